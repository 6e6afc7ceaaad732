"""Building blocks of the fixture tasks: OSWorld task JSON, config steps, expert steps.

A fixture task is OSWorld's JSON plus the files it needs; files are written into the cache
folder the `download` steps and `cloud_file` getters read, under the last part of their URL.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

HOME = "/home/user"
CACHE_URL = "https://roost.invalid/osworld-fixtures/"
"""Fixture files are never fetched: the config's `download` serves them from the cache by name."""
ID_NAMESPACE = uuid.UUID("5b0c6a1e-3f1d-4c38-9d55-6f3c1a2b7e90")
LO_PROFILE = f"{HOME}/.config/libreoffice/4/user/registrymodifications.xcu"
LO_SETTINGS = """<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema" \
xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Office.Common/Save/Document"><prop oor:name="WarnAlienFormat" oor:op="fuse">\
<value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="ShowTipOfTheDay" oor:op="fuse">\
<value>false</value></prop></item>
</oor:items>
"""
"""OSWorld's VM image saves .xlsx/.docx without the keep-format question and shows no tips; so do ours."""


@dataclass
class FixtureTask:
    domain: str
    name: str
    """A stable short name; the task id is a UUID derived from it."""
    instruction: str
    config: list[dict[str, Any]]
    evaluator: dict[str, Any]
    expert: list[dict[str, Any]]
    related_apps: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    """Cache file name → content (inputs and gold files)."""

    @property
    def id(self) -> str:
        return str(uuid.uuid5(ID_NAMESPACE, f"{self.domain}/{self.name}"))

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "snapshot": self.domain,
            "instruction": self.instruction,
            "source": f"roost fixtures: {self.domain}/{self.name}",
            "config": self.config,
            "trajectory": "trajectories/",
            "related_apps": self.related_apps,
            "evaluator": self.evaluator,
            "expert": self.expert,
        }


def url(name: str) -> str:
    return CACHE_URL + name


def download(*pairs: tuple[str, str]) -> dict[str, Any]:
    """A `download` step: (cache file name, path in the desktop) pairs."""
    return {"type": "download", "parameters": {"files": [{"url": url(n), "path": p} for n, p in pairs]}}


def execute(command: str) -> dict[str, Any]:
    return {"type": "execute", "parameters": {"command": ["bash", "-c", command]}}


def launch(*command: str) -> dict[str, Any]:
    return {"type": "launch", "parameters": {"command": list(command)}}


def vm_file(path: str) -> dict[str, Any]:
    return {"type": "vm_file", "path": path, "dest": path.rsplit("/", 1)[-1]}


def cloud_file(name: str) -> dict[str, Any]:
    return {"type": "cloud_file", "path": url(name), "dest": name}


def vm_command(command: str) -> dict[str, Any]:
    return {"type": "vm_command_line", "command": ["bash", "-c", command]}


def step(do: str, when: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"when": when, "do": do}


def keys(*names: str) -> str:
    """pyautogui code pressing one key or a chord."""
    args = ", ".join(repr(n) for n in names)
    return (
        f"import pyautogui; pyautogui.hotkey({args})"
        if len(names) > 1
        else f"import pyautogui; pyautogui.press({args})"
    )


def typed(text: str) -> str:
    """pyautogui code typing `text` (newlines press Enter, tabs Tab)."""
    return f"import pyautogui; pyautogui.write({text!r}, interval=0.01)"


def chain(*codes: str) -> str:
    """Several pyautogui snippets as one action."""
    return "\n".join(codes)
