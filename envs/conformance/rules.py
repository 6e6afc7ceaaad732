"""The rules of the env protocol (`roost.envs.protocol`), one function each; the docstring is the rule.

A rule returns a short note on what it saw, raises `RuleFailed` saying what is wrong and
what to change, or `RuleSkipped` when it cannot run here. They run in this order on one
env, so later rules may use what earlier ones found (the task, the probe's baseline).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from roost.envs.conformance.processes import processes_left
from roost.envs.conformance.shapes import check_reset, check_step
from roost.envs.conformance.tool_schemas import tool_problems
from roost.envs.conformance.trial import RuleFailed, RuleSkipped, Trial, outcome_of, show
from roost.envs.errors import EpisodeFinishedError, InvalidActionError, UnknownTaskError
from roost.envs.protocol import Action, EnvInfo, Reset, Task, TextAction, ToolCall

Rule = Callable[[Trial], Awaitable[str]]
NO_SUCH_TOOL = "roost_check_no_such_tool"
NO_SUCH_TASK = "roost-check-no-such-task"


async def info_describes_the_env(trial: Trial) -> str:
    """`info` is an `EnvInfo` with a name, a version and at least one split; the env declares `info_keys`."""
    info = trial.env.info
    if not isinstance(info, EnvInfo):
        raise RuleFailed(f"info must be a roost.envs.protocol.EnvInfo, got {type(info).__name__}")
    if not (isinstance(info.name, str) and info.name and isinstance(info.version, str)):
        raise RuleFailed(f"info needs a non-empty name and a version string, got {info.name!r}, {info.version!r}")
    if not info.splits or not all(isinstance(s, str) for s in info.splits):
        raise RuleFailed(f"info.splits must name at least one split, got {info.splits!r}")
    keys = getattr(trial.env, "info_keys", None)
    if not isinstance(keys, frozenset) or not all(isinstance(k, str) for k in keys):
        raise RuleFailed(
            f"the env must declare info_keys, a frozenset of the keys its info dicts hold, got {keys!r:.100} "
            f"(e.g. `info_keys = frozenset({{'steps'}})` on {type(trial.env).__name__})"
        )
    return f"{info.name} {info.version}, splits {', '.join(info.splits)}"


async def tools_are_openai_functions(trial: Trial) -> str:
    """Every tool in `info.tools` is an OpenAI function tool, so a harness can pass them on as they are."""
    tools = trial.env.info.tools
    if problems := tool_problems(tools):
        raise RuleFailed("; ".join(problems))
    return f"{len(tools)} tools" + (f": {', '.join(t['function']['name'] for t in tools)}" if tools else "")


async def tasks_are_listed(trial: Trial) -> str:
    """`tasks(split)` lists `Task`s of that split with distinct ids; the check's split has one."""
    trial.split = trial.config.split or trial.env.info.splits[0]
    tasks = await trial.env.tasks(trial.split)
    if not isinstance(tasks, list) or not all(isinstance(t, Task) for t in tasks):
        raise RuleFailed(f"tasks({trial.split!r}) must return a list of roost.envs.protocol.Task")
    if wrong := [t.id for t in tasks if t.split != trial.split]:
        raise RuleFailed(f"tasks({trial.split!r}) returned tasks of another split: {wrong[:5]}")
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        raise RuleFailed(f"tasks({trial.split!r}) repeats task ids: {sorted({i for i in ids if ids.count(i) > 1})[:5]}")
    wanted = trial.config.task_id or (ids[0] if ids else None)
    if wanted not in ids:
        raise RuleFailed(
            f"split {trial.split!r} has no task {wanted!r} to check with; give one that exists "
            "(CheckConfig.task_id, `--task`) or a split with tasks (`--split`)"
        )
    trial.task = tasks[ids.index(wanted)]
    return f"{len(tasks)} tasks in {trial.split!r}; checking with {wanted!r}"


async def unknown_tasks_are_refused(trial: Trial) -> str:
    """`reset` of a task id the split does not hold raises `UnknownTaskError` (the server's 404)."""
    trial.need_task()
    try:
        await trial.env.reset(task_id=NO_SUCH_TASK, split=trial.split)
    except UnknownTaskError:
        return "UnknownTaskError"
    raise RuleFailed(f"reset(task_id={NO_SUCH_TASK!r}) started an episode; raise UnknownTaskError instead")


