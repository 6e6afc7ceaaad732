"""A Ray cluster of several nodes on this machine, for tests of what runs across nodes.

    with SimulatedCluster(tmp, [NodeSpec("head", cpus=1), NodeSpec("rollout", cpus=1)]) as cluster:
        ray.nodes()                                # this process joined it as a driver
        cluster.run_dir                            # the path every node sees as its own run folder

Each node is a `ray start --block` of its own (`--num-cpus`, `--resources
{"roost_node_<label>": 1}`, its own `--temp-dir`), started by `unshare --mount --propagation
private` with a fresh tmpfs mounted over `run_dir`: its processes (raylet, workers, the servers
they start) see their node's private folder at that path, so a path that one node writes and
another reads fails there as on separate machines. Data must travel through Ray (the object
store) or the network. Needs root (CI and this machine run tests as root); `unavailable()` says why
not where it is not.

Teardown does not use `ray stop`, which stops every Ray on the machine: each node's process
group is terminated, then any process left in the node's mount namespace is killed.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

NODE_RESOURCE = "roost_node_{}"
OBJECT_STORE_BYTES = 80 * 1024 * 1024  # Ray's minimum is 75 MiB
RAY = str(Path(sys.executable).with_name("ray"))


@dataclass(frozen=True)
class NodeSpec:
    label: str
    """The node's Ray custom resource is `roost_node_<label>` (what a layout's `node:` names)."""
    cpus: int = 1
    gpus: int = 0


def unavailable() -> str | None:
    """Why a private mount namespace cannot be made here (None: it can)."""
    if shutil.which("unshare") is None:
        return "util-linux `unshare` is not installed"
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True, check=False
    )
    return None if probe.returncode == 0 else f"unshare --mount failed: {probe.stderr.strip()} (needs root)"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class SimulatedCluster:
    """A head node (the first spec) and worker nodes, each in its own mount namespace."""

    def __init__(self, root: Path, nodes: list[NodeSpec], *, startup_timeout_s: float = 90.0) -> None:
        self.root = root
        self.specs = nodes
        self.run_dir = root / "run"
        self.port = _free_port()
        self.startup_timeout_s = startup_timeout_s
        self.processes: list[subprocess.Popen] = []
        self.namespaces: set[str] = set()
        """The nodes' mount namespaces (`/proc/PID/ns/mnt` links), read once they are up."""

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> SimulatedCluster:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            for index, spec in enumerate(self.specs):
                self.processes.append(self._start(index, spec))
            self._wait_for_nodes()
            own = _mount_namespace(os.getpid())
            self.namespaces = {ns for p in self.processes if (ns := _mount_namespace(p.pid)) not in (None, own)}
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _ray_start(self, index: int, spec: NodeSpec) -> list[str]:
        # Each node gets ports of its own: several raylets share this machine's one address.
        where = ["--head", f"--port={self.port}", "--include-dashboard=false"] if index == 0 else []
        where = where or [f"--address={self.address}"]
        return [
            RAY,
            "start",
            "--block",
            *where,
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={spec.cpus}",
            f"--num-gpus={spec.gpus}",
            f"--resources={json.dumps({NODE_RESOURCE.format(spec.label): 1})}",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
            f"--temp-dir={self.root / f'n{index}'}",
            f"--dashboard-agent-listen-port={_free_port()}",
            f"--dashboard-agent-grpc-port={_free_port()}",
            f"--runtime-env-agent-port={_free_port()}",
            f"--metrics-export-port={_free_port()}",
            "--disable-usage-stats",
        ]

    def _start(self, index: int, spec: NodeSpec) -> subprocess.Popen:
        # The tmpfs is mounted inside the node's namespace only; `exec` keeps one process tree.
        script = f"mount -t tmpfs roost-node-{index} {shlex.quote(str(self.run_dir))} && exec {shlex.join(self._ray_start(index, spec))}"
        log = (self.root / f"node{index}.log").open("ab")
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        process = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        log.close()
        return process

    def _wait_for_nodes(self) -> None:
        """Join the cluster from this process (as a driver) once its head is up, and wait until
        every node has joined."""
        import ray

        deadline = time.monotonic() + self.startup_timeout_s
        while not ray.is_initialized():
            self._check_alive()
            try:
                ray.init(address=self.address, log_to_driver=False, configure_logging=False)
            except ConnectionError:
                if time.monotonic() > deadline:
                    raise
        while sum(node["Alive"] for node in ray.nodes()) < len(self.specs):
            self._check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{len(self.specs)} Ray nodes did not all join in {self.startup_timeout_s:.0f}s; see {self.root}/node*.log"
                )
            time.sleep(0.5)

    def _check_alive(self) -> None:
        for index, process in enumerate(self.processes):
            if process.poll() is not None:
                log = (self.root / f"node{index}.log").read_text()[-2000:]
                raise RuntimeError(f"Ray node {index} ({self.specs[index].label}) exited {process.returncode}:\n{log}")

    def stop(self, grace_s: float = 5.0) -> None:
        """Disconnect, then stop every node: its process group, then whatever is left in its
        mount namespace."""
        import ray

        ray.shutdown()
        for process in reversed(self.processes):
            _signal_group(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for process in self.processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
        _kill_in_namespaces(self.namespaces)
        self.processes.clear()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def _mount_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def _kill_in_namespaces(namespaces: set[str]) -> None:
    """SIGKILL every process whose mount namespace is one of these (workers a raylet left behind)."""
    if not namespaces:
        return
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _mount_namespace(int(entry.name)) in namespaces:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass
