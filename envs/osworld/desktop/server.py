"""The desktop's control server: the part of OSWorld's in-VM server protocol that OSWorld's
`PythonController`, `SetupController` and getters use, on the standard library's HTTP server.

    python3 -m roost.envs.osworld.desktop.server --port 5000 --width 1280 --height 720

Starts the X session (session.py), then serves. Same paths, methods, field names and answers
as OSWorld's server: GET /screenshot, /accessibility, /terminal, /platform, /cursor_position;
POST /file, /execute (= /setup/execute), /run_python, /run_bash_script, /screen_size,
/window_size, /list_directory, /desktop_path, /setup/upload, /setup/launch, /setup/open_file,
/setup/activate_window, /setup/close_window; plus GET /health and GET /versions (the
applications' versions, versions.py). Every command has a timeout
(a request's `timeout` field where it has one); a command that runs past it is killed with its
process group and answered 500 with `"timed_out": true`. Bad requests get a 4xx and the
server keeps serving. /run_python code runs in a child forked from the action runner
(action_runner.py: pyautogui imported once), not in a new python each. Chromium's DevTools are served on
`--devtools-port`, forwarded to whatever port the running Chromium bound (forward.py). Once serving
it prints one JSON line, `{"port": ..., "display": ..., "devtools_port": ...}`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from . import commands, screen, windows
from .action_runner import ActionRunner, RunnerUnavailable
from .forward import forward
from .http_io import BadRequest, Reply, Request
from .session import DesktopSession, SessionConfig, devtools_port
from .versions import application_versions

EXECUTE_TIMEOUT_S = 120.0
PYTHON_TIMEOUT_S = 30.0
BASH_TIMEOUT_S = 100.0
OPEN_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 1800.0


class Desktop:
    """What the routes act on: the session's environment and display, the desktop's python and
    its action runner (pyautogui imported once; actions forked from it)."""

    def __init__(self, session: DesktopSession, python: str, runner: ActionRunner) -> None:
        self.session = session
        self.python = python
        self.runner = runner
        self.a11y_lock = threading.Lock()
        self._versions: dict[str, str] | None = None
        self._versions_lock = threading.Lock()

    def versions(self) -> dict[str, str]:
        """The applications' versions, found at the first request (they do not change while it runs)."""
        with self._versions_lock:
            if self._versions is None:
                self._versions = application_versions(self.env)
            return self._versions

    def run_python(self, code: str, timeout_s: float) -> commands.Completed:
        """Through the action runner; where it is gone, in a python of its own (as it restarts)."""
        with commands.script_file(code, ".py") as script:
            try:
                return self.runner.run(script, timeout_s=timeout_s)
            except RunnerUnavailable:
                return commands.run([self.python, script], shell=False, env=self.env, timeout_s=timeout_s)

    @property
    def env(self) -> dict[str, str]:
        return self.session.env

    @property
    def display(self) -> str:
        return self.session.display


