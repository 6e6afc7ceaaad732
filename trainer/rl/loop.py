"""The training loop on Ray: (SFT →) generate → score → train → sync weights, with checkpoints.

    summary = train(load_recipe("recipes/alfworld/cpu.yaml", ["steps=2"]))

Read top to bottom: set up (Ray, env server, model, engine, gateway: `setup`; trainer ranks,
rollout workers: `_handles`), evaluate the starting policy, SFT if the recipe has it, then the
RL steps (`_rl`): take finished groups (`rollouts`), keep the trainable samples (`batches`, read
over the gateway's API: the trainer opens no store file), score them (`advantages`; with
`algorithm.critic`, GAE over the trainer's value head: `critic`), optimizer steps (the first
`critic.warmup_steps` train the value head alone), export and load the new weights into the
engine, log, checkpoint. Evaluations before, after SFT, every `eval.every` steps and at the end go
into the summary (and `evals.json`). Every stage is a function of one `Run`, the run's typed
handles.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from roost.envs.protocol import Task, ToolSchema
from roost.outcome import UNSCORED
from roost.tracing import Tracing

from ..advantages import AdvantageConfig, EstimatorConfig, Scored, compute_advantages
from ..checkpoint import RunState, adapter_dir, checkpoint_dir, load_evals, prune_checkpoints, save_evals
from ..corrections import ratio_quantiles
from ..critic import critic_advantages
from ..eval_compare import per_task_success
from ..metrics import MetricsLogger
from ..recipe import AlgorithmConfig, DistillConfig, Recipe, dump_recipe
from ..sft.data import Transcript
from ..step_wise import per_turn
from .batches import Batch, collect_batch
from .placement import Placement
from .rollouts import EVAL_PREFIX, RolloutInfo, Rollouts
from .setup import Services
from .teaching import check_teachers, teach

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from roost.rollout.gateway.control.client import GatewayClient

    from ..megatron.train import StepStats
    from .rollout_workers import RolloutWorker
    from .trainer import TrainerGroup


T = TypeVar("T")


@dataclass
class RunSummary:
    run_dir: Path
    store: Path
    steps: int
    evals: dict[str, dict[str, Any]] = field(default_factory=dict)
    last_metrics: dict[str, Any] = field(default_factory=dict)


def _ignore(*args: object) -> None:
    return None


@dataclass
class Hooks:
    """Optional callbacks for front ends (the demo's progress bars)."""

    stage: Callable[[str, int], None] = _ignore
    """A stage starts: (name, total steps)."""
    advance: Callable[[str, int, dict[str, Any]], None] = _ignore
    """A step of a stage is done: (name, step, metrics)."""
    batch: Callable[[int, list[Scored]], None] = _ignore
    """An RL step's scored samples, as the trainer ranks get them to pack: (step, samples)."""
    echo: Callable[[str], None] = print


@dataclass
class Run:
    """One run's handles, passed to every stage; nothing else is shared."""

    recipe: Recipe
    run_dir: Path
    state: RunState
    services: Services
    trainer: TrainerGroup
    workers: list[ActorHandle[RolloutWorker]]
    rollouts: Rollouts
    metrics: MetricsLogger
    hooks: Hooks
    evals: dict[str, dict[str, Any]]
    last: dict[str, Any] = field(default_factory=dict)
    """The newest RL step's metrics."""
    tracing: Tracing = field(default_factory=Tracing)
    """A `train.step` span per RL step, with its stages and the weight sync."""


def train(recipe: Recipe, hooks: Hooks | None = None) -> RunSummary:
    from ..layout import describe
    from .placement import cluster_plan, placement
    from .setup import ray_session, services, start_envs
    from .starters import stop_services

    hooks = hooks or Hooks()
    run_dir = recipe.output_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "recipe.yaml").write_text(dump_recipe(recipe))
    state = (_resumed_state(recipe, run_dir) if recipe.schedule.resume else None) or RunState()
    metrics = MetricsLogger(recipe.metrics, run_dir, run_name=recipe.name, echo=hooks.echo)
    with ray_session(recipe):
        plan = cluster_plan(recipe)  # a layout the cluster cannot hold fails here, before anything starts
        hooks.echo(describe(recipe, plan))
        where = placement(recipe, plan)
        hooks.stage("env: data and server", 0)
        envs = start_envs(recipe, run_dir / "logs", where)
        try:
            if recipe.sft is not None and recipe.sft.data.source == "expert" and not state.sft_done:
                hooks.stage("expert demonstrations", 0)
            transcripts, tools = _sft_transcripts(recipe, envs.url, run_dir)
            state.model = state.model or _model(recipe, run_dir, transcripts, tools)
            check_lora_model(recipe, state.model)
            hooks.stage("engine, gateway, trainer", 0)
            with (
                services(recipe, run_dir, state.model, envs, where) as svc,
                _handles(recipe, run_dir, state, svc, where, metrics, hooks) as run,
            ):
                return _schedule(run, transcripts, tools)
        finally:
            stop_services(envs.actors())
            metrics.close()


