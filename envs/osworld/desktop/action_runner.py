"""Actions without a python start each: a fork server that has imported pyautogui once.

Starting a python and importing pyautogui takes most of half a second; forking a process that
already did takes a few milliseconds. The control server starts one runner per desktop
(`ActionRunner`) on a listening Unix socket it made and passed down; for each action the
runner forks a supervisor in a new session, which forks the child that runs the script (as
`python3 SCRIPT` would: `__main__`, its own traceback, its exit status) with stdout and stderr
in files, and answers the child's exit status. The control server kills the session's process
group at the timeout, as it does for any command.

X connections are never shared across a fork: the runner closes every module-level
`Xlib.display.Display` that the imports opened (pyautogui's, mouseinfo's), and each child opens
its own in their place.

    python3 -m roost.envs.osworld.desktop.action_runner --fd N   (N: the listening socket)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from .commands import Completed, kill_group

PRELOAD = ("pyautogui",)
START_TIMEOUT_S = 20.0


class RunnerUnavailable(OSError):
    """The fork server cannot take an action (not started, or gone); the caller runs it otherwise."""


class ActionRunner:
    """The control server's side: starts the fork server and runs scripts through it."""

    def __init__(self, python: str, env: dict[str, str], folder: Path) -> None:
        self.python, self.env, self.folder = python, env, folder
        self.path = str(folder / "action-runner.sock")
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Starts the fork server; it takes actions once its imports are done (they queue till then)."""
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                return
            Path(self.path).unlink(missing_ok=True)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
                listener.bind(self.path)
                listener.listen(64)
                argv = [self.python, "-m", "roost.envs.osworld.desktop.action_runner", "--fd", str(listener.fileno())]
                self._process = subprocess.Popen(
                    argv,
                    env=self.env,
                    pass_fds=(listener.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )

    def stop(self) -> None:
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                kill_group(self._process.pid)
                self._process.wait()
            Path(self.path).unlink(missing_ok=True)

    def run(self, script: str, *, timeout_s: float) -> Completed:
        """Runs the script file; RunnerUnavailable where the fork server is gone (it is restarted
        for the next action)."""
        out = tempfile.NamedTemporaryFile(dir=self.folder, prefix="action-", suffix=".out", delete=False)
        err = tempfile.NamedTemporaryFile(dir=self.folder, prefix="action-", suffix=".err", delete=False)
        out.close(), err.close()
        try:
            returncode, timed_out = self._run(script, out.name, err.name, timeout_s)
            output, error = _read(out.name), _read(err.name)
        finally:
            os.unlink(out.name), os.unlink(err.name)
        if timed_out:
            return Completed(None, output, error + f"\ntimed out after {timeout_s:g}s; killed", timed_out=True)
        return Completed(returncode, output, error)

    def _run(self, script: str, out: str, err: str, timeout_s: float) -> tuple[int | None, bool]:
        try:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(self.path)
        except OSError as exc:
            self.start()
            raise RunnerUnavailable(f"the action runner does not answer ({exc}); restarted") from exc
        with conn:
            conn.settimeout(START_TIMEOUT_S)  # the first action waits for the runner's imports
            stream = conn.makefile("rwb")
            try:
                stream.write(json.dumps({"script": script, "stdout": out, "stderr": err}).encode() + b"\n")
                stream.flush()
                group = int(json.loads(stream.readline())["group"])
            except (OSError, ValueError, KeyError) as exc:
                self.start()
                raise RunnerUnavailable(f"the action runner did not take the action ({exc})") from exc
            conn.settimeout(timeout_s)
            try:
                line = stream.readline()
            except TimeoutError:
                kill_group(group)
                return None, True
            # No answer: the action killed its own process group, its supervisor with it.
            return (int(json.loads(line)["returncode"]) if line else -signal.SIGKILL), False


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as file:
        return file.read()


def serve(listener: socket.socket) -> None:
    """The fork server's loop: one supervisor per connection; it never runs actions itself."""
    _preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    while True:
        conn, _ = listener.accept()
        if os.fork() == 0:
            status = 1
            try:
                listener.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                status = _supervise(conn)
            finally:  # a forked copy never returns into the loop
                os._exit(status)
        conn.close()


def _preload() -> None:
    for name in PRELOAD:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - without it, each action imports what it needs itself
            continue
    for _, _, display in _module_displays():
        display.close()


def _module_displays():
    """(module, attribute, Display) for every X connection a loaded module holds at its top level."""
    xdisplay = sys.modules.get("Xlib.display")
    if xdisplay is None:
        return []
    return [
        (module, name, value)
        for module in list(sys.modules.values())
        for name, value in list(getattr(module, "__dict__", {}).items())
        if isinstance(value, xdisplay.Display)
    ]


def _supervise(conn: socket.socket) -> int:
    """In a new session: fork the action's child, answer its group, then its exit status."""
    os.setsid()
    stream = conn.makefile("rwb")
    request = json.loads(stream.readline())
    stream.write(json.dumps({"group": os.getpid()}).encode() + b"\n")
    stream.flush()
    child = os.fork()
    if child == 0:
        conn.close()
        _run_script(request["script"], request["stdout"], request["stderr"])
    _, status = os.waitpid(child, 0)
    stream.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
    stream.flush()
    return 0


def _run_script(script: str, stdout: str, stderr: str) -> None:
    """Runs `script` as `python3 script` would, then exits with its status (never returns)."""
    import runpy
    import traceback

    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, stdout, os.O_WRONLY), (2, stderr, os.O_WRONLY)):
        target = os.open(path, flags)
        os.dup2(target, fd)
        os.close(target)
    os.chdir(os.environ.get("HOME", "/"))
    sys.argv, sys.path[0] = [script], os.path.dirname(script)
    code = 0
    try:
        _reconnect_displays()
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - reported as python reports an uncaught error
        traceback.print_exception(type(exc), exc, _from_script(exc.__traceback__, script))
        code = 1
    try:
        sys.stdout.flush(), sys.stderr.flush()
    finally:
        os._exit(code)


def _reconnect_displays() -> None:
    for module, name, display in _module_displays():
        setattr(module, name, type(display)(os.environ.get("DISPLAY")))


def _from_script(tb, script: str):
    """The traceback from the script's first frame on (the runner's own frames are not the script's)."""
    while tb is not None and tb.tb_frame.f_code.co_filename != script:
        tb = tb.tb_next
    return tb


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fd", type=int, required=True, help="the listening Unix socket, passed down")
    args = parser.parse_args(argv)
    serve(socket.socket(fileno=args.fd))


if __name__ == "__main__":
    main()
