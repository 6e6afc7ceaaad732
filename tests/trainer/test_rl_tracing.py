"""A traced training run into a real OTLP receiver (Arize Phoenix): one GRPO step of the tiny
model on ALFWorld fixture games with the recipe's `trace: true`. The receiver is named by the
standard variable only after Ray is up, so the trainer rank, the rollout worker and the servers
(each in a Ray worker) trace only if the run hands them its OTEL_* settings. The step arrives
as one trace (collect, advantages, the update with the rank's pack, forward/backward and
optimizer, the weight sync into the engine), and every recorded call is in its episode's trace
with the env server's and the engine's spans."""

from __future__ import annotations

import os

import pytest

from roost.rollout.store.reader import TrajectoryReader
from roost.tests.agents.test_episode_tracing import lineage
from roost.tests.phoenix import PhoenixServer, Span
from roost.tests.trainer.test_rl_loop import local_ray, tiny_recipe  # noqa: F401 (a fixture)
from roost.trainer.recipe import validate_recipe
from roost.trainer.rl.loop import train
from roost.trainer.rl.starters import actor_options

STEP = {
    "train.step",
    "train.collect",
    "train.advantages",
    "train.update",
    "weight_sync",
    "trainer.rank_step",
    "train.pack",
    "train.forward_backward",
    "train.optimizer",
    "POST /update_weights_from_disk",
}
EPISODE = {"episode", "env.reset", "env.step", "gateway.call", "gateway.engine", "engine.generate"}


def traced_recipe(run_dir) -> dict:
    """One step of one group of two one-turn episodes of the tiny model: no SFT, no evaluation."""
    recipe = tiny_recipe(
        run_dir,
        agent__max_turns=1,
        rollout__groups_per_step=1,
        rollout__concurrency=2,
        eval__split=None,
        schedule__steps=1,
        trainer__warmup_steps=0,
    )
    recipe.update(model={"path": "tiny"}, sft=None, trace=True)
    recipe["trainer"]["loss"] = {"kl_coef": 0.0}
    return recipe


@pytest.mark.parametrize(
    ("trace", "environ", "handed"),
    [
        (False, {}, None),  # off: the actors' options are Ray's defaults
        (True, {}, {"OTEL_TRACES_EXPORTER": "otlp"}),
        (False, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}),
        (True, {"OTEL_TRACES_EXPORTER": "none"}, {"OTEL_TRACES_EXPORTER": "none"}),  # off in every process
    ],
)
def test_every_actor_of_a_run_gets_its_otel_settings(trace, environ, handed, tmp_path, monkeypatch):
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    recipe = validate_recipe({**traced_recipe(tmp_path), "trace": trace})
    assert actor_options(recipe).get("runtime_env", {}).get("env_vars") == handed


@pytest.fixture
def phoenix(tmp_path, local_ray, monkeypatch):  # noqa: F811
    """Phoenix, named to this process only once Ray (and the environment its workers get) is up."""
    (tmp_path / "phoenix").mkdir()
    with PhoenixServer(tmp_path / "phoenix") as server:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", server.url)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # export within 0.1 s, not 5 s
        for name in ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_EXPORTER_OTLP_PROTOCOL"):
            monkeypatch.delenv(name, raising=False)
        yield server


@pytest.mark.slow  # Phoenix takes ~30 s to start, the run two minutes
def test_a_traced_training_step_and_its_episodes_arrive_in_the_receiver(tmp_path, phoenix: PhoenixServer):
    summary = train(validate_recipe(traced_recipe(tmp_path / "run")))
    assert summary.steps == 1 and summary.last_metrics["updated"]

    [step] = phoenix.named("train.step")
    spans = phoenix.trace(step.trace_id, STEP)
    assert STEP <= {s.name for s in spans}, sorted({s.name for s in spans})
    one = {s.name: s for s in spans}
    assert step.parent_id is None and step.attributes["roost.step"] == 1
    stages = ("train.collect", "train.advantages", "train.update", "weight_sync")
    assert [one[n].parent_id for n in stages] == [step.span_id] * 4
    rank = one["trainer.rank_step"]  # in the rank's actor, parented across Ray by the traceparent
    assert rank.parent_id == one["train.update"].span_id and rank.attributes["roost.rank"] == 0
    assert [one[n].parent_id for n in ("train.pack", "train.forward_backward", "train.optimizer")] == [rank.span_id] * 3
    assert lineage(one["POST /update_weights_from_disk"], spans)[-2:] == ["weight_sync", "train.step"]

    with TrajectoryReader(summary.store) as reader:
        sessions = reader.sessions()
        calls = [call for s in sessions for call in reader.calls(s.session_id)]
    assert len(sessions) == 2 and calls and all(call.trace_id for call in calls)
    for call in calls:  # the rollout worker's episode, the gateway's call, the engine's and env server's spans
        spans = phoenix.trace(call.trace_id, EPISODE)
        assert EPISODE <= {s.name for s in spans}, sorted({s.name for s in spans})
        episode = next(s for s in spans if s.name == "episode")
        assert episode.parent_id is None and episode.attributes["roost.session_id"] == call.session_id
        model_call = _by_id(spans, call.span_id)
        assert model_call.name == "gateway.call" and model_call.parent_id == episode.span_id
        assert all(lineage(s, spans)[-1] == "episode" for s in spans if s.name in ("env.reset", "engine.generate"))


def _by_id(spans: list[Span], span_id: str) -> Span:
    return next(s for s in spans if s.span_id == span_id)
