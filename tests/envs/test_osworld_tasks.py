"""OSWorld's task format (loading, errors), the cache folder, and OSWorld's own metric functions
on real files (openpyxl/python-docx made), loaded module by module from desktop-env.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import docx
import openpyxl
import pytest

from roost.envs.osworld import osworld_package
from roost.envs.osworld.errors import TaskFormatError, UnsupportedTask
from roost.envs.osworld.evaluator import unsupported_reason
from roost.envs.osworld.file_cache import FileCache, MissingCacheFile
from roost.envs.osworld.tasks import load_task, load_tasks, parse_task

CALC_TASK = {
    "id": "calc-sum",
    "snapshot": "libreoffice_calc",
    "instruction": "Add a total row.",
    "source": "roost",
    "related_apps": ["libreoffice_calc"],
    "trajectory": "trajectories/",
    "config": [
        {
            "type": "download",
            "parameters": {"files": [{"url": "https://files.example/sheet.xlsx", "path": "/home/user/sheet.xlsx"}]},
        },
        {"type": "open", "parameters": {"path": "/home/user/sheet.xlsx"}},
    ],
    "evaluator": {
        "func": "compare_table",
        "result": {"type": "vm_file", "path": "/home/user/sheet.xlsx", "dest": "sheet.xlsx"},
        "expected": {"type": "cache_file", "path": "sheet_gold.xlsx"},
        "options": {"rules": [{"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]},
    },
}
TERMINAL_TASK = {
    "id": "os-echo",
    "snapshot": "os",
    "instruction": "Say hello in a file.",
    "config": [{"type": "execute", "parameters": {"command": ["mkdir", "-p", "/home/user/out"]}}],
    "evaluator": {
        "func": ["check_include_exclude", "exact_match"],
        "conj": "or",
        "result": [
            {"type": "vm_command_line", "command": "cat /home/user/out/hi", "shell": True},
            {"type": "vm_command_line", "command": "cat /home/user/out/hi", "shell": True},
        ],
        "expected": [
            {"type": "rule", "rules": {"include": ["hello"], "exclude": []}},
            {"type": "rule", "rules": {"expected": "hello\n"}},
        ],
    },
}
INFEASIBLE_TASK = {
    "id": "no-way",
    "snapshot": "os",
    "instruction": "Fly to the moon.",
    "config": [],
    "evaluator": {"func": "infeasible"},
}


def _write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def _examples(tmp_path: Path) -> Path:
    root = tmp_path / "evaluation_examples"
    _write(root / "examples" / "libreoffice_calc" / "calc-sum.json", CALC_TASK)
    _write(root / "examples" / "os" / "os-echo.json", TERMINAL_TASK)
    _write(root / "examples" / "os" / "no-way.json", INFEASIBLE_TASK)
    _write(root / "test_all.json", {"os": ["os-echo", "no-way"]})
    return root


def test_an_osworld_folder_loads_with_domains_and_extra_fields_kept(tmp_path):
    entries = load_tasks(_examples(tmp_path))
    assert [(e.domain, e.task.id) for e in entries] == [
        ("libreoffice_calc", "calc-sum"),
        ("os", "no-way"),
        ("os", "os-echo"),
    ]
    calc = entries[0].task
    assert calc.model_dump(exclude_unset=True) == CALC_TASK  # unchanged, OSWorld's extra fields included
    (check,) = calc.evaluator.checks()
    assert (check.func, check.result["type"], check.expected["type"]) == ("compare_table", "vm_file", "cache_file")
    assert check.options["rules"][0]["sheet_idx1"] == "EI0"
    terminal = entries[2].task
    assert terminal.evaluator.is_list and terminal.evaluator.conj == "or"
    assert [c.options for c in terminal.evaluator.checks()] == [{}, {}]
    assert entries[1].task.infeasible and not calc.infeasible


def test_an_index_file_selects_tasks_and_the_examples_folder_loads_alone(tmp_path):
    root = _examples(tmp_path)
    assert [e.task.id for e in load_tasks(root, index="test_all.json")] == ["no-way", "os-echo"]
    assert len(load_tasks(root / "examples")) == 3
    assert load_tasks(root / "examples" / "os" / "no-way.json")[0].domain == "os"
    _write(root / "test_all.json", {"os": ["os-echo", "missing-id"]})
    with pytest.raises(TaskFormatError, match=r"test_all.json: lists os/missing-id"):
        load_tasks(root, index="test_all.json")


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda t: t.pop("instruction"), r"instruction: Field required"),
        (lambda t: t["evaluator"].pop("func"), r"evaluator.func"),
        (lambda t: t["evaluator"].update(conj="xor"), r"evaluator.conj"),
        (lambda t: t["config"][0].pop("type"), r"config.0.type"),
        (lambda t: t["evaluator"].update(options=[{}]), r"options: must be a list of 2 entries"),
        (lambda t: t["evaluator"]["result"][1].pop("type"), r"no string 'type'"),
    ],
)
def test_a_malformed_task_names_its_file_and_field(tmp_path, mutate, field):
    task = json.loads(json.dumps(TERMINAL_TASK))
    mutate(task)
    path = _write(tmp_path / "examples" / "os" / "bad.json", task)
    with pytest.raises(TaskFormatError, match=rf"{path}: not an OSWorld task \(.*{field}"):
        load_task(path)
    with pytest.raises(TaskFormatError, match=str(path)):
        load_tasks(tmp_path)


def test_bad_json_and_duplicate_ids_are_named(tmp_path):
    bad = _write(tmp_path / "a" / "broken.json", '{"id": "x",')
    with pytest.raises(TaskFormatError, match=rf"{bad}: not valid JSON"):
        load_task(bad)
    bad.unlink()
    _write(tmp_path / "a" / "one.json", INFEASIBLE_TASK)
    _write(tmp_path / "b" / "two.json", INFEASIBLE_TASK)
    with pytest.raises(TaskFormatError, match="task id 'no-way' is also the id of"):
        load_tasks(tmp_path)
    with pytest.raises(TaskFormatError, match="no such task file or folder"):
        load_tasks(tmp_path / "nowhere")
    with pytest.raises(TaskFormatError, match="<inline>"):
        parse_task([], "<inline>")


def test_the_cache_finds_files_in_osworlds_layout_by_url_or_by_name(tmp_path):
    cache = FileCache(tmp_path)
    url = "https://files.example/dl?id=7&name=x"
    osworld_layout = _write(tmp_path / "t1" / f"{uuid.uuid5(uuid.NAMESPACE_URL, url)}_sheet.xlsx", "a")
    assert cache.find("t1", url, "sheet.xlsx") == osworld_layout
    by_url_name = _write(tmp_path / "report%20v2.docx".replace("%20", " "), "b")
    assert cache.find("t2", "https://files.example/report%20v2.docx", "renamed.docx") == by_url_name
    with pytest.raises(MissingCacheFile) as missing:
        cache.find("t3", "https://files.example/nothing.pdf", "nothing.pdf")
    assert isinstance(missing.value, UnsupportedTask)
    assert "https://files.example/nothing.pdf is not in the cache folder" in str(missing.value)
    assert str(tmp_path / "t3" / "nothing.pdf") in str(missing.value)
    assert cache.relative("t1", osworld_layout.name) == osworld_layout


def _xlsx(path: Path, rows: list[list]) -> str:
    book = openpyxl.Workbook()
    for row in rows:
        book.active.append(row)
    book.save(path)
    return str(path)


def _docx(path: Path, paragraphs: list[str]) -> str:
    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    document.save(path)
    return str(path)


def test_osworlds_table_and_docx_metrics_score_real_files(tmp_path):
    compare_table = osworld_package.load_function("metrics", "compare_table")
    rules = {"rules": [{"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]}
    gold = _xlsx(tmp_path / "gold.xlsx", [["item", "n"], ["a", 1], ["b", 2], ["total", 3]])
    same = _xlsx(tmp_path / "same.xlsx", [["item", "n"], ["a", 1], ["b", 2], ["total", 3]])
    wrong = _xlsx(tmp_path / "wrong.xlsx", [["item", "n"], ["a", 1], ["b", 2], ["total", 4]])
    assert compare_table(same, gold, **rules) == 1.0
    assert compare_table(wrong, gold, **rules) == 0.0
    assert compare_table(None, gold, **rules) == 0.0

    compare_docx_files = osworld_package.load_function("metrics", "compare_docx_files")
    expected = _docx(tmp_path / "gold.docx", ["Dear Ann,", "See you soon."])
    assert compare_docx_files(_docx(tmp_path / "ok.docx", ["Dear Ann,", "See you soon."]), expected) == 1
    assert compare_docx_files(_docx(tmp_path / "no.docx", ["Dear Bob,", "See you soon."]), expected) == 0


def test_osworlds_text_and_bookmark_metrics():
    include_exclude = osworld_package.load_function("metrics", "check_include_exclude")
    assert include_exclude("hello world\n", {"include": ["hello"], "exclude": ["bye"]}) == 1.0
    assert include_exclude("bye world\n", {"include": ["hello"], "exclude": ["bye"]}) == 0.0
    bookmarks = osworld_package.load_function("metrics", "is_expected_bookmarks")
    bar = {"bookmark_bar": {"children": [{"type": "url", "name": "Docs", "url": "https://docs.example/"}]}}
    rule = {"type": "bookmark_bar_websites_urls", "urls": ["https://docs.example/"]}
    assert bookmarks(bar, rule) == 1.0
    assert bookmarks({"bookmark_bar": {"children": []}}, rule) == 0.0


def test_unavailable_functions_and_steps_make_a_task_unsupported(tmp_path):
    with pytest.raises(osworld_package.UnavailableFunction, match="no function 'no_such_metric'"):
        osworld_package.load_function("metrics", "no_such_metric")
    ocr = osworld_package.load_function("metrics", "compare_image_text")  # docs.py loads without easyocr
    assert callable(ocr)
    assert unsupported_reason(parse_task(CALC_TASK, "calc")) is None
    assert unsupported_reason(parse_task(TERMINAL_TASK, "terminal")) is None
    assert unsupported_reason(parse_task(INFEASIBLE_TASK, "infeasible")) is None
    drive = {**INFEASIBLE_TASK, "config": [{"type": "googledrive", "parameters": {"operation": ["delete"]}}]}
    assert "Google Drive account" in unsupported_reason(parse_task(drive, "drive"))
    unknown = {**CALC_TASK, "evaluator": {**CALC_TASK["evaluator"], "func": "no_such_metric"}}
    assert "no function 'no_such_metric'" in unsupported_reason(parse_task(unknown, "unknown"))
    website = {**CALC_TASK, "evaluator": {**CALC_TASK["evaluator"], "result": {"type": "info_from_website"}}}
    assert "live website" in unsupported_reason(parse_task(website, "website"))


def test_loading_osworld_metrics_prints_nothing_on_stdout():
    """`roost eval osworld --json` prints JSON on stdout: what OSWorld's imports print (PyMuPDF's
    `fitz` warns on stdout) must not land there."""
    import subprocess
    import sys

    code = (
        "from roost.envs.osworld import osworld_package as p; "
        "p.load_function('metrics', 'is_expected_tabs'); p.load_function('metrics', 'compare_pdfs')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == ""
