"""A training run across three nodes of a simulated Ray cluster (`tests/ray_cluster.py`: each node
in its own mount namespace with a private run folder, so a path one node writes and another reads
fails): the trainer and gateway on the head, two engines on a `rollout` node, the env server on an
`env` node. The rollout node is killed while a step's calls are in flight and another joins, where
the lost engines start again; then the env node likewise. A second rollout node joins after that,
and the run grows a third engine there (`max_replicas`). The run goes on, with the lost episodes
stored `infra_error` and not trained on."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
import yaml

from roost.outcome import EpisodeStatus
from roost.rollout.store.reader import TrajectoryReader
from roost.tests.prometheus_samples import sample
from roost.tests.ray_cluster import NodeSpec, SimulatedCluster, unavailable
from roost.tests.trainer.test_rl_loop import tiny_recipe

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

HEAD, ROLLOUT, ENV = 0, 1, 2
STEPS = 5
"""The engines' node is lost in step 1, 2 or 3 (whichever the test holds calls of first), the env
server's in a later step but the last: a clean step follows, and a step that starts after the
last node joined (the run grows there)."""
LAYOUT = {
    "mode": "split",
    "trainer": {"node": "trainer", "cpus": 1},
    "engine": {"node": "rollout", "replicas": 2, "max_replicas": 3},
    "env": {"node": "env"},
    "gateway": {"node": "trainer"},
}
LOST = "is lost (its node left the cluster); starting another"


@pytest.fixture
def cluster(monkeypatch):
    if reason := unavailable():
        pytest.skip(f"no simulated Ray cluster: {reason}")
    root = Path(tempfile.mkdtemp(prefix="rl-", dir="/tmp"))  # short: Ray's socket paths have a limit
    # each node's caches (the env's games, models) in its own private run folder
    monkeypatch.setenv("ROOST_HOME", str(root / "run" / "home"))
    specs = [NodeSpec("trainer", cpus=2), NodeSpec("rollout", cpus=1), NodeSpec("env", cpus=1)]
    with SimulatedCluster(root, specs) as simulated:
        yield simulated
    shutil.rmtree(root, ignore_errors=True)


def recipe_file(cluster: SimulatedCluster) -> tuple[Path, Path]:
    run_dir = cluster.run_dir / "out"
    recipe = tiny_recipe(
        run_dir,
        eval__split=None,  # the first calls through the gateway are step 1's
        rollout__group_size=4,
        rollout__concurrency=8,
        placement__ray_address=cluster.address,
        placement__layout=LAYOUT,
        schedule__checkpoint_every=0,
        schedule__steps=STEPS,
    )
    recipe["engine"] = {"weight_sync": "http"}  # the engines' node cannot read the trainer's folders
    path = cluster.root / "recipe.yaml"  # outside every node's run folder: each reads the same file
    path.write_text(yaml.safe_dump(recipe))
    return path, run_dir


def rl_steps(run_dir: Path) -> list[dict]:
    metrics = run_dir / "metrics.jsonl"
    lines = metrics.read_text().splitlines() if metrics.is_file() else []
    return [m for m in map(json.loads, lines) if m.get("stage") == "rl"]


def said(log: Path) -> str:
    return " ".join(log.read_text().split())  # the console wraps long lines


def lose_mid_step(
    cluster: SimulatedCluster,
    run_dir: Path,
    driver: subprocess.Popen,
    log: Path,
    *,
    lose: int,
    engines: int,
    steps_done: range,
    then: str = "",
) -> int:
    """Kill node `lose` while a step's episodes are in flight; the steps done then, one of
    `steps_done`. A step's calls are short (a tiny model, 8 tokens), so seeing one in flight
    proves nothing by the time a node is killed: once the run's gateway (on the head) has calls
    in flight (and the run has said `then`), the engines' node is frozen; calls still in flight
    after a while are held there, each an episode that calls again or acts in the env after its
    reply. Then `lose` is killed and the engines' node thawed. Without held calls (the step's
    last ones had just ended) it is thawed and the next step's are waited for."""
    port_file = cluster.path_on(HEAD, run_dir / "logs" / "gateway.port")
    deadline = time.monotonic() + 600
    with httpx.Client(timeout=5) as http:

        def in_flight() -> int:
            """The gateway's calls in flight, from /metrics (/health asks the engines too)."""
            if not (port_file.is_file() and (port := port_file.read_text().strip())):
                return 0
            try:
                text = http.get(f"http://127.0.0.1:{port}/metrics").text
            except httpx.HTTPError:
                return 0
            return int(sample(text, "roost_gateway_in_flight") or 0)

        while time.monotonic() < deadline:
            assert driver.poll() is None, log.read_text()[-4000:]
            if not in_flight():
                time.sleep(0.005)  # a step's calls last a fraction of a second
                continue
            done = len(rl_steps(cluster.path_on(HEAD, run_dir)))
            assert done <= steps_done[-1], f"{done} steps done already:\n{said(log)[-4000:]}"
            if done not in steps_done or then not in said(log):
                continue
            cluster.freeze_node(engines)
            try:
                time.sleep(0.5)
                if in_flight():
                    cluster.kill_node(lose)
                    return done
            finally:
                if engines in cluster.nodes:  # not the node killed
                    cluster.freeze_node(engines, frozen=False)
    raise AssertionError(f"no call held in 600s:\n{log.read_text()[-4000:]}")


