"""The accessibility tree's text table: the same output as OSWorld's own `linearize_accessibility_tree`.

OSWorld's function lives in mm_agents/agent.py, whose module imports every model vendor's SDK;
the test compiles just that function from the installed `desktop-env` package and runs it
(with OSWorld's own `filter_nodes`) on the same XML as roost's.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from roost.envs.osworld.observations import HEADER, clip_table, linearize_accessibility_tree, observation_text

ST = "https://accessibility.ubuntu.example.org/ns/state"
CP = "https://accessibility.ubuntu.example.org/ns/component"
ATTR = "https://accessibility.ubuntu.example.org/ns/attributes"
VAL = "https://accessibility.ubuntu.example.org/ns/value"
WIN_ST = "https://accessibility.windows.example.org/ns/state"
WIN_CP = "https://accessibility.windows.example.org/ns/component"
WIN_ATTR = "https://accessibility.windows.example.org/ns/attributes"
WIN_CLASS = "https://accessibility.windows.example.org/ns/class"
WIN_VAL = "https://accessibility.windows.example.org/ns/value"

SHOWN = 'st:visible="true" st:showing="true" st:enabled="true"'
UBUNTU_XML = f"""<desktop-frame xmlns:st="{ST}" xmlns:cp="{CP}" xmlns:attr="{ATTR}" xmlns:val="{VAL}"
 xmlns:wattr="{WIN_ATTR}" name="main">
 <application name="mousepad" {SHOWN} cp:screencoord="(0, 0)" cp:size="(1280, 720)">
  <frame name="Untitled 1 - Mousepad" {SHOWN} cp:screencoord="(0, 0)" cp:size="(1280, 720)">
   <menu name="File" {SHOWN} cp:screencoord="(2, 24)" cp:size="(36, 22)" attr:toolkit="gtk" />
   <menu-item name="Save As…" {SHOWN} cp:screencoord="(2, 48)" cp:size="(120, 22)" />
   <push-button name="Close" st:visible="true" st:showing="true" st:focusable="true"
      cp:screencoord="(1250, 2)" cp:size="(24, 24)" />
   <push-button name="Hidden" st:visible="true" st:enabled="true" cp:screencoord="(5, 5)" cp:size="(5, 5)" />
   <push-button name="Offscreen" {SHOWN} cp:screencoord="(-30, 5)" cp:size="(5, 5)" />
   <push-button name="Flat" {SHOWN} cp:screencoord="(30, 5)" cp:size="(0, 5)" />
   <push-button name="" {SHOWN} cp:screencoord="(30, 5)" cp:size="(5, 5)" />
   <push-button name="Undescribed" {SHOWN} />
   <check-box name="Wrap" st:visible="true" st:showing="true" st:checkable="true" wattr:class="GtkCheck"
      wattr:description="wrap long lines" cp:screencoord="(40, 60)" cp:size="(80, 20)" />
   <text name="" st:visible="true" st:showing="true" st:editable="true" cp:screencoord="(0, 80)"
      cp:size="(1280, 600)">he said "hi"	and left
second line &lt;b&gt;</text>
   <document-text name="notes.txt" {SHOWN} cp:screencoord="(0, 80)" cp:size="(1280, 600)">plain</document-text>
   <table-cell name="A1" {SHOWN} cp:screencoord="(10, 100)" cp:size="(80, 20)" val:value="3" />
   <panel name="A panel" {SHOWN} cp:screencoord="(0, 0)" cp:size="(10, 10)" />
   <label name="Ünïcødé ✓" {SHOWN} cp:screencoord="(7, 8)" cp:size="(9, 10)" />
  </frame>
 </application>
</desktop-frame>"""

WIN_SHOWN = 'wst:visible="true" wst:enabled="true"'
WINDOWS_XML = f"""<desktop xmlns:wst="{WIN_ST}" xmlns:wcp="{WIN_CP}" xmlns:wcl="{WIN_CLASS}" xmlns:wv="{WIN_VAL}">
 <textbox name="Search" {WIN_SHOWN} wcl:class="EditWrapper" wv:value='say "x"' wcp:screencoord="(1, 2)"
   wcp:size="(3, 4)" />
 <button name="OK" {WIN_SHOWN} wcl:class="ButtonWrapper" wcp:screencoord="(5, 6)" wcp:size="(7, 8)" />
