"""The training loop on Ray: (SFT →) generate → train → update weights, with checkpoints.

    summary = train(load_recipe("recipes/alfworld/cpu.yaml", ["steps=2"]))

Read top to bottom: set up (Ray, env server, model, engine, gateway, trainer ranks,
rollout workers), evaluate the starting policy, SFT if the recipe has it, then the RL
steps: take finished groups (`rollouts`), keep the trainable samples (`batches`),
score them (`advantages`), one optimizer step, export and load the new weights into the
engine, log, checkpoint. Evaluations before, after SFT, every `eval.every` steps and at the
end go into the summary (and `evals.json`).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roost.agents.results import UNSCORED

from ..checkpoint import RunState, checkpoint_dir, load_evals, prune_checkpoints, save_evals
from ..metrics import MetricsLogger
from ..recipe import Recipe, dump_recipe
from .batches import collect_batch


@dataclass
class RunSummary:
    run_dir: Path
    store: Path
    steps: int
    evals: dict[str, dict[str, Any]] = field(default_factory=dict)
    last_metrics: dict[str, Any] = field(default_factory=dict)


@dataclass
class Hooks:
    """Optional callbacks for front ends (the demo's progress bars)."""

    stage: Callable[[str, int], None] | None = None
    """A stage starts: (name, total steps)."""
    advance: Callable[[str, int, dict[str, Any]], None] | None = None
    """A step of a stage is done: (name, step, metrics)."""
    echo: Callable[[str], None] = print


def train(recipe: Recipe, hooks: Hooks | None = None) -> RunSummary:
    from .setup import placement, prepare_env, ray_session, services, start_env, stop_services

    hooks = hooks or Hooks()
    run_dir = recipe.output_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "recipe.yaml").write_text(dump_recipe(recipe))
    state = (RunState.load(run_dir) if recipe.schedule.resume else None) or RunState()
    metrics = MetricsLogger(recipe.metrics, run_dir, run_name=recipe.name, echo=hooks.echo)
    stage = hooks.stage or (lambda name, total: None)
    with ray_session(recipe):
        where = placement(recipe)
        stage("env: data and server", 0)
        env = start_env(recipe, prepare_env(recipe), run_dir / "logs")
        try:
            if recipe.sft is not None and recipe.sft.data.source == "expert" and not state.sft_done:
                stage("expert demonstrations", 0)
            transcripts, tools = _sft_transcripts(recipe, env.url, run_dir)
            state.model = state.model or _model(recipe, run_dir, transcripts, tools)
            stage("engine, gateway, trainer", 0)
            with services(recipe, run_dir, state.model, env, where) as svc:
                run = _Run(recipe, run_dir, state, svc, where, metrics, hooks)
                try:
                    return run.all(transcripts, tools)
                finally:
                    run.close()
        finally:
            stop_services([env.actor])
            metrics.close()


def _sft_transcripts(recipe: Recipe, env_url: str, run_dir: Path) -> tuple[list, list]:
    from roost.envs.client import EnvClient

    async def tools() -> list:
        async with EnvClient(env_url) as client:
            return (await client.info()).tools

    env_tools = asyncio.run(tools())
    if recipe.sft is None or recipe.sft.data.source != "expert":
        return [], env_tools
    from ..sft.train import expert_transcripts

    transcripts = expert_transcripts(env_url, recipe.env.split, recipe.sft.data, max_turns=recipe.sft.data.max_turns,
                                     seed=recipe.schedule.seed,
                                     cache=Path(recipe.sft.data.cache or run_dir / "sft" / "transcripts.jsonl"))
    return transcripts, env_tools


def _model(recipe: Recipe, run_dir: Path, transcripts: list, tools: list) -> str:
    if recipe.model.small_vocab is None:
        from roost.rollout.engine.tiny_model import resolve_model

        return str(resolve_model(recipe.model.path))
    from roost.rollout.chat.template import ChatTemplate
    from roost.rollout.engine.small_vocab_model import SmallModelShape, build_small_vocab_model
    from roost.rollout.engine.tokenizer_files import qwen3_tokenizer_dir

    from ..sft.train import transcript_messages

    if not transcripts:
        raise ValueError("model.small_vocab needs expert transcripts to train its tokenizer, and the expert "
                         "won no episode; check the env and sft.data")
    template = ChatTemplate.from_pretrained(str(qwen3_tokenizer_dir()))
    offered = tools if recipe.agent.tools else None
    corpus = [template.render(transcript_messages(t, recipe.agent), tools=offered, add_generation_prompt=False)
              for t in transcripts]
    shape = SmallModelShape(**recipe.model.small_vocab.model_dump())
    return str(build_small_vocab_model(corpus, run_dir / "model", shape))


