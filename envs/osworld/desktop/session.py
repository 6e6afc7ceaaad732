"""The X session of one desktop: Xvfb, a D-Bus session bus, the at-spi bus and openbox.

Runs inside the desktop with the system python3 and the standard library only. Every process
runs as the user that runs this module (the image's `user`; the host's own user in the local
backend). Xvfb picks a free display itself (`-displayfd`), so desktops on one host never race
for a display number. `stop` ends everything the session started, launched apps included, as
long as they stayed in the session's process group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_PROFILE = ".config/google-chrome"
"""Under $HOME: Google Chrome's profile folder, where OSWorld's tasks and getters look for it."""
DEVTOOLS_PORT_FILE = "DevToolsActivePort"
"""In the profile folder: Chromium started with `--remote-debugging-port=0` writes the port it
bound there (the first line), so no port is picked before Chromium binds it."""
CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--password-store=basic",
    "--force-renderer-accessibility",
)
CHROMIUM_PREFERENCES = {
    "default_search_provider_data": {
        "template_url_data": {
            "short_name": "Google",
            "keyword": "google.com",
            "prepopulate_id": 1,
            "url": "{google:baseURL}search?q={searchTerms}",
        }
    }
}
"""A new profile's Default/Preferences (an existing one is left as it is). Google as
the search engine, as in OSWorld's VM (its `get_default_search_engine` getter assumes it too), gives
the local new-tab page (chrome://new-tab-page) with the address bar focused. Debian's default,
DuckDuckGo, gives chrome://new-tab-page-third-party, which from Chromium 155 takes the keyboard
focus itself: text typed after Ctrl+T went nowhere. A managed policy (NewTabPageLocation) fixes
it too, but binds the user's settings, which OSWorld's Chrome tasks change."""
AT_SPI_LAUNCHER = "/usr/libexec/at-spi-bus-launcher"
MARKER = "ROOST_DESKTOP_ID"
"""Set in every desktop process's environment: `kill_marked` finds them all by it, even those
that left the session's process groups (apps started by apps, a server that died hard)."""


class SessionError(RuntimeError):
    """A part of the desktop (Xvfb, D-Bus, the at-spi bus, openbox) did not start."""


@dataclass
class SessionConfig:
    width: int = 1280
    height: int = 720
    home: Path = field(default_factory=Path.home)
    """The desktop user's home: apps and commands see it as $HOME."""
    python: str = "python3"
    """The python that `python`/`python3` name inside the desktop (one that imports pyautogui)."""
    start_timeout_s: float = 20.0


class DesktopSession:
    """A running X session; `env` is the environment every desktop process gets."""

    def __init__(self, config: SessionConfig) -> None:
        self.config = config
        self.display = ""
        self.env: dict[str, str] = {}
        self._procs: list[subprocess.Popen] = []
        self._runtime = Path(tempfile.mkdtemp(prefix="roost-xsession-"))
        self.marker = os.environ.get(MARKER) or self._runtime.name

    def start(self, attempts: int = 3) -> None:
        """Starts the session; a start that fails is cleaned up and tried again, `attempts` in all."""
        for attempt in range(attempts):
            self._runtime.mkdir(exist_ok=True)  # a failed attempt's stop removed it
            try:
                return self._start_once()
            except SessionError:
                if attempt == attempts - 1:
                    raise

    def _start_once(self) -> None:
        try:
            self.display = self._start_xvfb()
            self.env = self._base_env()
            self._wait_for("the X server", ["xprop", "-root", "-len", "0", "WM_NAME"], "")
            self._start_dbus()
            self._spawn([AT_SPI_LAUNCHER, "--launch-immediately"])
            self._spawn(["openbox", "--config-file", str(self._openbox_config())])
            self._wait_for("openbox", ["xprop", "-root", "_NET_SUPPORTING_WM_CHECK"], "window id")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Ends the session's processes (their groups too), newest first, then removes its files."""
        for proc in reversed(self._procs):
            _terminate(proc)
        self._procs.clear()
        kill_marked(self.marker, spare=os.getpid())
        subprocess.run(["rm", "-rf", str(self._runtime)], check=False)

    @property
    def runtime(self) -> Path:
        """The session's own folder (sockets, wrappers, its log); removed by `stop`."""
        return self._runtime

    def alive(self) -> bool:
        return bool(self._procs) and self._procs[0].poll() is None

    def _start_xvfb(self) -> str:
        # -noreset: Xvfb resets when its last client leaves, and a client connecting in that
        # moment (openbox, right after a probe) fails to open the display.
        read_fd, write_fd = os.pipe()
        size = f"{self.config.width}x{self.config.height}x24"
        proc = subprocess.Popen(
            [
                "Xvfb",
                f":{free_display()}",
                "-displayfd",
                str(write_fd),
                "-screen",
                "0",
                size,
                "-nolisten",
                "tcp",
                "-ac",
                "-noreset",
                "+extension",
                "RANDR",
            ],
            pass_fds=(write_fd,),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, MARKER: self.marker},
        )
        os.close(write_fd)
        self._procs.append(proc)
        number = _read_line(read_fd, self.config.start_timeout_s)
        if not number.strip().isdigit():
            raise SessionError(
                f"Xvfb did not report a display number (exit code {proc.poll()}); "
                "is xvfb installed (`apt-get install xvfb`)?"
            )
        return f":{number.strip()}"

    def _base_env(self) -> dict[str, str]:
        bin_dir = self._runtime / "bin"
        bin_dir.mkdir()
        _write_wrappers(bin_dir, self.config)
        runtime_dir = self._runtime / "xdg-runtime"
        runtime_dir.mkdir(mode=0o700)
        xauthority = self.config.home / ".Xauthority"
        _write_xauthority(xauthority, self.display)
        seed_chromium_profile(self.config.home)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DBUS_", "AT_SPI", "XDG_"))}
        env.update(
            {
                "DISPLAY": self.display,
                "HOME": str(self.config.home),
                "XDG_RUNTIME_DIR": str(runtime_dir),
                "XAUTHORITY": str(xauthority),
                "PATH": f"{bin_dir}:{env.get('PATH', '/usr/local/bin:/usr/bin:/bin')}",
                # GTK and Qt apps export their widgets to the at-spi bus only when asked to.
                "GTK_MODULES": "gail:atk-bridge",
                "QT_LINUX_ACCESSIBILITY_ALWAYS_ON": "1",
                "QT_ACCESSIBILITY": "1",
                "SAL_USE_VCLPLUGIN": "gtk3",
                "LANG": env.get("LANG", "C.UTF-8"),
                MARKER: self.marker,
            }
        )
        env.pop("NO_AT_BRIDGE", None)
        return env

    def _start_dbus(self) -> None:
        out = subprocess.run(
            ["dbus-launch", "--sh-syntax"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=self.config.start_timeout_s,
            check=False,
        )
        found = dict(_parse_sh_assignments(out.stdout))
        if "DBUS_SESSION_BUS_ADDRESS" not in found:
            raise SessionError(
                f"dbus-launch printed no bus address (stderr: {out.stderr.strip()!r}); is dbus-x11 installed?"
            )
        self.env.update(found)

    def _openbox_config(self) -> Path:
        # No desktop menu or dock: a plain window manager that maximises nothing by itself. Ctrl+Alt+T
        # opens a terminal titled "Terminal", as on OSWorld's Ubuntu (its tasks press it, then
        # activate the window "Terminal").
        path = self._runtime / "openbox-rc.xml"
        path.write_text(
            '<?xml version="1.0"?>\n<openbox_config xmlns="http://openbox.org/3.4/rc">'
            '<desktops><number>1</number></desktops><keyboard><keybind key="C-A-t">'
            '<action name="Execute"><command>lxterminal --title=Terminal</command></action>'
            "</keybind></keyboard></openbox_config>\n"
        )
        return path

    def _wait_for(self, what: str, probe: list[str], expect: str) -> None:
        """Polls `probe` until it succeeds with `expect` in its output; SessionError if a session
        process ended or the start timeout passed."""
        deadline = time.monotonic() + self.config.start_timeout_s
        while time.monotonic() < deadline:
            done = subprocess.run(probe, env=self.env, capture_output=True, text=True, check=False)
            if done.returncode == 0 and expect in done.stdout:
                return
            ended = [f"{p.args[0]} (exit code {p.returncode})" for p in self._procs if p.poll() is not None]
            if ended:
                raise SessionError(
                    f"{', '.join(ended)} ended while the desktop started; their output ends with:\n{self._log_tail()}"
                )
            time.sleep(0.05)
        raise SessionError(
            f"{what} did not come up on {self.display} within {self.config.start_timeout_s:.0f}s\n{self._log_tail()}"
        )

    def _log_tail(self, chars: int = 2000) -> str:
        try:
            return (self._runtime / "session.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _spawn(self, argv: list[str]) -> subprocess.Popen:
        with open(self._runtime / "session.log", "ab") as log:
            proc = subprocess.Popen(argv, env=self.env, stdout=log, stderr=log, start_new_session=True)
        self._procs.append(proc)
        return proc


def _write_wrappers(bin_dir: Path, config: SessionConfig) -> None:
    """`python`/`python3` name the desktop's python (pyautogui importable); `google-chrome` and
    `chromium` start Chromium with the flags it needs here, DevTools on a port Chromium picks
    itself (OSWorld's tasks launch `google-chrome --remote-debugging-port=1337`; the control
    server serves the desktop's DevTools port and forwards it, see `devtools_port`) and Google
    Chrome's profile folder (OSWorld's Chrome getters read ~/.config/google-chrome/Default/:
    Bookmarks, Preferences, History)."""
    flags = " ".join(CHROMIUM_FLAGS)
    chrome = (
        '#!/bin/sh\nfor a in "$@"; do shift; case "$a" in --remote-debugging-port=*) ;; '
        '*) set -- "$@" "$a";; esac; done\n'
        f"exec {CHROMIUM} {flags} --remote-debugging-port=0 "
        f'--user-data-dir="$HOME/{CHROMIUM_PROFILE}" "$@"\n'
    )
    scripts = {
        "python": f'#!/bin/sh\nexec {config.python} "$@"\n',
        "google-chrome": chrome,
        "chromium": chrome,
        "chromium-browser": chrome,
    }
    scripts["python3"] = scripts["python"]
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)


def devtools_port(home: Path) -> int | None:
    """The DevTools port of the Chromium running on the profile in `home`, or None before one
    wrote it. A Chromium that exited leaves its file: connecting to that port then fails, as it
    would before Chromium started."""
    try:
        return int((home / CHROMIUM_PROFILE / DEVTOOLS_PORT_FILE).read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def seed_chromium_profile(home: Path) -> None:
    """Writes CHROMIUM_PREFERENCES as the profile's preferences where it has none: the profile is
    there before any task runs, as in OSWorld's VM (some of its tasks edit it before Chrome starts)."""
    preferences = home / CHROMIUM_PROFILE / "Default" / "Preferences"
    if not preferences.exists():
        preferences.parent.mkdir(parents=True, exist_ok=True)
        preferences.write_text(json.dumps(CHROMIUM_PREFERENCES))


def free_display(first: int = 20, last: int = 2000) -> int:
    """A display number no X server holds, by its socket file or its abstract socket. Xvfb's own
    choice (-displayfd alone) is not enough here: it writes no lock file then, and X clients try
    the abstract socket first, so they could reach another desktop's server (one in another
    mount or PID namespace). A socket file nobody listens on is stale and is removed."""
    import socket

    for number in range(first, last):
        path = f"/tmp/.X11-unix/X{number}"
        if os.path.exists(f"/tmp/.X{number}-lock") or (os.path.exists(path) and not _remove_stale(path)):
            continue
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.bind("\0" + path)
            except OSError:
                continue
        return number
    raise SessionError(f"no free X display number in {first}..{last - 1}")


def _remove_stale(path: str) -> bool:
    """Removes the socket file if no server listens on it; whether it is gone."""
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
            return False
        except (ConnectionRefusedError, FileNotFoundError):
            pass
        except OSError:
            return False
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def _write_xauthority(path: Path, display: str) -> None:
    """An authority entry for the display. Xvfb runs with -ac and checks none, but Xlib clients
    (python-xlib under pyautogui) print a warning into every command's output without one."""
    import secrets
    import socket
    import struct

    def field(value: bytes) -> bytes:
        return struct.pack(">H", len(value)) + value

    entry = (
        struct.pack(">H", 256)
        + field(socket.gethostname().encode())
        + field(display.lstrip(":").encode())
        + field(b"MIT-MAGIC-COOKIE-1")
        + field(secrets.token_bytes(16))
    )
    path.write_bytes(entry)
    path.chmod(0o600)


def _read_line(fd: int, timeout_s: float) -> str:
    import select

    data = b""
    deadline = time.monotonic() + timeout_s
    try:
        while b"\n" not in data and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = os.read(fd, 64)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    return data.decode(errors="replace")


def _parse_sh_assignments(text: str):
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.isidentifier():
            yield name, value.rstrip(";").strip("'\"")


def _terminate(proc: subprocess.Popen, grace_s: float = 2.0) -> None:
    if proc.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            proc.send_signal(sig)
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def kill_marked(marker: str, spare: int | None = None) -> int:
    """SIGKILLs every process (of this user) whose environment holds MARKER=marker; how many."""
    needle = f"{MARKER}={marker}".encode() + b"\0"
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in (spare, os.getpid()):
            continue
        try:
            if needle in (entry / "environ").read_bytes() + b"\0":
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
        except (OSError, ProcessLookupError):
            continue
    return killed