def _resumed_state(recipe: Recipe, run_dir: Path) -> RunState | None:
    """The state to resume from: output_dir's, or the checkpoint URI's when it is further on."""
    if recipe.schedule.checkpoint_uri is None:
        return RunState.load(run_dir)
    from ..checkpoint_mirror import CheckpointMirror

    return CheckpointMirror(recipe.schedule.checkpoint_uri).pull(run_dir)


def check_lora_model(recipe: Recipe, model: str) -> None:
    """Refuse, before any service starts, a LoRA run the engine is not known to serve: an adapted
    `lm_head` of a model with tied embeddings on SGLang (roost's engine and vLLM serve that
    adapter as PEFT computes it)."""
    from roost.rollout.engine.model_spec import ModelSpec

    from ..recipe import RecipeError

    lora, backend = recipe.trainer.lora, recipe.engine.backend
    if lora is None or "lm_head" not in lora.targets or backend != "sglang":
        return
    if ModelSpec.from_folder(model).tie_word_embeddings:
        raise RecipeError(
            f"trainer.lora.targets has lm_head, but {model} ties its embeddings and engine.backend {backend} "
            "is not known to serve an lm_head adapter on tied embeddings; leave lm_head out of the targets, "
            "start from a model with its own lm_head, or use engine.backend embedded or vllm"
        )


def _sft_transcripts(recipe: Recipe, env_url: str, run_dir: Path) -> tuple[list[Transcript], list[ToolSchema]]:
    """The env's tools, and the expert's transcripts when SFT learns from them."""
    from roost.envs.client import EnvClient

    async def tools() -> list[ToolSchema]:
        async with EnvClient(env_url) as client:
            return (await client.info()).tools

    env_tools = asyncio.run(tools())
    if recipe.sft is None or recipe.sft.data.source != "expert":
        return [], env_tools
    from ..sft.train import expert_transcripts

    transcripts = expert_transcripts(
        env_url,
        recipe.env.split,
        recipe.sft.data,
        max_turns=recipe.sft.data.max_turns,
        seed=recipe.schedule.seed,
        cache=Path(recipe.sft.data.cache or run_dir / "sft" / "transcripts.jsonl"),
    )
    return transcripts, env_tools


def _model(recipe: Recipe, run_dir: Path, transcripts: list[Transcript], tools: list[ToolSchema]) -> str:
    """The starting model's folder: the recipe's, or a small-vocabulary one built from the transcripts."""
    if recipe.model.small_vocab is None:
        from roost.rollout.engine.tiny_model import resolve_model

        return str(resolve_model(recipe.model.path))
    from roost.rollout.chat.template import ChatTemplate
    from roost.rollout.engine.small_vocab_model import SmallModelShape, build_small_vocab_model
    from roost.rollout.engine.tokenizer_files import qwen3_tokenizer_dir

    from ..sft.train import transcript_messages

    if not transcripts:
        raise ValueError(
            "model.small_vocab needs expert transcripts to train its tokenizer, and the expert "
            "won no episode; check the env and sft.data"
        )
    template = ChatTemplate.from_pretrained(str(qwen3_tokenizer_dir()))
    offered = tools if recipe.agent.tools else None
    corpus = [
        template.render(transcript_messages(t, recipe.agent), tools=offered, add_generation_prompt=False)
        for t in transcripts
    ]
    shape = SmallModelShape(**recipe.model.small_vocab.model_dump())
    return str(build_small_vocab_model(corpus, run_dir / "model", shape))


