"""roost's offline OSWorld task set: its files and format, the expert's plan, and the expert
(and an agent that does nothing) through the env server on local desktops, over two tasks of each
application. The whole set, expert-solved (about 8 min here):
`roost eval osworld --agent expert --split all --episodes 47 --json`."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from roost.agents.evaluate import EvalConfig, evaluate
from roost.agents.protocol import AgentOutcome, EpisodeContext
from roost.envs.client import EnvClient
from roost.envs.episodes import ManagerConfig
from roost.envs.osworld.desktop.versions import OSWORLD_APPS
from roost.envs.osworld.env import make_factory
from roost.envs.osworld.expert import ExpertPlanner, NoExpertSolution, tree_holds
from roost.envs.osworld.fixtures import write_fixtures
from roost.envs.osworld.osworld_package import load_function
from roost.envs.osworld.task_set import TaskSet
from roost.envs.protocol import TextAction
from roost.envs.serve import ServerConfig, serving

TREE = """<desktop-frame xmlns:st="https://accessibility.ubuntu.example.org/ns/state">
<frame name="*/home/user/a.txt - Mousepad" st:active="true"><text st:focused="true">roost-done-2
</text></frame><table name="Sheet Sheet1" st:focused="false"/></desktop-frame>"""


@pytest.fixture(scope="module")
def fixture_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("osworld-fixtures")
    write_fixtures(root)
    return root


def _tasks(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((root / "examples").rglob("*.json"))]


def test_the_set_has_40_tasks_over_5_apps_in_two_splits(fixture_dir: Path):
    task_set = TaskSet.load(fixture_dir)
    assert len(task_set.splits["all"]) >= 40
    assert set(task_set.splits) == {"all", "train", "test"}
    assert not set(task_set.splits["train"]) & set(task_set.splits["test"])
    domains = {json.loads(p.read_text()).get("snapshot") for p in (fixture_dir / "examples").rglob("*.json")}
    assert {"os", "mousepad", "libreoffice_calc", "libreoffice_writer", "chrome"} <= domains


def test_every_file_a_task_reads_is_in_the_cache(fixture_dir: Path):
    for task in _tasks(fixture_dir):
        urls = [f["url"] for s in task["config"] if s["type"] == "download" for f in s["parameters"]["files"]]
        urls += [e["path"] for e in _listed(task["evaluator"].get("expected")) if e.get("type") == "cloud_file"]
        for url in urls:
            assert (fixture_dir / "cache" / url.rsplit("/", 1)[-1]).is_file(), (task["id"], url)


def _listed(value) -> list[dict]:
    return value if isinstance(value, list) else [value] if value else []


def test_every_evaluator_is_an_osworld_metric(fixture_dir: Path):
    for task in _tasks(fixture_dir):
        func = task["evaluator"]["func"]
        if func != "infeasible":
            assert callable(load_function("metrics", func)), func


def test_gold_files_score_1_against_themselves_and_the_inputs_score_0(fixture_dir: Path):
    """The checks can fail: an untouched input file is not the answer (a copy task's gold is its input)."""
    cache = fixture_dir / "cache"
    checked = 0
    for task in _tasks(fixture_dir):
        evaluator = task["evaluator"]
        if evaluator["func"] not in ("compare_text_file", "compare_table", "compare_docx_files"):
            continue
        gold = str(cache / evaluator["expected"]["dest"])
        inputs = [
            f["url"].rsplit("/", 1)[-1]
            for s in task["config"]
            if s["type"] == "download"
            for f in s["parameters"]["files"]
            if not f["path"].endswith(".xcu")
        ]
        inputs = [name for name in inputs if name != evaluator["expected"]["dest"]]
        metric = load_function("metrics", evaluator["func"])
        options = evaluator.get("options", {})
        assert metric(gold, gold, **options) == 1.0, task["id"]
        for name in inputs:
            assert metric(str(cache / name), gold, **options) < 1.0, (task["id"], name)
        checked += 1
    assert checked >= 20


def test_expert_conditions_read_osworld_trees():
    assert tree_holds(TREE, {"role": "frame", "name": "a.txt - Mousepad"})
    assert tree_holds(TREE, {"text": "roost-done-2"})
    assert tree_holds(TREE, {"role": "text", "focused": True})
    assert not tree_holds(TREE, {"role": "table", "focused": True})
    assert not tree_holds(TREE, {"absent": {"role": "frame", "name": "*"}})
    assert not tree_holds(None, {"role": "frame"})
    assert tree_holds(None, None)


def test_the_planner_waits_until_the_condition_holds_then_acts_then_is_done():
    planner = ExpertPlanner({"id": "t", "expert": [{"when": {"role": "table", "focused": True}, "do": "X"}]})
    assert planner.next_action(TREE) == "WAIT"
    assert planner.next_action(TREE.replace('st:focused="false"', 'st:focused="true"')) == "X"
    assert planner.next_action(None) == "DONE"
    with pytest.raises(NoExpertSolution, match="make-fixtures"):
        ExpertPlanner({"id": "official-task"})


class DoNothingAgent:
    """Says DONE at once: scores 0 on every feasible task, and on the infeasible ones too."""

    name = "do-nothing"
    needs_model = False
    reset_options: dict = {}

    async def run(self, ctx: EpisodeContext) -> AgentOutcome:
        await ctx.step(TextAction("DONE"))
        return AgentOutcome(turns=1)


@pytest.fixture
async def env_url(fixture_dir: Path):
    if shutil.which("Xvfb") is None or shutil.which("soffice") is None or shutil.which("lxterminal") is None:
        pytest.skip("the fixture set's desktop needs Xvfb, LibreOffice and LXTerminal (.ci/apt-packages.txt)")
    kwargs = {"tasks": str(fixture_dir), "max_steps": 15}
    config = ServerConfig("osworld", kwargs, port=0, manager=ManagerConfig(workers=2, max_episodes=4))
    async with serving(config) as url:
        yield url


def two_tasks_of_each_application(tasks: list[dict]) -> list[str]:
    """The first two task ids (in id order) of each application: what CI plays of the set."""
    by_app: dict[str, list[str]] = {}
    for task in sorted(tasks, key=lambda t: t["id"]):
        by_app.setdefault(OSWORLD_APPS.get(task["snapshot"], task["snapshot"]), []).append(task["id"])
    return [task_id for ids in by_app.values() for task_id in ids[:2]]


@pytest.mark.slow
@pytest.mark.timeout(600)  # 10 episodes, two at a time: ~2 min on 2 cores, LibreOffice's ~30 s each the most
async def test_the_expert_solves_two_tasks_of_each_application_through_the_env_server(env_url: str, fixture_dir: Path):
    async with EnvClient(env_url) as client:
        versions = (await client.info()).versions
    tasks = _tasks(fixture_dir)
    task_ids = two_tasks_of_each_application(tasks)
    assert len(task_ids) == 2 * len({OSWORLD_APPS.get(t["snapshot"], t["snapshot"]) for t in tasks})
    report = await evaluate(
        EvalConfig(
            "osworld",
            agent="expert",
            env_url=env_url,
            episodes=len(task_ids),
            split="all",
            task_ids=tuple(task_ids),
            concurrency=2,
            max_turns=15,
            progress=False,
        )
    )
    assert sorted(r["task_id"] for r in report["results"]) == sorted(task_ids)
    failed = _failures_by_application(report["results"], {t["id"]: t for t in tasks}, versions)
    # Both of an application's tasks failing is that application changing under the expert
    # (Chromium 155 did: its new-tab page kept the focus); one is a flake on a loaded machine.
    broken = [summary for summary, scored_failures in failed.values() if scored_failures >= 2]
    assert not broken, "the expert's tasks broke with these applications:\n" + "\n".join(broken)
    # a desktop that fails to start is an env fault (infra_error, not scored): one is tolerated
    # here, on a CI machine shared with other tests
    assert report["infra_errors"] <= 1, [summary for summary, _ in failed.values()]
    assert report["success_rate"] >= 0.9, [summary for summary, _ in failed.values()]


def _failures_by_application(
    results: list[dict], tasks: dict[str, dict], versions: dict[str, str]
) -> dict[str, tuple[str, int]]:
    """Application → (what failed, with the application's version; how many of its tasks were
    scored and failed: an infra error is no sign of the application)."""
    apps = {task_id: OSWORLD_APPS.get(task["snapshot"], task["snapshot"]) for task_id, task in tasks.items()}
    totals = Counter(apps.values())
    lines: dict[str, list[str]] = {}
    scored: Counter[str] = Counter()
    for r in results:
        if not r["success"]:
            app = apps[r["task_id"]]
            scored[app] += r["status"] == "ok"
            lines.setdefault(app, []).append(
                f"{tasks[r['task_id']]['source']}: {r['status']}, reward {r['reward']} after {r['turns']} turns "
                f"{(r['error'] or '')[-300:]}"
            )
    return {
        app: (
            f"{app} {versions.get(app, '(version not reported)')}: {len(found)} of {totals[app]} expert "
            "tasks failed:\n  " + "\n  ".join(found),
            scored[app],
        )
        for app, found in lines.items()
    }


@pytest.mark.slow
async def test_an_agent_that_does_nothing_scores_0(env_url: str, fixture_dir: Path):
    """On a test task of each evaluator kind (an infeasible one among them), LibreOffice's but for
    their slow starts (the gold-files test shows its untouched inputs score below 1)."""
    test_ids = set(TaskSet.load(fixture_dir).splits["test"])
    first_of_kind: dict[str, str] = {}
    for task in sorted(_tasks(fixture_dir), key=lambda t: t["id"]):
        if task["id"] in test_ids and not task["snapshot"].startswith("libreoffice"):
            first_of_kind.setdefault(task["evaluator"]["func"], task["id"])
    assert "infeasible" in first_of_kind and len(first_of_kind) >= 4, first_of_kind
    report = await evaluate(
        EvalConfig(
            "osworld",
            agent=f"{__name__}:DoNothingAgent",
            env_url=env_url,
            episodes=len(first_of_kind),
            split="test",
            task_ids=tuple(first_of_kind.values()),
            concurrency=2,
            progress=False,
        )
    )
    assert report["scored"] == len(first_of_kind) and report["mean_reward"] == 0.0, report["results"]


async def test_a_reset_observes_the_page_its_config_opened(fixture_dir: Path):
    """Chromium registers with the accessibility bus a second or more after its window shows; a reset
    waits for it, so the first observation holds the page (it used to be an empty desktop, and a
    second reset of the same task sometimes not: the conformance check caught that in CI)."""
    if shutil.which("Xvfb") is None or shutil.which("chromium") is None:
        pytest.skip("the Chromium task needs Xvfb and chromium (.ci/apt-packages.txt)")
    task_id = next(t["id"] for t in _tasks(fixture_dir) if "in new tabs" in t["instruction"])
    env = make_factory(tasks=str(fixture_dir), settle_s=0.1)()
    try:
        for _ in range(2):
            reset = await env.reset(task_id=task_id)
            assert "\tAddress and search bar\t" in reset.observation.text, reset.observation.text
            assert "document-web\t" in reset.observation.text
    finally:
        await env.close()
