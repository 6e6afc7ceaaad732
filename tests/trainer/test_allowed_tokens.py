"""The trainer trains a constrained call on the distribution the engine sampled it from: it
replays each call's recorded grammar over the call's sampled tokens (every sampled token is one
its grammar allowed), takes each token's logprob over the allowed tokens only (the model's
logprob renormalised: log p(t) - log sum of p(a) over the allowed a), and so never moves mass
onto tokens the grammar kept the engine from sampling."""

from __future__ import annotations

import asyncio
import dataclasses

import httpx
import pytest
import torch
import xgrammar

from roost.rollout.engine.model_spec import ModelSpec
from roost.rollout.engine.rope import inverse_frequencies
from roost.rollout.keys import bearer
from roost.rollout.store.paths import iter_training_samples
from roost.tests.rollout.gateway_helpers import new_session, running_gateway
from roost.trainer import hf_checkpoint
from roost.trainer.allowed_tokens import AllowedTokens, allowed_counts
from roost.trainer.megatron import convert
from roost.trainer.megatron.model import build_gpt_model, masked_logprobs, scored_logprobs, transformer_config
from roost.trainer.prefix_tree import build_microbatches, tree_microbatch

REPLIES = ["go north", "take key (brass)", "open door.", "go to cabinet 1"]
ANSWER = {
    "type": "object",
    "properties": {"answer": {"type": "string", "maxLength": 8}},
    "required": ["answer"],
    "additionalProperties": False,
}
CONSTRAINTS = {
    "allowed_replies": {"allowed_replies": REPLIES},
    "json_schema": {
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER, "strict": True}}
    },
    "free": {},
}


@pytest.fixture(scope="module")
def recorded(engine_url, tmp_path_factory):
    """Samples of real calls through the gateway and the embedded engine: two per constraint."""
    store = tmp_path_factory.mktemp("allowed") / "calls.sqlite"
    with running_gateway(engine_url, store) as (server, _):
        session = new_session(server)
        bodies = [
            {
                "model": "tiny",
                "messages": [{"role": "user", "content": f"Where now? {name}"}],
                "temperature": 1.0,
                "seed": seed,
                "max_tokens": 24,
                **fields,
            }
            for name, fields in CONSTRAINTS.items()
            for seed in range(2)
        ]

        async def post_all():
            async with httpx.AsyncClient(timeout=300, headers=bearer(session["key"])) as client:
                return await asyncio.gather(
                    *(client.post(f"{session['base_url']}/chat/completions", json=body) for body in bodies)
                )

        answers = asyncio.run(post_all())
    assert [a.status_code for a in answers] == [200] * len(bodies), [a.text for a in answers]
    return list(iter_training_samples(store, session_ids=[session["session_id"]]))


@pytest.fixture(scope="module")
def model(tiny_model_path):
    spec = ModelSpec.from_folder(tiny_model_path)
    gpt = build_gpt_model(spec, transformer_config(spec), "sdpa")
    convert.load_into(gpt, convert.hf_to_megatron(hf_checkpoint.read_weights(tiny_model_path), spec))
    return spec, gpt


def kind(sample) -> str:
    constraint = sample.calls[0].constraint
    return "free" if constraint is None else constraint[0]


def allowed_ids(row: torch.Tensor, vocab_size: int) -> list[int]:
    """The ids a bitmask row allows, read by xgrammar's own kernel."""
    logits = torch.zeros(1, vocab_size)
    xgrammar.apply_token_bitmask_inplace(logits, row[None].clone())
    return torch.isfinite(logits[0]).nonzero()[:, 0].tolist()