def copied_store(run_dir: Path, to: Path) -> Path:
    """The run's store copied out of a node's run folder: SQLite resolves the `/proc/PID/root`
    link of a path through it to this process's own view, where the file is not."""
    to.mkdir()
    for path in run_dir.glob("trajectories.sqlite*"):
        shutil.copy(path, to / path.name)
    return to / "trajectories.sqlite"


def test_a_run_across_three_nodes_survives_losing_its_engines_node_then_its_env_node(cluster):
    recipe, run_dir = recipe_file(cluster)
    log = cluster.root / "train.log"
    with log.open("wb") as out:
        # the loop on the head, in its mount namespace: the run folder it writes is the head's own
        driver = subprocess.Popen(
            cluster.command(HEAD, [sys.executable, "-m", "roost.cli.main", "train", str(recipe)]),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=cluster.env(),
        )
    try:
        # both engines, mid-step (in step 1, 2 or 3)
        first = lose_mid_step(cluster, run_dir, driver, log, lose=ROLLOUT, engines=ROLLOUT, steps_done=range(3))
        rollouts = [cluster.add_node(NodeSpec("rollout", cpus=1))]  # where both engines start again
        # once both engines serve again, the env server's node, mid-step in a later step (at most
        # the fourth: a clean step follows)
        second = lose_mid_step(
            cluster,
            run_dir,
            driver,
            log,
            lose=ENV,
            engines=rollouts[0],
            steps_done=range(first + 1, STEPS - 1),
            then="engine 1 serves again",
        )
        env = cluster.add_node(NodeSpec("env", cpus=1))
        rollouts.append(cluster.add_node(NodeSpec("rollout", cpus=1)))  # a node to grow on
        assert driver.wait(timeout=900) == 0, log.read_text()[-6000:]
    finally:
        if driver.poll() is None:
            driver.kill()
    output = said(log)
    assert (output.count("engine 0 at http"), output.count(LOST)) == (1, 3), output[-4000:]
    assert "env server 0 serves again at http" in output
    grown = re.findall(r"engine 2 joins at (http://\S+), on a node that joined the cluster", output)
    assert len(grown) == 1, output[-4000:]

    # what the run wrote is on the head only; the new nodes made their own copies of what they read
    head_run = cluster.path_on(HEAD, run_dir)
    assert json.loads((head_run / "state.json").read_text())["step"] == STEPS
    for rollout in rollouts:
        assert cluster.path_on(rollout, run_dir / "model" / "config.json").is_file()  # staged on each
    assert not cluster.path_on(env, run_dir / "model").exists()
    logs = [sorted(p.name for p in cluster.path_on(r, run_dir / "logs").glob("*.log")) for r in rollouts]
    assert sorted(logs) == [["engine-1.log", "engine.log"], ["engine-2.log"]]  # the grown one on a node alone
    assert [p.name for p in cluster.path_on(env, run_dir / "logs").glob("*.log")] == ["env.log"]
    assert any(cluster.path_on(env, run_dir.parent / "home").iterdir())  # the env's games, made there

    rl = rl_steps(head_run)
    assert [m["step"] for m in rl] == list(range(1, STEPS + 1))
    hits = [i for i, m in enumerate(rl) if m["infra_error"]]  # the steps a node was lost in
    assert hits == [first, second], rl
    with TrajectoryReader(copied_store(head_run, cluster.root / "store")) as store:
        sessions = [s for s in store.sessions() if s.outcome is not None and s.outcome.kind.value == "train"]
        lost = [s for s in sessions if s.outcome.status is EpisodeStatus.INFRA_ERROR]
        engines = {call.engine for s in sessions for call in store.calls(s.session_id)}
    assert grown[0] in engines, f"the grown engine sampled no call: {engines}"
    # the episodes in flight on the lost nodes, and only those, never trained on; the step after
    # played on the new engines, which were sent the newest weights before they served
    assert sum(rl[i]["infra_error"] for i in hits) == len(lost)
    assert all(rl[i]["trained_samples"] <= 8 - rl[i]["infra_error"] for i in hits)
    after = rl[hits[1] + 1]
    assert (after["infra_error"], after["mixed_version_samples"]) == (0, 0) and after["trained_samples"] > 0
    assert after["oldest_version"] == rl[hits[1]]["weight_version"]