def _schedule(run: Run, transcripts: list[Transcript], tools: list[ToolSchema]) -> RunSummary:
    """Evaluate the start, SFT (and evaluate it), the RL steps, a final evaluation."""
    recipe, state = run.recipe, run.state
    if "before" not in run.evals:
        _evaluate(run, "before")
    if recipe.sft is not None and not state.sft_done:
        _sft(run, transcripts, tools)
        _evaluate(run, "after_sft")
    _rl(run)
    if recipe.schedule.steps and f"step-{state.step}" not in run.evals:
        _evaluate(run, "final")
    return RunSummary(run.run_dir, run.services.store, state.step, dict(run.evals), run.last)


def _rl(run: Run) -> None:
    """The RL steps: generate → score → train → sync weights (then log, and evaluate when due)."""
    recipe, state, algo = run.recipe, run.state, run.recipe.algorithm
    advantages = _advantage_config(algo, recipe.distill)
    max_staleness = algo.max_staleness if algo.mode == "async" else 0
    image_token_id = _image_token_id(state.model) if algo.step_wise else None
    if state.step < recipe.schedule.steps:
        _rl_loss(run)
    if recipe.distill is not None and state.step < recipe.schedule.steps:
        run.hooks.echo(f"starting teacher engine(s): {', '.join(recipe.teachers)}")
        run.services.teacher_engines.start(state.reference or state.model)
        check_teachers(run.services, recipe)
    if recipe.reward is not None and state.step < recipe.schedule.steps:
        _start_judge(run)
    run.hooks.stage("rl", recipe.schedule.steps)
    budget = recipe.schedule.max_minutes
    deadline = None if budget is None else time.monotonic() + 60.0 * budget
    while state.step < recipe.schedule.steps:
        started = time.perf_counter()
        with run.tracing.span("train.step", {"roost.step": state.step + 1}):
            with run.tracing.span("train.collect"):
                run.services.ensure_serving(run.hooks.echo)
                group_ids, rollout = run.rollouts.next_groups()
                batch = _collect(run, group_ids, max_staleness)
                if batch.images:  # a vision-language policy packs its samples' image tokens with them
                    run.trainer.use_images(batch.images)
            if batch.refused:
                run.hooks.echo(
                    f"step {state.step + 1}: {len(batch.refused)} calls left out of training; "
                    f"the first: {batch.refused[0].message()}"
                )
            teaching: dict[str, Any] = {}
            if recipe.distill is not None and batch.groups:
                with run.tracing.span("train.teachers"):
                    teaching = teach(run.services, recipe, batch)
            with run.tracing.span("train.advantages"):
                scored, counts = _score(run, batch, advantages)
            lr = rl_lr(recipe.trainer.lr, recipe.trainer.warmup_steps, state.step)
            if recipe.trainer.warmup_steps:
                run.trainer.set_lr(lr)
            run.hooks.batch(state.step + 1, scored)
            trainer_version = state.weight_version
            # step-wise: the trainer takes a sample per turn; the step's metrics stay per episode path
            trained = per_turn(scored, image_token_id) if algo.step_wise else scored
            stats = _train(run.trainer, trained, algo.updates_per_batch, run.tracing, _policy_trains(algo, state.step))
            state.step += 1
            state.consumed_groups += group_ids
            last = state.step >= recipe.schedule.steps or (deadline is not None and time.monotonic() >= deadline)
            sync_s, sync_bytes = _publish(run, f"step-{state.step}", last) if stats else (0.0, 0)
        run.last = {
            **step_metrics(batch, rollout, stats, counts, scored),
            **teaching,
            "lr": lr,
            "trainer_version": trainer_version,
            "weight_version": state.weight_version,
            "weight_sync_s": sync_s,
            "weight_sync_bytes": sync_bytes,
            "step_s": time.perf_counter() - started,
        }
        run.metrics.log(state.step, run.last, stage="rl")
        run.hooks.advance("rl", state.step, run.last)
        if recipe.eval.every and state.step % recipe.eval.every == 0:
            _evaluate(run, f"step-{state.step}")
        if last:
            if state.step < recipe.schedule.steps:
                run.hooks.echo(f"schedule.max_minutes ({budget}) spent after step {state.step}: the run ends here")
            break


def _image_token_id(model: str) -> int | None:
    """A vision-language model's image placeholder id (step-wise training gives each turn the
    images of its tokens); None for a text model."""
    from roost.rollout.engine.model_spec import ModelSpec

    vision = ModelSpec.from_folder(model).vision
    return None if vision is None else vision.image_token_id