def _timeout(body: dict, default: float) -> float:
    value = body.get("timeout", default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_TIMEOUT_S:
        raise BadRequest(f"timeout must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], got {value!r}")
    return float(value)


def _text(body: dict, key: str, missing: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise BadRequest(missing)
    return value


def _command(body: dict) -> tuple[list[str] | str, bool]:
    shell = bool(body.get("shell", False))
    command = body.get("command", "" if shell else [])
    if not command or not (
        isinstance(command, str) or (isinstance(command, list) and all(isinstance(a, str) for a in command))
    ):
        raise BadRequest("command must be a non-empty string or list of strings")
    try:
        return commands.as_argv(command, shell), shell
    except ValueError as exc:
        raise BadRequest(f"command does not split like a shell line: {exc}") from exc


def health(desktop: Desktop, request: Request) -> Reply:
    if not desktop.session.alive():
        return Reply.json({"status": "error", "message": "the X server is gone"}, 503)
    return Reply.json({"status": "ok", "display": desktop.display})


def versions(desktop: Desktop, request: Request) -> Reply:
    return Reply.json(desktop.versions())


def screenshot(desktop: Desktop, request: Request) -> Reply:
    return Reply(200, screen.screenshot_png(desktop.display), "image/png")


def accessibility(desktop: Desktop, request: Request) -> Reply:
    from .a11y import accessibility_xml

    with desktop.a11y_lock:
        return Reply.json({"AT": accessibility_xml()})


def terminal(desktop: Desktop, request: Request) -> Reply:
    # OSWorld reads gnome-terminal's text; this desktop has no gnome-terminal, so there is none.
    return Reply.json({"output": None, "status": "success"})


def platform_name(desktop: Desktop, request: Request) -> Reply:
    return Reply(200, b"Linux", "text/html; charset=utf-8")


def cursor_position(desktop: Desktop, request: Request) -> Reply:
    return Reply.json(list(screen.pointer(desktop.display)))


def screen_size(desktop: Desktop, request: Request) -> Reply:
    width, height = screen.screen_size(desktop.display)
    return Reply.json({"width": width, "height": height})


def window_size(desktop: Desktop, request: Request) -> Reply:
    fields, _ = request.form()
    if "app_class_name" not in fields:
        return Reply.json({"error": "app_class_name is required"}, 400)
    size = screen.window_size(desktop.display, fields["app_class_name"])
    if size is None:
        return Reply.json({"error": f"no window of class {fields['app_class_name']!r}"}, 404)
    return Reply.json({"width": size[0], "height": size[1]})


def execute(desktop: Desktop, request: Request) -> Reply:
    body = request.json()
    command, shell = _command(body)
    try:
        done = commands.run(command, shell=shell, env=desktop.env, timeout_s=_timeout(body, EXECUTE_TIMEOUT_S))
    except OSError as exc:
        return Reply.json({"status": "error", "message": str(exc)}, 500)
    answer = {"status": "success", "output": done.output, "error": done.error, "returncode": done.returncode}
    if done.timed_out:
        return Reply.json({**answer, "status": "error", "message": done.error.strip(), "timed_out": True}, 500)
    return Reply.json(answer)


def run_python(desktop: Desktop, request: Request) -> Reply:
    body = request.json()
    code = body.get("code")
    if not isinstance(code, str) or not code:
        return Reply.json({"status": "error", "message": "Code not supplied!"}, 400)
    done = desktop.run_python(code, _timeout(body, PYTHON_TIMEOUT_S))
    if done.timed_out:
        return Reply.json(
            {
                "status": "error",
                "message": "Execution timeout: Code took too long to execute",
                "error": "TimeoutExpired",
                "need_more": False,
                "output": done.output,
                "timed_out": True,
            },
            500,
        )
    error = done.error or ("" if done.returncode == 0 else f"Process exited with code {done.returncode}")
    message = "\n".join(part for part in (done.output, error) if part)
    return Reply.json(
        {
            "status": "success" if done.returncode == 0 else "error",
            "message": message,
            "need_more": False,
            "output": done.output,
            "error": error,
            "return_code": done.returncode,
        }
    )


def run_bash_script(desktop: Desktop, request: Request) -> Reply:
    body = request.json()
    script, cwd = body.get("script"), body.get("working_dir")
    if not isinstance(script, str) or not script:
        return Reply.json({"status": "error", "output": "Script not supplied!", "error": "", "returncode": -1}, 400)
    if cwd is not None:
        cwd = os.path.expanduser(str(cwd))
        if not os.path.isdir(cwd):
            return Reply.json(
                {
                    "status": "error",
                    "output": f"Working directory does not exist: {cwd}",
                    "error": "",
                    "returncode": -1,
                },
                400,
            )
    timeout_s = _timeout(body, BASH_TIMEOUT_S)
    done = commands.run_bash(script, env=desktop.env, timeout_s=timeout_s, cwd=cwd)
    if done.timed_out:
        return Reply.json(
            {
                "status": "error",
                "output": f"Script execution timed out after {timeout_s:g} seconds",
                "error": "",
                "returncode": -1,
                "timed_out": True,
            },
            500,
        )
    return Reply.json(
        {
            "status": "success" if done.returncode == 0 else "error",
            "output": done.output,
            "error": "",
            "returncode": done.returncode,
        }
    )


def get_file(desktop: Desktop, request: Request) -> Reply:
    fields, _ = request.form()
    if "file_path" not in fields:
        return Reply.json({"error": "file_path is required"}, 400)
    path = Path(os.path.expandvars(os.path.expanduser(fields["file_path"])))
    if not path.is_file():
        return Reply.json({"error": "File not found"}, 404)
    return Reply(
        200,
        path.read_bytes(),
        "application/octet-stream",
        {"Content-Disposition": f'attachment; filename="{path.name}"'},
    )


def upload(desktop: Desktop, request: Request) -> Reply:
    fields, files = request.form()
    if "file_path" not in fields or "file_data" not in files:
        return Reply.json({"error": "file_path and file_data are required"}, 400)
    path = Path(os.path.expandvars(os.path.expanduser(fields["file_path"])))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files["file_data"])
    except OSError as exc:
        return Reply.json({"error": f"Failed to upload file: {exc}"}, 400)
    return Reply.text(f"File Uploaded: {len(files['file_data'])} bytes")


def launch(desktop: Desktop, request: Request) -> Reply:
    command, shell = _command(request.json())
    try:
        commands.spawn(command, shell=shell, env=desktop.env)
    except OSError as exc:
        return Reply.json({"status": "error", "message": str(exc)}, 404)
    return Reply.text(f"{command if shell else ' '.join(command)} launched successfully")


def open_file(desktop: Desktop, request: Request) -> Reply:
    body = request.json()
    path = _text(body, "path", "Path not supplied!")
    try:
        timeout_s = float(body.get("timeout_seconds", OPEN_TIMEOUT_S))
    except (TypeError, ValueError):
        return Reply.text(f"Invalid timeout_seconds: {body.get('timeout_seconds')}", 400)
    try:
        windows.open_path(
            os.path.expandvars(path),
            window_name=body.get("window_name"),
            env=desktop.env,
            timeout_s=min(timeout_s, MAX_TIMEOUT_S),
        )
    except FileNotFoundError as exc:
        return Reply.text(str(exc), 404)
    except windows.WindowNotFound as exc:
        return Reply.text(str(exc), 500)
    return Reply.text("File opened and window activated successfully")


def _window_action(action: str, done: str):
    def route(desktop: Desktop, request: Request) -> Reply:
        body = request.json()
        name = _text(body, "window_name", "window_name required")
        try:
            windows.wmctrl_window(
                action,
                name,
                strict=bool(body.get("strict", False)),
                by_class=bool(body.get("by_class", False)),
                env=desktop.env,
            )
        except windows.WindowNotFound as exc:
            return Reply.text(str(exc), 404)
        return Reply.text(done)

    return route


def desktop_path(desktop: Desktop, request: Request) -> Reply:
    path = Path(desktop.env["HOME"]) / "Desktop"
    if not path.is_dir():
        return Reply.json({"error": "Unsupported operating system or desktop path not found"}, 404)
    return Reply.json({"desktop_path": str(path)})


def list_directory(desktop: Desktop, request: Request) -> Reply:
    body = request.json()
    if "path" not in body:
        return Reply.json({"error": "Missing 'path' parameter"}, 400)
    start = os.path.expanduser(str(body["path"]))
    if not os.path.isdir(start):
        return Reply.json({"error": "The provided path is not a directory"}, 400)
    return Reply.json({"directory_tree": _tree(start)})


def _tree(directory: str) -> dict:
    try:
        entries = sorted(os.listdir(directory))
    except OSError as exc:
        return {"error": str(exc)}
    children = [
        _tree(os.path.join(directory, e)) if os.path.isdir(os.path.join(directory, e)) else {"type": "file", "name": e}
        for e in entries
    ]
    return {"type": "directory", "name": os.path.basename(directory), "children": children}


ROUTES = {
    ("GET", "/health"): health,
    ("GET", "/screenshot"): screenshot,
    ("GET", "/accessibility"): accessibility,
    ("GET", "/versions"): versions,
    ("GET", "/terminal"): terminal,
    ("GET", "/platform"): platform_name,
    ("GET", "/cursor_position"): cursor_position,
    ("POST", "/screen_size"): screen_size,
    ("POST", "/window_size"): window_size,
    ("POST", "/execute"): execute,
    ("POST", "/setup/execute"): execute,
    ("POST", "/run_python"): run_python,
    ("POST", "/run_bash_script"): run_bash_script,
    ("POST", "/file"): get_file,
    ("POST", "/setup/upload"): upload,
    ("POST", "/setup/launch"): launch,
    ("POST", "/setup/open_file"): open_file,
    ("POST", "/setup/activate_window"): _window_action("a", "Window activated successfully"),
    ("POST", "/setup/close_window"): _window_action("c", "Window closed successfully."),
    ("POST", "/desktop_path"): desktop_path,
    ("POST", "/list_directory"): list_directory,
}


def make_handler(desktop: Desktop) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 120  # a client that stops sending mid-request frees its thread
        # Headers and body go out in two writes: with Nagle's algorithm the body waits for the
        # client's delayed ACK (40 ms a reply on a kept-alive connection).
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def _serve(self, method: str) -> None:
            path = self.path.split("?", 1)[0]
            route = ROUTES.get((method, path))
            if route is None:
                allowed = sorted(m for m, p in ROUTES if p == path)
                reply = (
                    Reply.json({"error": f"{method} {path} is not allowed; use {', '.join(allowed)}"}, 405)
                    if allowed
                    else Reply.json({"error": f"no route {path}"}, 404)
                )
            else:
                reply = self._call(route)
            reply.send(self)

        def _call(self, route) -> Reply:
            try:
                return route(desktop, Request.read(self))
            except BadRequest as exc:
                return Reply.json({"status": "error", "error": str(exc), "message": str(exc)}, exc.status)
            except Exception as exc:  # noqa: BLE001 - one failed request must not end the server
                return Reply.json(
                    {
                        "status": "error",
                        "message": f"{type(exc).__name__}: {exc}",
                        "error": f"{type(exc).__name__}: {exc}",
                    },
                    500,
                )

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
            pass

    return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5000, help="0: any free port (printed when serving)")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--home", default=os.path.expanduser("~"), help="the desktop user's home")
    parser.add_argument(
        "--devtools-port",
        type=int,
        default=0,
        help="serve Chromium's DevTools on this port of --host, forwarded to the port Chromium "
        "bound (it listens on 127.0.0.1 only); 0: any free port (printed when serving)",
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the python that runs /run_python code and `python` commands (imports pyautogui)",
    )
    args = parser.parse_args(argv)
    home = Path(args.home)
    (home / "Desktop").mkdir(parents=True, exist_ok=True)
    session = DesktopSession(SessionConfig(width=args.width, height=args.height, home=home, python=args.python))
    session.start()
    # pyatspi (in this process) finds the at-spi bus through the display and the session bus.
    for key in ("DISPLAY", "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR", "XAUTHORITY"):
        os.environ[key] = session.env[key]
    runner = ActionRunner(args.python, session.env, session.runtime)
    runner.start()
    server = ThreadingHTTPServer((args.host, args.port), make_handler(Desktop(session, args.python, runner)))
    server.daemon_threads = True
    devtools = forward((args.host, args.devtools_port), lambda: _chromium_address(home))
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    ready = {"port": server.server_address[1], "display": session.display, "devtools_port": devtools.getsockname()[1]}
    print(json.dumps(ready), flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        devtools.close()
        runner.stop()
        session.stop()


def _chromium_address(home: Path) -> tuple[str, int] | None:
    port = devtools_port(home)
    return None if port is None else ("127.0.0.1", port)


if __name__ == "__main__":
    main()
