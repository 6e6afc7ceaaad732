"""Config steps and OSWorld's getters and metrics against a real local desktop.

Needs the Debian packages of .ci/apt-packages.txt (see tests/envs/test_osworld_desktop.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import openpyxl
import pytest

from roost.envs.osworld.backends import DesktopConfig, start_desktop
from roost.envs.osworld.config_steps import TaskContext, run_steps
from roost.envs.osworld.desktop_client import DesktopClient
from roost.envs.osworld.errors import EvaluationError, SetupError, UnsupportedTask
from roost.envs.osworld.evaluator import evaluate
from roost.envs.osworld.file_cache import FileCache, MissingCacheFile
from roost.envs.osworld.tasks import parse_task

WIDTH, HEIGHT = 1024, 640
RULES = {"rules": [{"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]}


@pytest.fixture(scope="module")
def desktop():
    desktop = asyncio.run(start_desktop(DesktopConfig(width=WIDTH, height=HEIGHT)))
    yield desktop
    asyncio.run(desktop.close())


@pytest.fixture
async def ctx(desktop, tmp_path):
    (tmp_path / "cache" / "t1").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    async with DesktopClient(desktop.url) as client:
        yield TaskContext(
            "t1",
            client,
            desktop.host,
            desktop.server_port,
            desktop.chromium_port,
            FileCache(tmp_path / "cache"),
            tmp_path / "work",
            (WIDTH, HEIGHT),
        )


def _task(config=(), **evaluator):
    return parse_task({"id": "t1", "instruction": "do it", "config": list(config), "evaluator": evaluator}, "test")


def _xlsx(path: Path, rows: list[list]) -> bytes:
    book = openpyxl.Workbook()
    for row in rows:
        book.active.append(row)
    book.save(path)
    return path.read_bytes()


async def test_config_steps_download_open_execute_and_windows(ctx):
    (ctx.cache.root / "notes.txt").write_text("from the cache\n")
    steps = _task(
        [
            {
                "type": "download",
                "parameters": {
                    "files": [{"url": "https://files.example/notes.txt", "path": "/home/user/Desktop/notes.txt"}]
                },
            },
            {
                "type": "execute",
                "parameters": {"command": ["cat", "/home/user/Desktop/notes.txt"], "stdout": "cat.out"},
            },
            {
                "type": "execute",
                "parameters": {
                    "command": "echo {SCREEN_WIDTH}x{SCREEN_HEIGHT_HALF}",
                    "shell": True,
                    "stdout": "size.out",
                },
            },
            {
                "type": "command",
                "parameters": {
                    "command": "test -e /home/user/later || (sleep 1; touch /home/user/later)",
                    "shell": True,
                    "until": {"returncode": 0},
                },
            },
            {"type": "open", "parameters": {"path": "/home/user/Desktop/notes.txt"}},
            {"type": "sleep", "parameters": {"seconds": 0.2}},
            {"type": "activate_window", "parameters": {"window_name": "notes.txt"}},
        ],
        func="infeasible",
    ).config
    await run_steps(steps, ctx)
    assert await ctx.client.get_file("/home/user/Desktop/notes.txt") == b"from the cache\n"
    assert (ctx.work_dir / "cat.out").read_text() == "from the cache\n"
    assert (ctx.work_dir / "size.out").read_text() == f"{WIDTH}x{HEIGHT // 2}\n"
    assert "notes.txt" in await ctx.client.accessibility_tree()
    close = _task([{"type": "close_window", "parameters": {"window_name": "notes.txt"}}], func="infeasible")
    await run_steps(close.config, ctx)


async def test_a_missing_cache_file_or_an_online_step_is_unsupported_and_a_failing_step_is_named(ctx):
    missing = _task(
        [
            {
                "type": "download",
                "parameters": {
                    "files": [{"url": "https://files.example/absent.xlsx", "path": "/home/user/absent.xlsx"}]
                },
            }
        ],
        func="infeasible",
    )
    with pytest.raises(MissingCacheFile, match=r"https://files.example/absent.xlsx is not in the cache folder"):
        await run_steps(missing.config, ctx)
    assert await ctx.client.get_file("/home/user/absent.xlsx") is None
    login = _task([{"type": "login", "parameters": {"platform": "googledrive"}}], func="infeasible")
    with pytest.raises(UnsupportedTask, match="logs in to a website"):
        await run_steps(login.config, ctx)
    broken = _task([{"type": "open", "parameters": {"path": "/home/user/no/such.txt"}}], func="infeasible")
    with pytest.raises(SetupError, match=r"config step 1 \(open .*no/such.txt"):
        await run_steps(broken.config, ctx)


async def test_a_calc_task_scores_the_agents_file_with_osworlds_compare_table(ctx, tmp_path):
    _xlsx(ctx.cache.root / "t1" / "gold.xlsx", [["item", "n"], ["a", 1], ["total", 1]])
    task = _task(
        func="compare_table",
        result={"type": "vm_file", "path": "/home/user/sheet.xlsx", "dest": "sheet.xlsx"},
        expected={"type": "cache_file", "path": "gold.xlsx"},
        options=RULES,
    )
    assert (await evaluate(task, ctx, agent_failed=False)).reward == 0.0  # no file on the desktop yet
    await ctx.client.upload_file(
        "/home/user/sheet.xlsx", _xlsx(tmp_path / "w.xlsx", [["item", "n"], ["a", 1], ["total", 2]])
    )
    assert (await evaluate(task, ctx, agent_failed=False)).reward == 0.0
    await ctx.client.upload_file(
        "/home/user/sheet.xlsx", _xlsx(tmp_path / "r.xlsx", [["item", "n"], ["a", 1], ["total", 1]])
    )
    evaluation = await evaluate(task, ctx, agent_failed=False)
    assert evaluation.reward == 1.0 and [s.func for s in evaluation.scores] == ["compare_table"]
    assert (ctx.work_dir / "sheet.xlsx").is_file()  # OSWorld's vm_file saved it in the episode's folder
    assert (await evaluate(task, ctx, agent_failed=True)).reward == 0.0


async def test_conj_postconfig_command_line_rule_and_infeasible(ctx):
    def checks(conj):
        return _task(
            func=["check_include_exclude", "check_include_exclude"],
            conj=conj,
            result=[{"type": "vm_command_line", "command": "cat /home/user/greeting", "shell": True}] * 2,
            expected=[
                {"type": "rule", "rules": {"include": ["hello"], "exclude": []}},
                {"type": "rule", "rules": {"include": ["goodbye"], "exclude": []}},
            ],
            postconfig=[
                {"type": "execute", "parameters": {"command": "echo hello > /home/user/greeting", "shell": True}}
            ],
        )

    evaluation = await evaluate(checks("and"), ctx, agent_failed=False)
    assert evaluation.reward == 0.0 and [s.score for s in evaluation.scores] == [1.0, 0.0]
    assert (await evaluate(checks("or"), ctx, agent_failed=False)).reward == 1.0
    infeasible = _task(func="infeasible")
    assert (await evaluate(infeasible, ctx, agent_failed=True)).reward == 1.0
    assert (await evaluate(infeasible, ctx, agent_failed=False)).reward == 0.0


async def test_the_accessibility_tree_getter_feeds_osworlds_tree_metric(ctx):
    await ctx.client.upload_file("/home/user/tree.txt", b"roost tree check\n")
    await run_steps(
        _task([{"type": "open", "parameters": {"path": "/home/user/tree.txt"}}], func="infeasible").config, ctx
    )
    task = _task(
        func="check_accessibility_tree",
        result={"type": "accessibility_tree"},
        options={"rules": [{"selectors": ['frame[name*="tree.txt"]']}]},
    )
    assert (await evaluate(task, ctx, agent_failed=False)).reward == 1.0
    absent = _task(
        func="check_accessibility_tree",
        result={"type": "accessibility_tree"},
        options={"rules": [{"selectors": ['frame[name*="no-such-window"]']}]},
    )
    assert (await evaluate(absent, ctx, agent_failed=False)).reward == 0.0
    await ctx.client.close_window("tree.txt")


async def test_cloud_file_reads_the_cache_and_a_broken_metric_is_an_evaluation_error(ctx):
    (ctx.cache.root / "t1" / "expected.txt").write_text("same\n")
    await ctx.client.upload_file("/home/user/out.txt", b"same\n")
    task = _task(
        func="compare_text_file",
        result={"type": "vm_file", "path": "/home/user/out.txt", "dest": "out.txt"},
        expected={"type": "cloud_file", "path": "https://files.example/x?id=1", "dest": "expected.txt"},
    )
    assert (await evaluate(task, ctx, agent_failed=False)).reward == 1.0
    gone = _task(
        func="compare_text_file",
        result={"type": "vm_file", "path": "/home/user/out.txt", "dest": "o.txt"},
        expected={"type": "cloud_file", "path": "https://files.example/y", "dest": "nowhere.txt"},
    )
    with pytest.raises(MissingCacheFile, match="https://files.example/y"):
        await evaluate(gone, ctx, agent_failed=False)
    broken = _task(
        func="exact_match",
        result={"type": "vm_command_line", "command": ["echo", "x"]},
        expected={"type": "rule", "rules": {"expectd": "x\n"}},
    )  # OSWorld's exact_match raises KeyError
    with pytest.raises(EvaluationError, match="metric exact_match .* KeyError"):
        await evaluate(broken, ctx, agent_failed=False)


async def test_chrome_tabs_open_through_devtools_and_osworlds_playwright_getter_reads_them(ctx):
    page = "<html><head><title>Roost page</title></head><body>hi</body></html>"
    await ctx.client.upload_file("/home/user/page.html", page.encode())
    steps = _task(
        [
            {"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]}},
            {
                "type": "chrome_open_tabs",
                "parameters": {"urls_to_open": ["file:///home/user/page.html", "file:///home/user/page.html?two"]},
            },
        ],
        func="infeasible",
    )
    await run_steps(steps.config, ctx)
    task = _task(
        func="is_expected_tabs",
        result={"type": "open_tabs_info"},
        expected={
            "type": "rule",
            "rules": {"type": "url", "urls": ["file:///home/user/page.html", "file:///home/user/page.html?two"]},
        },
    )
    started = time.monotonic()
    evaluation = await evaluate(task, ctx, agent_failed=False)
    assert evaluation.reward == 1.0, (evaluation, time.monotonic() - started)
    await run_steps(
        _task(
            [{"type": "chrome_close_tabs", "parameters": {"urls_to_close": ["file:///home/user/page.html?two"]}}],
            func="infeasible",
        ).config,
        ctx,
    )
    assert (await evaluate(task, ctx, agent_failed=False)).reward == 0.0
    listed = json.loads(
        (
            await ctx.client.execute(
                [
                    "python3",
                    "-c",
                    f"import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:"
                    f"{ctx.chromium_port}/json/list').read().decode())",
                ]
            )
        ).output
    )
    assert [p["url"] for p in listed if p["type"] == "page"] == ["file:///home/user/page.html"]


async def test_roosts_cache_getters_answer_as_osworlds_on_files_in_its_cache_layout(ctx):
    from roost.envs.osworld import evaluator
    from roost.envs.osworld.osworld_package import load_function

    for name in ("a.txt", "b.txt", "gold.docx"):
        (ctx.cache.root / "t1" / name).write_text(name)
    osworld_env = evaluator.GetterEnv.for_task(ctx)
    osworld_env.cache_dir = str(ctx.cache.root / "t1")  # OSWorld's cache_dir: the task's cache folder
    configs = [
        {"type": "cloud_file", "path": "https://files.example/a", "dest": "a.txt"},
        {
            "type": "cloud_file",
            "multi": True,
            "path": ["https://files.example/a", "https://files.example/b"],
            "dest": ["a.txt", "b.txt"],
            "gives": [0, 1],
        },
        {
            "type": "cloud_file",
            "multi": True,
            "path": ["https://files.example/a", "https://files.example/b"],
            "dest": ["a.txt", "b.txt"],
            "gives": [1],
        },
    ]
    for config in configs:
        assert evaluator._cloud_file(ctx, config) == load_function("getters", "get_cloud_file")(osworld_env, config)
    config = {"type": "cache_file", "path": "gold.docx"}
    assert evaluator._cache_file(ctx, config) == load_function("getters", "get_cache_file")(osworld_env, config)
