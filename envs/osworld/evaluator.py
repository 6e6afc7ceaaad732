"""Score an OSWorld task with OSWorld's own getters and metric functions, as its DesktopEnv does.

`evaluate` runs the evaluator's `postconfig`, then each metric on what its getters fetch. The
getters are OSWorld's (`desktop_env.evaluators.getters`), given `GetterEnv`: the attributes of
OSWorld's DesktopEnv they read, with OSWorld's own `PythonController` pointed at the desktop's
control server. Two getters are roost's, because their files come from the cache folder instead
of the internet: `cache_file` and `cloud_file`. Scoring follows `DesktopEnv.evaluate`:
`infeasible` is 1 exactly when the agent's last action was FAIL; otherwise FAIL scores 0; one
metric scores its value; a list combines with `conj` ("and": 0 as soon as one is 0, else the
mean; "or": 1 as soon as one is 1, else the max). A getter's FileNotFoundError scores that metric 0.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Any

import requests

from roost.envs.osworld.config_steps import TaskContext, run_steps, unsupported_step
from roost.envs.osworld.errors import EvaluationError, UnsupportedTask
from roost.envs.osworld.osworld_package import UnavailableFunction, import_module, load_function
from roost.envs.osworld.tasks import Check, GetterConfig, OSWorldTask

NETWORK_GETTERS = {
    "googledrive_file": "it reads a Google Drive account",
    "info_from_website": "it browses a live website",
    "gotoRecreationPage_and_get_html_content": "it browses a live website",
}
_ABSENT = object()


@dataclass
class GetterEnv:
    """The `env` argument OSWorld's getters take: the DesktopEnv attributes they read."""

    vm_ip: str
    server_port: int
    chromium_port: int
    cache_dir: str
    """Where getters save what they fetch (this episode's work folder)."""
    controller: Any
    """OSWorld's PythonController on the desktop's control server."""
    vlc_port: int = 8080
    vm_platform: str = "Linux"
    current_use_proxy: bool = False

    @classmethod
    def for_task(cls, ctx: TaskContext) -> GetterEnv:
        controller_cls = import_module("desktop_env.controllers.python").PythonController
        controller = controller_cls(vm_ip=ctx.host, server_port=ctx.server_port)
        controller.retry_interval = 1  # OSWorld waits 5 s between retries, made for booting VMs
        return cls(ctx.host, ctx.server_port, ctx.chromium_port, str(ctx.work_dir), controller)


@dataclass(frozen=True)
class MetricScore:
    """One metric's value (as a float) in an evaluation."""

    func: str
    score: float


@dataclass(frozen=True)
class Evaluation:
    """A task's reward and the metric scores it came from (in the order evaluated)."""

    reward: float
    scores: list[MetricScore] = field(default_factory=list)


def unsupported_reason(task: OSWorldTask) -> str | None:
    """Why the task cannot run here, or None. Imports the metric and getter modules it uses
    (blocking: call it through asyncio.to_thread on an event loop).
    """
    for step in [*task.config, *task.evaluator.postconfig]:
        reason = unsupported_step(step)
        if reason:
            return reason
    if task.infeasible:
        return None
    for check in task.evaluator.checks():
        try:
            load_function("metrics", check.func)
            for getter in (check.result, check.expected):
                if getter:
                    _getter_function(getter["type"])
        except (UnavailableFunction, UnsupportedTask) as exc:
            return getattr(exc, "reason", str(exc))
    return None


async def evaluate(task: OSWorldTask, ctx: TaskContext, *, agent_failed: bool) -> Evaluation:
    """The task's reward. `agent_failed`: the agent's last action was FAIL.

    UnsupportedTask: a file or function the evaluator needs is not here. EvaluationError: a getter
    or metric broke (not the agent's doing). DesktopError: the desktop is gone.
    """
    await run_steps(task.evaluator.postconfig, ctx)
    if task.infeasible:
        return Evaluation(1.0 if agent_failed else 0.0)
    if agent_failed:
        return Evaluation(0.0)
    env = GetterEnv.for_task(ctx)
    scores: list[MetricScore] = []
    for check in task.evaluator.checks():
        score = await _score(task, check, env, ctx)
        scores.append(MetricScore(check.func, score))
        if task.evaluator.is_list and task.evaluator.conj == "and" and score == 0.0:
            return Evaluation(0.0, scores)
        if task.evaluator.is_list and task.evaluator.conj == "or" and score == 1.0:
            return Evaluation(1.0, scores)
    values = [s.score for s in scores]
    if not task.evaluator.is_list:
        return Evaluation(values[0], scores)
    reward = sum(values) / len(values) if task.evaluator.conj == "and" else max(values)
    return Evaluation(reward, scores)


async def _score(task: OSWorldTask, check: Check, env: GetterEnv, ctx: TaskContext) -> float:
    try:
        metric = load_function("metrics", check.func)
        try:
            result = await _get(check.result, env, ctx)
        except FileNotFoundError:
            return 0.0  # as OSWorld: the file the agent should have made is not there
        expected = await _get(check.expected, env, ctx) if check.expected else _ABSENT
        args = (result,) if expected is _ABSENT else (result, expected)
        return float(await asyncio.to_thread(metric, *args, **check.options))
    except UnavailableFunction as exc:
        raise UnsupportedTask(task.id, str(exc)) from exc
    except UnsupportedTask:
        raise
    except requests.ConnectionError as exc:
        raise EvaluationError(
            f"task {task.id}: the desktop's control server at {ctx.host}:{ctx.server_port} "
            f"did not answer during evaluation ({exc})"
        ) from exc
    except Exception as exc:
        raise EvaluationError(
            f"task {task.id}: metric {check.func} (result {check.result}, expected "
            f"{check.expected}) failed: {type(exc).__name__}: {exc}"
        ) from exc


async def _get(config: GetterConfig | None, env: GetterEnv, ctx: TaskContext) -> Any:
    """What a getter config yields (None for no getter, as OSWorld's metrics then receive)."""
    if not config:
        return None
    getter = _getter_function(config["type"])
    if getter is _cache_file or getter is _cloud_file:
        return await asyncio.to_thread(getter, ctx, config)
    return await asyncio.to_thread(getter, env, config)


def _getter_function(type_: str) -> Any:
    if type_ in NETWORK_GETTERS:
        raise UnavailableFunction(f"its getter {type_!r} cannot run here: {NETWORK_GETTERS[type_]}")
    own = {"cache_file": _cache_file, "cloud_file": _cloud_file}
    return own.get(type_) or load_function("getters", f"get_{type_}")


def _cache_file(ctx: TaskContext, config: GetterConfig) -> str:
    """OSWorld's `get_cache_file`: a file by its path relative to the task's cache folder."""
    return str(ctx.cache.relative(ctx.task_id, config["path"]))


def _cloud_file(ctx: TaskContext, config: GetterConfig) -> str | list[str]:
    """OSWorld's `get_cloud_file`, from the cache folder instead of the URL.

    Same config (`path`: URL(s), `dest`: file name(s), `multi`, `gives`) and same answer: one
    path, or a list when `gives` picks several.
    """
    multi = config.get("multi", False)
    urls = config["path"] if multi else [config["path"]]
    dests = config["dest"] if multi else [config["dest"]]
    gives = set(config.get("gives", [0]))
    paths = [
        str(ctx.cache.find(ctx.task_id, url, os.path.basename(dest)))
        for i, (url, dest) in enumerate(zip(urls, dests))
        if i in gives
    ]
    return paths[0] if len(paths) == 1 else paths
