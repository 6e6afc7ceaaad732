"""Weights sent to the embedded engine over HTTP in chunks: they serve exactly what the same
weights loaded from disk serve (and Hugging Face's forward on them), only from the commit on; a
chunk or commit that does not fit is a precise 400 and the old weights keep serving."""

from __future__ import annotations

import asyncio
import shutil

import httpx
import pytest
import torch
from safetensors.torch import load_file, save_file

from roost.rollout.engine.launch import EngineProcess
from roost.rollout.engine_api.sglang_client import EngineRejected, SGLangClient
from roost.rollout.engine_api.weight_sender import send_weights
from roost.rollout.engine_api.weight_upload import AdapterUpload, encode_chunk, manifest
from roost.rollout.keys import bearer
from roost.rollout.lora import load_adapter
from roost.tests.rollout.engine_helpers import recorded_and_forward_logprobs
from roost.tests.rollout.test_engine_lora import make_adapter

PROMPT = "The weather today"
GREEDY = {
    "text": PROMPT,
    "return_logprob": True,
    "sampling_params": {"max_new_tokens": 10, "temperature": 0, "ignore_eos": True},
}


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    """This module's own engine: its weights change."""
    process = EngineProcess("tiny")
    with process:
        yield process


def keyed(engine: EngineProcess) -> httpx.Client:
    return httpx.Client(base_url=engine.url, headers=bearer(engine.api_key), timeout=60)


def served(client: httpx.Client, lora: str | None = None) -> tuple[list[int], list[float], str]:
    body = {**GREEDY, "lora_path": lora} if lora else GREEDY
    answer = client.post("/generate", json=body).json()
    meta = answer["meta_info"]
    return answer["output_ids"], [entry[0] for entry in meta["output_token_logprobs"]], meta["weight_version"]