def _start_judge(run: Run) -> None:
    """The reward's judge up (its engine, and its gateway on the run's store), and the rollout
    workers told to reward training episodes by its verdict."""
    import ray

    reward, state = run.recipe.reward, run.state
    run.hooks.echo(f"starting judge engine: {reward.judge}")
    urls = run.services.judges.start(state.reference or state.model, [reward.judge])
    rubric = reward.model_dump(mode="json", exclude={"judge"})
    ray.get([worker.use_judge.remote(reward.judge, urls[reward.judge], rubric) for worker in run.workers])


def _collect(run: Run, group_ids: list[str], max_staleness: int | None) -> Batch:
    version = run.state.weight_version
    return over_gateway(
        run.services,
        lambda gateway: collect_batch(gateway, group_ids, current_version=version, max_staleness=max_staleness),
    )


def _score(run: Run, batch: Batch, advantages: AdvantageConfig) -> tuple[list[Scored], dict[str, int]]:
    """The batch's scored samples: with `algorithm.critic`, GAE over the value head's values of them
    (the trainer's forward, before any update), each sample carrying its values and returns."""
    if not batch.groups:
        return [], {}
    if run.recipe.algorithm.critic is None:
        return compute_advantages(batch.groups, advantages)
    return critic_advantages(batch.groups, advantages, run.trainer.values)


def _policy_trains(algo: AlgorithmConfig, step: int) -> bool:
    """Whether RL step `step` (0-based) updates the policy: not during the critic's warm-up."""
    return algo.critic is None or step >= algo.critic.warmup_steps


def _advantage_config(algo: AlgorithmConfig, distill: DistillConfig | None = None) -> AdvantageConfig:
    """The recipe's estimator; with `distill`, the teacher's reverse KL mixed with it."""
    main = EstimatorConfig(algo.advantage.name, algo.advantage.options)
    if distill is not None:
        options = {"env_estimator": main.name, "env_options": main.options}
        main = EstimatorConfig("distill", {"coef": distill.coef, "env_weight": distill.env_weight, **options})
    return AdvantageConfig(main, {a: EstimatorConfig(e.name, e.options) for a, e in algo.per_agent.items()})


def _train(
    trainer: TrainerGroup, scored: list[Scored], updates: int, tracing: Tracing, update_policy: bool = True
) -> StepStats | None:
    """`updates` optimizer steps on the batch (none on an empty one; the value head's alone
    without `update_policy`): the first's statistics measure the engine/trainer mismatch, the
    last's clip fraction how much is clipped."""
    stats = None
    for _ in range(updates if scored else 0):
        with tracing.span("train.update", {"roost.samples": len(scored)}):
            last = trainer.train_step(scored, tracing.current().traceparent, update_policy)
        stats = (
            last
            if stats is None
            else replace(stats, extra={**stats.extra, "clip_fraction": last.extra["clip_fraction"]})
        )
    return stats


def _rl_loss(run: Run) -> None:
    from .trainer import train_config

    # the KL reference is the policy RL starts from (after SFT, else the recipe's model),
    # kept across resumes
    state = run.state
    state.reference = state.reference or state.hf_weights or state.model
    config = train_config(run.recipe, state.model, reference=state.reference)
    run.trainer.set_loss(config.loss, config.lr, reference=state.reference)


def _sft(run: Run, transcripts: list[Transcript], tools: list[ToolSchema]) -> None:
    from ..sft.data import ChatRenderer
    from ..sft.train import recorded_samples, render_transcripts, run_sft

    sft = run.recipe.sft
    if sft.data.source == "expert":
        samples = render_transcripts(
            ChatRenderer.from_pretrained(run.state.model), transcripts, tools, run.recipe.agent
        )
    else:
        samples = recorded_samples(sft.data)
    run.hooks.stage("sft", sft.steps)

    def logged(step: int, values: dict[str, Any]) -> None:
        run.metrics.log(step, values, stage="sft")
        run.hooks.advance("sft", step, values)

    run_sft(run.trainer, samples, sft, seed=run.recipe.schedule.seed, on_step=logged)
    # RL starts with a new optimizer, as a separate RL run from the SFT checkpoint would: Adam's
    # second moments from the NLL gradients are far larger than policy-gradient ones and would
    # shrink its updates (measured in the demo: clip fraction ~0.000 over 24 RL steps with SFT's
    # moments, 0.07 on the first step with a new optimizer)
    run.trainer.reset_optimizer()
    run.state.sft_done = True
    _checkpoint(run, "sft")


