"""Fixtures shared by the whole suite: the tiny model and real engines on 127.0.0.1."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine.tiny_model import tiny_model_dir
from roost.rollout.engine_api.vllm_launch import VLLMLaunchError, vllm_python
from roost.tests.file_order import load_durations, order_by_duration


def pytest_collection_modifyitems(config, items) -> None:
    """Longest files first (tests/file_order.py): both xdist workers finish close together."""
    items[:] = order_by_duration(items, load_durations())


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    return tiny_model_dir()


@pytest.fixture(scope="session")
def model_engine(tiny_model_path: Path):
    """A real embedded engine with the model's own sampler (shared: do not change its weights);
    `.url`, and `.api_key` for its control routes."""
    process = EngineProcess("tiny")
    with process:
        yield process


@pytest.fixture(scope="session")
def engine_url(model_engine: EngineProcess) -> str:
    return model_engine.url


@pytest.fixture(scope="session")
def scripted_engine(tiny_model_path: Path, tmp_path_factory):
    """A real embedded engine whose replies come from the scripted sampler; `.url`, and `.api_key`
    for its control routes.

    Starts with a fallback rule only; tests force text per request with
    `custom_params.scripted_reply` or replace the rules with POST /roost/scripted_sampler.
    """
    script = tmp_path_factory.mktemp("script") / "script.json"
    script.write_text(json.dumps({"rules": [{"match": None, "reply": "OK."}]}))
    process = EngineProcess("tiny", scripted=True, script=script)
    with process:
        yield process


@pytest.fixture(scope="session")
def scripted_engine_url(scripted_engine: EngineProcess) -> str:
    return scripted_engine.url


@pytest.fixture(scope="session")
def vllm_py() -> Path:
    """The python of vLLM's virtualenv; the test is skipped without one, except with
    ROOST_REQUIRE_VLLM=1 (CI), where it fails."""
    try:
        return vllm_python()
    except VLLMLaunchError as exc:
        if os.environ.get("ROOST_REQUIRE_VLLM") == "1":
            pytest.fail(f"ROOST_REQUIRE_VLLM=1 but {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def ray_cluster():
    """A Ray cluster on this machine (`tests/ray_cluster.py`): a head labelled `trainer` and a worker
    labelled `rollout`, 1 CPU each, each node in its own mount namespace with a private run folder
    (`.run_dir`); this process is connected to it as a driver. Skipped where a mount namespace
    cannot be made (not root)."""
    import shutil
    import tempfile

    from roost.tests.ray_cluster import NodeSpec, SimulatedCluster, unavailable

    if reason := unavailable():
        pytest.skip(f"no simulated Ray cluster: {reason}")
    # short: Ray's Unix sockets live under each node's temp dir, and their paths have a length limit
    root = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))
    with SimulatedCluster(root, [NodeSpec("trainer", cpus=1), NodeSpec("rollout", cpus=1)]) as cluster:
        yield cluster
    shutil.rmtree(root, ignore_errors=True)