def perturbed(tiny_model_path, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    tensors = load_file(tiny_model_path / "model.safetensors")
    return {name: t + 0.05 * torch.randn(t.shape, generator=gen) for name, t in tensors.items()}


def saved(tensors: dict[str, torch.Tensor], tiny_model_path, folder) -> str:
    shutil.copytree(tiny_model_path, folder)
    save_file(tensors, str(folder / "model.safetensors"))
    return str(folder)


async def upload(engine: EngineProcess, tensors, **kwargs):
    async with SGLangClient(engine.url, api_key=engine.api_key) as client:
        return await send_weights(client, tensors, **kwargs)


def test_http_update_serves_what_the_disk_update_serves(engine, tiny_model_path, tmp_path):
    tensors = perturbed(tiny_model_path, seed=5)
    folder = saved(tensors, tiny_model_path, tmp_path / "ckpt")
    with keyed(engine) as client:
        before = served(client)
        # a budget of 64 KiB: the tiny model's tensors go in many chunks
        answer = asyncio.run(upload(engine, tensors, weight_version="http-1", chunk_bytes=64 * 1024))
        assert answer.success and answer.weight_version == "http-1"
        raw = client.post("/generate", json=GREEDY).json()
        assert raw["meta_info"]["cached_tokens"] == 0, "keys and values of the old weights were reused"
        over_http = served(client)
        assert over_http[2] == "http-1" and over_http[:2] != before[:2]
        ok = client.post("/update_weights_from_disk", json={"model_path": folder, "weight_version": "disk-1"})
        assert ok.status_code == 200, ok.text
        from_disk = served(client)
    assert from_disk[0] == over_http[0] == raw["output_ids"]
    # the first answer on each weights (both prefill the prompt whole): bit-equal
    assert from_disk[1] == [entry[0] for entry in raw["meta_info"]["output_token_logprobs"]]
    recorded, forward = recorded_and_forward_logprobs(raw, tmp_path / "ckpt", PROMPT)
    torch.testing.assert_close(recorded, forward, atol=1e-5, rtol=0)


def _begin(client, tensors, **extra) -> str:
    answer = client.post("/roost/weights/begin", json={"tensors": _declared(tensors), **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()["update_id"]


def _declared(tensors):
    return {name: meta.model_dump() for name, meta in manifest(tensors).items()}


def _chunk(client, update_id, tensors) -> httpx.Response:
    return client.post(
        f"/roost/weights/{update_id}/chunk",
        content=encode_chunk(tensors),
        headers={"Content-Type": "application/octet-stream"},
    )


def _bad_chunk(name: str):
    def edit(tensors):
        if name == "unknown":
            return {"model.extra.weight": torch.ones(2)}
        if name == "shape":
            return {"model.norm.weight": torch.ones(65)}
        if name == "dtype":
            return {"model.norm.weight": tensors["model.norm.weight"].to(torch.bfloat16)}
        return {"model.norm.weight": torch.full_like(tensors["model.norm.weight"], float("nan"))}

    return edit


@pytest.mark.parametrize(
    "case,needle",
    [
        ("unknown", "model.extra.weight was not declared"),
        ("shape", "model.norm.weight: shape (65,)"),
        ("dtype", "torch.bfloat16, declared (64,) torch.float32"),
        ("nan", "contains NaN or inf"),
    ],
)
def test_a_chunk_that_does_not_fit_is_refused_and_nothing_changes(engine, tiny_model_path, case, needle):
    tensors = perturbed(tiny_model_path, seed=7)
    with keyed(engine) as client:
        before = served(client)
        update_id = _begin(client, tensors)
        refused = _chunk(client, update_id, _bad_chunk(case)(tensors))
        assert refused.status_code == 400 and needle in refused.json()["error"]["message"], refused.text
        assert "nothing of it kept" in refused.json()["error"]["message"]
        # the update stays open: the good tensors still go, and the commit then works
        first = dict(list(tensors.items())[:3])
        assert _chunk(client, update_id, first).json() == {"received": 3, "remaining": len(tensors) - 3}
        assert _chunk(client, update_id, first).status_code == 400  # sent twice
        assert served(client) == before, "a staged update must not serve before its commit"
        assert client.post(f"/roost/weights/{update_id}/abort").status_code == 200
        assert served(client) == before


def test_a_commit_with_tensors_missing_is_refused_and_the_old_weights_stay(engine, tiny_model_path):
    tensors = perturbed(tiny_model_path, seed=8)
    with keyed(engine) as client:
        before = served(client)
        update_id = _begin(client, tensors, weight_version="never")
        names = list(tensors)
        assert _chunk(client, update_id, {name: tensors[name] for name in names[1:]}).status_code == 200
        commit = client.post(f"/roost/weights/{update_id}/commit")
        message = commit.json()["error"]["message"]
        assert commit.status_code == 400 and f"1 declared tensor(s) not sent: {names[0]}" in message
        assert served(client) == before
        assert client.get("/get_model_info").json()["weight_version"] == before[2]
        # the last tensor, then the commit: now it serves
        assert _chunk(client, update_id, {names[0]: tensors[names[0]]}).json()["remaining"] == 0
        assert client.post(f"/roost/weights/{update_id}/commit").json()["weight_version"] == "never"
        assert served(client)[2] == "never"
        late = _chunk(client, update_id, {names[0]: tensors[names[0]]})
        assert late.status_code == 409 and "was dropped" in late.json()["error"]["message"]


def test_bad_begins_keys_and_bytes_are_precise_errors(engine, tiny_model_path):
    tensors = perturbed(tiny_model_path, seed=9)
    with keyed(engine) as client:
        before = served(client)
        short = {name: t for name, t in tensors.items() if name != "model.norm.weight"}
        refused = client.post("/roost/weights/begin", json={"tensors": _declared(short)})
        assert refused.status_code == 400 and "missing tensor model.norm.weight" in refused.json()["error"]["message"]
        extra = client.post("/roost/weights/begin", json={"tensors": _declared(tensors), "dtype": "x"})
        assert extra.status_code == 400 and "dtype" in extra.json()["error"]["message"]
        update_id = _begin(client, tensors)
        garbage = client.post(f"/roost/weights/{update_id}/chunk", content=b"not safetensors")
        assert garbage.status_code == 400 and "safetensors" in garbage.json()["error"]["message"]
        unknown = client.post("/roost/weights/feedbeef/commit")
        assert unknown.status_code == 404 and "POST /roost/weights/begin" in unknown.json()["error"]["message"]
        newer = _begin(client, tensors)
        superseded = _chunk(client, update_id, dict(list(tensors.items())[:1]))
        assert superseded.status_code == 409, superseded.text
        client.post(f"/roost/weights/{newer}/abort")
        assert served(client) == before
    with httpx.Client(base_url=engine.url) as open_client:
        assert open_client.post("/roost/weights/begin", json={"tensors": _declared(tensors)}).status_code == 401


def test_a_refused_chunk_aborts_the_senders_update(engine, tiny_model_path):
    tensors = perturbed(tiny_model_path, seed=10)
    tensors["model.norm.weight"] = tensors["model.norm.weight"].to(torch.float64)
    with pytest.raises(ValueError, match="cannot be sent"):
        asyncio.run(upload(engine, tensors))
    tensors["model.norm.weight"] = torch.ones(65)
    with keyed(engine) as client:
        before = served(client)
        with pytest.raises(EngineRejected, match=r"model.norm.weight: shape \(65,\), expected \(64,\)"):
            asyncio.run(upload(engine, tensors))
        assert served(client) == before


def test_an_adapter_over_http_serves_as_the_same_folder_does(engine, tiny_model_path, tmp_path):
    folder = make_adapter(tiny_model_path, tmp_path / "a", rank=4, seed=3, targets=["q_proj", "v_proj", "up_proj"])
    adapter = load_adapter(folder)
    config = AdapterUpload(lora_name="sent", config=_config(folder))
    with keyed(engine) as client:
        ok = client.post("/v1/load_lora_adapter", json={"lora_name": "from-disk", "lora_path": str(folder)})
        assert ok.status_code == 200, ok.text
        answer = asyncio.run(upload(engine, adapter.weights, adapter=config, weight_version="lora-1"))
        assert answer.weight_version == "lora-1"
        from_disk, over_http = served(client, "from-disk"), served(client, "sent")
        assert over_http[:2] == from_disk[:2] and over_http[2] == "lora-1"
        assert served(client)[:2] != over_http[:2]
        models = client.get("/v1/models").json()["data"]
        assert any(card["id"] == "sent" and "weight update" in card["root"] for card in models)
        # a second version replaces it in place
        doubled = {k: v * 2 if ".lora_B." in k else v for k, v in adapter.weights.items()}
        asyncio.run(upload(engine, doubled, adapter=config, weight_version="lora-2"))
        assert served(client, "sent")[1] != over_http[1]
        misfit = dict(adapter.weights)
        misfit.pop(next(k for k in misfit if ".lora_A." in k))
        with pytest.raises(EngineRejected, match="lora_A or lora_B missing"):
            asyncio.run(upload(engine, misfit, adapter=config))
        assert served(client, "sent")[2] == "lora-2"


def _config(folder) -> dict:
    import json

    return json.loads((folder / "adapter_config.json").read_text())