def test_each_recorded_grammar_replays_over_its_sampled_tokens(recorded, tiny_model_path):
    spec = ModelSpec.from_folder(tiny_model_path)
    allowed = AllowedTokens(tiny_model_path, spec)
    assert sorted(map(kind, recorded)) == ["free", "free", "json_schema", "json_schema", "regex", "regex"]
    for sample in recorded:
        masks = allowed.masks(sample)
        if kind(sample) == "free":
            assert masks is None
            continue
        sampled = [t for t, m in zip(sample.tokens, sample.loss_mask) if m]
        assert masks.shape == (len(sampled), (spec.vocab_size + 31) // 32)
        counts = allowed_counts(masks)
        for token, row in zip(sampled, masks):
            assert token in allowed_ids(row, spec.vocab_size)
        assert int(counts.max()) > 1 and int(counts.min()) == 1, kind(sample)  # choices, and forced tokens
        # the reply ends where its grammar does: only the end-of-sequence token is allowed last
        assert allowed_ids(masks[-1], spec.vocab_size) == sorted(spec.eos_token_ids)


def test_a_call_its_grammar_refuses_on_replay_is_trained_unmasked_and_named(recorded, tiny_model_path):
    sample = next(s for s in recorded if kind(s) == "regex")
    first = sample.loss_mask.index(1)
    tokens = list(sample.tokens)
    tokens[first] = tokens[0]  # a prompt token: no reply starts with it
    allowed = AllowedTokens(tiny_model_path, ModelSpec.from_folder(tiny_model_path))
    masks = allowed.masks(dataclasses.replace(sample, tokens=tokens))
    assert bool((masks == -1).all())
    assert len(allowed.refused) == 1 and sample.calls[0].call_id in allowed.refused[0]
    assert "unmasked" in allowed.refused[0]
    assert not bool((allowed.masks(sample) == -1).all()) and len(allowed.refused) == 1


def test_masked_logprobs_are_the_models_renormalised_over_the_allowed_tokens(
    megatron_world, recorded, model, tiny_model_path
):
    spec, gpt = model
    allowed = AllowedTokens(tiny_model_path, spec)
    samples = [s for s in recorded if kind(s) == "regex"]
    positions = [[i for i, m in enumerate(s.loss_mask) if m] for s in samples]
    masks = [allowed.masks(s) for s in samples]
    inv_freq = inverse_frequencies(spec)
    with torch.no_grad():
        (tree,) = build_microbatches([s.tokens for s in samples], positions, ["g"] * len(samples), 4096, "tree", masks)
        (flat,) = build_microbatches([s.tokens for s in samples], positions, ["g"] * len(samples), 4096, "flat", masks)
        masked, mass = masked_logprobs(gpt, tree, inv_freq)
        flat_masked, _ = masked_logprobs(gpt, flat, inv_freq)
        plain = scored_logprobs(gpt, tree, inv_freq)
    assert torch.allclose(masked + mass, plain, atol=1e-5)
    for j, (sample, pos, mask) in enumerate(zip(samples, positions, masks)):
        ours = masked[tree.sample_scores[j]]
        assert torch.allclose(ours, flat_masked[flat.sample_scores[j]], atol=1e-5)
        # the reference: each allowed token's plain logprob after the same prefix, from one trie
        prefixes = [sample.tokens[:p] + [a] for p in pos for a in allowed_ids(mask[pos.index(p)], spec.vocab_size)]
        owner = [p for p in pos for _ in allowed_ids(mask[pos.index(p)], spec.vocab_size)]
        probe = tree_microbatch(prefixes, [[len(x) - 1] for x in prefixes], list(range(len(prefixes))))
        with torch.no_grad():
            each = scored_logprobs(gpt, probe, inv_freq)[torch.cat(probe.sample_scores)]
        for k, p in enumerate(pos):
            norm = torch.logsumexp(each[[i for i, o in enumerate(owner) if o == p]], 0)
            full = plain[tree.sample_scores[j]][k]
            assert abs(float(ours[k]) - float(full - norm)) <= 1e-4
            if len(allowed_ids(mask[k], spec.vocab_size)) == 1:
                assert abs(float(ours[k])) <= 1e-6  # forced: certain under the mask


def test_the_masked_loss_never_moves_mass_onto_tokens_the_grammar_refused(
    megatron_world, recorded, model, tiny_model_path
):
    spec, gpt = model
    samples = [s for s in recorded if kind(s) != "free"]
    positions = [[i for i, m in enumerate(s.loss_mask) if m] for s in samples]
    masks = [AllowedTokens(tiny_model_path, spec).masks(s) for s in samples]
    (microbatch,) = build_microbatches(
        [s.tokens for s in samples], positions, ["g"] * len(samples), 4096, "tree", masks
    )
    ever_allowed = torch.zeros(spec.vocab_size, dtype=torch.bool)
    for mask in masks:
        for row in mask:
            ever_allowed[allowed_ids(row, spec.vocab_size)] = True
    untouched = ~ever_allowed
    untouched[torch.tensor(sorted({t for s in samples for t in s.tokens}))] = False  # tied: inputs read these rows
    weight = gpt.shared_embedding_or_output_weight()

    def row_grads(loss_of) -> torch.Tensor:
        gpt.zero_grad()
        weight.grad = None
        loss_of().backward()
        return weight.grad[: spec.vocab_size][untouched].abs().sum(dim=-1)

    inv_freq = inverse_frequencies(spec)
    # a negative advantage on every sampled token: push each one down
    masked = row_grads(lambda: masked_logprobs(gpt, microbatch, inv_freq)[0].sum())
    plain = row_grads(lambda: scored_logprobs(gpt, microbatch, inv_freq).sum())
    assert int(untouched.sum()) > 10_000  # (a JSON string allows most of the vocabulary)
    assert float(masked.max()) == 0.0
    assert float(plain.min()) > 0.0  # the unmasked loss moves every refused token's logit
