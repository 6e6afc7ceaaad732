"""Official-style task folders: what loads (template.json, repeated ids, unfinished tasks) and
`roost envs osworld survey`: why a task cannot run here, and do-nothing episodes for the rest on
real local desktops (roost's fixture set, and a folder these tests write in OSWorld's layout)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from roost.cli.main import build_app
from roost.envs.osworld.fixtures import write_fixtures
from roost.envs.osworld.task_set import TaskSet

ECHO = {
    "id": "os-echo",
    "snapshot": "os",
    "instruction": "Write hi to ~/hi.txt.",
    "related_apps": ["os"],
    "config": [{"type": "execute", "parameters": {"command": ["bash", "-c", "rm -f ~/hi.txt"]}}],
    "evaluator": {
        "func": "check_include_exclude",
        "result": {"type": "vm_command_line", "command": "cat ~/hi.txt || true", "shell": True},
        "expected": {"type": "rule", "rules": {"include": ["hi"], "exclude": []}},
    },
}
CTRL_ALT_T = {
    "id": "os-terminal",
    "snapshot": "os",
    "instruction": "Copy the folder tree.",
    "config": [
        {
            "type": "execute",
            "parameters": {"command": ["python", "-c", "import pyautogui; pyautogui.hotkey('ctrl', 'alt', 't')"]},
        },
        {"type": "sleep", "parameters": {"seconds": 2}},
        {"type": "activate_window", "parameters": {"window_name": "Terminal"}},
    ],
    "evaluator": {"func": "infeasible"},
}
INFEASIBLE = {
    "id": "no-fax",
    "snapshot": "os",
    "instruction": "Send a fax.",
    "config": [],
    "evaluator": {"func": "infeasible"},
}
PAGE = "file:///home/user/page.html"
FORWARDED_TABS = {  # OSWorld's Chrome tasks: Chrome on 1337, socat forwarding 9222 to it, getters on DevTools
    "id": "chrome-tabs",
    "snapshot": "chrome",
    "instruction": "Keep this page open.",
    "related_apps": ["chrome"],
    "config": [
        {"type": "execute", "parameters": {"command": "printf '<title>Page</title>' > ~/page.html", "shell": True}},
        {"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337", PAGE]}},
        {"type": "launch", "parameters": {"command": ["socat", "tcp-listen:9222,fork", "tcp:localhost:1337"]}},
        {"type": "sleep", "parameters": {"seconds": 3}},
    ],
    "evaluator": {
        "func": "is_expected_tabs",
        "result": {"type": "open_tabs_info"},
        "expected": {"type": "rule", "rules": {"type": "url", "urls": [PAGE]}},
    },
}
UNCACHED = {
    "id": "calc-uncached",
    "snapshot": "libreoffice_calc",
    "instruction": "Sum column A.",
    "config": [
        {
            "type": "download",
            "parameters": {"files": [{"url": "https://files.example/nowhere.xlsx", "path": "/home/user/nowhere.xlsx"}]},
        }
    ],
    "evaluator": {"func": "infeasible"},
}
LIVE = {
    "id": "chrome-live",
    "snapshot": "chrome",
    "instruction": "Bookmark this page.",
    "config": [{"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["https://www.example.com/"]}}],
    "evaluator": {"func": "infeasible"},
}
DRIVE = {
    "id": "drive",
    "snapshot": "chrome",
    "instruction": "Open the sheet on Drive.",
    "config": [
        {"type": "googledrive", "parameters": {"settings_file": "s.json", "operation": ["delete"], "args": [{}]}}
    ],
    "evaluator": {"func": "infeasible"},
}
UNFINISHED = {
    "id": "unfinished",
    "snapshot": "os",
    "instruction": "Summarize the PDFs.",
    "config": [],
    "evaluator": {"func": "", "result": {}, "expected": {}, "options": {}},
}
NOT_A_TASK = {
    "id": "placeholder",
    "snapshot": "base_setup",
    "instruction": "Compress the video.",
    "config": [],
    "evaluator": "evaluation_dir",
}
TEMPLATE = {
    "id": "",
    "snapshot": "libreoffice_calc",
    "instruction": "",
    "config": [{"type": "", "parameters": {}}],
    "evaluator": {"func": "func", "result": {"type": ""}, "expected": {"type": ""}},
}


def _official_like(tmp_path: Path) -> Path:
    """A folder with OSWorld's quirks: template.json beside the domains, a Windows/ subtree, a task
    id repeated in two domains, an unfinished task and one whose evaluator is not an object."""
    root = tmp_path / "evaluation_examples"
    examples = root / "examples"
    files = {
        "os/os-echo.json": ECHO,
        "os/os-terminal.json": CTRL_ALT_T,
        "os/no-fax.json": INFEASIBLE,
        "os/unfinished.json": UNFINISHED,
        "libreoffice_calc/calc-uncached.json": UNCACHED,
        "chrome/chrome-live.json": LIVE,
        "chrome/drive.json": DRIVE,
        "chrome/chrome-tabs.json": FORWARDED_TABS,
        "chrome/no-fax.json": INFEASIBLE,
        "vlc/placeholder.json": NOT_A_TASK,
        "Windows/excel/calc-uncached.json": {**UNCACHED, "id": "calc-win"},
        "template.json": TEMPLATE,
    }
    for name, task in files.items():
        (examples / name).parent.mkdir(parents=True, exist_ok=True)
        (examples / name).write_text(json.dumps(task))
    (root / "test_all.json").write_text(json.dumps({"os": ["os-echo", "no-fax"], "chrome": ["no-fax"]}))
    return root


def _cli(*args: str):
    result = CliRunner().invoke(build_app(), ["envs", "osworld", *args])
    assert result.exit_code == 0, result.output
    return result.stdout  # OSWorld's getters and imports write to stderr


def test_an_official_like_folder_loads_and_reports_its_malformed_files(tmp_path):
    root = _official_like(tmp_path)
    task_set = TaskSet.load(root)
    assert sorted(task_set.entries) == [
        "calc-uncached",
        "calc-win",
        "chrome-live",
        "chrome-tabs",
        "chrome/no-fax",
        "drive",
        "os-echo",
        "os-terminal",
        "os/no-fax",
        "unfinished",
    ]
    assert task_set.splits["test_all"] == ("chrome/no-fax", "os/no-fax", "os-echo")
    (skipped,) = task_set.skipped
    assert str(skipped).startswith(f"{root / 'examples' / 'vlc' / 'placeholder.json'}: not an OSWorld task (evaluator")
    check = CliRunner().invoke(build_app(), ["envs", "osworld", "check", str(root)])
    report = json.loads(check.stdout)
    assert report["tasks"] == 10 and report["splits"]["test_all"] == 3 and len(report["skipped"]) == 1
    assert check.exit_code == 1 and "error: " in check.stderr and "placeholder.json" in check.stderr


def test_survey_sorts_without_a_desktop(tmp_path):
    report = json.loads(_cli("survey", str(_official_like(tmp_path)), "--no-run", "--json"))
    assert report["Windows/excel"]["unsupported"] == {"a task for OSWorld's Windows VM": 1}
    assert report["libreoffice_calc"]["unsupported"] == {"a downloaded file is not in the cache folder": 1}
    assert report["chrome"]["unsupported"] == {
        "opens a live website": 1,
        "config step 'googledrive' (an account or the internet)": 1,
    }
    assert report["os"]["unsupported"] == {"no evaluator (an empty func: an unfinished task)": 1}
    assert (report["os"]["loaded"], report["os"]["runnable"], report["os"]["ran"]) == (4, 3, 0)
    assert report["chrome"]["runnable"] == 2
    listed = json.loads(_cli("survey", str(_official_like(tmp_path)), "--no-run", "--json", "--split", "test_all"))
    assert {name: counts["runnable"] for name, counts in listed.items()} == {"chrome": 1, "os": 2}
    wrong = CliRunner().invoke(
        build_app(), ["envs", "osworld", "survey", str(tmp_path / "evaluation_examples"), "--no-run", "--split", "nope"]
    )
    assert wrong.exit_code == 1 and "no split 'nope'" in wrong.output


@pytest.fixture
def desktop():
    if shutil.which("Xvfb") is None or shutil.which("mousepad") is None:
        pytest.skip("the local desktop needs Xvfb and mousepad (.ci/apt-packages.txt)")


def test_survey_runs_do_nothing_episodes_for_the_rest(tmp_path, desktop):
    report = json.loads(_cli("survey", str(_official_like(tmp_path)), "--domain", "os", "--json"))
    assert list(report) == ["os"]
    # os-terminal: OSWorld's Ctrl+Alt+T opens a window "Terminal" that its config activates
    assert report["os"] | {"faults": []} == {
        "loaded": 4,
        "unsupported": {"no evaluator (an empty func: an unfinished task)": 1},
        "runnable": 3,
        "ran": 3,
        "rewarded": 0,
        "faulted": 0,
        "faults": [],
    }, report["os"]["faults"]


def test_a_chrome_task_with_osworlds_socat_forward_runs_and_its_getter_reads_the_tabs(tmp_path, desktop):
    report = json.loads(_cli("survey", str(_official_like(tmp_path)), "--domain", "chrome", "--json"))
    assert (report["chrome"]["runnable"], report["chrome"]["faults"]) == (2, [])
    # the do-nothing episode keeps the one tab config opened: is_expected_tabs scores 1
    assert (report["chrome"]["ran"], report["chrome"]["rewarded"]) == (2, 1)


def test_survey_of_roosts_fixture_set(tmp_path, desktop):
    written = write_fixtures(tmp_path / "fixtures")
    table = _cli("survey", str(written.root), "--no-run")
    lines = [line.split("\t") for line in table.strip().splitlines()]
    assert lines[0][:6] == ["domain", "loaded", "unsupported", "runnable", "ran", "faulted"]
    assert sum(int(row[1]) for row in lines[1:]) == written.count
    assert all(row[1] == row[3] for row in lines[1:]), table  # every fixture task runs here
    domain = min((row for row in lines[1:]), key=lambda row: int(row[1]))[0]
    ran = json.loads(_cli("survey", str(written.root), "--domain", domain, "--json"))[domain]
    assert (ran["ran"], ran["faulted"]) == (ran["loaded"], 0), ran["faults"]
