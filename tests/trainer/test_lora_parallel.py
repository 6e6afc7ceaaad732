"""LoRA under tensor parallel 2 and data parallel 2 (gloo, CPU) trains as one process does: the
same logprobs, loss, gradient norm, adapter gradients and updated adapters, saved in PEFT's full
shapes whatever the split, and the same merged weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from roost.rollout.lora import load_adapter
from roost.tests.trainer import lora_worker
from roost.trainer import hf_checkpoint

pytestmark = pytest.mark.slow


def launch(tmp_path: Path, tiny_model_path: Path, *, tp: int) -> dict:
    out = tmp_path / f"tp{tp}"
    out.mkdir()
    store = torch.distributed.TCPStore("127.0.0.1", 0, 2, is_master=True, wait_for_workers=False)
    mp.start_processes(
        lora_worker.run, args=(2, store.port, tp, str(tiny_model_path), str(out)), nprocs=2, start_method="spawn"
    )
    result = json.loads((out / "result.json").read_text()) | torch.load(out / "tensors.pt")
    return result | {
        "saved": load_adapter(out / "adapter").weights,
        "merged": hf_checkpoint.read_weights(out / "merged"),
    }


@pytest.fixture(scope="module")
def single_process(megatron_world, tiny_model_path):
    from roost.tests.trainer.test_lora import ALL
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    policy = MegatronPolicy(TrainConfig(checkpoint=str(tiny_model_path), lr=1e-3, token_budget=64, lora=ALL))
    return lora_worker.lora_step(policy) | {"merged": policy.hf_state()}


def assert_same(run: dict, single: dict) -> None:
    assert single["microbatches"] >= 2
    assert max(abs(a - b) for x, y in zip(run["logprobs"], single["logprobs"]) for a, b in zip(x, y)) <= 1e-5
    assert run["loss"] == pytest.approx(single["loss"], rel=1e-5, abs=1e-7)
    assert run["grad_norm"] == pytest.approx(single["grad_norm"], rel=1e-4)
    assert run["grads"].keys() == single["grads"].keys() == run["saved"].keys()
    for key, grad in single["grads"].items():
        assert grad.abs().max() > 0, key  # every adapter matrix got a gradient
        torch.testing.assert_close(run["grads"][key], grad, rtol=1e-4, atol=1e-7, msg=key)
        torch.testing.assert_close(run["adapter"][key], single["adapter"][key], rtol=0, atol=2e-5, msg=key)
        assert torch.equal(run["saved"][key], run["adapter"][key]), key
    assert run["merged"].keys() == single["merged"].keys()
    for name, tensor in single["merged"].items():
        torch.testing.assert_close(run["merged"][name], tensor, rtol=0, atol=2e-5, msg=name)


def test_lora_tensor_parallel_2_trains_like_one_process(tmp_path, tiny_model_path, single_process):
    run = launch(tmp_path, tiny_model_path, tp=2)
    assert run["info"]["tp_size"] == 2
    assert_same(run, single_process)


def test_lora_data_parallel_2_trains_like_one_process(tmp_path, tiny_model_path, single_process):
    run = launch(tmp_path, tiny_model_path, tp=1)
    assert run["info"]["dp_size"] == 2
    assert_same(run, single_process)
