"""Checks shared by the local and the docker desktop tests: each drives a running desktop
through DesktopClient (or an env server through EnvClient) and asserts on what it really answers."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
from PIL import Image

from roost.envs.client import EnvClient
from roost.envs.osworld.desktop.a11y import NS
from roost.envs.osworld.desktop_client import DesktopClient, DesktopRequestError
from roost.envs.protocol import TextAction, ToolCall

NOTES = {
    "id": "mousepad-notes",
    "snapshot": "mousepad",
    "source": "roost test",
    "instruction": "Add the line 'hello roost' to notes.txt, open in Mousepad, and save it.",
    "config": [
        {"type": "execute", "parameters": {"command": ["bash", "-c", "printf 'first line\\n' > ~/notes.txt"]}},
        {"type": "launch", "parameters": {"command": ["mousepad", "~/notes.txt"]}},
    ],
    "related_apps": ["mousepad"],
    "evaluator": {
        "func": "check_include_exclude",
        "result": {"type": "vm_command_line", "command": "cat ~/notes.txt", "shell": True},
        "expected": {"type": "rule", "rules": {"include": ["hello roost", "first line"], "exclude": []}},
    },
}


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
        f"import pyautogui\npyautogui.typewrite({typed!r}, interval=0.01)\nprint(pyautogui.size())"
    )
    assert (result.returncode, result.timed_out) == (0, False), result
    assert f"width={width}, height={height}" in result.output
    text = await poll_tree(
        client, lambda root: next((el for el in root.iter("text") if typed in (el.text or "")), None)
    )
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
    """`google-chrome` as OSWorld's tasks start it serves DevTools at the desktop's (host, port),
    with its profile in ~/.config/google-chrome; Ctrl+T opens the local new-tab page with the
    address bar focused (Chromium 155 and 156 gave Debian's third-party one, which keeps the focus)."""
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
        # Its profile is where OSWorld's Chrome getters read it (Bookmarks, Preferences, History).
        profile = await client.list_directory("~/.config/google-chrome")
        assert "Default" in [c["name"] for c in profile["children"]], profile
        assert (await client.execute("test -e ~/.config/chromium/Default", shell=True)).returncode != 0
        await poll_tree(client, lambda root: _find(root, "frame", "about:blank - Chromium"))
        await client.run_python("import pyautogui; pyautogui.hotkey('ctrl', 't')")
        await poll_tree(
            client,
            lambda root: next(
                (el for el in root.iter("entry") if el.get("name") == "Address and search bar" and _focused(el)), None
            ),
        )
        tabs = [t["url"] for t in (await http.get(f"http://{host}:{port}/json")).json() if t["type"] == "page"]
        assert len(tabs) == 2 and not any("third-party" in url for url in tabs), (version["Browser"], tabs)
    await close_when_mapped(client, "chromium")


async def check_versions(client: DesktopClient) -> None:
    """GET /versions names the desktop's applications with the versions they print themselves."""
    versions = await client.versions()
    assert {"chromium", "mousepad", "xvfb", "openbox"} <= set(versions), versions
    for app, command in (("chromium", "chromium --version"), ("mousepad", "mousepad --version")):
        printed = (await client.execute(command, shell=True)).output
        assert re.fullmatch(r"\d+(\.\d+)+", versions[app]) and versions[app] in printed, (app, versions, printed)


async def close_when_mapped(client: DesktopClient, window_class: str, timeout_s: float = 30.0) -> None:
    """Close the window of `window_class`, waiting for it to be mapped: DevTools can answer
    before the window shows (a loaded machine once took longer than that)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await client.close_window(window_class, by_class=True)
            return
        except DesktopRequestError as exc:
            if "not found" not in str(exc) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


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


def _focused(element: ET.Element) -> bool:
    return element.get(f"{{{NS['st']}}}focused") == "true"


def write_tasks(root: Path, tasks: list[tuple[str, dict]], index: dict[str, list[str]]) -> Path:
    """An OSWorld task folder: `examples/<domain>/<id>.json` for each (domain, task), `test.json` = index."""
    for domain, task in tasks:
        folder = root / "examples" / domain
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{task['id']}.json").write_text(json.dumps(task))
    (root / "test.json").write_text(json.dumps(index))
    return root


async def wait_for(client, episode, text: str, tries: int = 6):
    """Observe (WAIT) until the table shows `text`: windows appear when they are ready, not on a clock."""
    for _ in range(tries):
        step = await client.step(episode, TextAction("WAIT"))
        if text in step.observation.text:
            return step
    raise AssertionError(f"{text!r} never appeared in the accessibility table:\n{step.observation.text[-3000:]}")


async def check_notes_episode(client: EnvClient, width: int, height: int) -> None:
    """NOTES end to end, observed as screenshot + accessibility tree: the config steps opened
    notes.txt in mousepad, pyautogui types and saves, OSWorld's evaluator scores 1."""
    episode, reset = await client.create(task_id=NOTES["id"])
    png = base64.b64decode(reset.observation.image)
    assert Image.open(io.BytesIO(png)).size == (width, height)
    step = await wait_for(client, episode, "first line")
    assert "first line" in step.observation.accessibility_tree  # the XML beside its table
    step = await client.step(episode, TextAction("pyautogui.hotkey('ctrl', 'end')\npyautogui.typewrite('hello roost')"))
    assert step.info["returncode"] == 0 and not step.done, step.info
    await wait_for(client, episode, "hello roost")
    await client.step(episode, ToolCall("hotkey", {"keys": ["ctrl", "s"]}))
    step = await client.step(episode, ToolCall("done", {}))
    assert step.terminated and step.reward == 1.0 and step.info["exit_reason"] == "done", step.info
