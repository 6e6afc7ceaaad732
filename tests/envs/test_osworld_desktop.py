"""The local desktop backend: a real Xvfb desktop with its control server, driven by DesktopClient.

Needs the Debian packages of .ci/apt-packages.txt (xvfb, openbox, at-spi2-core, python3-pyatspi,
mousepad, wmctrl, ...); the desktop's python gets pyautogui from PyPI once (~/.cache/roost).
"""

from __future__ import annotations

import asyncio
import io
import os
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
import pytest
from PIL import Image

from roost.envs.osworld.backends import DesktopConfig, DesktopPool, start_desktop
from roost.envs.osworld.desktop.a11y import NS
from roost.envs.osworld.desktop.session import MARKER
from roost.envs.osworld.desktop_client import DesktopClient, DesktopError, DesktopRequestError

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
        png = await client.screenshot()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert Image.open(io.BytesIO(png)).size == (WIDTH, HEIGHT)
        assert await client.screen_size() == (WIDTH, HEIGHT)


async def test_pyautogui_types_into_mousepad_and_the_tree_shows_it(desktop):
    typed = "roost typed this"
    async with DesktopClient(desktop.url) as client:
        await client.launch(["mousepad"])
        frame = await _poll_tree(client, lambda root: _find(root, "frame", "Mousepad"))
        assert frame.get(f"{{{NS['cp']}}}screencoord") and frame.get(f"{{{NS['st']}}}showing") == "true"
        await client.activate_window("Mousepad")
        result = await client.run_python(
            f"import pyautogui\npyautogui.typewrite({typed!r}, interval=0.01)\nprint(pyautogui.size())")
        assert (result.returncode, result.timed_out) == (0, False), result
        assert f"width={WIDTH}, height={HEIGHT}" in result.output
        text = await _poll_tree(client, lambda root: next(
            (el for el in root.iter("text") if typed in (el.text or "")), None))
        assert text.get(f"{{{NS['st']}}}editable") == "true"
        await client.close_window("Mousepad")


async def test_files_go_up_and_come_back(desktop):
    data = bytes(range(256)) * 40
    async with DesktopClient(desktop.url) as client:
        await client.upload_file("/home/user/Desktop/sub/blob.bin", data)
        assert await client.get_file("/home/user/Desktop/sub/blob.bin") == data
        assert await client.get_file("~/Desktop/sub/blob.bin") == data
        assert await client.get_file("/home/user/no/such/file") is None
        listed = await client.list_directory("/home/user/Desktop")
        assert {"type": "file", "name": "blob.bin"} in next(c for c in listed["children"] if c["name"] == "sub")["children"]
        assert await client.desktop_path() == "/home/user/Desktop"
        done = await client.execute(["wc", "-c", "~/Desktop/sub/blob.bin"])
        assert (done.returncode, done.output.split()[0]) == (0, str(len(data)))
        done = await client.run_bash("cd ~/Desktop/sub && ls; echo oops >&2; exit 3")
        assert (done.returncode, done.output) == (3, "blob.bin\noops\n")


async def test_an_endless_loop_is_killed_at_its_timeout(desktop):
    async with DesktopClient(desktop.url) as client:
        started = time.monotonic()
        result = await client.run_python("while True:\n    pass\n", timeout_s=1.0)
        assert result.timed_out and result.returncode is None
        assert time.monotonic() - started < 8
        result = await client.execute("sleep 30; echo never", shell=True, timeout_s=1.0)
        assert result.timed_out and "never" not in result.output
        assert (await client.execute(["echo", "still serving"])).output == "still serving\n"


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


async def _poll_tree(client: DesktopClient, pick, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = pick(ET.fromstring(await client.accessibility_tree()))
        if found is not None:
            return found
        await asyncio.sleep(0.3)
    raise AssertionError(f"nothing in the accessibility tree matched within {timeout_s}s")


def _find(root: ET.Element, tag: str, name_part: str):
    return next((el for el in root.iter(tag) if name_part in el.get("name", "")), None)


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