def _publish(run: Run, label: str, last: bool) -> tuple[float, int]:
    """Export the weights, load them into the engine (next version), checkpoint when due (every
    `checkpoint_every` steps and at the `last` step); the seconds the weight update took and the
    bytes the engine loaded. A LoRA run sends the engine the adapter alone, and writes the merged
    weights only into checkpoints."""
    state, schedule = run.state, run.recipe.schedule
    due = last or bool(schedule.checkpoint_every and state.step % schedule.checkpoint_every == 0)
    folder = (
        checkpoint_dir(run.run_dir, label) / "hf" if due else run.run_dir / "weights" / f"v{state.weight_version % 2}"
    )
    adapter = adapter_dir(folder.parent) if due else _adapter_folder(run.run_dir, state.weight_version)
    if due or run.services.adapter is None:
        run.trainer.export(str(folder), str(adapter))
    else:
        run.trainer.save_adapter(str(adapter))
    started = time.perf_counter()
    state.weight_version += 1
    synced = str(folder if run.services.adapter is None else adapter)
    loaded = _sync(run.services, run.hooks, synced, state.weight_version, run.tracing)
    if due:
        _save(run, checkpoint_dir(run.run_dir, label))
    return time.perf_counter() - started, loaded


def _adapter_folder(run_dir: Path, version: int) -> Path:
    """Where the adapter of weight version `version + 1` is written between checkpoints: two
    folders in turn, so the one the engine (or its restart) loads is never half written."""
    return run_dir / "weights" / f"adapter-v{version % 2}"


def _checkpoint(run: Run, label: str) -> None:
    folder = checkpoint_dir(run.run_dir, label)
    run.trainer.export(str(folder / "hf"), str(adapter_dir(folder)))
    run.state.weight_version += 1
    synced = folder / "hf" if run.services.adapter is None else adapter_dir(folder)
    _sync(run.services, run.hooks, str(synced), run.state.weight_version)
    _save(run, folder)


def _save(run: Run, folder: Path) -> None:
    state = run.state
    run.trainer.save(str(folder / "trainer"))
    state.checkpoint = str(folder)
    state.save(run.run_dir)
    prune_checkpoints(run.run_dir, run.recipe.schedule.keep_checkpoints, state.checkpoint, state.reference)
    if run.recipe.schedule.checkpoint_uri is not None:
        from ..checkpoint_mirror import CheckpointMirror

        CheckpointMirror(run.recipe.schedule.checkpoint_uri).push(run.run_dir, state)


def _sync(
    svc: Services, hooks: Hooks, folder: str, version: int, tracing: Tracing | None = None, tries: int = 5
) -> int:
    """Load `folder` into the engine as `version` (the gateway paused around it): full weights, or
    in a LoRA run the adapter under `svc.adapter`; read by the engine, or with `weight_sync: http`
    read here and sent to it. An engine that died is waited for, and the
    update retried once it is back. Returns the bytes the engine loaded."""
    from ..weight_sync import sync_adapter, sync_weights

    common = dict(
        weight_version=str(version),
        engine_key=svc.engine_key,
        gateway_url=svc.gateway_url,
        admin_key=svc.admin_key,
        tracing=tracing,
        transport=svc.weight_sync,
    )
    for attempt in range(tries):
        svc.engines.ensure_serving(hooks.echo)
        try:
            if svc.adapter is None:
                result = asyncio.run(sync_weights(svc.engine_url, folder, **common))
            else:
                result = asyncio.run(sync_adapter(svc.engine_url, folder, svc.adapter, **common))
            break
        except Exception as exc:  # noqa: BLE001 - an engine mid-restart; retried, then raised
            if attempt + 1 == tries:
                raise
            hooks.echo(f"weight update to version {version} failed ({exc}); retrying")
            time.sleep(2.0 * (attempt + 1))
    svc.engines.loaded(folder, version, svc.adapter)
    return result.bytes


