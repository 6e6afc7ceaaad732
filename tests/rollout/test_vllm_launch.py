"""`roost engine --backend vllm` refuses clearly what it cannot start: before starting anything,
no vLLM virtualenv or a model whose attention heads vLLM's CPU kernels cannot serve (vLLM would
start, then die at the first request); a model vLLM itself refuses, with vLLM's reason."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from roost.rollout.engine.tiny_model import tiny_model_dir


def run_engine(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "roost.cli.main", "engine", "--backend", "vllm", "--port", "0", *args]
    return subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True, timeout=300)


def test_a_missing_vllm_is_named_with_how_to_install_it(tmp_path):
    missing = tmp_path / "no-venv" / "bin" / "python"
    done = run_engine("--model", "tiny-vllm", env={"ROOST_VLLM_PYTHON": str(missing)})
    assert done.returncode == 2
    assert f"no vLLM python at $ROOST_VLLM_PYTHON={missing}" in done.stderr
    assert "make vllm" in done.stderr


def test_a_head_size_below_32_is_refused_with_the_fix(tmp_path):
    done = run_engine("--model", "tiny", env={"ROOST_VLLM_PYTHON": sys.executable})
    assert done.returncode == 2
    assert "attention heads of 16 dimensions" in done.stderr and "--model tiny-vllm" in done.stderr


@pytest.mark.vllm
def test_a_model_vllm_refuses_is_reported_with_vllms_reason(tmp_path, vllm_py):
    model = tmp_path / "unservable"
    shutil.copytree(tiny_model_dir(variant="tiny-vllm"), model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "architectures": ["NoSuchModelForCausalLM"]}))
    done = run_engine(
        "--model", str(model), "--vllm-log", str(tmp_path / "vllm.log"), env={"ROOST_VLLM_PYTHON": str(vllm_py)}
    )
    assert done.returncode == 2
    assert f"vLLM exited with 1 while starting {model}" in done.stderr
    # vLLM's own words, from the end of its log
    assert "Model architectures ['NoSuchModelForCausalLM'] are not supported for now" in done.stderr
