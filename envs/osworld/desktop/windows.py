"""Windows: open a file in its application, find, activate and close windows (wmctrl), as
OSWorld's in-VM server does on Linux.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from . import commands

OPENERS = (
    ((".xlsx", ".xls", ".ods", ".csv"), ["libreoffice", "--calc"]),
    ((".docx", ".doc", ".odt", ".rtf"), ["libreoffice", "--writer"]),
    ((".pptx", ".ppt", ".odp"), ["libreoffice", "--impress"]),
    ((".html", ".htm", ".pdf", ".svg"), ["google-chrome"]),
    ((".png", ".jpg", ".jpeg", ".gif", ".bmp"), ["gimp"]),
    ((".mp3", ".mp4", ".wav", ".mkv", ".avi", ".ogg"), ["vlc"]),
)
TEXT_EDITOR = ["mousepad"]


class WindowNotFound(LookupError):
    pass


def opener_for(path: Path, env: dict[str, str]) -> list[str]:
    """The app that opens `path`: by extension, xdg-open where the image has it, else the text editor."""
    suffix = path.suffix.lower()
    known = False
    for suffixes, argv in OPENERS:
        if suffix in suffixes:
            known = True
            if shutil.which(argv[0], path=env.get("PATH")):
                return argv
    xdg = shutil.which("xdg-open", path=env.get("PATH"))
    return [xdg] if known and xdg else TEXT_EDITOR


def open_path(path: str, *, window_name: str | None, env: dict[str, str], timeout_s: float) -> str:
    """Opens a file (or starts a program on PATH) and activates its window; the window's line.

    Raises FileNotFoundError when `path` is neither a file nor a program, WindowNotFound when no
    window with the file's name (or `window_name`) showed up within `timeout_s`."""
    target = Path(path).expanduser()
    if target.exists():
        commands.spawn(opener_for(target, env) + [str(target)], shell=False, env=env)
        candidates = [window_name] if window_name else [target.name, target.stem]
    elif shutil.which(path, path=env.get("PATH")):
        commands.spawn([path], shell=False, env=env)
        candidates = [window_name or path]
    else:
        raise FileNotFoundError(f"Application/file not found: {path}")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in list_windows(env):
            if any(c and c in line for c in candidates):
                subprocess.run(
                    ["wmctrl", "-i", "-a", line.split()[0]], env=env, check=False, capture_output=True, timeout=10
                )
                return line
        time.sleep(0.2)
    raise WindowNotFound(f"Failed to find window for {candidates} within {timeout_s:g} seconds.")


def list_windows(env: dict[str, str]) -> list[str]:
    done = subprocess.run(["wmctrl", "-l"], env=env, capture_output=True, text=True, check=False, timeout=10)
    return [line for line in done.stdout.splitlines() if line.strip()]


def wmctrl_window(action: str, window_name: str, *, strict: bool, by_class: bool, env: dict[str, str]) -> None:
    """`action` "a" activates, "c" closes (gracefully); WindowNotFound when none matches."""
    flags = "-" + ("x" if by_class else "") + ("F" if strict else "") + action
    done = subprocess.run(
        ["wmctrl", flags, window_name], env=env, capture_output=True, text=True, check=False, timeout=10
    )
    if done.returncode != 0:
        raise WindowNotFound(f"Window {window_name} not found" + (" (strict mode)." if strict else "."))