</desktop>"""


def load_osworld_linearize():
    """OSWorld's own function, compiled from the installed mm_agents/agent.py."""
    from mm_agents.accessibility_tree_wrap import heuristic_retrieve

    source = Path(importlib.util.find_spec("mm_agents").submodule_search_locations[0], "agent.py").read_text()
    tree = ast.parse(source)
    keep = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and node.name == "linearize_accessibility_tree"
        or isinstance(node, ast.Assign)
        and all(
            isinstance(t, ast.Name)
            and t.id.endswith("_ns_ubuntu")
            or isinstance(t, ast.Name)
            and t.id.endswith("_ns_windows")
            for t in node.targets
        )
    ]
    namespace = {
        "ET": __import__("xml.etree.ElementTree", fromlist=["ElementTree"]),
        "filter_nodes": heuristic_retrieve.filter_nodes,
    }
    exec(compile(ast.Module(body=keep, type_ignores=[]), "mm_agents/agent.py", "exec"), namespace)
    return namespace["linearize_accessibility_tree"]


@pytest.fixture(scope="module")
def osworld_linearize():
    return load_osworld_linearize()


@pytest.mark.parametrize("xml, platform", [(UBUNTU_XML, "ubuntu"), (WINDOWS_XML, "windows")])
def test_same_table_as_osworld(osworld_linearize, xml, platform):
    ours = linearize_accessibility_tree(xml, platform)
    assert ours == osworld_linearize(xml, platform)
    assert ours.splitlines()[0] == HEADER


def test_what_the_table_keeps():
    rows = linearize_accessibility_tree(UBUNTU_XML).split("\n")
    names = [row.split("\t")[1] for row in rows[1:] if "\t" in row]
    assert names[:3] == ["File", "Save As…", "Wrap"]
    assert "Close" not in names and "Hidden" not in names and "Offscreen" not in names and "A panel" not in names
    assert 'text\t\t"he said ""hi""\tand left' in rows
    assert 'check-box\tWrap\t""\tGtkCheck\twrap long lines\t(40, 60)\t(80, 20)' in rows
    assert 'label\tÜnïcødé ✓\t""\t\t\t(7, 8)\t(9, 10)' in rows


def test_windows_edit_value_is_its_text():
    rows = linearize_accessibility_tree(WINDOWS_XML, "windows").splitlines()
    assert rows[1] == 'textbox\tSearch\t"say ""x"""\tEditWrapper\t\t(1, 2)\t(3, 4)'


def test_coordinates_are_parsed_not_evaluated():
    hostile = UBUNTU_XML.replace('cp:screencoord="(2, 24)"', "cp:screencoord=\"__import__('os').getpid()\"")
    rows = linearize_accessibility_tree(hostile)
    assert "\tFile\t" not in rows and "\tSave As…\t" in rows


def test_clip_and_text():
    table = linearize_accessibility_tree(UBUNTU_XML)
    assert clip_table(table, None) == table and clip_table(table, 20) == table[:20] + "[...]\n"
    text = observation_text("Save the file", table, "Last action: ran")
    assert text.startswith("Task: Save the file\n\nLast action: ran\n\nAccessibility tree:\ntag\tname")
    assert observation_text("Save", None) == "Task: Save"


def test_the_cli_prints_the_table(tmp_path):
    import subprocess
    import sys

    (tmp_path / "tree.xml").write_text(UBUNTU_XML)
    run = subprocess.run(
        [sys.executable, "-m", "roost.envs.osworld.cli", "linearize", str(tmp_path / "tree.xml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and run.stdout.rstrip("\n") == linearize_accessibility_tree(UBUNTU_XML)
    (tmp_path / "bad.xml").write_text("<a><b></a>")
    run = subprocess.run(
        [sys.executable, "-m", "roost.envs.osworld.cli", "linearize", str(tmp_path / "bad.xml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1 and "mismatched tag" in run.stderr
