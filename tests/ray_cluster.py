"""A Ray cluster of several nodes on this machine, for tests of what runs across nodes.

    with SimulatedCluster(tmp, [NodeSpec("head", cpus=1), NodeSpec("rollout", cpus=1)]) as cluster:
        ray.nodes()                                # this process joined it as a driver
        cluster.run_dir                            # the path every node sees as its own run folder

Each node is a `ray start --block` of its own (`ray_node_start.py`) (`--num-cpus`, `--resources
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
import secrets
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
# `ray start`, patient with a raylet slow to register (see the script)
RAY_START = [sys.executable, str(Path(__file__).with_name("ray_node_start.py"))]
NODE_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    # how long a raylet waits for its dashboard agent, and the agent to register (30 s by
    # default, which the agent's start can take on a loaded two-core machine)
    "RAY_raylet_start_wait_time_s": "180",
    "RAY_agent_register_timeout_ms": "180000",
    "ROOST_RAY_NODE_WAIT_S": "180",
}


STARTUP_NICENESS = -10
"""A starting node's priority (root may raise it; elsewhere `nice` warns and starts it as usual)."""


class NodeDied(RuntimeError):
    """A node's `ray start` exited while starting (its log is in the message)."""


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


class NodeProbe:
    """An actor for tests: the node it runs on, and files there. (Defined here, in a module the
    nodes' workers import as `roost.tests.ray_cluster`: a test module's own classes are not.)"""

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def write(self, path: str, text: str) -> str:
        Path(path).write_text(text)
        return Path(path).read_text()

    def read(self, path: str) -> str:
        return Path(path).read_text()

    def take(self, payloads: list) -> bytes:
        """The object a ref (inside a list, so Ray does not resolve it first) points to."""
        import ray

        return ray.get(payloads[0])