class _Run:
    """One run's handles, passed explicitly; `all` is the whole schedule."""

    def __init__(self, recipe: Recipe, run_dir: Path, state: RunState, svc: Any, where: Any,
                 metrics: MetricsLogger, hooks: Hooks) -> None:
        import ray

        from .rollouts import Rollouts, task_pool
        from .trainer import TrainerGroup
        from .rollout_workers import RolloutWorker

        self.recipe, self.run_dir, self.state, self.svc = recipe, run_dir, state, svc
        self.metrics, self.hooks = metrics, hooks
        self.evals = load_evals(run_dir)
        start = state.hf_weights or state.model
        self.trainer = TrainerGroup.start(recipe, start, scheduling=where.trainer)
        if state.checkpoint:
            self.trainer.load(str(Path(state.checkpoint) / "trainer"))
            self._sync(start, state.weight_version)
        r = recipe.rollout
        worker = ray.remote(RolloutWorker).options(num_cpus=0)
        per_worker = max(1, r.concurrency // r.workers)
        self.workers = [worker.remote(svc.env_url, svc.gateway_url, recipe.agent.model_dump(), concurrency=per_worker,
                                      admin_key=svc.admin_key,
                                      invalid_action_penalty=r.invalid_action_penalty)
                        for _ in range(r.workers)]
        self.tasks = task_pool(self._tasks(recipe.env.split), recipe.env.max_tasks, recipe.schedule.seed)
        self.rollouts = Rollouts(recipe, self.workers, self.tasks, state, svc.store)

    def all(self, transcripts: list, tools: list) -> RunSummary:
        recipe, state = self.recipe, self.state
        if "before" not in self.evals:
            self._evaluate("before")
        if recipe.sft is not None and not state.sft_done:
            self._sft(transcripts, tools)
            self._evaluate("after_sft")
        self._rl()
        if recipe.schedule.steps and f"step-{state.step}" not in self.evals:
            self._evaluate("final")
        return RunSummary(self.run_dir, self.svc.store, state.step, dict(self.evals), self._last)

    def _tasks(self, split: str) -> list:
        from roost.envs.client import EnvClient

        async def fetch() -> list:
            async with EnvClient(self.svc.env_url) as client:
                return await client.tasks(split)

        tasks = asyncio.run(fetch())
        if not tasks:
            raise ValueError(f"split {split!r} of env {self.recipe.env.name!r} has no tasks; set env.split")
        return tasks

    # --- SFT -----------------------------------------------------------------------------
    def _sft(self, transcripts: list, tools: list) -> None:
        from ..sft.train import recorded_samples, render_transcripts, run_sft
        from ..sft.data import ChatRenderer

        sft = self.recipe.sft
        if sft.data.source == "expert":
            samples = render_transcripts(ChatRenderer.from_pretrained(self.state.model), transcripts, tools,
                                         self.recipe.agent)
        else:
            samples = recorded_samples(sft.data)
        self._stage("sft", sft.steps)

        def logged(step: int, values: dict[str, Any]) -> None:
            self.metrics.log(step, values, stage="sft")
            self._advance("sft", step, values)

        run_sft(self.trainer, samples, sft, seed=self.recipe.schedule.seed, on_step=logged)
        # RL starts with a new optimizer, as a separate RL run from the SFT checkpoint would: Adam's
        # second moments from the NLL gradients are far larger than policy-gradient ones and would
        # shrink its updates (measured in the demo: clip fraction ~0.000 over 24 RL steps with SFT's
        # moments, 0.07 on the first step with a new optimizer)
        self.trainer.reset_optimizer()
        self.state.sft_done = True
        self._checkpoint("sft")

    # --- RL ------------------------------------------------------------------------------
    def _rl_loss(self) -> None:
        from .trainer import train_config

        # the KL reference is the policy RL starts from (after SFT, else the recipe's model),
        # kept across resumes
        self.state.reference = self.state.reference or self.state.hf_weights or self.state.model
        config = train_config(self.recipe, self.state.model, reference=self.state.reference)
        self.trainer.set_loss(config.loss, config.lr, reference=self.state.reference)

    def _rl(self) -> None:
        from ..advantages import AdvantageConfig, EstimatorConfig, compute_advantages

        recipe, state = self.recipe, self.state
        algo = recipe.algorithm
        advantages = AdvantageConfig(EstimatorConfig(algo.advantage.name, algo.advantage.options),
                                     {a: EstimatorConfig(e.name, e.options) for a, e in algo.per_agent.items()})
        max_staleness = algo.max_staleness if algo.mode == "async" else 0
        if state.step < recipe.schedule.steps:
            self._rl_loss()
        self._stage("rl", recipe.schedule.steps)
        self._last: dict[str, Any] = {}
        while state.step < recipe.schedule.steps:
            started = time.perf_counter()
            group_ids, rollout = self.rollouts.next_groups()
            batch = collect_batch(self.svc.store, group_ids, current_version=state.weight_version,
                                  max_staleness=max_staleness)
            scored, counts = compute_advantages(batch.groups, advantages) if batch.groups else ([], {})
            lr = rl_lr(recipe.trainer.lr, recipe.trainer.warmup_steps, state.step)
            if recipe.trainer.warmup_steps:
                self.trainer.set_lr(lr)
            stats = None
            for update in range(algo.updates_per_batch if scored else 0):
                last = self.trainer.train_step(scored)
                # the first update measures engine/trainer mismatch; the last one how much is clipped
                stats = last if stats is None else {**stats, "extra": {**stats["extra"],
                                                                       "clip_fraction": last["extra"]["clip_fraction"]}}
            state.step += 1
            state.consumed_groups += group_ids
            sync_s = self._publish(f"step-{state.step}") if stats else 0.0
            values = step_metrics(batch, rollout, stats, counts, scored)
            values.update(lr=lr, weight_version=state.weight_version, weight_sync_s=sync_s,
                          step_s=time.perf_counter() - started)
            self._last = values
            self.metrics.log(state.step, values, stage="rl")
            self._advance("rl", state.step, values)
            if recipe.eval.every and state.step % recipe.eval.every == 0:
                self._evaluate(f"step-{state.step}")

    def _publish(self, label: str) -> float:
        """Export the weights, load them into the engine (next version), checkpoint when due."""
        state, schedule = self.state, self.recipe.schedule
        due = state.step >= schedule.steps or (schedule.checkpoint_every and state.step % schedule.checkpoint_every == 0)
        folder = checkpoint_dir(self.run_dir, label) / "hf" if due else self.run_dir / "weights" / f"v{state.weight_version % 2}"
        self.trainer.export(str(folder))
        started = time.perf_counter()
        state.weight_version += 1
        self._sync(str(folder), state.weight_version)
        if due:
            self._save(checkpoint_dir(self.run_dir, label))
        return time.perf_counter() - started

    def _checkpoint(self, label: str) -> None:
        folder = checkpoint_dir(self.run_dir, label)
        self.trainer.export(str(folder / "hf"))
        self.state.weight_version += 1
        self._sync(str(folder / "hf"), self.state.weight_version)
        self._save(folder)

    def _save(self, folder: Path) -> None:
        self.trainer.save(str(folder / "trainer"))
        self.state.checkpoint = str(folder)
        self.state.save(self.run_dir)
        prune_checkpoints(self.run_dir, self.recipe.schedule.keep_checkpoints, self.state.checkpoint,
                          self.state.reference)

    def _sync(self, folder: str, version: int, tries: int = 5) -> None:
        """Load `folder` into the engine as `version` (the gateway paused around it); retried while a
        restarting engine comes back."""
        import ray

        from ..weight_sync import sync_weights

        for attempt in range(tries):
            try:
                asyncio.run(sync_weights(self.svc.engine_url, folder, weight_version=str(version),
                                         engine_key=self.svc.engine_key, gateway_url=self.svc.gateway_url,
                                         admin_key=self.svc.admin_key))
                break
            except Exception as exc:  # noqa: BLE001 - an engine mid-restart; retried, then raised
                if attempt + 1 == tries:
                    raise
                self.hooks.echo(f"weight update to version {version} failed ({exc}); retrying")
                time.sleep(2.0 * (attempt + 1))
        if self.svc.engine is not None:
            ray.get(self.svc.engine.loaded.remote(folder, str(version)))

    # --- evaluation ----------------------------------------------------------------------
    def _evaluate(self, label: str) -> None:
        ev = self.recipe.eval
        if ev.split is None:
            return
        episodes = ev.before_episodes if label == "before" and ev.before_episodes else ev.episodes
        self._stage(f"eval {label}", episodes)
        results = self.rollouts.evaluate(label, self._tasks(ev.split), episodes, {**self.recipe.agent.args, **ev.args})
        scored = [r for r in results if r.scored]
        summary = {"split": ev.split, "episodes": len(results), "scored": len(scored),
                   "success_rate": sum(r.success for r in scored) / len(scored) if scored else None,
                   "mean_reward": sum(r.reward for r in scored) / len(scored) if scored else None,
                   "left_out": dict(Counter(r.status.value for r in results if not r.scored)),
                   "groups": f"{'eval'}-{label}-*"}
        self.evals[label] = summary
        save_evals(self.run_dir, self.evals)
        self.metrics.log(self.state.step, {k: v for k, v in summary.items() if k != "left_out"}, stage=f"eval/{label}")
        self._advance(f"eval {label}", episodes, summary)

    def _stage(self, name: str, total: int) -> None:
        if self.hooks.stage is not None:
            self.hooks.stage(name, total)

    def _advance(self, name: str, step: int, values: dict[str, Any]) -> None:
        if self.hooks.advance is not None:
            self.hooks.advance(name, step, values)

    def close(self) -> None:
        import ray

        for worker in self.workers:
            ray.kill(worker)
        self.trainer.shutdown()


def rl_lr(lr: float, warmup_steps: int, step: int) -> float:
    """The learning rate of RL step `step` (0-based): a linear warmup, then `lr`."""
    return lr * (step + 1) / warmup_steps if step < warmup_steps else lr


def step_metrics(batch: Any, rollout: Any, stats: dict[str, Any] | None, counts: dict[str, int],
                 scored: list) -> dict[str, Any]:
    """One RL step's numbers: rewards, what was left out and why, and the trainer's statistics."""
    results = rollout.results
    ok = [r for r in results if r.scored]
    values: dict[str, Any] = {
        "reward": sum(batch.rewards) / len(batch.rewards) if batch.rewards else None,
        "success": sum(r.success for r in ok) / len(ok) if ok else None,
        "invalid_actions": sum(r.invalid_actions for r in ok) / len(ok) if ok else None,
        "episodes": len(results), "recovered_groups": rollout.recovered,
        **{s.value: batch.counts.get(s.value, 0) for s in UNSCORED},  # infra_error, timeout, agent_error
        "unfinished": batch.counts.get("open", 0),
        "dropped_stale": batch.counts.get("dropped_stale", 0), "dropped_groups": counts.get("dropped_groups", 0),
        "staleness": sum(batch.staleness) / len(batch.staleness) if batch.staleness else 0.0,
        "rollout_s": rollout.seconds, "trained_samples": len(scored),
    }
    sampled = sum(s.sample.num_sampled for s in scored)
    values["rollout_tokens_per_s"] = sampled / rollout.seconds if rollout.seconds else None
    if stats is None:
        values["updated"] = False
        return values
    extra = stats["extra"]
    tokens = max(extra.get("tokens", 0.0), 1.0)
    flat = sum(len(s.sample.tokens) for s in scored)
    values.update(
        updated=stats["updated"], loss=stats["loss"], grad_norm=stats["grad_norm"],
        kl=extra.get("kl", 0.0) / tokens, clip_fraction=extra.get("clip_fraction", 0.0) / tokens,
        entropy=extra.get("neg_logprob", 0.0) / tokens, tis_mean=extra.get("tis_mean", 0.0) / tokens,
        logprob_mismatch=extra.get("rollout_abs_diff", 0.0) / tokens,
        tree_saving=1 - stats["tree_tokens"] / flat if flat else 0.0,
        train_tokens_per_s=stats["tree_tokens"] / max(stats["seconds"], 1e-9), train_s=stats["seconds"],
    )
    return values
