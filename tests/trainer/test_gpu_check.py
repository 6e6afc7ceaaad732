"""`make gpu-check` (`python -m roost.trainer.gpu_check`) on a machine without a GPU: one JSON
line saying so, exit 0; its trainer checks run on the CPU with --cpu."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="here the checks run on the GPU (make gpu-check)")


def gpu_check(*args: str) -> tuple[int, list[dict]]:
    done = subprocess.run(
        [sys.executable, "-m", "roost.trainer.gpu_check", *args], capture_output=True, text=True, timeout=240
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == len(done.stdout.splitlines()), done.stdout + done.stderr
    return done.returncode, lines


def test_without_a_gpu_it_says_so_and_exits_0():
    rc, lines = gpu_check()
    assert rc == 0 and len(lines) == 1
    assert lines[0]["check"] == "cuda" and lines[0]["status"] == "skip" and "no CUDA device" in lines[0]["reason"]


def test_its_trainer_checks_run_on_the_cpu():
    rc, lines = gpu_check("--cpu")
    by_check = {line["check"]: line for line in lines}
    assert rc == 0 and list(by_check) == ["tree_vs_flat_bf16", "te_tree_mask", "sglang_sync"]
    tree = by_check["tree_vs_flat_bf16"]
    assert tree["status"] == "pass" and tree["max_abs_diff"] <= tree["tolerance"] and tree["device"] == "cpu"
    assert tree["tree_tokens"] < tree["flat_tokens"]
    assert by_check["te_tree_mask"]["status"] == by_check["sglang_sync"]["status"] == "skip"
