"""Run an OSWorld task's `config` (and its evaluator's `postconfig`) against a desktop.

Each step is `{"type": T, "parameters": {...}}`, as OSWorld's `SetupController._<T>_setup`
takes them. Supported: launch, open, execute, command, sleep, activate_window, close_window,
chrome_open_tabs, chrome_close_tabs (Chrome's DevTools HTTP endpoints on the desktop's
Chromium; OSWorld's `socat` launch that forwards port 9222 to them is skipped), download (from
the cache folder, see `file_cache`), upload_file. Steps that need the internet or an account,
and those roost's desktop does not serve, raise `UnsupportedTask` with the reason, before
anything runs when checked with `unsupported_step`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from roost.envs.osworld.desktop_client import DesktopClient, DesktopError
from roost.envs.osworld.errors import SetupError, UnsupportedTask
from roost.envs.osworld.file_cache import FileCache
from roost.envs.osworld.tasks import ConfigStep

UNSUPPORTED_STEPS = {
    "googledrive": "it uses a Google Drive account over the internet",
    "login": "it logs in to a website with an account over the internet",
    "update_browse_history": "it downloads Chrome's history database from the internet",
    "proxy": "it configures a paid proxy pool",
    "change_wallpaper": "roost's desktop server does not serve /setup/change_wallpaper",
    "execute_with_verification": "roost's desktop server does not serve /setup/execute_with_verification",
    "tidy_desktop": "OSWorld itself does not implement it",
    "act": "OSWorld itself does not implement it",
    "replay": "OSWorld itself does not implement it",
}
CLIENT_PASSWORD = "password"
"""What OSWorld's `{CLIENT_PASSWORD}` placeholder becomes (its VM image's password)."""
UNTIL_TIMEOUT_S = 60.0
"""How long an `execute` step with `until` repeats its command (OSWorld's repeats without end)."""
CHROME_WAIT_S = 30.0


@dataclass
class TaskContext:
    """What steps and getters need besides the task: the desktop, the caches, the task's id."""

    task_id: str
    client: DesktopClient
    host: str
    """Where OSWorld-style clients reach the desktop (its control server and Chromium)."""
    server_port: int
    chromium_port: int
    cache: FileCache
    work_dir: Path
    """This episode's own folder: getters save the desktop's files here (OSWorld's `cache_dir`)."""
    screen_size: tuple[int, int] = (1280, 720)

    @property
    def chromium_url(self) -> str:
        return f"http://{self.host}:{self.chromium_port}"


def unsupported_step(step: ConfigStep) -> str | None:
    """Why a step cannot run here, or None when it can."""
    if step.type in UNSUPPORTED_STEPS:
        return f"its config step {step.type!r} cannot run here: {UNSUPPORTED_STEPS[step.type]}"
    if step.type not in STEPS:
        return f"its config step {step.type!r} is not one OSWorld defines (known: {', '.join(sorted(STEPS))})"
    return None


async def run_steps(steps: list[ConfigStep], ctx: TaskContext) -> None:
    """Run the steps in order. UnsupportedTask: the task cannot run here; SetupError: a step
    failed; DesktopError: the desktop is gone.
    """
    for i, step in enumerate(steps, 1):
        reason = unsupported_step(step)
        if reason is not None:
            raise UnsupportedTask(ctx.task_id, reason)
        try:
            await STEPS[step.type](ctx, **step.parameters)
        except (UnsupportedTask, DesktopError):
            raise
        except Exception as exc:
            raise SetupError(
                f"task {ctx.task_id}: config step {i} ({step.type} {step.parameters}) "
                f"failed: {type(exc).__name__}: {exc}"
            ) from exc


async def _launch(ctx: TaskContext, command: str | list[str], shell: bool = False) -> None:
    if not command:
        raise ValueError("launch: an empty command")
    if not shell and isinstance(command, str):
        command = command.split()  # as OSWorld's SetupController does
    if _forwards_devtools(command):
        return
    await ctx.client.launch(command, shell=shell)


def _forwards_devtools(command: str | list[str]) -> bool:
    """OSWorld's Chrome tasks launch `socat tcp-listen:9222,fork tcp:localhost:1337` so its getters
    reach Chrome's DevTools at 9222. Here the getters and tab steps are given the port Chromium
    really listens on (`chromium_port`), so that forward is not needed (and socat not installed)."""
    words = command.split() if isinstance(command, str) else command
    return bool(words) and Path(words[0]).name == "socat" and any(w.startswith("tcp-listen:9222") for w in words[1:])


async def _open(ctx: TaskContext, path: str) -> None:
    if not path:
        raise ValueError("open: an empty path")
    await ctx.client.open_file(path)


async def _execute(
    ctx: TaskContext,
    command: str | list[str],
    stdout: str = "",
    stderr: str = "",
    shell: bool = False,
    until: dict[str, Any] | None = None,
) -> None:
    if not command:
        raise ValueError("execute: an empty command")
    command = _fill_placeholders(command, ctx.screen_size)
    deadline = time.monotonic() + UNTIL_TIMEOUT_S
    while True:
        result = await ctx.client.execute(command, shell=shell)
        if stdout:
            (ctx.work_dir / stdout).write_text(result.output)
        if stderr:
            (ctx.work_dir / stderr).write_text(result.error)
        if not until or _until_met(until, result):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"execute: {until} not met within {UNTIL_TIMEOUT_S:.0f} s "
                f"(last returncode {result.returncode}, output {result.output[-200:]!r})"
            )
        await asyncio.sleep(0.3)