def _evaluate(run: Run, label: str) -> None:
    ev = run.recipe.eval
    if ev.split is None:
        return
    episodes = ev.before_episodes if label == "before" and ev.before_episodes else ev.episodes
    run.hooks.stage(f"eval {label}", episodes)
    results = run.rollouts.evaluate(
        label, _tasks(run.services, ev.split, run.recipe.env.name), episodes, {**run.recipe.agent.args, **ev.args}
    )
    scored = [r for r in results if r.scored]
    rewards = [r.reward for r in scored if r.reward is not None]
    summary = {
        "split": ev.split,
        "episodes": len(results),
        "scored": len(scored),
        "success_rate": sum(r.success for r in scored) / len(scored) if scored else None,
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "left_out": dict(Counter(r.status.value for r in results if not r.scored)),
        "groups": f"{EVAL_PREFIX}-{label}-*",
        # kept so two rows compare game by game (roost.trainer.eval_compare)
        "per_task": per_task_success((r.task_id, r.success) for r in scored),
    }
    run.evals[label] = summary
    save_evals(run.run_dir, run.evals)
    run.metrics.log(
        run.state.step, {k: v for k, v in summary.items() if k not in ("left_out", "per_task")}, stage=f"eval/{label}"
    )
    run.hooks.advance(f"eval {label}", episodes, summary)


