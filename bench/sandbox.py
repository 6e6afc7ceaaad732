"""`roost bench sandbox`: per backend, median start, exec round trip and fresh-repository times.

start_ms       an empty sandbox, from the call to a usable sandbox
exec_ms        `true` in a running sandbox, call to result
fresh_repo_ms  a sandbox holding a private copy of a generated git repository (files, sizes below)
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from roost.sandboxes.config import SandboxConfig
from roost.sandboxes.overlay import remove_tree
from roost.sandboxes.protocol import SandboxSpec
from roost.sandboxes.registry import backend_class


def make_bench_repo(root: Path, files: int, file_bytes: int) -> Path:
    """A committed git repository of `files` files of `file_bytes` bytes each."""
    repo = root / "repo"
    for i in range(files):
        path = repo / f"pkg{i % 20}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        line = f"VALUE_{i} = {i}\n"
        path.write_text(line * max(1, file_bytes // len(line)))
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "bench"], cwd=repo, check=True)
    return repo


async def _timed_start(backend, spec: SandboxSpec) -> float:
    start = time.perf_counter()
    sandbox = await backend.start(spec)
    elapsed = time.perf_counter() - start
    await sandbox.close()
    return elapsed * 1000


async def bench_backend(name: str, config: SandboxConfig, repo: Path, reps: int, execs: int) -> dict:
    backend = backend_class(name)(config.model_copy(update={"backend": name}))
    reason = await backend.available()
    if reason is not None:
        return {"backend": name, "available": False, "reason": reason}
    starts = [await _timed_start(backend, SandboxSpec()) for _ in range(reps)]
    fresh = [await _timed_start(backend, SandboxSpec(directory=repo)) for _ in range(reps)]
    async with await backend.start(SandboxSpec()) as sandbox:
        await sandbox.exec("true")
        rounds = []
        for _ in range(execs):
            start = time.perf_counter()
            await sandbox.exec("true")
            rounds.append((time.perf_counter() - start) * 1000)
        limits = sandbox.limits_enforced
    return {
        "backend": name,
        "available": True,
        "start_ms": _median(starts),
        "exec_ms": _median(rounds),
        "fresh_repo_ms": _median(fresh),
        "reps": reps,
        "execs": execs,
        "limits_enforced": limits,
    }


def run_bench(
    backends: list[str],
    *,
    reps: int = 5,
    execs: int = 20,
    repo_files: int = 500,
    file_bytes: int = 2000,
    config: SandboxConfig | None = None,
) -> list[dict]:
    config = config or SandboxConfig()
    root = Path(tempfile.mkdtemp(prefix="roost-bench-"))
    try:
        repo = make_bench_repo(root, repo_files, file_bytes)
        rows = []
        for name in backends:
            row = asyncio.run(bench_backend(name, config, repo, reps, execs))
            row |= {"repo_files": repo_files, "repo_bytes": repo_files * file_bytes}
            rows.append(row)
        return rows
    finally:
        remove_tree(root)


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 2)
