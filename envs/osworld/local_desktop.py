"""The `local` desktop backend: a desktop on this host's Xvfb, for development.

Each desktop is one process tree: the control server (`desktop/server.py`, run by the desktop's
python) and the X session it starts, with a display, ports and home of its own. Where bubblewrap
runs, the tree is wrapped in it: its own PID namespace (closing ends every process in it, even
apps that left their process group) and its home folder bound at /home/user. Needs the Debian
packages in .ci/apt-packages.txt (xvfb, openbox, at-spi2-core, python3-pyatspi, ...).
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from roost.envs.osworld.backends import DESKTOP_HOME, DesktopConfig, serving_or_closed
from roost.envs.osworld.desktop.session import MARKER, kill_marked
from roost.envs.osworld.desktop_client import DesktopClient, DesktopError
from roost.sandboxes.stale import process_start_time

SYSTEM_PYTHON = "/usr/bin/python3"
RUN_PREFIX, HOME_PREFIX = "roost-desktop-run-", "roost-desktop-home-"
OWNER_FILE, MARKER_FILE = "owner.json", "marker"
DESKTOP_PACKAGES = ("pyautogui==0.9.54",)
"""What code run in the desktop imports beyond the system python's Debian packages."""


@dataclass
class LocalDesktop:
    url: str
    host: str
    server_port: int
    chromium_port: int
    process: subprocess.Popen
    home: Path
    marker: str
    runtime: Path
    """Holds the `roost` link on the server's PYTHONPATH and the server's log."""

    async def close(self) -> None:
        await asyncio.to_thread(self._stop)

    async def alive(self) -> bool:
        if self.process.poll() is not None:
            return False
        async with DesktopClient(self.url, timeout_s=5.0) as client:
            return await client.health()

    def _stop(self) -> None:
        if self.process.poll() is None:
            # The server alone gets SIGTERM and stops its session; bwrap, the PID namespace's
            # init, would take every process down with SIGKILL, leaving their files behind.
            _signal_server(self.process, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _signal_group(self.process, signal.SIGKILL)
                self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        kill_marked(self.marker)
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.rmtree(self.runtime, ignore_errors=True)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return (self.runtime / "server.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""


async def start_local(config: DesktopConfig) -> LocalDesktop:
    missing = [tool for tool in ("Xvfb", "openbox", "dbus-launch", "wmctrl") if shutil.which(tool) is None]
    if missing:
        raise DesktopError(
            f"the local desktop backend needs {', '.join(missing)} on this host; install the "
            "packages of .ci/apt-packages.txt, or use backend 'docker'"
        )
    config = await resolve_host(config)
    await asyncio.to_thread(sweep_stale)
    desktop = await asyncio.to_thread(_spawn, config, config.python, config.isolate_home)
    return await serving_or_closed(desktop, config.start_timeout_s, lambda: _exited(desktop))


async def resolve_host(config: DesktopConfig) -> DesktopConfig:
    """`config` with `python` and `isolate_home` decided (the desktop's python made if missing)."""
    python = config.python or await asyncio.to_thread(desktop_python, config.cache_dir)
    isolate = await asyncio.to_thread(_bwrap_works) if config.isolate_home is None else config.isolate_home
    return replace(config, python=python, isolate_home=isolate)


def _spawn(config: DesktopConfig, python: str, isolate: bool) -> LocalDesktop:
    """Starts the server (and through it the X session); returns once it printed its ports."""
    home = Path(tempfile.mkdtemp(prefix=HOME_PREFIX))
    runtime = _runtime_dir()
    marker = home.name
    (runtime / MARKER_FILE).write_text(marker)
    inner_home = DESKTOP_HOME if isolate else str(home)
    argv = [
        python,
        "-m",
        "roost.envs.osworld.desktop.server",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--width",
        str(config.width),
        "--height",
        str(config.height),
        "--home",
        inner_home,
        "--devtools-port",
        "0",
        "--python",
        python,
    ]
    if isolate:
        argv = [
            "bwrap",
            "--dev-bind",
            "/",
            "/",
            "--tmpfs",
            "/home",
            "--bind",
            str(home),
            DESKTOP_HOME,
            "--proc",
            "/proc",
            "--unshare-pid",
            "--",
        ] + argv
    env = {**os.environ, "PYTHONPATH": str(runtime), "HOME": inner_home, MARKER: marker, "PYTHONUNBUFFERED": "1"}
    with open(runtime / "server.log", "wb") as log:
        process = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,
            text=True,
        )
    desktop = LocalDesktop("", "127.0.0.1", 0, 0, process, home, marker, runtime)
    try:
        desktop.server_port, desktop.chromium_port = _read_ports(desktop, config.start_timeout_s)
    except BaseException:
        desktop._stop()
        raise
    desktop.url = f"http://127.0.0.1:{desktop.server_port}"
    return desktop


def _read_ports(desktop: LocalDesktop, timeout_s: float) -> tuple[int, int]:
    """The server's and DevTools' ports, from the server's first stdout line (`{"port": ...,
    "devtools_port": ..., "display": ...}`): both bound to port 0, so no other process can take
    them between choosing and binding."""
    import select

    ready, _, _ = select.select([desktop.process.stdout], [], [], timeout_s)
    line = desktop.process.stdout.readline() if ready else ""
    try:
        announced = json.loads(line)
        return int(announced["port"]), int(announced["devtools_port"])
    except (ValueError, KeyError, TypeError):
        state = _exited(desktop) or f"still running; its log ends with:\n{desktop.log_tail()}"
        raise DesktopError(f"the desktop's control server did not start within {timeout_s:.0f}s ({state})") from None


def _exited(desktop: LocalDesktop) -> str | None:
    if desktop.process.poll() is None:
        return None
    return f"exit code {desktop.process.returncode}; its log ends with:\n{desktop.log_tail()}"


def _signal_server(process: subprocess.Popen, sig: int) -> None:
    """Signals the control server: `process` itself, or under bwrap its descendant running it."""
    for pid in [process.pid, *_descendants(process.pid)]:
        try:
            if b"roost.envs.osworld.desktop.server" in Path(f"/proc/{pid}/cmdline").read_bytes() and not Path(
                f"/proc/{pid}/exe"
            ).resolve().name.startswith("bwrap"):
                os.kill(pid, sig)
                return
        except OSError:
            continue
    _signal_group(process, sig)


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            children = [int(c) for c in Path(f"/proc/{parent}/task/{parent}/children").read_text().split()]
        except OSError:
            children = []
        found += children
        todo += children
    return found


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def _runtime_dir() -> Path:
    """A folder whose `roost` entry is this roost package, for the desktop's PYTHONPATH (the repo
    root is the package, so an editable install's path cannot be used as it is)."""
    import roost

    root = Path(tempfile.mkdtemp(prefix=RUN_PREFIX))
    (root / OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "start": process_start_time(os.getpid())}))
    (root / "roost").symlink_to(Path(roost.__file__).resolve().parent, target_is_directory=True)
    return root


