"""Checks shared by the local and the docker desktop tests: each drives a running desktop
through DesktopClient and asserts on what it really answers."""

from __future__ import annotations

import asyncio
import io
import time
import xml.etree.ElementTree as ET

import httpx
from PIL import Image

from roost.envs.osworld.desktop.a11y import NS
from roost.envs.osworld.desktop_client import DesktopClient


async def check_screenshot(client: DesktopClient, width: int, height: int) -> None:
    png = await client.screenshot()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert Image.open(io.BytesIO(png)).size == (width, height)
    assert await client.screen_size() == (width, height)


async def check_typing_into_mousepad(client: DesktopClient, width: int, height: int) -> None:
    """pyautogui code types into a launched mousepad; the accessibility tree shows the text."""
    typed = "roost typed this"
    await client.launch(["mousepad"])
    frame = await poll_tree(client, lambda root: _find(root, "frame", "Mousepad"))
    assert frame.get(f"{{{NS['cp']}}}screencoord") and frame.get(f"{{{NS['st']}}}showing") == "true"
    await client.activate_window("Mousepad")
    result = await client.run_python(
        f"import pyautogui\npyautogui.typewrite({typed!r}, interval=0.01)\nprint(pyautogui.size())")
    assert (result.returncode, result.timed_out) == (0, False), result
    assert f"width={width}, height={height}" in result.output
    text = await poll_tree(client, lambda root: next(
        (el for el in root.iter("text") if typed in (el.text or "")), None))
    assert text.get(f"{{{NS['st']}}}editable") == "true"
    width_px, height_px = await client.window_size("mousepad")
    assert 0 < width_px <= width and 0 < height_px <= height
    await client.close_window("Mousepad")
    assert await client.window_size("no-such-class") is None


async def check_files(client: DesktopClient) -> None:
    """Files go up and come back byte for byte; commands see them in the user's home."""
    data = bytes(range(256)) * 40
    await client.upload_file("/home/user/Desktop/sub/blob.bin", data)
    assert await client.get_file("/home/user/Desktop/sub/blob.bin") == data
    assert await client.get_file("~/Desktop/sub/blob.bin") == data
    assert await client.get_file("/home/user/no/such/file") is None
    listed = await client.list_directory("/home/user/Desktop")
    sub = next(c for c in listed["children"] if c["name"] == "sub")
    assert {"type": "file", "name": "blob.bin"} in sub["children"]
    assert await client.desktop_path() == "/home/user/Desktop"
    done = await client.execute(["wc", "-c", "~/Desktop/sub/blob.bin"])
    assert (done.returncode, done.output.split()[0]) == (0, str(len(data)))
    done = await client.run_bash("cd ~/Desktop/sub && ls; echo oops >&2; exit 3")
    assert (done.returncode, done.output) == (3, "blob.bin\noops\n")


async def check_chromium_devtools(client: DesktopClient, host: str, port: int) -> None:
    """`google-chrome` as OSWorld's tasks start it serves DevTools at the desktop's (host, port)."""
    await client.launch(["google-chrome", "--remote-debugging-port=1337", "about:blank"])
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient(timeout=5) as http:
        while True:
            try:
                version = (await http.get(f"http://{host}:{port}/json/version")).json()
                break
            except (httpx.HTTPError, ValueError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
    assert "Chrome" in version["Browser"] and version["webSocketDebuggerUrl"]
    await client.close_window("chromium", by_class=True)


async def poll_tree(client: DesktopClient, pick, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = pick(ET.fromstring(await client.accessibility_tree()))
        if found is not None:
            return found
        await asyncio.sleep(0.3)
    raise AssertionError(f"nothing in the accessibility tree matched within {timeout_s}s")


def _find(root: ET.Element, tag: str, name_part: str):
    return next((el for el in root.iter(tag) if name_part in el.get("name", "")), None)
