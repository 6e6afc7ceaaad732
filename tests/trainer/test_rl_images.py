"""Samples with images reach the RL trainer: a gateway over the scripted `tiny-vl` engine records
image calls; `collect_batch` reads the samples and the bytes of the images they name from the
gateway (`GET /images/{sha256}`, each image once); a `MegatronPolicy` given those bytes scores the
samples as transformers' `Qwen3VLForConditionalGeneration` does (fp32, 1e-4) and takes a step."""

from __future__ import annotations

import base64
import hashlib
import io

import httpx
import pytest
import torch
from PIL import Image

from roost.rollout.engine.tiny_model import tiny_model_dir
from roost.rollout.gateway.control.client import GatewayClient
from roost.rollout.keys import bearer
from roost.tests.vision_helpers import IMAGE_PAD, noise_png, scripted_vision_gateway, transformers_logprobs
from roost.trainer.rl.batches import collect_batch

PNG = noise_png(0)
PICTURE = Image.open(io.BytesIO(PNG)).convert("RGB")
SHA = hashlib.sha256(PNG).hexdigest()


@pytest.fixture(scope="module")
def vision_gateway(tmp_path_factory):
    with scripted_vision_gateway(tmp_path_factory.mktemp("vl"), model="tiny-vl") as (server, _):
        yield server


async def record_episode(http: httpx.AsyncClient, server, reply: str, reward: float) -> None:
    admin = bearer(server.admin_key)
    session = (await http.post(f"{server.url}/sessions", json={"group_id": "g"}, headers=admin)).json()
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "What?"}]
    answer = await http.post(
        f"{session['base_url']}/chat/completions",
        headers=bearer(session["key"]),
        json={"model": "tiny-vl", "messages": [{"role": "user", "content": content}], "max_tokens": 8}
        | {"custom_params": {"scripted_reply": reply}},
    )
    assert answer.status_code == 200, answer.text
    sid = session["session_id"]
    await http.post(f"{server.url}/sessions/{sid}/reward", json={"reward": reward}, headers=admin)
    done = await http.post(f"{server.url}/sessions/{sid}/finish", json={"info": {}}, headers=admin)
    assert done.status_code == 200, done.text


async def test_image_samples_and_their_bytes_reach_the_policy(megatron_world, vision_gateway):
    from transformers import Qwen3VLForConditionalGeneration

    from roost.trainer.advantages import AdvantageConfig, compute_advantages
    from roost.trainer.megatron.train import MegatronPolicy, TrainConfig

    async with httpx.AsyncClient(timeout=60) as http:
        await record_episode(http, vision_gateway, "Noise.", 1.0)
        await record_episode(http, vision_gateway, "A picture.", 0.0)
    async with GatewayClient(vision_gateway.url, admin_key=vision_gateway.admin_key) as gateway:
        batch = await collect_batch(gateway, ["g"], current_version=0, max_staleness=None)
    samples = [s for group in batch.groups for s in group.samples]
    assert len(samples) == 2 and all(s.images == [SHA] and IMAGE_PAD in s.tokens for s in samples)
    assert batch.images == {SHA: PNG}  # fetched once for both samples

    folder = tiny_model_dir(variant="tiny-vl")
    policy = MegatronPolicy(TrainConfig(checkpoint=str(folder), token_budget=1024))
    policy.use_images(batch.images)
    ours = policy.logprobs(samples)
    reference = Qwen3VLForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
    for sample, lp in zip(samples, ours):
        positions = [i for i, m in enumerate(sample.loss_mask) if m]
        assert (lp - transformers_logprobs(reference, folder, sample.tokens, positions, PICTURE)).abs().max() <= 1e-4
    scored, _ = compute_advantages(batch.groups, AdvantageConfig())
    stats = policy.train_step(scored)
    assert stats.updated and stats.samples == 2
    # the two samples' prompts, image included, packed once
    assert stats.tree_tokens < sum(len(s.tokens) for s in samples)