def sweep_stale() -> int:
    """Ends the desktops (processes and folders) of owners that died without closing them; how
    many. (bwrap's --die-with-parent cannot do it: it fires when the starting *thread* ends.)"""
    swept = 0
    for runtime in Path(tempfile.gettempdir()).glob(f"{RUN_PREFIX}*"):
        try:
            owner = json.loads((runtime / OWNER_FILE).read_text())
            marker = (runtime / MARKER_FILE).read_text()
        except (OSError, ValueError):
            continue
        if process_start_time(owner.get("pid", -1)) == owner.get("start"):
            continue
        kill_marked(marker)
        if marker.startswith(HOME_PREFIX):  # the marker is the home folder's name
            shutil.rmtree(Path(tempfile.gettempdir()) / marker, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)
        swept += 1
    return swept


def _bwrap_works() -> bool:
    if shutil.which("bwrap") is None:
        return False
    # The desktop's own options: in a container, a fresh /proc is what Docker's defaults refuse.
    probe = subprocess.run(
        ["bwrap", "--dev-bind", "/", "/", "--tmpfs", "/home", "--proc", "/proc", "--unshare-pid", "true"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def desktop_python(cache_dir: Path | None = None) -> str:
    """A python that imports pyatspi and Xlib (the system's) and pyautogui: this python or the
    system python3 where they have it all, else a venv over the system python3
    (`--system-site-packages`) with pyautogui, made once."""
    if not Path(SYSTEM_PYTHON).exists():
        raise DesktopError(
            f"{SYSTEM_PYTHON} is missing: the desktop needs the system python3 with python3-pyatspi and python3-xlib"
        )
    for python in (sys.executable, SYSTEM_PYTHON):  # the image's /opt/venv has it all
        if _imports(python, "pyatspi, Xlib, PIL, pyautogui"):
            return python
    if not _imports(SYSTEM_PYTHON, "pyatspi, Xlib, PIL"):
        raise DesktopError(
            f"{SYSTEM_PYTHON} cannot import pyatspi, Xlib and PIL; install python3-pyatspi, "
            "python3-xlib and python3-pil (apt)"
        )
    tag = hashlib.sha256(" ".join(DESKTOP_PACKAGES).encode()).hexdigest()[:8]
    venv = (cache_dir or Path.home() / ".cache" / "roost") / f"osworld-desktop-venv-{tag}"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # desktops started at once make the venv once
        python = venv / "bin" / "python"
        if not _imports(str(python), "pyatspi, pyautogui"):
            _make_venv(venv)
    return str(python)


def _make_venv(venv: Path) -> None:
    """Made beside its place and moved in: desktops running on an older one never see it half made
    (its python finds its packages relative to itself, so the move keeps it whole)."""
    building = venv.with_name(f"{venv.name}.building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    steps = (
        [SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", str(building)],
        [str(building / "bin" / "python"), "-m", "pip", "install", "--quiet", *DESKTOP_PACKAGES],
    )
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            shutil.rmtree(building, ignore_errors=True)
            raise DesktopError(f"making the desktop's python failed at `{' '.join(step)}`:\n{done.stderr[-2000:]}")
    shutil.rmtree(venv, ignore_errors=True)
    building.rename(venv)


def _imports(python: str, modules: str) -> bool:
    """Whether `python` finds these modules (found, not imported: pyautogui connects to a display
    when imported)."""
    if not Path(python).exists():
        return False
    names = [m.strip() for m in modules.split(",")]
    probe = f"import importlib.util as u, sys; sys.exit(0 if all(u.find_spec(m) for m in {names!r}) else 1)"
    return subprocess.run([python, "-c", probe], capture_output=True, check=False).returncode == 0
