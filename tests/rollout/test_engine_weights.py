"""Weight updates: a good checkpoint changes outputs and the version; a bad one changes nothing."""

from __future__ import annotations

import shutil

import httpx
import pytest
import torch
from safetensors.torch import load_file, save_file

from roost.rollout.engine.launch import EngineProcess

GREEDY = {"text": "The weather today", "return_logprob": True,
          "sampling_params": {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}}


@pytest.fixture(scope="module")
def own_engine(tiny_model_path):
    """An engine of this module's own: these tests change its weights."""
    with EngineProcess("tiny") as url:
        yield url


def checkpoint(tmp_path, tiny_model_path, edit) -> str:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    tensors = load_file(tiny_model_path / "model.safetensors")
    edit(tensors)
    save_file(tensors, str(folder / "model.safetensors"))
    shutil.copy(tiny_model_path / "config.json", folder / "config.json")
    return str(folder)


def perturb(tensors):
    gen = torch.Generator().manual_seed(3)
    for name, t in tensors.items():
        tensors[name] = t + 0.05 * torch.randn(t.shape, generator=gen)


def state(client, url):
    answer = client.post(f"{url}/generate", json=GREEDY, timeout=60).json()
    return answer["output_ids"], answer["meta_info"]["weight_version"]


@pytest.mark.parametrize(
    "edit,needle",
    [
        (lambda t: t.pop("model.norm.weight"), "missing tensor model.norm.weight"),
        (lambda t: t.update({"model.norm.weight": torch.ones(65)}), "shape (65,), expected (64,)"),
        (lambda t: t.update({"model.norm.weight": t["model.norm.weight"].to(torch.bfloat16)}), "dtype torch.bfloat16"),
        (lambda t: t.update({"model.extra.weight": torch.ones(2)}), "unexpected tensor model.extra.weight"),
        (lambda t: t["model.norm.weight"].fill_(float("nan")), "NaN"),
    ],
    ids=["missing", "shape", "dtype", "unexpected", "nan"],
)
def test_bad_checkpoint_is_refused_and_old_weights_stay(own_engine, tiny_model_path, tmp_path, edit, needle):
    with httpx.Client() as client:
        before = state(client, own_engine)
        resp = client.post(f"{own_engine}/update_weights_from_disk",
                           json={"model_path": checkpoint(tmp_path, tiny_model_path, edit)})
        assert resp.status_code == 400
        assert needle in resp.json()["message"]
        assert resp.json()["success"] is False
        assert state(client, own_engine) == before


def test_missing_path_is_refused(own_engine):
    resp = httpx.post(f"{own_engine}/update_weights_from_disk", json={"model_path": "/nonexistent/ckpt"})
    assert resp.status_code == 400 and "does not exist" in resp.json()["message"]


def test_update_changes_outputs_and_bumps_version(own_engine, tiny_model_path, tmp_path):
    with httpx.Client() as client:
        ids_before, version_before = state(client, own_engine)
        resp = client.post(f"{own_engine}/update_weights_from_disk",
                           json={"model_path": checkpoint(tmp_path, tiny_model_path, perturb)})
        assert resp.status_code == 200 and resp.json()["success"] is True
        first = client.post(f"{own_engine}/generate", json=GREEDY, timeout=60).json()["meta_info"]
        assert first["cached_tokens"] == 0, "keys and values of the old weights were reused"
        ids_after, version_after = state(client, own_engine)
        assert int(version_after) == int(version_before) + 1
        assert resp.json()["weight_version"] == version_after
        assert ids_after != ids_before
        assert client.get(f"{own_engine}/get_model_info").json()["weight_version"] == version_after
        named = client.post(f"{own_engine}/update_weights_from_disk",
                            json={"model_path": str(tiny_model_path), "weight_version": "step-7"})
        assert named.json()["weight_version"] == "step-7"
        assert state(client, own_engine) == (ids_before, "step-7")


def test_pause_holds_requests_until_continue(own_engine):
    with httpx.Client() as client:
        assert client.post(f"{own_engine}/pause_generation", json={}).json()["paused"] is True
        with pytest.raises(httpx.ReadTimeout):
            client.post(f"{own_engine}/generate", json=GREEDY, timeout=1.0)
        assert client.get(f"{own_engine}/health").status_code == 200
        client.post(f"{own_engine}/continue_generation", json={})
        ids, _ = state(client, own_engine)
        assert len(ids) == 12
