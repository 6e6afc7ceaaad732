"""`DesktopClient`: roost's async client of a desktop's control server (OSWorld's in-VM protocol).

    async with DesktopClient(desktop.url) as client:
        png = await client.screenshot()
        result = await client.run_python("import pyautogui; pyautogui.typewrite('hi')")

Errors: `DesktopError` when the desktop or its server is gone or answers 5xx (an infra error:
the desktop should be replaced); `DesktopRequestError` when it refused a request (4xx: a window
that is not there, a file path that does not exist, a bad field).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

SLACK_S = 10.0
"""HTTP time on top of a command's own timeout: the server answers a killed command itself."""


class DesktopError(RuntimeError):
    """The desktop or its control server is gone, or answered 5xx."""


class DesktopRequestError(ValueError):
    """The control server refused a request (4xx); `status` is its HTTP status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class CommandResult:
    returncode: int | None
    """None when the command was killed at its timeout."""
    output: str
    error: str
    timed_out: bool = False


class DesktopClient:
    def __init__(self, base_url: str, *, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s)

    async def __aenter__(self) -> DesktopClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def health(self) -> bool:
        try:
            return (await self._http.get("/health", timeout=5.0)).status_code == 200
        except httpx.HTTPError:
            return False

    async def screenshot(self) -> bytes:
        return (await self._request("GET", "/screenshot")).content

    async def accessibility_tree(self) -> str:
        return (await self._request("GET", "/accessibility")).json()["AT"]

    async def versions(self) -> dict[str, str]:
        """The desktop's applications and their versions (`{"chromium": "156.0.8078.114", ...}`)."""
        return _json(await self._request("GET", "/versions"))

    async def screen_size(self) -> tuple[int, int]:
        size = (await self._request("POST", "/screen_size")).json()
        return int(size["width"]), int(size["height"])

    async def window_size(self, app_class_name: str) -> tuple[int, int] | None:
        """The size of the first window of that WM_CLASS; None where there is none."""
        found = await self._found("POST", "/window_size", data={"app_class_name": app_class_name})
        return None if found is None else (int(found.json()["width"]), int(found.json()["height"]))

    async def execute(self, command: list[str] | str, *, shell: bool = False, timeout_s: float = 30.0) -> CommandResult:
        """Runs a command to completion (killed at `timeout_s`) as the desktop's user."""
        body = {"command": command, "shell": shell, "timeout": timeout_s}
        return _result(
            await self._request("POST", "/execute", json=body, timeout=timeout_s + SLACK_S, timed_out_ok=True)
        )

    async def run_python(self, code: str, *, timeout_s: float = 30.0) -> CommandResult:
        """Runs Python code on the desktop (DISPLAY set, pyautogui importable), killed at `timeout_s`."""
        body = {"code": code, "timeout": timeout_s}
        return _result(
            await self._request("POST", "/run_python", json=body, timeout=timeout_s + SLACK_S, timed_out_ok=True)
        )

    async def run_bash(self, script: str, *, timeout_s: float = 30.0, working_dir: str | None = None) -> CommandResult:
        """Runs a bash script (stderr merged into `output`), killed at `timeout_s`."""
        body = {"script": script, "timeout": timeout_s, "working_dir": working_dir}
        return _result(
            await self._request("POST", "/run_bash_script", json=body, timeout=timeout_s + SLACK_S, timed_out_ok=True)
        )

    async def get_file(self, path: str) -> bytes | None:
        """The file's bytes; None where the desktop has no file at `path`."""
        found = await self._found("POST", "/file", data={"file_path": path})
        return None if found is None else found.content

    async def upload_file(self, path: str, data: bytes) -> None:
        """Writes `data` at `path` on the desktop (parent folders made)."""
        await self._request(
            "POST",
            "/setup/upload",
            data={"file_path": path},
            files={"file_data": ("file", data, "application/octet-stream")},
        )

    async def launch(self, command: list[str] | str, *, shell: bool = False) -> None:
        """Starts a program and leaves it running."""
        await self._request("POST", "/setup/launch", json={"command": command, "shell": shell})

    async def open_file(self, path: str, *, window_name: str | None = None, timeout_s: float = 60.0) -> None:
        """Opens a file in its application and waits (up to `timeout_s`) for its window."""
        body: dict[str, Any] = {"path": path, "timeout_seconds": timeout_s}
        if window_name:
            body["window_name"] = window_name
        await self._request("POST", "/setup/open_file", json=body, timeout=timeout_s + SLACK_S)

    async def activate_window(self, window_name: str, *, strict: bool = False, by_class: bool = False) -> None:
        await self._request(
            "POST", "/setup/activate_window", json={"window_name": window_name, "strict": strict, "by_class": by_class}
        )

    async def close_window(self, window_name: str, *, strict: bool = False, by_class: bool = False) -> None:
        await self._request(
            "POST", "/setup/close_window", json={"window_name": window_name, "strict": strict, "by_class": by_class}
        )

    async def list_directory(self, path: str) -> dict:
        """OSWorld's directory tree: {"type", "name", "children": [...]}."""
        return (await self._request("POST", "/list_directory", json={"path": path})).json()["directory_tree"]

    async def desktop_path(self) -> str:
        return (await self._request("POST", "/desktop_path")).json()["desktop_path"]

    async def _found(self, method: str, path: str, **kwargs: Any) -> httpx.Response | None:
        """The answer, or None where the server answered 404."""
        try:
            return await self._request(method, path, **kwargs)
        except DesktopRequestError as exc:
            if exc.status == 404:
                return None
            raise

    async def _request(
        self, method: str, path: str, *, timed_out_ok: bool = False, timeout: float | None = None, **kwargs: Any
    ) -> httpx.Response:
        try:
            response = await self._http.request(method, path, timeout=timeout or self.timeout_s, **kwargs)
        except httpx.HTTPError as exc:
            raise DesktopError(
                f"the desktop at {self.base_url} did not answer {method} {path}: {type(exc).__name__}: {exc}"
            ) from exc
        if response.status_code < 400:
            return response
        detail = _detail(response)
        if 400 <= response.status_code < 500:
            raise DesktopRequestError(
                f"{method} {path} refused ({response.status_code}): {detail}", response.status_code
            )
        if timed_out_ok and _json(response).get("timed_out"):
            return response
        raise DesktopError(f"the desktop at {self.base_url} failed {method} {path} ({response.status_code}): {detail}")


def _json(response: httpx.Response) -> dict:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _detail(response: httpx.Response) -> str:
    data = _json(response)
    return str(data.get("error") or data.get("message") or response.text[:500])


def _result(response: httpx.Response) -> CommandResult:
    data = _json(response)
    timed_out = bool(data.get("timed_out"))
    code = data.get("returncode", data.get("return_code"))
    return CommandResult(
        returncode=None if timed_out else code,
        output=data.get("output") or "",
        error=data.get("error") or "",
        timed_out=timed_out,
    )
