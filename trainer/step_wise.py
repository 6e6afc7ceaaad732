"""Step-wise training: one sample per turn instead of one per episode path.

    scored = per_turn(scored)            # after advantages, before the trainer's step

An episode path's sample holds every turn of an agent; its turn-`k` sample is the same tokens up
to the end of turn `k`'s reply, trained on that reply alone. Advantages are computed first, on
the episode samples (an estimator that scores turns, `gigpo` or advantages posted per call, gives
each turn its own), and each turn keeps its own tokens' values. The prefix tree packs a path's
turn samples into the tokens of the path itself, so the forward costs the same; what changes is
what counts as a sample: under `seq_mean_token_mean` each turn's reply is averaged on its own
(every turn weighs the same, however long), while `token_mean` trains exactly as whole episodes
do (the same tokens, the same weights: `tests/trainer/test_step_wise.py` checks the gradients).
SkyRL calls this step-wise trajectories; verl-agent trains per step the same way. A
vision-language model's sample names its images in the order of their placeholder runs; each
turn keeps those whose runs lie in its tokens (`per_turn(scored, image_token_id)`).
"""

from __future__ import annotations

from dataclasses import replace

from roost.rollout.store.samples import Sample
from roost.rollout.vision.placeholders import image_pad_runs

from .advantages import Scored


def per_turn(scored: list[Scored], image_token_id: int | None = None) -> list[Scored]:
    """Each scored sample split into one scored sample per call that sampled tokens in it, in
    token order; a sample of one turn comes back as it was. A vision-language model's samples
    need its `image_token_id`: each turn keeps the images whose placeholder runs lie in its tokens."""
    return [turn for item in scored for turn in turns_of(item, image_token_id)]


class StepWiseError(ValueError):
    """A sample step-wise training cannot cut into turns."""


def turns_of(item: Scored, image_token_id: int | None = None) -> list[Scored]:
    sample = item.sample
    if sample.images and image_token_id is None:
        # a Sample names its images in the order of their placeholder runs: the id finds the runs
        raise StepWiseError(
            f"session {sample.session_id!r}, agent {sample.agent_id!r}: the sample has images, and cutting it "
            "into turns needs the model's image token id (per_turn(scored, image_token_id))"
        )
    ends: dict[int, int] = {}
    for call, _, end in sample.spans():
        ends[call] = end  # a call's last run of sampled tokens ends its turn
    if len(ends) <= 1:
        return [item]
    return [_turn(item, call, end, image_token_id) for call, end in sorted(ends.items(), key=lambda kv: kv[1])]


def _turn(item: Scored, call: int, end: int, image_token_id: int | None) -> Scored:
    sample = item.sample
    keep = [int(m == 1 and c == call) for m, c in zip(sample.loss_mask[:end], sample.token_call[:end])]
    images = sample.images
    if images and image_token_id is not None:  # a turn's images: those of the runs in its tokens
        images = images[: len(image_pad_runs(sample.tokens[:end], image_token_id))]
    turn = replace(
        sample,
        tokens=sample.tokens[:end],
        images=images,
        loss_mask=keep,
        rollout_logprobs=sample.rollout_logprobs[:end],
        token_call=[call if k else -1 for k in keep],
        advantages=None if sample.advantages is None else sample.advantages[:end],
        teacher_logprobs=None if sample.teacher_logprobs is None else sample.teacher_logprobs[:end],
        leaf_call_id=sample.calls[call].call_id,
        call_ids=_calls_until(sample, sample.calls[call].call_id),
        finish_reason=sample.finish_reason if end == len(sample.tokens) else {},
    )
    return Scored(
        turn.validate(),
        _only(item.advantages, keep),
        None if item.values is None else _only(item.values, keep),
        None if item.returns is None else _only(item.returns, keep),
    )


def _only(values: list[float], keep: list[int]) -> list[float]:
    """`values` cut to the turn's tokens, 0.0 off its reply (Scored's convention off the mask)."""
    return [v if k else 0.0 for v, k in zip(values, keep)]


def _calls_until(sample: Sample, call_id: str) -> list[str]:
    if call_id not in sample.call_ids:
        return list(sample.call_ids)
    return sample.call_ids[: sample.call_ids.index(call_id) + 1]