class SimulatedCluster:
    """A head node (the first spec) and worker nodes, each in its own mount namespace."""

    def __init__(self, root: Path, nodes: list[NodeSpec], *, startup_timeout_s: float = 240.0) -> None:
        self.root = root
        self.specs = nodes
        self.run_dir = root / "run"
        self.port = _free_port()
        self.startup_timeout_s = startup_timeout_s
        self.processes: list[subprocess.Popen] = []
        self.token = secrets.token_hex(32)
        """The cluster's own Ray auth token (Ray 2.5x turns token auth on by default and keeps one
        token per user in ~/.ray/auth_token, which other Rays on this machine may have written)."""
        self._driver_auth: dict[str, str | None] = {}
        self.namespaces: set[str | None] = set()
        """The nodes' mount namespaces (`/proc/PID/ns/mnt` links), read once they are up."""
        self.nodes: dict[int, subprocess.Popen] = {}
        """Each live node's `ray start` process, by its index in `specs`."""

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> SimulatedCluster:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._driver_auth = self._use_auth(self._auth_env())
        try:
            for index, spec in enumerate(self.specs):
                self._start_node(index, spec)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add_node(self, spec: NodeSpec) -> int:
        """Start another worker node and wait until it has joined (as a machine joins a running
        cluster); its index."""
        self.specs.append(spec)
        index = len(self.specs) - 1
        self._start_node(index, spec)
        return index

    def kill_node(self, index: int) -> None:
        """Kill node `index` as a machine that loses power: every process in its mount namespace
        at once, no cleanup; the head learns it is gone through its health checks."""
        process = self.nodes.pop(index)
        namespace = mount_namespace(process.pid)
        _signal_group(process.pid, signal.SIGKILL)
        _kill_in_namespaces({namespace})
        process.wait(timeout=10)

    def freeze_node(self, index: int, frozen: bool = True) -> None:
        """Stop (or, `frozen=False`, continue) every process of node `index`, as a machine that
        hangs: its servers keep their connections but answer nothing until it is thawed."""
        sig = signal.SIGSTOP if frozen else signal.SIGCONT
        for pid in _in_namespaces({mount_namespace(self.nodes[index].pid)}):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def command(self, index: int, argv: list[str]) -> list[str]:
        """`argv` run inside node `index`'s mount namespace (so it sees that node's run folder),
        as a process on that machine: a driver started there attaches to that node."""
        return ["nsenter", f"--mount=/proc/{self.nodes[index].pid}/ns/mnt", "--", *argv]

    def env(self) -> dict[str, str]:
        """The environment a process needs to join this cluster (its Ray auth token)."""
        env = {**os.environ, **self._auth_env(), **NODE_ENV}
        env.pop("RAY_AUTH_TOKEN_PATH", None)
        return env

    def path_on(self, index: int, path: Path) -> Path:
        """Where this process reads `path` as node `index` sees it (its private run folder)."""
        return Path(f"/proc/{self.nodes[index].pid}/root") / path.relative_to("/")

    def _ray_start(self, index: int, spec: NodeSpec) -> list[str]:
        # Each node gets ports of its own: several raylets share this machine's one address.
        where = ["--head", f"--port={self.port}", "--include-dashboard=false"] if index == 0 else []
        where = where or [f"--address={self.address}"]
        return [
            *RAY_START,
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
            "--include-log-monitor=false",  # one Python process less per node: the driver reads no logs
        ]

    def _start_node(self, index: int, spec: NodeSpec, attempts: int = 3) -> None:
        """Start one node and wait until it has joined; again if it dies starting. A raylet waits
        about 15 s for its dashboard agent's port files and aborts without them, and the agent's
        start (a Python process importing Ray) can take longer on a loaded machine: so a node
        starts at a raised CPU priority, lowered to the usual once it has joined."""
        import ray

        for attempt in range(attempts):
            known = {n["NodeID"] for n in ray.nodes()} if ray.is_initialized() else set()
            process = self._start(index, spec)
            # known to stop() from here on, whatever interrupts the wait
            namespace = self._namespace_of(process)
            self.processes.append(process)
            self.namespaces.add(namespace)
            try:
                self._wait_joined(index, process, known)
                _renice({namespace}, 0)  # started: its workers run at the machine's usual priority
                self.nodes[index] = process
                return
            except NodeDied:
                _kill_in_namespaces({namespace})  # what the dead node left
                self.processes.remove(process)
                self.namespaces.discard(namespace)
                if attempt + 1 == attempts:
                    raise

    def _start(self, index: int, spec: NodeSpec) -> subprocess.Popen:
        # The tmpfs is mounted inside the node's namespace only; `exec` keeps one process tree.
        mount = f"mount -t tmpfs roost-node-{index} {shlex.quote(str(self.run_dir))}"
        script = f"{mount} && exec {shlex.join(self._ray_start(index, spec))}"
        log = (self.root / f"node{index}.log").open("ab")
        env = self.env()
        process = subprocess.Popen(
            ["nice", "-n", str(STARTUP_NICENESS), "unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        log.close()
        return process

    @staticmethod
    def _namespace_of(process: subprocess.Popen) -> str | None:
        """The mount namespace `unshare` made for `process` (read as soon as it has made it)."""
        own = mount_namespace(os.getpid())
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            namespace = mount_namespace(process.pid)
            if namespace is None or namespace != own:
                return namespace
            time.sleep(0.01)
        return None

    def _auth_env(self) -> dict[str, str]:
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}

    def _use_auth(self, values: dict[str, str | None]) -> dict[str, str | None]:
        """Set (None: unset) this process's Ray auth variables and reload them; returns what they were."""
        from ray._raylet import AuthenticationTokenLoader, Config

        before = {name: os.environ.get(name) for name in (*values, "RAY_AUTH_TOKEN_PATH")}
        for name, value in {"RAY_AUTH_TOKEN_PATH": None, **values}.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
        return before

    def _wait_joined(self, index: int, process: subprocess.Popen, known: set[str]) -> None:
        """Wait until node `index` is up: the head answers this process's `ray.init` (it joins the
        cluster as a driver), a worker is a node the head counts alive that is not in `known`."""
        import ray

        deadline = time.monotonic() + self.startup_timeout_s
        while not ray.is_initialized():
            self._check_alive(index, process)
            try:
                ray.init(address=self.address, log_to_driver=False, configure_logging=False)
            except ConnectionError:
                self._check_alive(index, process)  # a head that died is started again
                if time.monotonic() > deadline:
                    raise
        while not any(n["Alive"] and n["NodeID"] not in known for n in ray.nodes()):
            self._check_alive(index, process)
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"Ray node {index} did not join in {self.startup_timeout_s:.0f}s; see {self.root}/node{index}.log"
                )
            time.sleep(0.5)

    def _check_alive(self, index: int, process: subprocess.Popen) -> None:
        if process.poll() is not None:
            log = (self.root / f"node{index}.log").read_text()[-2000:]
            raise NodeDied(f"Ray node {index} ({self.specs[index].label}) exited {process.returncode}:\n{log}")

    def stop(self, grace_s: float = 5.0) -> None:
        """Disconnect, then stop every node: its process group, then whatever is left in its
        mount namespace."""
        import ray

        ray.shutdown()
        if self._driver_auth:
            self._use_auth(self._driver_auth)
            self._driver_auth = {}
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
        self.nodes.clear()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def mount_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def _in_namespaces(namespaces: set[str | None]) -> list[int]:
    namespaces = namespaces - {None}
    return [
        int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and mount_namespace(int(e.name)) in namespaces
    ]


def _renice(namespaces: set[str | None], niceness: int) -> None:
    for pid in _in_namespaces(namespaces):
        try:
            os.setpriority(os.PRIO_PROCESS, pid, niceness)
        except OSError:  # gone meanwhile
            pass


def _kill_in_namespaces(namespaces: set[str | None]) -> None:
    """SIGKILL every process whose mount namespace is one of these (workers a raylet left behind)."""
    for pid in _in_namespaces(namespaces):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
