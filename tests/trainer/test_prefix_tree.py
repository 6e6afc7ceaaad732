"""The token trie's layout: depth-first, ancestor mask, depth positions, gather maps,
first-fit-decreasing microbatches under a token budget."""

from __future__ import annotations

import pytest
import torch

from roost.tests.trainer.trainer_fixtures import agentic_batch, grpo_batch
from roost.trainer.prefix_tree import (
    PackingError,
    build_microbatches,
    flat_microbatch,
    plan_microbatches,
    tree_microbatch,
    trie_size,
)


def test_shared_prefixes_are_stored_once_in_depth_first_order():
    seqs = [[1, 2, 3, 4], [1, 2, 5], [1, 2, 3, 6], [7, 8]]
    mb = tree_microbatch(seqs, [[1, 2, 3], [2], [3], [1]], [0, 1, 2, 3])
    assert mb.input_ids[0].tolist() == [1, 2, 3, 4, 6, 5, 7, 8]
    assert mb.position_ids[0].tolist() == [0, 1, 2, 3, 3, 2, 0, 1]
    allowed = ~mb.attention_mask[0, 0]
    # token 6 (slot 4) sees 1, 2, 3 and itself, not its sibling 4
    assert allowed[4].nonzero().flatten().tolist() == [0, 1, 2, 4]
    # separate roots do not see each other
    assert allowed[7].nonzero().flatten().tolist() == [6, 7]
    assert trie_size(seqs) == mb.num_tokens == 8


@pytest.mark.parametrize("batch", [grpo_batch, agentic_batch])
def test_gather_maps_give_each_sample_its_own_tokens_and_contexts(batch):
    samples = batch()
    scored = [[i for i, m in enumerate(s.loss_mask) if m] for s in samples]
    mb = tree_microbatch([s.tokens for s in samples], scored, list(range(len(samples))))
    tokens, parents = mb.input_ids[0], mb.score_rows
    allowed = ~mb.attention_mask[0, 0]
    for sample, positions, index in zip(samples, scored, mb.sample_scores):
        assert mb.score_targets[index].tolist() == [sample.tokens[i] for i in positions]
        for position, row in zip(positions, parents[index].tolist()):
            # the row that predicts the token sees exactly the sample's prefix
            context = tokens[allowed[row]].tolist()
            assert context == sample.tokens[:position]
            assert mb.position_ids[0, row] == position - 1
    assert mb.num_tokens < sum(len(s) for s in samples)


def test_budget_planning_is_first_fit_decreasing_and_keeps_groups_together():
    seqs = [[g] + [100 + g] * n for g, n in enumerate([9, 5, 3, 3, 2])]
    plan = plan_microbatches(seqs, [f"g{i}" for i in range(5)], token_budget=12)
    assert plan == [[0], [1, 2], [3, 4]]  # sizes 10 | 6 + 4 | 4 + 3
    grouped = plan_microbatches([[1, 2, 3], [1, 2, 4], [9, 9]], ["a", "a", "b"], token_budget=5)
    assert grouped == [[0, 1], [2]]


def test_a_group_over_budget_is_split_into_several_trees():
    samples = grpo_batch(groups=1, size=6)
    seqs = [s.tokens for s in samples]
    plan = plan_microbatches(seqs, ["g"] * 6, token_budget=50)
    assert sorted(i for mb in plan for i in mb) == list(range(6)) and len(plan) > 1
    for ids in plan:
        assert trie_size([seqs[i] for i in ids]) <= 50


def test_samples_longer_than_the_budget_are_refused():
    with pytest.raises(PackingError, match="over the microbatch token budget of 4"):
        plan_microbatches([[1, 2, 3, 4, 5]], ["g"], token_budget=4)
    with pytest.raises(PackingError, match="over the token budget"):
        build_microbatches([[1, 2, 3, 4, 5]], [[1]], ["g"], 4, layout="flat")


def test_flat_layout_rows_match_samples():
    samples = agentic_batch()
    scored = [[i for i, m in enumerate(s.loss_mask) if m] for s in samples]
    mbs = build_microbatches([s.tokens for s in samples], scored, ["g"] * len(samples), 10_000, layout="flat")
    assert mbs[0].attention_mask is None and sum(mb.num_tokens for mb in mbs) == sum(len(s) for s in samples)
    mb = mbs[0]
    flat = mb.input_ids.reshape(-1)
    for index, positions, sel in zip(mb.sample_index, [scored[i] for i in mb.sample_index], mb.sample_scores):
        assert mb.score_targets[sel].tolist() == [samples[index].tokens[p] for p in positions]
        assert flat[mb.score_rows[sel]].tolist() == [samples[index].tokens[p - 1] for p in positions]
    assert torch.equal(mb.position_ids[0], torch.arange(mb.input_ids.shape[1]))


@pytest.mark.parametrize("batch", [grpo_batch, agentic_batch])
def test_chains_attend_to_exactly_what_the_dense_mask_allows(batch):
    samples = batch()
    mb = tree_microbatch([s.tokens for s in samples], [[] for _ in samples], list(range(len(samples))))
    allowed = ~mb.attention_mask[0, 0]
    covered = []
    for segment in mb.tree.segments:
        mask = (
            segment.mask
            if segment.mask is not None
            else torch.ones(segment.end - segment.start, segment.end - segment.start, dtype=torch.bool).tril()
        )
        for row, slot in enumerate(range(segment.start, segment.end)):
            assert sorted(segment.keys[mask[row]].tolist()) == allowed[slot].nonzero().flatten().tolist()
            covered.append(slot)
    assert covered == list(range(mb.num_tokens))


def test_recorded_routing_rides_on_each_tree_slot_and_flat_row():
    """R3: a token's recorded experts land on its hidden row; a shared node takes the first
    sequence's row; tokens without a record (an empty row, a sequence without routing) get -1."""
    a, b = [1, 2, 3, 4], [1, 2, 5]
    routing = [[[0, 1], [2, 3], [4, 5], []], [[7, 7], [6, 6], []]]
    tree = tree_microbatch([a, b], [[3], [2]], [0, 1], routing=routing)
    assert tree.input_ids[0].tolist() == [1, 2, 3, 4, 5]
    assert tree.routed_experts.tolist() == [[0, 1], [2, 3], [4, 5], [-1, -1], [-1, -1]]
    flat = flat_microbatch([a, b], [[3], [2]], [0, 1], routing=[None, routing[1]])
    assert flat.routed_experts.tolist() == [[-1, -1]] * 4 + [[7, 7], [6, 6], [-1, -1], [-1, -1]]
    assert tree_microbatch([a], [[3]], [0]).routed_experts is None
