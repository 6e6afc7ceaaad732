"""The RL loop with vLLM as the rollout engine: ALFWorld fixture games → SFT → two GRPO steps,
vLLM started and supervised by the run (`engine.backend: vllm`), weights synced into it after
SFT and after each step; the engine's recorded logprobs are the trainer's on the same weights.
vLLM killed in the middle of a step's rollouts: the episodes it fails are stored `infra_error`
with no reward and left out of training, and the run waits for the restarted vLLM (the run's
newest weights reloaded) and completes its steps."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import psutil
import pytest

from roost.agents.protocol import AgentOutcome, EpisodeContext
from roost.agents.tool_agent import ToolAgent
from roost.outcome import EpisodeStatus
from roost.rollout.store.paths import group_training_sessions
from roost.rollout.store.reader import TrajectoryReader
from roost.tests.trainer.test_rl_loop import local_ray, tiny_recipe  # noqa: F401 (a fixture)
from roost.trainer.recipe import validate_recipe
from roost.trainer.rl.batches import batch_of
from roost.trainer.rl.loop import train

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

THIS = "roost.tests.trainer.test_rl_vllm"  # the rollout workers load the harness from here

VLLM_ENGINE = {"backend": "vllm", "args": ["--optimization-level", "0", "--enforce-eager"]}


def vllm_recipe(run_dir: Path, **overrides) -> dict:
    recipe = tiny_recipe(run_dir, eval__split=None, **overrides)
    recipe["engine"] = dict(VLLM_ENGINE)
    # vLLM's CPU attention needs heads of 32 dimensions or more
    recipe["model"]["small_vocab"]["head_dim"] = 32
    return recipe


def rl_metrics(run_dir: Path) -> list[dict]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [m for m in lines if m["stage"] == "rl"]


def test_two_grpo_steps_with_vllm_as_the_engine(tmp_path, local_ray, vllm_py):  # noqa: F811
    run_dir = tmp_path / "run"
    summary = train(validate_recipe(vllm_recipe(run_dir)))
    assert summary.steps == 2
    rl = rl_metrics(run_dir)
    assert [m["step"] for m in rl] == [1, 2] and all(m["updated"] for m in rl)
    assert all(m["infra_error"] == 0 for m in rl)
    # vLLM's raw logprobs of what it sampled equal the trainer's on the same weights: after
    # SFT's sync and after step 1's (a stale tied output head would be off by nats)
    assert all(m["logprob_mismatch"] < 1e-3 for m in rl), [m["logprob_mismatch"] for m in rl]
    assert json.loads((run_dir / "state.json").read_text())["weight_version"] == 3
    assert (run_dir / "logs" / "vllm.log").is_file()


def kill_vllm_once(run_dir: Path) -> None:
    """Kill the vLLM serving the run in `run_dir` (its API server and engine core, as a crash
    would), the first time only: `killed` in the run folder marks it done."""
    try:
        (run_dir / "killed").open("x").close()
    except FileExistsError:
        return
    for process in psutil.process_iter(["cmdline"]):
        command = process.info["cmdline"] or []
        if "vllm.entrypoints.openai.api_server" in command and any(str(run_dir) in arg for arg in command):
            for victim in [*process.children(recursive=True), process]:
                victim.kill()


class KillsVLLMMidEpisode(ToolAgent):
    """The tool agent, which kills the run's vLLM right after its first env step of the run: that
    episode's next call, and those of the episodes still playing, find vLLM gone. Loaded by the
    rollout workers from this module."""

    def __init__(self, run_dir: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.run_dir = Path(run_dir)

    async def run(self, ctx: EpisodeContext) -> AgentOutcome:
        act = ctx.step

        async def step(action):
            try:
                return await act(action)
            finally:
                kill_vllm_once(self.run_dir)

        return await super().run(dataclasses.replace(ctx, step=step))


# vLLM starts twice (the second after the watchdog's restart): ~3 min on an idle CI machine,
# past the suite's 300 s on a loaded one (313 s seen here beside other jobs).
@pytest.mark.timeout(600)
def test_vllm_killed_mid_rollouts_fails_those_episodes_and_the_run_goes_on(tmp_path, local_ray, vllm_py):  # noqa: F811
    run_dir = tmp_path / "run"
    recipe = vllm_recipe(run_dir, schedule__checkpoint_every=0)
    recipe["agent"]["harness"] = f"{THIS}:KillsVLLMMidEpisode"
    recipe["agent"]["args"]["run_dir"] = str(run_dir)
    summary = train(validate_recipe(recipe))
    assert (run_dir / "killed").is_file() and summary.steps == 2
    # the watchdog started vLLM again (`roost engine` says so each time it serves)
    assert (run_dir / "logs" / "engine.log").read_text().count("vLLM serves") == 2

    first, second = rl_metrics(run_dir)
    state = json.loads((run_dir / "state.json").read_text())
    step_one = state["consumed_groups"][:2]
    with TrajectoryReader(run_dir / "trajectories.sqlite") as reader:
        sessions = [s for g in step_one for s in reader.sessions(group_id=g)]
        failed = [s for s in sessions if s.outcome.status is EpisodeStatus.INFRA_ERROR]
        assert len(failed) == first["infra_error"] >= 1 and len(sessions) == first["episodes"] == 4
        # stored without a reward (never a 0), though the killer's first turn was recorded
        assert all(s.outcome.reward is None and reader.rewards(s.session_id) == [] for s in failed)
        assert any(reader.calls(s.session_id) for s in failed)
    # the run is over and its gateway gone: read the store file it left, as the trainer's API would
    sessions = group_training_sessions(run_dir / "trajectories.sqlite", step_one)
    batch = batch_of(sessions, current_version=1, max_staleness=None)
    trained = {sample.session_id for group in batch.groups for sample in group.samples}
    assert trained.isdisjoint(s.session_id for s in failed)
    # the step after ran on the restarted vLLM with the run's newest weights back in it
    assert second["infra_error"] == 0 and second["updated"]
    assert second["logprob_mismatch"] < 1e-3, second["logprob_mismatch"]
    assert state["weight_version"] == 1 + first["updated"] + second["updated"]
