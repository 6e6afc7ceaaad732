"""Weight updates: a good checkpoint changes outputs and the version; a bad one changes nothing."""

from __future__ import annotations

import shutil

import httpx
import pytest
import torch
from safetensors.torch import load_file, save_file

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.keys import bearer

GREEDY = {
    "text": "The weather today",
    "return_logprob": True,
    "sampling_params": {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True},
}


@pytest.fixture(scope="module")
def own_engine(tiny_model_path):
    """An engine of this module's own: these tests change its weights."""
    process = EngineProcess("tiny")
    with process:
        yield process


def keyed(engine: EngineProcess) -> httpx.Client:
    """A client that sends the engine's key (its control routes need it)."""
    return httpx.Client(base_url=engine.url, headers=bearer(engine.api_key))


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


def state(client):
    answer = client.post("/generate", json=GREEDY, timeout=60).json()
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
    with keyed(own_engine) as client:
        before = state(client)
        resp = client.post(
            "/update_weights_from_disk", json={"model_path": checkpoint(tmp_path, tiny_model_path, edit)}
        )
        assert resp.status_code == 400
        assert needle in resp.json()["message"]
        assert resp.json()["success"] is False
        assert state(client) == before


def test_missing_path_is_refused(own_engine):
    with keyed(own_engine) as client:
        resp = client.post("/update_weights_from_disk", json={"model_path": "/nonexistent/ckpt"})
    assert resp.status_code == 400 and "does not exist" in resp.json()["message"]


def test_update_changes_outputs_and_bumps_version(own_engine, tiny_model_path, tmp_path):
    with keyed(own_engine) as client:
        ids_before, version_before = state(client)
        resp = client.post(
            "/update_weights_from_disk", json={"model_path": checkpoint(tmp_path, tiny_model_path, perturb)}
        )
        assert resp.status_code == 200 and resp.json()["success"] is True
        first = client.post("/generate", json=GREEDY, timeout=60).json()["meta_info"]
        assert first["cached_tokens"] == 0, "keys and values of the old weights were reused"
        ids_after, version_after = state(client)
        assert int(version_after) == int(version_before) + 1
        assert resp.json()["weight_version"] == version_after
        assert ids_after != ids_before
        assert client.get("/get_model_info").json()["weight_version"] == version_after
        named = client.post(
            "/update_weights_from_disk", json={"model_path": str(tiny_model_path), "weight_version": "step-7"}
        )
        assert named.json()["weight_version"] == "step-7"
        assert state(client) == (ids_before, "step-7")


def test_pause_holds_requests_until_continue(own_engine):
    with keyed(own_engine) as client:
        assert client.post("/pause_generation", json={}).json()["paused"] is True
        with pytest.raises(httpx.ReadTimeout):
            client.post("/generate", json=GREEDY, timeout=1.0)
        assert client.get("/health").status_code == 200
        client.post("/continue_generation", json={})
        ids, _ = state(client)
        assert len(ids) == 12
