"""Which tasks of a folder run here: `roost envs osworld survey PATH`.

Each task is first checked without a desktop, in this order, and the first reason found is its
group: a task for OSWorld's Windows VM (under `examples/Windows/`), an empty `func` (an
unfinished task), an application that is not installed here, a config step that cannot run
here (an account, the internet), a `download` or `cloud_file` whose file is not in the cache
folder, a tab opened on a live website, a metric or getter this install cannot import. The
rest run a do-nothing episode through the env (reset, `DONE`, evaluate) on roost's local
desktops: it proves that config and evaluation run (the reward is 0 mostly). Each ends `ran`,
`unsupported` (found at reset or evaluation) or `faulted` (an env fault, a timeout, any other
error), with the message kept.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from roost.envs.protocol import TextAction

from .config_steps import unsupported_step
from .errors import TaskFormatError, UnsupportedTask
from .evaluator import unsupported_reason
from .file_cache import FileCache
from .task_set import TaskSet
from .tasks import ConfigStep, OSWorldTask, TaskEntry

APPS = {
    "gimp": ("gimp",),
    "vlc": ("vlc",),
    "thunderbird": ("thunderbird",),
    "vs_code": ("code",),
    "vscode": ("code",),
    "chrome": ("chromium", "google-chrome"),
    "libreoffice_calc": ("soffice",),
    "libreoffice_writer": ("soffice",),
    "libreoffice_impress": ("soffice",),
}
"""OSWorld's `related_apps` names → the executables that provide them (any one is enough)."""
LOCAL_HOSTS = ("localhost", "127.0.0.1", "")


@dataclass
class DomainSurvey:
    """One domain's counts: loaded, unsupported by grouped reason, ran, faulted."""

    loaded: int = 0
    unsupported: Counter[str] = field(default_factory=Counter)
    runnable: int = 0
    """Passed the checks without a desktop (what `run` then tries)."""
    ran: int = 0
    rewarded: int = 0
    """Of those that ran, how many scored above 0 (a do-nothing episode: infeasible tasks, mostly)."""
    faulted: list[str] = field(default_factory=list)
    """`<task>: <message>` for each task whose episode broke."""

    def as_json(self) -> dict[str, Any]:
        return {
            "loaded": self.loaded,
            "unsupported": dict(self.unsupported.most_common()),
            "runnable": self.runnable,
            "ran": self.ran,
            "rewarded": self.rewarded,
            "faulted": len(self.faulted),
            "faults": self.faulted,
        }


def domain_of(entry: TaskEntry) -> str:
    """The task's domain, `Windows/<app>` for the tasks of OSWorld's Windows VM."""
    parent = entry.path.parent
    return f"Windows/{entry.domain}" if parent.parent.name == "Windows" else entry.domain or "-"


def static_reason(entry: TaskEntry, cache: FileCache) -> str | None:
    """The grouped reason the task cannot run here (found without a desktop), or None.
    Imports metric and getter modules (blocking)."""
    task = entry.task
    if entry.path.parent.parent.name == "Windows":
        return "a task for OSWorld's Windows VM"
    funcs = task.evaluator.func if isinstance(task.evaluator.func, list) else [task.evaluator.func]
    if "" in funcs:
        return "no evaluator (an empty func: an unfinished task)"
    missing = _missing_apps(task)
    if missing:
        return f"application not installed: {', '.join(missing)}"
    steps = [*task.config, *task.evaluator.postconfig]
    for step in steps:
        if unsupported_step(step):
            return f"config step {step.type!r} (an account or the internet)"
    if not _files_cached(task, steps, cache):
        return "a downloaded file is not in the cache folder"
    if any(_live_tabs(step) for step in steps):
        return "opens a live website"
    reason = unsupported_reason(task)
    return f"metric or getter unavailable: {reason}" if reason else None


def _missing_apps(task: OSWorldTask) -> list[str]:
    return sorted(
        {
            app.replace("vscode", "vs_code")
            for app in task.related_apps
            if app in APPS and not any(shutil.which(exe) for exe in APPS[app])
        }
    )


def _files_cached(task: OSWorldTask, steps: list[ConfigStep], cache: FileCache) -> bool:
    try:
        for step in steps:
            if step.type == "download":
                for f in step.parameters.get("files", []):
                    cache.find(task.id, f["url"], os.path.basename(f["path"]))
        for check in task.evaluator.checks():
            for getter in (check.result, check.expected):
                if getter and getter.get("type") == "cloud_file":
                    multi = getter.get("multi", False)
                    urls, dests = (getter["path"], getter["dest"]) if multi else ([getter["path"]], [getter["dest"]])
                    for url, dest in zip(urls, dests):
                        cache.find(task.id, url, os.path.basename(dest))
    except UnsupportedTask:
        return False
    return True


def _live_tabs(step: ConfigStep) -> bool:
    if step.type != "chrome_open_tabs":
        return False
    return any(
        urlparse(url).scheme in ("http", "https") and urlparse(url).hostname not in LOCAL_HOSTS
        for url in step.parameters.get("urls_to_open", [])
    )


async def survey(
    source: Path,
    *,
    cache_dir: Path | None = None,
    run: bool = True,
    timeout_s: float = 120.0,
    domains: set[str] | None = None,
    split: str = "all",
) -> dict[str, DomainSurvey]:
    """Per domain: loaded, unsupported by reason, ran and faulted (`run`: do-nothing episodes for
    the rest; else they count as neither). `domains`: survey only these; `split`: only its tasks
    (`test_all`: those OSWorld's index lists)."""
    from .env import make_factory

    task_set = TaskSet.load(source)
    if split not in task_set.splits:
        raise TaskFormatError(f"{source}: no split {split!r}; its splits: {', '.join(task_set.splits)}")
    folder = source if source.is_dir() else source.parent
    cache = FileCache(cache_dir or folder / "cache")
    out: dict[str, DomainSurvey] = {}
    runnable: list[tuple[str, str]] = []
    for key in task_set.splits[split]:
        entry = task_set.entries[key]
        domain = domain_of(entry)
        if domains is not None and domain not in domains:
            continue
        counts = out.setdefault(domain, DomainSurvey())
        counts.loaded += 1
        reason = await asyncio.to_thread(static_reason, entry, cache)
        if reason:
            counts.unsupported[reason] += 1
        else:
            counts.runnable += 1
            runnable.append((domain, key))
    if run and runnable:
        factory = make_factory(tasks=str(source), cache_dir=str(cache.root), max_steps=1, settle_s=0.2)
        for domain, key in runnable:
            await _episode(factory(), key, out[domain], timeout_s)
    return dict(sorted(out.items()))


async def _episode(env: Any, key: str, counts: DomainSurvey, timeout_s: float) -> None:
    try:
        reward = await asyncio.wait_for(_do_nothing(env, key), timeout_s)
    except UnsupportedTask as exc:
        counts.unsupported[f"found at reset or evaluation: {_short(exc.reason)}"] += 1
        return
    except Exception as exc:  # an env fault, a timeout, a bug: all count as faults, with the message
        counts.faulted.append(f"{key}: {type(exc).__name__}: {exc}"[:500])
        return
    finally:
        await env.close()
    counts.ran += 1
    counts.rewarded += reward > 0


async def _do_nothing(env: Any, key: str) -> float:
    await env.reset(task_id=key)
    step = await env.step(TextAction("DONE"))
    return float(step.reward)


def _short(reason: str) -> str:
    # The missing file's URL and paths differ per task; the reason is the same.
    return "a file is not in the cache folder" if "is not in the cache folder" in reason else reason[:160]
