"""The vision-language trainer under tensor parallel 2 and data parallel 2 over gloo on CPU
trains exactly like one process, as the text trainer does (`test_parallel.py`): `tiny-vl`'s
image batch (three replies sharing one image, a fourth sample with another), the vision tower
trained too (`freeze_vision_tower: false`: whole on every rank, its gradients summed over the
data-parallel ranks), gives the same logprobs, loss and updated weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from roost.rollout.engine.tiny_model import tiny_model_dir
from roost.tests.trainer import vision_parallel_worker
from roost.trainer import hf_checkpoint

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def vl_path() -> Path:
    return tiny_model_dir(variant="tiny-vl")


def launch(tmp_path: Path, vl_path: Path, *, tp: int) -> dict:
    out = tmp_path / f"tp{tp}"
    out.mkdir()
    store = torch.distributed.TCPStore("127.0.0.1", 0, 2, is_master=True, wait_for_workers=False)
    args = (2, store.port, tp, str(vl_path), str(out))
    mp.start_processes(vision_parallel_worker.run, args=args, nprocs=2, start_method="spawn", join=True)
    return json.loads((out / "result.json").read_text()) | {"weights": hf_checkpoint.read_weights(out / "ckpt")}


@pytest.fixture(scope="module")
def single_process(megatron_world, vl_path) -> dict:
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    budget = vision_parallel_worker.TOKEN_BUDGET
    config = TrainConfig(checkpoint=str(vl_path), token_budget=budget, lr=1e-2, freeze_vision_tower=False)
    policy = MegatronPolicy(config)
    result = vision_parallel_worker.train_once(policy, str(vl_path))
    assert result["microbatches"] == 2  # one a data-parallel rank
    return result | {"weights": policy.hf_state()}


def assert_same_training(run: dict, single: dict, start: dict) -> None:
    worst = max(abs(a - b) for x, y in zip(run["logprobs"], single["logprobs"]) for a, b in zip(x, y))
    assert worst <= 1e-5
    assert run["loss"] == pytest.approx(single["loss"], rel=1e-5, abs=1e-7)
    assert run["weights"].keys() == single["weights"].keys() == start.keys()
    for name, tensor in single["weights"].items():
        torch.testing.assert_close(run["weights"][name], tensor, rtol=0, atol=2e-5, msg=name)
    # the step trained the language model and the tower
    for moved in ("model.language_model.norm.weight", "model.visual.patch_embed.proj.weight"):
        assert not torch.equal(single["weights"][moved], start[moved]), moved


@pytest.mark.parametrize("tp", [2, 1], ids=["tp2", "dp2"])
def test_the_vision_language_trainer_in_parallel_trains_like_one_process(tmp_path, vl_path, single_process, tp):
    run = launch(tmp_path, vl_path, tp=tp)
    assert (run["info"]["tp_size"], run["info"]["dp_size"]) == (tp, 2 // tp)
    assert_same_training(run, single_process, hf_checkpoint.read_weights(vl_path))
