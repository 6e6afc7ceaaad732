"""Make SWE tasks from the pinned projects: bugs by mutation, kept when the project's tests catch them.

Per project: the sdist as a clean git repository; its tests run once (a project whose tests fail
before any bug is dropped); then candidates in the seed's order, each applied in a working copy
and the tests run: kept when some tests that passed now fail (FAIL_TO_PASS) and some still pass
(PASS_TO_PASS), else dropped with the reason. Candidates are judged in fixed-size batches and
kept in candidate order, so the tasks depend on the seed, not on the number of workers (only
how many extra candidates get tried does).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..fixtures import git
from ..task import SdistSource, SWETask
from .mutations import Mutation, candidates, source_files
from .projects import Project, split_of
from .sdist import clean_repo, make_task_repo
from .statement import problem_statement
from .validate import TestRun, run_tests, test_cmd

log = logging.getLogger(__name__)
BASELINE_TIMEOUT_S = 600.0
ATTEMPTS_PER_TASK = 4
MAX_BUG_TIMEOUT_S = 180.0
"""At most this many candidates per wanted task are tried."""


@dataclass
class Drop:
    candidate: str
    reason: str


@dataclass
class ProjectReport:
    project: str
    version: str
    split: str
    kept: int = 0
    tried: int = 0
    tests: int = 0
    """Tests that pass before any bug."""
    dropped: list[Drop] = field(default_factory=list)
    error: str | None = None
    """Why the whole project was dropped."""
    duration_s: float = 0.0

    def reasons(self) -> dict[str, int]:
        return dict(Counter(d.reason.split(" (")[0] for d in self.dropped))


@dataclass
class _Judged:
    mutation: Mutation
    bug_patch: str = ""
    gold_patch: str = ""
    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    output: str = ""
    reason: str | None = None


def make_tasks(
    projects: list[Project], *, seed: int, per_project: int, workers: int, cache: Path, progress: bool = False
) -> tuple[list[SWETask], list[ProjectReport]]:
    tasks, reports = [], []
    for project in projects:
        made, report = make_project(
            project, seed=seed, per_project=per_project, workers=workers, cache=cache, progress=progress
        )
        tasks.extend(made)
        reports.append(report)
    return tasks, reports


def make_project(
    project: Project, *, seed: int, per_project: int, workers: int, cache: Path, progress: bool = False
) -> tuple[list[SWETask], ProjectReport]:
    start = time.monotonic()
    report = ProjectReport(project.name, project.version, split_of(project.name))
    clean = clean_repo(project.name, project.version, project.sha256, cache)
    with tempfile.TemporaryDirectory(prefix=f"roost-make-{project.name}-") as work:
        copies = []
        for i in range(max(workers, 1)):
            git(Path(work), "clone", "-q", "--local", str(clean), str(i))
            copies.append(Path(work) / str(i))
        baseline = run_tests(str(copies[0]), project, BASELINE_TIMEOUT_S)
        report.error = _baseline_problem(baseline)
        if report.error:
            log.warning("%s %s dropped: %s", project.name, project.version, report.error)
            report.duration_s = time.monotonic() - start
            return [], report
        passing = baseline.passed()
        report.tests = len(passing)
        # 5× the clean run, at least a minute; capped, for a bug that hangs the tests costs all of it
        # (more-itertools' infinite iterators hang often, and a loaded machine's clean run is slow)
        timeout_s = min(max(60.0, 5 * baseline.duration_s), MAX_BUG_TIMEOUT_S)
        files = source_files(clean, project.sources)
        pool = candidates(clean, files, f"{seed}:{project.name}", limit=per_project * ATTEMPTS_PER_TASK)
        kept: list[_Judged] = []
        bar = _bar(project.name, len(pool), progress)
        with ThreadPoolExecutor(max(workers, 1)) as executor:
            for at in range(0, len(pool), len(copies)):
                if len(kept) >= per_project:
                    break
                batch = pool[at : at + len(copies)]
                jobs = [(copy, mutation, project, passing, timeout_s) for copy, mutation in zip(copies, batch)]
                judged = list(executor.map(lambda job: _judge(*job), jobs))
                for one in judged:
                    report.tried += 1
                    if one.reason is not None:
                        report.dropped.append(Drop(f"{one.mutation.kind} at {one.mutation.where}", one.reason))
                        log.info(
                            "%s: dropped %s at %s: %s", project.name, one.mutation.kind, one.mutation.where, one.reason
                        )
                    elif len(kept) < per_project:
                        kept.append(one)
                bar.update(len(batch))
        bar.close()
    tasks = _tasks(project, kept, cache)
    report.kept = len(tasks)
    report.duration_s = time.monotonic() - start
    return tasks, report


def _judge(repo: Path, mutation: Mutation, project: Project, passing: set[str], timeout_s: float) -> _Judged:
    """The tests on `repo` (a working copy of its own) with `mutation` applied, then the copy restored."""
    path = repo / mutation.path
    original = path.read_text(encoding="utf-8")
    path.write_text(mutation.apply(original), encoding="utf-8")
    try:
        bug_patch = git(repo, "diff")
        gold_patch = git(repo, "diff", "-R")
        run = run_tests(str(repo), project, timeout_s)
    finally:
        path.write_text(original, encoding="utf-8")
    judged = _Judged(mutation, bug_patch, gold_patch, output=run.output)
    if run.timed_out:
        judged.reason = f"the tests hang with it (past {timeout_s:.0f}s)"
        return judged
    after = run.passed()
    judged.fail_to_pass = sorted(passing - after)
    judged.pass_to_pass = sorted(passing & after)
    if not judged.fail_to_pass:
        judged.reason = "no test catches it"
    elif not judged.pass_to_pass:
        judged.reason = "it breaks the whole test suite (no test still passes)"
    return judged


def _tasks(project: Project, kept: list[_Judged], cache: Path) -> list[SWETask]:
    counts: Counter[str] = Counter()
    tasks = []
    for one in kept:
        counts[one.mutation.kind] += 1
        instance_id = f"{project.name}__{project.version}-{one.mutation.kind}-{counts[one.mutation.kind]}"
        source = SdistSource(name=project.name, version=project.version, sha256=project.sha256, bug_patch=one.bug_patch)
        base_commit = make_task_repo(source, cache, cache / "tasks" / instance_id)
        tasks.append(
            SWETask(
                instance_id=instance_id,
                repo=f"pypi/{project.name}",
                version=project.version,
                base_commit=base_commit,
                problem_statement=problem_statement(project.name, project.version, one.fail_to_pass, one.output),
                FAIL_TO_PASS=one.fail_to_pass,
                PASS_TO_PASS=one.pass_to_pass,
                patch=one.gold_patch,
                test_patch="",
                test_cmd=test_cmd(project),
                log_parser="parse_log_pytest",
                source=source,
                split=split_of(project.name),
            )
        )
    return tasks


def _baseline_problem(run: TestRun) -> str | None:
    if run.timed_out:
        return f"its tests run past {BASELINE_TIMEOUT_S:.0f}s before any bug"
    failing = sorted(name for name, status in run.statuses.items() if status in ("FAILED", "ERROR"))
    if failing:
        return f"{len(failing)} of its tests fail before any bug (e.g. {', '.join(failing[:3])})"
    if not run.passed():
        return f"its tests do not run before any bug: {run.output[-300:].strip()}"
    return None


def _bar(name: str, total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=name, unit="bug", disable=not enabled, leave=False)


def write_tasks(
    names: list[str] | None, *, seed: int, per_project: int, out: Path | None, workers: int, progress: bool = True
) -> tuple[Path, list[ProjectReport]]:
    """make_tasks on the named projects into `out`: tasks.jsonl and summary.json (kept, drops and reasons)."""
    import dataclasses
    import json

    from .projects import select
    from .sdist import cache_dir

    projects = select(names)
    cache = cache_dir()
    out = out or cache / "made"
    tasks, reports = make_tasks(
        projects, seed=seed, per_project=per_project, workers=workers, cache=cache, progress=progress
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "tasks.jsonl").write_text("".join(t.model_dump_json(exclude_none=True) + "\n" for t in tasks))
    summary = {"seed": seed, "per_project": per_project, "projects": [dataclasses.asdict(r) for r in reports]}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return out, reports