async def reset_returns_an_observation(trial: Trial) -> str:
    """`reset(task_id=...)` returns a `Reset` of that task: an `Observation`, valid tools and an info dict."""
    reset = await trial.reset()
    check_reset(reset, trial.need_task().id)
    return f"{len(reset.observation.text)} characters of text" + (", an image" if reset.observation.image else "")


async def seeds_choose_the_same_task(trial: Trial) -> str:
    """`reset(seed=s, split=...)` starts the same task of that split for the same seed."""
    chosen = []
    for _ in range(2):
        reset = await trial.env.reset(seed=7, split=trial.split)
        check_reset(reset, None)
        chosen.append(reset.task_id)
    if chosen[0] != chosen[1]:
        raise RuleFailed(f"seed 7 started {chosen[0]!r}, then {chosen[1]!r}; choose the task with random.Random(seed)")
    listed = {t.id for t in await trial.env.tasks(trial.split)}
    if chosen[0] not in listed:
        raise RuleFailed(f"seed 7 started {chosen[0]!r}, which tasks({trial.split!r}) does not list")
    return f"seed 7 → {chosen[0]!r}"


async def steps_return_a_step(trial: Trial) -> str:
    """`step(action)` returns a `Step`: an `Observation`, a finite reward, `terminated` and `truncated` as bools."""
    probe = trial.need_probe()
    await trial.reset()
    step = await trial.step(probe)
    check_step(step)
    trial.baseline = outcome_of(step)
    return f"reward {step.reward}, terminated {step.terminated}, truncated {step.truncated}"


async def reset_again_starts_fresh(trial: Trial) -> str:
    """`reset` may be called at any time, mid-episode included, and starts a fresh episode of the task."""
    first = await trial.reset()
    if trial.config.probe is not None:
        await trial.step(trial.config.probe)
    again = await trial.reset()
    check_reset(again, trial.need_task().id)
    if again.observation.text != first.observation.text:
        raise RuleFailed(
            "a second reset of the same task gave another observation: "
            f"{_diff(first.observation.text, again.observation.text)}"
        )
    probe = trial.config.probe
    if probe is None or trial.baseline is None:
        return "same first observation (no probe answer to compare the next step with)"
    after = outcome_of(await trial.step(probe))
    if after != trial.baseline:
        raise RuleFailed(
            f"the probe after a second reset answered otherwise than after the first: {_outcome_diff(trial.baseline, after)}"
        )
    return "same first observation, same answer to the probe"


async def invalid_actions_are_refused(trial: Trial) -> str:
    """A call of an unknown tool, or malformed arguments of a known one, raises `InvalidActionError`."""
    await trial.reset()
    refused = [await _refused(trial, action) for action in _invalid_actions(trial)]
    return "; ".join(refused)


async def refusals_leave_the_episode_unchanged(trial: Trial) -> str:
    """After an `InvalidActionError` the episode is as it was: the probe then returns what it returns after reset."""
    probe = trial.need_probe()
    if trial.baseline is None:
        raise RuleSkipped("needs the probe's answer after reset (steps_return_a_step did not pass)")
    await trial.reset()
    for action in _invalid_actions(trial):
        await _refused(trial, action)
    after = outcome_of(await trial.step(probe))
    if after != trial.baseline:
        raise RuleFailed(
            f"after refused actions the probe answered otherwise than right after reset: {_outcome_diff(trial.baseline, after)}. "
            "Check an action completely before changing any state"
        )
    return "the probe answered as right after reset"


async def steps_without_an_episode_are_refused(trial: Trial) -> str:
    """`step` before any `reset` raises `EpisodeFinishedError` ("call reset first")."""
    fresh = trial.factory()
    try:
        await fresh.step(trial.config.probe or TextAction("look"))
    except EpisodeFinishedError:
        return "EpisodeFinishedError"
    finally:
        await fresh.close()
    raise RuleFailed("step before reset did not raise EpisodeFinishedError")