def _until_met(until: dict[str, Any], result: Any) -> bool:
    return (
        "returncode" in until
        and result.returncode == until["returncode"]
        or "stdout" in until
        and until["stdout"] in result.output
        or "stderr" in until
        and until["stderr"] in result.error
    )


def _fill_placeholders(command: str | list[str], screen_size: tuple[int, int]) -> str | list[str]:
    width, height = screen_size
    values = {
        "{CLIENT_PASSWORD}": CLIENT_PASSWORD,
        "{SCREEN_WIDTH_HALF}": str(width // 2),
        "{SCREEN_HEIGHT_HALF}": str(height // 2),
        "{SCREEN_WIDTH}": str(width),
        "{SCREEN_HEIGHT}": str(height),
    }

    def fill(text: str) -> str:
        for key, value in values.items():
            text = text.replace(key, value)
        return text

    return fill(command) if isinstance(command, str) else [fill(c) for c in command]


async def _sleep(ctx: TaskContext, seconds: float) -> None:
    await asyncio.sleep(float(seconds))


async def _activate_window(ctx: TaskContext, window_name: str, strict: bool = False, by_class: bool = False) -> None:
    if not window_name:
        raise ValueError("activate_window: an empty window_name")
    await ctx.client.activate_window(window_name, strict=strict, by_class=by_class)


async def _close_window(ctx: TaskContext, window_name: str, strict: bool = False, by_class: bool = False) -> None:
    if not window_name:
        raise ValueError("close_window: an empty window_name")
    await ctx.client.close_window(window_name, strict=strict, by_class=by_class)


async def _download(ctx: TaskContext, files: list[dict[str, str]]) -> None:
    for f in files:
        url, path = f.get("url", ""), f.get("path", "")
        if not url or not path:
            raise ValueError(f"download: each file needs a url and a path, got {f}")
        source = ctx.cache.find(ctx.task_id, url, Path(path).name)
        await ctx.client.upload_file(path, await asyncio.to_thread(source.read_bytes))


async def _upload_file(ctx: TaskContext, files: list[dict[str, str]]) -> None:
    for f in files:
        local, path = f.get("local_path", ""), f.get("path", "")
        if not local or not path:
            raise ValueError(f"upload_file: each file needs a local_path and a path, got {f}")
        source = ctx.cache.relative(ctx.task_id, local)
        await ctx.client.upload_file(path, await asyncio.to_thread(source.read_bytes))


async def _chrome_open_tabs(ctx: TaskContext, urls_to_open: list[str]) -> None:
    async with httpx.AsyncClient(base_url=ctx.chromium_url, timeout=10.0) as http:
        before = await _chrome_pages(http)
        for url in urls_to_open:
            # DevTools opens a tab with PUT /json/new?<url>; it answers before the page loads.
            (await http.put("/json/new?" + url)).raise_for_status()
        if urls_to_open and before:
            # OSWorld closes the tab Chrome started with once the first new one is open.
            (await http.get(f"/json/close/{before[0]['id']}")).raise_for_status()


async def _chrome_close_tabs(ctx: TaskContext, urls_to_close: list[str]) -> None:
    from roost.envs.osworld.osworld_package import import_module

    compare_urls = import_module("desktop_env.evaluators.metrics.utils").compare_urls
    async with httpx.AsyncClient(base_url=ctx.chromium_url, timeout=10.0) as http:
        for url in urls_to_close:
            page = next((p for p in await _chrome_pages(http) if compare_urls(p["url"], url)), None)
            if page is not None:
                (await http.get(f"/json/close/{page['id']}")).raise_for_status()


async def _chrome_pages(http: httpx.AsyncClient) -> list[dict[str, Any]]:
    """Chromium's open tabs, waiting (bounded) for its DevTools endpoint to come up."""
    deadline = time.monotonic() + CHROME_WAIT_S
    while True:
        try:
            response = await http.get("/json/list")
            response.raise_for_status()
            return [p for p in response.json() if p.get("type") == "page"]
        except httpx.HTTPError as exc:
            if time.monotonic() > deadline:
                raise ConnectionError(
                    f"Chromium's DevTools at {http.base_url} did not answer within "
                    f"{CHROME_WAIT_S:.0f} s ({exc}); launch it with "
                    "--remote-debugging-port first"
                ) from exc
            await asyncio.sleep(0.1)  # Chromium comes up in about a second: do not wait half a second more


STEPS: dict[str, Callable[..., Awaitable[None]]] = {
    "launch": _launch,
    "open": _open,
    "execute": _execute,
    "command": _execute,
    "sleep": _sleep,
    "activate_window": _activate_window,
    "close_window": _close_window,
    "download": _download,
    "upload_file": _upload_file,
    "chrome_open_tabs": _chrome_open_tabs,
    "chrome_close_tabs": _chrome_close_tabs,
}
"""Step type → its coroutine (`ctx` first, then the step's parameters)."""
