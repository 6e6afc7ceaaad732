"""The local desktop backend: a real Xvfb desktop with its control server, driven by DesktopClient.

Needs the Debian packages of .ci/apt-packages.txt (xvfb, openbox, at-spi2-core, python3-pyatspi,
mousepad, wmctrl, ...); the desktop's python gets pyautogui from PyPI once (~/.cache/roost).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from roost.envs.osworld.backends import DesktopConfig, DesktopPool, start_desktop
from roost.envs.osworld.desktop.session import MARKER
from roost.envs.osworld.desktop_client import DesktopClient, DesktopError, DesktopRequestError
from roost.tests.envs.osworld_checks import (
    check_chromium_devtools,
    check_files,
    check_screenshot,
    check_typing_into_mousepad,
    check_versions,
)

WIDTH, HEIGHT = 1024, 640


@pytest.fixture(scope="module")
def desktop():
    """One desktop for the module's tests (started and closed outside their event loops: the local
    backend holds no loop-bound state)."""
    desktop = asyncio.run(start_desktop(DesktopConfig(width=WIDTH, height=HEIGHT)))
    yield desktop
    asyncio.run(desktop.close())


async def test_screenshot_is_a_png_of_the_configured_size(desktop):
    async with DesktopClient(desktop.url) as client:
        await check_screenshot(client, WIDTH, HEIGHT)


async def test_pyautogui_types_into_mousepad_and_the_tree_shows_it(desktop):
    async with DesktopClient(desktop.url) as client:
        await check_typing_into_mousepad(client, WIDTH, HEIGHT)


async def test_files_go_up_and_come_back(desktop):
    async with DesktopClient(desktop.url) as client:
        await check_files(client)


async def test_chromium_devtools_answer_on_the_desktop_port(desktop):
    async with DesktopClient(desktop.url) as client:
        await check_chromium_devtools(client, desktop.host, desktop.chromium_port)


async def test_a_relaunched_chromium_answers_on_the_same_desktop_port(desktop):
    """Chromium binds a new DevTools port each launch (port 0, written to its DevToolsActivePort);
    the desktop's port, held by the control server, reaches whichever Chromium runs now."""
    async with DesktopClient(desktop.url) as client, httpx.AsyncClient(timeout=5) as http:
        url = f"http://{desktop.host}:{desktop.chromium_port}/json/version"
        first = await _devtools_browser(client, http, url)
        await _close_once_shown(client, "Chromium")
        deadline = time.monotonic() + 30
        while await _answer(http, url) is not None:
            assert time.monotonic() < deadline, "Chromium still answers after its window closed"
            await asyncio.sleep(0.2)
        second = await _devtools_browser(client, http, url)
        assert second != first  # another browser process, on the same desktop port


async def _close_once_shown(client: DesktopClient, window: str) -> None:
    """Close the window once it is there: on a loaded machine Chromium's DevTools answer before
    its window is mapped (close_window's 404 then), seen under the two-worker suite."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return await client.close_window(window)
        except DesktopRequestError as exc:
            assert exc.status == 404 and time.monotonic() < deadline, exc
            await asyncio.sleep(0.2)


async def _devtools_browser(client: DesktopClient, http: httpx.AsyncClient, url: str) -> str:
    """Launches Chromium as OSWorld's tasks do; the browser's DevTools id once it answers."""
    await client.launch(["google-chrome", "--remote-debugging-port=1337", "about:blank"])
    deadline = time.monotonic() + 60
    while (version := await _answer(http, url)) is None:
        assert time.monotonic() < deadline, f"no DevTools answer at {url}"
        await asyncio.sleep(0.2)
    return version["webSocketDebuggerUrl"].rsplit("/", 1)[-1]


async def _answer(http: httpx.AsyncClient, url: str) -> dict | None:
    try:
        return (await http.get(url)).json()
    except (httpx.HTTPError, ValueError):
        return None


async def test_it_reports_its_applications_versions(desktop):
    async with DesktopClient(desktop.url) as client:
        await check_versions(client)


async def test_an_endless_loop_is_killed_at_its_timeout(desktop):
    async with DesktopClient(desktop.url) as client:
        started = time.monotonic()
        result = await client.run_python("while True:\n    pass\n", timeout_s=1.0)
        assert result.timed_out and result.returncode is None
        assert time.monotonic() - started < 8
        result = await client.execute("sleep 30; echo never", shell=True, timeout_s=1.0)
        assert result.timed_out and "never" not in result.output
        assert (await client.execute(["echo", "still serving"])).output == "still serving\n"


async def test_actions_fork_from_a_runner_that_imported_pyautogui(desktop):
    """Each action is a fresh child of the action runner: pyautogui is already imported, its X
    connection is the child's own, and the script reports as `python3 script` would."""
    probe = (
        "import os, sys\nprint('pyautogui' in sys.modules, __name__)\nimport pyautogui\n"
        "pyautogui.moveTo({x}, 33)\nprint(pyautogui._pyautogui_x11._display.fileno(), os.getpid())"
    )
    async with DesktopClient(desktop.url) as client:
        first, second = await asyncio.gather(
            client.run_python(probe.format(x=44)), client.run_python(probe.format(x=55))
        )
        for result in (first, second):
            assert result.returncode == 0 and result.output.startswith("True __main__\n"), result
        assert first.output.split()[-1] != second.output.split()[-1]  # two processes
        assert (await client.run_python("import pyautogui; print(tuple(pyautogui.position()))")).output in (
            "(44, 33)\n",
            "(55, 33)\n",
        )
        failed = await client.run_python("x = 1\nraise ValueError('bad value')\n")
        assert failed.returncode == 1 and failed.error.startswith("Traceback (most recent call last):\n  File")
        assert "line 2, in <module>" in failed.error and "ValueError: bad value" in failed.error
        assert "runpy" not in failed.error and "action_runner" not in failed.error
        assert (await client.run_python("import sys; sys.exit(3)")).returncode == 3
        syntax = await client.run_python("def broken(:\n")
        assert syntax.returncode == 1 and "SyntaxError" in syntax.error


