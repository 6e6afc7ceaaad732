"""The desktop's accessibility tree as the XML OSWorld's in-VM server builds on Linux.

Same element names (the at-spi role, spaces as dashes), the same namespaces and attributes
(`st:` states, `attr:` object attributes, `cp:screencoord`/`cp:size` for visible showing nodes,
`val:` values, `act:` actions, `image`/`selection` flags, text as the element's text), under a
`desktop-frame` root, so OSWorld's accessibility getters, metrics and linearizer read it as
they read OSWorld's own. Built with the standard library's ElementTree (no lxml in the desktop);
pyatspi is imported on the first call, after the session has set DISPLAY and the D-Bus address.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

NS = {
    "st": "https://accessibility.ubuntu.example.org/ns/state",
    "attr": "https://accessibility.ubuntu.example.org/ns/attributes",
    "cp": "https://accessibility.ubuntu.example.org/ns/component",
    "doc": "https://accessibility.ubuntu.example.org/ns/document",
    "docattr": "https://accessibility.ubuntu.example.org/ns/document/attributes",
    "txt": "https://accessibility.ubuntu.example.org/ns/text",
    "val": "https://accessibility.ubuntu.example.org/ns/value",
    "act": "https://accessibility.ubuntu.example.org/ns/action",
}
MAX_DEPTH = 50
MAX_WIDTH = 1024
MAX_NODES = 20000
"""A bound on one tree (OSWorld has none): a runaway app cannot make a request take minutes."""
CALC_SCAN = 500
"""How far a LibreOffice Calc table is scanned for its first showing cell (rows and columns)."""


def accessibility_xml() -> str:
    """The whole desktop's tree, one child per application, as an XML string."""
    import pyatspi

    for prefix, uri in NS.items():
        ET.register_namespace(prefix, uri)
    root = ET.Element("desktop-frame")
    builder = _Builder(pyatspi)
    for app in builder.children(pyatspi.Registry.getDesktop(0)):
        root.append(builder.node(app, depth=1, flag=None))
    return ET.tostring(root, encoding="unicode")


def _q(ns: str, name: str) -> str:
    return f"{{{NS[ns]}}}{name}"


class _Builder:
    def __init__(self, pyatspi: Any) -> None:
        self.pyatspi = pyatspi
        self.count = 0

    def children(self, node: Any) -> list[Any]:
        try:
            return [node.getChildAtIndex(i) for i in range(min(node.childCount, MAX_WIDTH))]
        except Exception:  # noqa: BLE001 - a closing app's D-Bus errors come in many types
            return []

    def node(self, node: Any, depth: int, flag: str | None) -> ET.Element:
        self.count += 1
        try:
            role = node.getRoleName().strip()
            attrib = self._attributes(node)
            text = self._text(node)
        except Exception:  # noqa: BLE001 - the app went away mid-walk: keep what was read
            return ET.Element("unknown", {"name": ""})
        if not flag and role == "document spreadsheet":
            flag = "calc"
        element = ET.Element((role or "unknown").replace(" ", "-"), attrib)
        if text:
            element.text = text
        if depth >= MAX_DEPTH or self.count >= MAX_NODES:
            return element
        kids = self._calc_cells(node) if flag == "calc" and role == "table" else self.children(node)
        for child in kids:
            if child is not None:
                element.append(self.node(child, depth + 1, flag))
        return element

    def _attributes(self, node: Any) -> dict[str, str]:
        pyatspi = self.pyatspi
        attrib = {"name": node.name or ""}
        for state in node.getState().getStates():
            name = pyatspi.StateType._enum_lookup[state].split("_", 1)[1].lower()
            if name:
                attrib[_q("st", name)] = "true"
        for key, value in _object_attributes(node).items():
            if key:
                attrib[_q("attr", key)] = value
        if attrib.get(_q("st", "visible")) == "true" and attrib.get(_q("st", "showing")) == "true":
            attrib.update(self._extents(node))
        attrib.update(_flags(node))
        attrib.update(_value(node))
        attrib.update(_actions(node))
        return attrib

    def _extents(self, node: Any) -> dict[str, str]:
        try:
            box = node.queryComponent().getExtents(self.pyatspi.XY_SCREEN)
        except NotImplementedError:
            return {}
        return {_q("cp", "screencoord"): str((box.x, box.y)), _q("cp", "size"): str((box.width, box.height))}

    def _text(self, node: Any) -> str:
        try:
            text_iface = node.queryText()
        except NotImplementedError:
            return ""
        # U+FFFC stands in for embedded objects, U+FFFD for undecodable text: neither is text.
        return text_iface.getText(0, text_iface.characterCount).replace("\ufffc", "").replace("\ufffd", "")

    def _calc_cells(self, table: Any) -> list[Any]:
        """Calc tables have a million rows: only the showing block of cells, from the cell at the
        table's top-left corner on screen, row by row until a cell is not showing."""
        pyatspi = self.pyatspi
        try:
            columns = table.queryTable().nColumns
            component = table.queryComponent()
            box = component.getExtents(pyatspi.XY_SCREEN)
            first = component.getAccessibleAtPoint(box.x + 1, box.y + 1, pyatspi.XY_SCREEN)
        except Exception:  # noqa: BLE001 - no table or component interface: no cells
            return []
        row0, col0 = divmod(first.getIndexInParent(), columns) if first is not None else (0, 0)
        cells: list[Any] = []
        for row in range(row0, row0 + CALC_SCAN):
            row_cells = []
            for col in range(col0, min(columns, col0 + CALC_SCAN)):
                cell = self._cell(table, row * columns + col)
                if cell is None or not cell.getState().contains(pyatspi.STATE_SHOWING):
                    break
                row_cells.append(cell)
            if not row_cells or len(cells) >= MAX_NODES:
                break
            cells.extend(row_cells)
        return cells

    @staticmethod
    def _cell(table: Any, index: int) -> Any:
        try:
            return table.getChildAtIndex(index)
        except Exception:  # noqa: BLE001 - past the table's end
            return None


def _object_attributes(node: Any) -> dict[str, str]:
    try:
        return dict(node.get_attributes())
    except Exception:  # noqa: BLE001 - some toolkits answer errors for "none"
        return {}


def _flags(node: Any) -> dict[str, str]:
    found = {}
    for key, query in (("image", "queryImage"), ("selection", "querySelection")):
        try:
            getattr(node, query)()
            found[key] = "true"
        except NotImplementedError:
            pass
    return found


def _value(node: Any) -> dict[str, str]:
    try:
        value = node.queryValue()
    except NotImplementedError:
        return {}
    found = {}
    for key, attr in (
        ("value", "currentValue"),
        ("min", "minimumValue"),
        ("max", "maximumValue"),
        ("step", "minimumIncrement"),
    ):
        try:
            found[_q("val", key)] = str(getattr(value, attr))
        except Exception:  # noqa: BLE001 - an unreadable field is left out, as OSWorld does
            pass
    return found


def _actions(node: Any) -> dict[str, str]:
    try:
        action = node.queryAction()
    except NotImplementedError:
        return {}
    found = {}
    for i in range(action.nActions):
        name = action.getName(i).replace(" ", "-")
        found[_q("act", f"{name}_desc")] = action.getDescription(i)
        found[_q("act", f"{name}_kb")] = action.getKeyBinding(i)
    return found