@contextlib.contextmanager
def _handles(
    recipe: Recipe,
    run_dir: Path,
    state: RunState,
    svc: Services,
    where: Placement,
    metrics: MetricsLogger,
    hooks: Hooks,
) -> Iterator[Run]:
    """The trainer ranks (from the newest checkpoint, synced into the engine), the rollout
    workers and the groups they play; stopped on the way out."""
    import ray

    from .rollout_workers import RolloutWorker
    from .rollouts import task_pool, unfinished_backlog
    from .starters import actor_options
    from .trainer import TrainerGroup

    if recipe.trainer.lora is None:
        start, adapter = state.hf_weights or state.model, None
    else:  # the frozen base is the starting model; what trained is the checkpoint's adapter
        start, adapter = state.model, str(adapter_dir(state.checkpoint)) if state.checkpoint else None
    trainer = TrainerGroup.start(recipe, start, adapter=adapter, scheduling=where.trainer)
    r = recipe.rollout
    # on the loop's node: a node that leaves takes its servers' episodes, not the loop's workers
    worker = ray.remote(RolloutWorker).options(num_cpus=0, **where.local(), **actor_options(recipe))
    workers = [
        worker.remote(
            svc.envs.url_for(i),
            svc.gateway_url,
            recipe.agent.model_dump(),
            concurrency=max(1, r.concurrency // r.workers),
            follow_admission=r.follow_admission,
            admin_key=svc.admin_key,
            invalid_action_penalty=r.invalid_action_penalty,
            model=svc.adapter,
        )
        for i in range(r.workers)
    ]
    svc.envs.assign(workers)
    tracing = Tracing.start("trainer", flag=recipe.trace)
    try:
        if state.checkpoint:
            trainer.load(str(Path(state.checkpoint) / "trainer"))
            _sync(svc, hooks, adapter or state.hf_weights, state.weight_version)
        elif svc.adapter is not None:  # the rollouts name the adapter: serve the fresh one (the base model's policy)
            fresh = trainer.save_adapter(str(_adapter_folder(run_dir, state.weight_version + 1)))
            _sync(svc, hooks, fresh, state.weight_version)
        tasks = task_pool(_tasks(svc, recipe.env.split, recipe.env.name), recipe.env.max_tasks, recipe.schedule.seed)
        consumed, size = set(state.consumed_groups), recipe.rollout.group_size
        backlog = over_gateway(svc, lambda gateway: unfinished_backlog(gateway, consumed, size))
        yield Run(
            recipe,
            run_dir,
            state,
            svc,
            trainer,
            workers,
            Rollouts(recipe, workers, tasks, state, backlog),
            metrics,
            hooks,
            load_evals(run_dir),
            tracing=tracing,
        )
    finally:
        for handle in workers:
            ray.kill(handle)
        trainer.shutdown()
        tracing.shutdown()


def over_gateway(svc: Services, call: Callable[[GatewayClient], Awaitable[T]]) -> T:
    """`call` on a control-plane client of the run's gateway, from the loop's synchronous code:
    the trainer reads what the gateway recorded over its API, never from the store file."""
    from roost.rollout.gateway.control.client import GatewayClient

    async def run() -> T:
        async with GatewayClient(svc.gateway_url, admin_key=svc.admin_key) as gateway:
            return await call(gateway)

    return asyncio.run(run())


def _tasks(svc: Services, split: str, env_name: str) -> list[Task]:
    from roost.envs.client import EnvClient

    async def fetch() -> list[Task]:
        async with EnvClient(svc.env_url) as client:
            return await client.tasks(split)

    tasks = asyncio.run(fetch())
    if not tasks:
        raise ValueError(f"split {split!r} of env {env_name!r} has no tasks; set env.split")
    return tasks


def rl_lr(lr: float, warmup_steps: int, step: int) -> float:
    """The learning rate of RL step `step` (0-based): a linear warmup, then `lr`."""
    return lr * (step + 1) / warmup_steps if step < warmup_steps else lr


def step_metrics(
    batch: Batch, rollout: RolloutInfo, stats: StepStats | None, counts: dict[str, int], scored: list[Scored]
) -> dict[str, Any]:
    """One RL step's numbers: rewards, what was left out and why, and the trainer's statistics."""
    results = rollout.results
    ok = [r for r in results if r.scored]
    values: dict[str, Any] = {
        "reward": sum(batch.rewards) / len(batch.rewards) if batch.rewards else None,
        "success": sum(r.success for r in ok) / len(ok) if ok else None,
        "invalid_actions": sum(r.invalid_actions for r in ok) / len(ok) if ok else None,
        "episodes": len(results),
        "recovered_groups": rollout.recovered,
        **{s.value: batch.counts.get(s.value, 0) for s in UNSCORED},  # infra_error, timeout, agent_error
        "unfinished": batch.counts.get("open", 0),
        "no_reward": batch.counts.get("no_reward", 0),
        "dropped_stale": batch.counts.get("dropped_stale", 0),
        "dropped_groups": counts.get("dropped_groups", 0),
        "untrainable_calls": batch.counts.get("untrainable_calls", 0),
        "staleness": sum(batch.staleness) / len(batch.staleness) if batch.staleness else 0.0,
        "staleness_max": max(batch.staleness, default=0),
        "oldest_version": min((v[0] for v in batch.versions if v), default=None),
        "mixed_version_samples": sum(len(v) > 1 for v in batch.versions),
        "rollout_s": rollout.seconds,
        "trained_samples": len(scored),
        "trained_images": len({sha for s in scored for sha in s.sample.images}),
    }
    sampled = sum(s.sample.num_sampled for s in scored)
    values["rollout_tokens_per_s"] = sampled / rollout.seconds if rollout.seconds else None
    if stats is None:
        values["updated"] = False
        return values
    extra = stats.extra
    tokens = max(extra.get("tokens", 0.0), 1.0)
    flat = sum(len(s.sample.tokens) for s in scored)
    values.update(
        updated=stats.updated,
        trainer_samples=stats.samples,
        loss=stats.loss,
        grad_norm=stats.grad_norm,
        kl=extra.get("kl", 0.0) / tokens,
        clip_fraction=extra.get("clip_fraction", 0.0) / tokens,
        entropy=extra.get("neg_logprob", 0.0) / tokens,
        tis_mean=extra.get("tis_mean", 0.0) / tokens,
        masked_fraction=extra.get("masked", 0.0) / tokens,
        mismatch_kl=extra.get("mismatch_k1", 0.0) / tokens,
        mismatch_k3=extra.get("mismatch_k3", 0.0) / tokens,
        **dict(zip(("ratio_p05", "ratio_p50", "ratio_p95"), ratio_quantiles(extra))),
        logprob_mismatch=extra.get("rollout_abs_diff", 0.0) / tokens,
        allowed_mass=extra.get("allowed_mass", tokens) / tokens,
        grammar_replay_failures=int(extra.get("grammar_replay_failures", 0)),
        replayed_tokens=int(extra.get("replayed_tokens", 0)),
        tree_saving=1 - stats.tree_tokens / flat if flat else 0.0,
        train_tokens_per_s=stats.tree_tokens / max(stats.seconds, 1e-9),
        train_s=stats.seconds,
    )
    if "value_tokens" in extra:  # the critic trained: its loss (a token mean) and where it stands
        value_tokens = max(extra["value_tokens"], 1.0)
        values.update(
            value_loss=extra["value_loss"],
            value_clip_fraction=extra["value_clipped"] / value_tokens,
            value_mean=extra["values"] / value_tokens,
            return_mean=extra["returns"] / value_tokens,
        )
    return values
