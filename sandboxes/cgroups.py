"""Per-sandbox cgroups for the host-process backends: limits, OOM counts and a sure kill.

Works with cgroup v2 (where this process may create child groups with the memory and pids
controllers) and with v1 hierarchies (one folder per controller). Where neither is writable
the backend runs without limits and says so (`LimitGroup.create` returns None with a reason).
The groups are created under this process's own cgroup, so they nest inside its limits.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

V1_CONTROLLERS = ("memory", "pids", "cpu")
PERIOD_US = 100_000


@dataclass
class LimitGroup:
    """One cgroup (v2) or one group per controller (v1) holding a sandbox's processes."""

    version: int
    dirs: dict[str, Path]
    """Controller name → folder; v2 has one folder under the key 'unified'."""
    removed: bool = field(default=False)

    @classmethod
    def create(
        cls, memory_bytes: int | None, pids_max: int | None, cpus: float | None
    ) -> tuple[LimitGroup | None, str | None]:
        """A new group with the given limits, or (None, why not)."""
        name = f"roost-sandbox-{uuid.uuid4().hex[:12]}"
        try:
            group = _create_v2(name) or _create_v1(name)
        except OSError as exc:
            return None, f"cannot create a cgroup here ({exc}); run as root or with a delegated cgroup"
        if group is None:
            return None, "no writable cgroup with the memory and pids controllers on this machine"
        try:
            group._apply(memory_bytes, pids_max, cpus)
        except OSError as exc:
            group.remove()
            return None, f"cannot set cgroup limits ({exc})"
        return group, None

    def procs_files(self) -> list[str]:
        """Files a process writes its pid to, to join every folder of the group."""
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def oom_kills(self) -> int:
        """How many processes the OOM killer has ended in this group so far."""
        if self.version == 2:
            text, key = _read(self.dirs["unified"] / "memory.events"), "oom_kill"
        else:
            text, key = _read(self.dirs["memory"] / "memory.oom_control"), "oom_kill"
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == key:
                return int(parts[1])
        return 0

    def kill_all(self) -> None:
        """SIGKILL every process in the group, including ones that forked while we looked."""
        if self.version == 2 and (self.dirs["unified"] / "cgroup.kill").exists():
            _write(self.dirs["unified"] / "cgroup.kill", "1")
            return
        for _ in range(50):
            pids = self._pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def remove(self) -> None:
        """Kill what is left and delete the folders (retrying while the kernel reaps)."""
        if self.removed:
            return
        self.kill_all()
        for folder in self.dirs.values():
            for _ in range(100):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
        self.removed = True

    def _pids(self) -> list[int]:
        pids: set[int] = set()
        for folder in self.dirs.values():
            pids.update(int(p) for p in _read(folder / "cgroup.procs").split())
        return sorted(pids)

    def _apply(self, memory_bytes: int | None, pids_max: int | None, cpus: float | None) -> None:
        if self.version == 2:
            d = self.dirs["unified"]
            if memory_bytes is not None:
                _write(d / "memory.max", str(memory_bytes))
                if (d / "memory.swap.max").exists():
                    _write(d / "memory.swap.max", "0")
            if pids_max is not None:
                _write(d / "pids.max", str(pids_max))
            if cpus is not None and (d / "cpu.max").exists():
                _write(d / "cpu.max", f"{int(cpus * PERIOD_US)} {PERIOD_US}")
            return
        if memory_bytes is not None:
            _write(self.dirs["memory"] / "memory.limit_in_bytes", str(memory_bytes))
            memsw = self.dirs["memory"] / "memory.memsw.limit_in_bytes"
            if memsw.exists():
                _write(memsw, str(memory_bytes))  # no swap: the limit is RAM + swap
        if pids_max is not None:
            _write(self.dirs["pids"] / "pids.max", str(pids_max))
        if cpus is not None and "cpu" in self.dirs:
            _write(self.dirs["cpu"] / "cpu.cfs_period_us", str(PERIOD_US))
            _write(self.dirs["cpu"] / "cpu.cfs_quota_us", str(int(cpus * PERIOD_US)))


def _create_v2(name: str) -> LimitGroup | None:
    root = Path("/sys/fs/cgroup")
    if not (root / "cgroup.controllers").exists():
        return None
    own = _own_paths().get("", "/")
    parent = root / own.lstrip("/")
    wanted = {"memory", "pids"}
    enabled = set(_read(parent / "cgroup.subtree_control").split())
    if not wanted <= enabled:
        try:
            _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in sorted(wanted - enabled)))
        except OSError:
            return None  # our own group holds processes (no-internal-process rule) or is not ours
    folder = parent / name
    folder.mkdir()
    return LimitGroup(2, {"unified": folder})


def _create_v1(name: str) -> LimitGroup | None:
    mounts = _v1_mounts()
    if "memory" not in mounts or "pids" not in mounts:
        return None
    own = _own_paths()
    dirs: dict[str, Path] = {}
    try:
        for controller in V1_CONTROLLERS:
            if controller not in mounts:
                continue
            mountpoint, mount_root = mounts[controller]
            relative = _relative(own.get(controller, "/"), mount_root)
            folder = mountpoint / relative / name
            folder.mkdir()
            dirs[controller] = folder
    except OSError:
        for folder in dirs.values():
            folder.rmdir()
        raise
    return LimitGroup(1, dirs)


def _own_paths() -> dict[str, str]:
    """Controller → this process's cgroup path ('' is the v2 hierarchy)."""
    paths: dict[str, str] = {}
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            paths[controller] = path
    return paths


def _v1_mounts() -> dict[str, tuple[Path, str]]:
    """Controller → (mount point, root of the hierarchy that the mount shows)."""
    mounts: dict[str, tuple[Path, str]] = {}
    for line in _read(Path("/proc/self/mountinfo")).splitlines():
        before, _, after = line.partition(" - ")
        fields, extra = before.split(), after.split()
        if len(extra) < 3 or extra[0] != "cgroup":
            continue
        for option in extra[2].split(","):
            if option in V1_CONTROLLERS and os.access(fields[4], os.W_OK):
                mounts[option] = (Path(fields[4]), fields[3])
    return mounts


def _relative(path: str, mount_root: str) -> str:
    if mount_root != "/" and path.startswith(mount_root):
        path = path[len(mount_root) :]
    return path.lstrip("/")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)
