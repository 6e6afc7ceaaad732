"""`roost bench sandbox`, backend selection, and the errors a misconfigured sandbox raises."""

from __future__ import annotations

import json
import shutil

import pytest
import typer
from typer.testing import CliRunner

from roost.bench.cli import register
from roost.sandboxes import SandboxConfig, SandboxSpec, SandboxUnavailable, make_backend, start_sandbox
from roost.sandboxes.errors import SandboxError


def test_bench_cli_prints_one_json_object_per_backend():
    app, bench = typer.Typer(), typer.Typer()
    app.add_typer(bench, name="bench")
    register(app, bench)
    backends = "local,bubblewrap" if shutil.which("bwrap") else "local"
    result = CliRunner().invoke(
        app, ["bench", "sandbox", "--backends", backends, "--reps", "1", "--execs", "2", "--repo-files", "20", "--json"]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [r["backend"] for r in rows] == backends.split(",")
    for row in rows:
        assert row["available"] and row["start_ms"] > 0 and row["exec_ms"] > 0 and row["fresh_repo_ms"] > 0


async def test_unknown_backend_and_unsupported_sources(tmp_path):
    with pytest.raises(SandboxUnavailable, match="unknown sandbox backend"):
        await make_backend(SandboxConfig.model_construct(backend="chroot"))
    with pytest.raises(SandboxUnavailable, match="cannot start from image"):
        await start_sandbox(SandboxConfig(backend="local"), SandboxSpec(image="debian:12"))
    with pytest.raises(SandboxError, match="not a directory"):
        await start_sandbox(SandboxConfig(backend="local"), SandboxSpec(directory=tmp_path / "missing"))
    if shutil.which("bwrap"):
        with pytest.raises(SandboxUnavailable, match="root filesystem folder"):
            await start_sandbox(SandboxConfig(backend="bubblewrap"), SandboxSpec(image="debian:12"))


async def test_docker_without_an_engine_says_how_to_fix_it():
    config = SandboxConfig(
        backend="docker", docker={"base_url": "unix:///nonexistent/docker.sock", "ping_timeout_s": 1}
    )
    backend = await make_backend(config)
    reason = await backend.available()
    assert reason is not None and "start dockerd or set DOCKER_HOST" in reason


def test_config_rejects_unknown_fields_and_bad_limits():
    with pytest.raises(ValueError, match="extra"):
        SandboxConfig(backend="local", memroy_mb=10)
    with pytest.raises(ValueError, match="greater than 0"):
        SandboxConfig(limits={"memory_mb": 0})