async def finished_episodes_refuse_steps(trial: Trial) -> str:
    """Once a step returns `terminated` or `truncated`, a further `step` raises `EpisodeFinishedError`."""
    config = trial.config
    if not config.finish and not config.finish_by_expert_plan:
        raise RuleSkipped("no way to finish an episode configured (CheckConfig.finish or finish_by_expert_plan)")
    reset = await trial.reset(**({"expert_plan": True} if config.finish_by_expert_plan else {}))
    step, last = await _play_to_the_end(trial, reset)
    try:
        await trial.env.step(last)
    except EpisodeFinishedError:
        return f"ended after {step} steps; the next step raised EpisodeFinishedError"
    raise RuleFailed(f"the episode ended after {step} steps, but another step was accepted; raise EpisodeFinishedError")


async def info_keys_are_declared(trial: Trial) -> str:
    """Every key of every `info` that `reset` and `step` returned is one the env declares in `info_keys`."""
    declared = set(getattr(trial.env, "info_keys", None) or ())
    undeclared: dict[str, str] = {}
    for where, info in trial.infos:
        if not isinstance(info, dict):
            raise RuleFailed(f"the info of {where} is a {type(info).__name__}, not a dict")
        for key in set(info) - declared:
            undeclared.setdefault(key, where)
    if undeclared:
        seen = ", ".join(f"{k!r} (from {w})" for k, w in sorted(undeclared.items()))
        raise RuleFailed(f"info keys not in {type(trial.env).__name__}.info_keys: {seen}; declare them")
    return f"{len({k for _, i in trial.infos for k in i})} keys seen in {len(trial.infos)} infos, all declared"


async def close_frees_the_env(trial: Trial) -> str:
    """`close` frees what the env holds, may be called twice, and leaves no process of the env running."""
    await trial.env.close()
    await trial.env.close()
    left = await processes_left(trial.processes_before)
    if left:
        raise RuleFailed(
            f"after close, processes the env started still run: {', '.join(left[:5])}; "
            "stop them in close (or hold them in the factory's shared state)"
        )
    return "closed twice; no process left behind"


RULES: tuple[Rule, ...] = (
    info_describes_the_env,
    tools_are_openai_functions,
    tasks_are_listed,
    unknown_tasks_are_refused,
    reset_returns_an_observation,
    seeds_choose_the_same_task,
    steps_return_a_step,
    reset_again_starts_fresh,
    invalid_actions_are_refused,
    refusals_leave_the_episode_unchanged,
    steps_without_an_episode_are_refused,
    finished_episodes_refuse_steps,
    info_keys_are_declared,
    close_frees_the_env,
)


def _invalid_actions(trial: Trial) -> list[Action]:
    actions: list[Action] = [ToolCall(NO_SUCH_TOOL, {})]
    if trial.env.info.tools:
        actions.append(ToolCall(trial.env.info.tools[0]["function"]["name"], "{not json"))
    return actions


async def _refused(trial: Trial, action: Action) -> str:
    try:
        await trial.step(action)
    except InvalidActionError:
        return f"{show(action)} refused"
    raise RuleFailed(f"step({show(action)}) was accepted; raise InvalidActionError for it (the episode unchanged)")


async def _play_to_the_end(trial: Trial, reset: Reset) -> tuple[int, Action]:
    """Play the configured finish (or the expert's plan) until a step ends the episode."""
    config, info = trial.config, reset.info
    for turn in range(config.max_finish_steps):
        if config.finish_by_expert_plan:
            plan = info.get("expert_plan")
            if not plan:
                raise RuleFailed(f"no info['expert_plan'] at step {turn} though reset asked for one")
            action: Action = TextAction(plan[0])
        elif turn < len(config.finish):
            action = config.finish[turn]
        else:
            raise RuleFailed(f"the {len(config.finish)} finishing actions did not end the episode")
        step = await trial.step(action)
        check_step(step)
        if step.terminated or step.truncated:
            return turn + 1, action
        info = step.info
    raise RuleFailed(f"the episode had not ended after {config.max_finish_steps} steps")


def _outcome_diff(before: tuple[Any, ...], after: tuple[Any, ...]) -> str:
    """Name the first field of two `outcome_of` tuples that differs, and where."""
    for field, a, b in zip(("observation text", "reward", "terminated", "truncated"), before, after):
        if a != b:
            return (
                f"{field}: {_diff(a, b)}" if isinstance(a, str) and isinstance(b, str) else f"{field}: {a!r} vs {b!r}"
            )
    return f"{before!r:.200} vs {after!r:.200}"


def _diff(a: str, b: str) -> str:
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"they differ from character {at}: {a[at : at + 60]!r} vs {b[at : at + 60]!r}"
