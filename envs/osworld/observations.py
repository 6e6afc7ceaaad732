"""What the agent sees, as OSWorld shows it: a screenshot, the accessibility tree as a text table, or both.

    screenshot             Observation.image = the screen as a base64 PNG; text = the instruction
    a11y_tree              text = the instruction and OSWorld's linearised tree (no image)
    screenshot_a11y_tree   both

`Observation.accessibility_tree` holds the tree's XML as the desktop answered it (the input of
OSWorld's a11y getters); the table is what OSWorld's `linearize_accessibility_tree`
(mm_agents/agent.py) makes of it: the same filter, columns, quoting and order. OSWorld's
filter `eval`s the position and size attributes; this one parses them as integer pairs.
"""

from __future__ import annotations

import asyncio
import base64
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from roost.envs.protocol import Observation

if TYPE_CHECKING:
    from .desktop_client import DesktopClient

ObservationType = Literal["screenshot", "a11y_tree", "screenshot_a11y_tree"]
OBSERVATION_TYPES: tuple[str, ...] = ("screenshot", "a11y_tree", "screenshot_a11y_tree")
Platform = Literal["ubuntu", "windows"]

_UBUNTU = "https://accessibility.ubuntu.example.org/ns/"
_WINDOWS = "https://accessibility.windows.example.org/ns/"
# OSWorld's linearizer reads the class column from the *windows* attributes namespace on both
# platforms (its attributes_ns_ubuntu), so Ubuntu rows have an empty class; kept for equal output.
_ATTRIBUTES = _WINDOWS + "attributes"
_CLASS_WINDOWS = _WINDOWS + "class"
HEADER = "tag\tname\ttext\tclass\tdescription\tposition (top-left x&y)\tsize (w&h)"

_KEPT_SUFFIXES = (
    "item",
    "button",
    "heading",
    "label",
    "scrollbar",
    "searchbox",
    "textbox",
    "link",
    "tabelement",
    "textfield",
    "textarea",
    "menu",
)
_KEPT_TAGS = frozenset(
    {
        "alert",
        "canvas",
        "check-box",
        "combo-box",
        "entry",
        "icon",
        "image",
        "paragraph",
        "scroll-bar",
        "section",
        "slider",
        "static",
        "table-cell",
        "terminal",
        "text",
        "netuiribbontab",
        "start",
        "trayclockwclass",
        "traydummysearchcontrol",
        "uiimage",
        "uiproperty",
        "uiribboncommandbar",
    }
)
_PAIR = re.compile(r"^\(\s*(-?\d+)\s*,\s*(-?\d+)\s*\)$")


@dataclass(frozen=True)
class ObservationConfig:
    observation_type: ObservationType = "a11y_tree"
    platform: Platform = "ubuntu"
    max_tree_chars: int | None = None
    """Cut the table past this many characters (OSWorld's agents cut it at a token budget)."""


def linearize_accessibility_tree(xml: str, platform: Platform = "ubuntu") -> str:
    """OSWorld's text table of the tree's visible, enabled, named nodes (one row per node)."""
    ns = _UBUNTU if platform == "ubuntu" else _WINDOWS
    rows = [HEADER]
    for node in ET.fromstring(xml).iter():
        if not _keeps(node, ns, platform):
            continue
        rows.append(
            "\t".join(
                (
                    node.tag,
                    node.get("name", ""),
                    _text(node, ns),
                    node.get("{%s}class" % (_ATTRIBUTES if platform == "ubuntu" else _CLASS_WINDOWS), ""),
                    node.get("{%s}description" % _ATTRIBUTES, ""),
                    node.get("{%scomponent}screencoord" % ns, ""),
                    node.get("{%scomponent}size" % ns, ""),
                )
            )
        )
    return "\n".join(rows)


def _keeps(node: ET.Element, ns: str, platform: Platform) -> bool:
    """OSWorld's `judge_node` (accessibility_tree_wrap/heuristic_retrieve.py) without check_image."""
    tag = node.tag
    if not (tag.startswith("document") or tag.endswith(_KEPT_SUFFIXES) or tag in _KEPT_TAGS):
        return False
    state = ns + "state"

    def on(name: str) -> bool:
        return node.get("{%s}%s" % (state, name), "false") == "true"

    shown = on("visible") and (on("showing") or platform == "windows")
    usable = on("enabled") or on("editable") or on("expandable") or on("checkable")
    named = node.get("name", "") != "" or bool(node.text)
    if not (shown and usable and named):
        return False
    x, y = _pair(node.get("{%scomponent}screencoord" % ns))
    width, height = _pair(node.get("{%scomponent}size" % ns))
    return x >= 0 and y >= 0 and width > 0 and height > 0


def _pair(value: str | None) -> tuple[int, int]:
    match = _PAIR.match(value.strip()) if value else None
    return (int(match.group(1)), int(match.group(2))) if match else (-1, -1)


def _text(node: ET.Element, ns: str) -> str:
    if node.text:
        return _quoted(node.text)
    value = node.get("{%svalue}value" % ns)
    if node.get("{%s}class" % _CLASS_WINDOWS, "").endswith("EditWrapper") and value:
        return _quoted(value)
    return '""'


def _quoted(text: str) -> str:
    return text if '"' not in text else '"{}"'.format(text.replace('"', '""'))


def clip_table(table: str, max_chars: int | None) -> str:
    if max_chars is None or len(table) <= max_chars:
        return table
    return table[:max_chars] + "[...]\n"


def observation_text(instruction: str, table: str | None, note: str = "") -> str:
    parts = [f"Task: {instruction}"]
    if note:
        parts.append(note)
    if table is not None:
        parts.append(f"Accessibility tree:\n{table}")
    return "\n\n".join(parts)


async def observe(
    client: DesktopClient, config: ObservationConfig, instruction: str, note: str = "", tree: str | None = None
) -> Observation:
    """The observation of the desktop now (screenshot and tree fetched at once, as the type needs);
    `tree`: the accessibility tree read a moment ago, used instead of reading it again."""
    kind = config.observation_type
    wants_image, wants_tree = kind != "a11y_tree", kind != "screenshot"
    png, xml = await asyncio.gather(
        client.screenshot() if wants_image else _none(),
        client.accessibility_tree() if wants_tree and tree is None else _none(),
    )
    return observation_from(config, instruction, png, (tree if tree is not None else xml) if wants_tree else None, note)


def observation_from(
    config: ObservationConfig, instruction: str, png: bytes | None, xml: str | None, note: str = ""
) -> Observation:
    """The observation of a screenshot and a tree (either may be None: not asked for)."""
    table = clip_table(linearize_accessibility_tree(xml, config.platform), config.max_tree_chars) if xml else None
    image = base64.b64encode(png).decode("ascii") if png else None
    return Observation(observation_text(instruction, table, note), image=image, accessibility_tree=xml)


async def _none() -> None:
    return None