def _action_runners(marker: str) -> list[int]:
    return [
        pid
        for pid in _desktop_processes(marker)
        if b"desktop.action_runner" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]


async def test_a_killed_action_runner_is_replaced_and_actions_go_on(desktop):
    # a runner the earlier tests replaced may still be exiting (seen under the two-worker suite)
    deadline = time.monotonic() + 15
    while len(runners := _action_runners(desktop.marker)) != 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert len(runners) == 1, runners
    os.kill(runners[0], signal.SIGKILL)
    async with DesktopClient(desktop.url) as client:
        for _ in range(3):  # the first runs in a python of its own, the next in the new runner
            result = await client.run_python("import sys; print('pyautogui' in sys.modules)")
            assert result.returncode == 0, result
        assert result.output == "True\n"


async def test_bad_requests_get_a_4xx_and_the_server_keeps_serving(desktop):
    async with httpx.AsyncClient(base_url=desktop.url, timeout=10) as http:
        cases = [
            (http.post("/execute", content=b"{not json", headers={"Content-Type": "application/json"}), 400),
            (http.post("/execute", json={"command": 5}), 400),
            (http.post("/execute", json=["ls"]), 400),
            (http.post("/execute", json={"command": "ls", "timeout": -1}), 400),
            (http.post("/run_python", json={}), 400),
            (http.post("/file", data={}), 400),
            (http.post("/setup/upload", data={"file_path": "/tmp/x"}), 400),
            (http.post("/setup/open_file", json={"path": "/home/user/nothing.txt"}), 404),
            (http.post("/setup/activate_window", json={}), 400),
            (http.post("/list_directory", json={"path": "/no/such/dir"}), 400),
            (http.get("/no/such/route"), 404),
            (http.get("/execute"), 405),
        ]
        for request, status in cases:
            response = await request
            assert response.status_code == status, (response.request.url, response.text)
    async with DesktopClient(desktop.url) as client:
        with pytest.raises(DesktopRequestError) as refused:
            await client.activate_window("no window has this title")
        assert refused.value.status == 404
        assert await client.health()


async def test_a_dead_x_server_is_a_dead_desktop():
    desktop = await start_desktop(DesktopConfig(width=640, height=480))
    try:
        assert await desktop.alive()
        async with DesktopClient(desktop.url) as client:
            killed = await client.execute('kill -9 $(pgrep -f "^Xvfb $DISPLAY ")', shell=True)
            assert killed.returncode == 0, killed
            deadline = time.monotonic() + 10
            while await desktop.alive() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert not await desktop.alive()
            with pytest.raises(DesktopError):
                await client.screenshot()
    finally:
        await desktop.close()


async def test_a_pool_bounds_desktops_and_closing_ends_every_process():
    pool = DesktopPool(DesktopConfig(width=640, height=480, start_timeout_s=30), max_desktops=1)
    desktop = await pool.start()
    try:
        async with DesktopClient(desktop.url) as client:
            # An app that leaves the desktop's process groups (setsid) still ends with the desktop.
            await client.execute("setsid sleep 600 >/dev/null 2>&1 &", shell=True)
            assert _desktop_processes(desktop.marker)
        with pytest.raises(DesktopError, match="bound"):
            await pool.start(wait_s=0.5)
    finally:
        await desktop.close()
    assert not await desktop.alive()
    assert _desktop_processes(desktop.marker) == []
    with pytest.raises(DesktopError):
        await DesktopClient(desktop.url).screenshot()


def _desktop_processes(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if f"{MARKER}={marker}".encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
