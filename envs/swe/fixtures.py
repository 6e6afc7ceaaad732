"""`roost envs swe make-fixtures`: roost's offline SWE tasks, built as git repositories.

    out/repos/<name>/   a git repository at the task's base commit (the bug, passing tests)
    out/tasks.jsonl     one SWETask per repository: hidden test as test_patch, fix as patch

Commits use fixed names and dates, so base commits are the same on every machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .fixture_repos import FIXTURES, FixtureRepo
from .task import SWETask

VERSION = "1"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "roost",
    "GIT_AUTHOR_EMAIL": "roost@localhost",
    "GIT_COMMITTER_NAME": "roost",
    "GIT_COMMITTER_EMAIL": "roost@localhost",
    "GIT_AUTHOR_DATE": "2025-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2025-01-01T00:00:00+0000",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}
TEST_CMD = "python -m pytest --no-header -rA --tb=no -p no:cacheprovider"
GITIGNORE = "__pycache__/\n*.pyc\n.pytest_cache/\n"


def default_dir() -> Path:
    """`$ROOST_HOME/swe-fixtures`, else `~/.cache/roost/swe-fixtures`."""
    return Path(os.environ.get("ROOST_HOME", Path.home() / ".cache" / "roost")).expanduser() / "swe-fixtures"


def fixture_tasks(out: Path | None = None) -> list[SWETask]:
    """The fixture tasks, building them first if `out` does not hold this version yet."""
    out = out or default_dir()
    if (out / "VERSION").is_file() and (out / "VERSION").read_text().strip() == VERSION:
        from .loaders import load_jsonl

        return load_jsonl(out / "tasks.jsonl")
    return make_fixtures(out)


def make_fixtures(out: Path) -> list[SWETask]:
    """Build every fixture repository and tasks.jsonl under `out` (replacing what was there)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".swe-fixtures-", dir=out.parent))
    staging.chmod(0o755)
    try:
        tasks = [_build(spec, staging / "repos" / spec.name, out / "repos" / spec.name) for spec in FIXTURES]
        (staging / "tasks.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in tasks))
        (staging / "VERSION").write_text(VERSION + "\n")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return tasks


def _build(spec: FixtureRepo, repo: Path, final: Path) -> SWETask:
    repo.mkdir(parents=True)
    _write(repo, {".gitignore": GITIGNORE, **spec.files})
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"{spec.name}: initial version")
    base = git(repo, "rev-parse", "HEAD").strip()
    _write(repo, spec.hidden_tests)
    test_patch = git(repo, "diff")
    git(repo, "checkout", "-q", "--", ".")
    for path, (old, new) in spec.fix.items():
        text = (repo / path).read_text()
        if text.count(old) != 1:
            raise RuntimeError(f"fixture {spec.name}: the fix of {path} must match exactly once")
        (repo / path).write_text(text.replace(old, new))
    patch = git(repo, "diff")
    git(repo, "checkout", "-q", "--", ".")
    test_files = " ".join(sorted(spec.hidden_tests))
    return SWETask(
        instance_id=f"roost-fixtures__{spec.name}-1",
        repo=f"roost-fixtures/{spec.name}",
        base_commit=base,
        problem_statement=spec.problem,
        FAIL_TO_PASS=spec.fail_to_pass,
        PASS_TO_PASS=spec.pass_to_pass,
        test_patch=test_patch,
        patch=patch,
        version="1.0",
        repo_dir=str(final),
        test_cmd=f"{TEST_CMD} {test_files}",
        log_parser="parse_log_pytest",
    )


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def git(repo: Path, *args: str) -> str:
    """`git args` in `repo` with fixed names and dates; its stdout, or RuntimeError with its stderr."""
    result = subprocess.run(["git", *args], cwd=repo, env={**os.environ, **GIT_ENV}, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {result.stderr.strip()}")
    return result.stdout
