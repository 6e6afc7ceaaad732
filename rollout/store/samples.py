"""Training samples: root-to-leaf paths of each agent's token tree.

This is the contract between the gateway's records and the trainer:

    from roost.rollout.store.samples import iter_training_samples
    for sample in iter_training_samples(".roost/trajectories.sqlite", group_id="step-3"):
        sample.tokens, sample.loss_mask, sample.logprobs, sample.advantages, sample.reward

A call `extend`s its parent when its prompt starts with the parent's whole token path; such
a parent is inside its child's sample and is not a sample of its own. Every other call is a
leaf: its sample is its own prompt + sampled ids, where the prompt already holds the tokens
of its ancestors (shared verbatim, see the gateway's token tree). The loss mask is 1 exactly
on tokens some call on the path sampled and that are still present, unchanged, in the leaf.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .reader import TrajectoryReader
from .records import AdvantageRecord, CallRecord, RewardRecord, SessionRecord


@dataclass
class SampledSpan:
    """Tokens `[start, end)` of a sample were sampled by call `call_id` at `weight_version`."""

    call_id: str
    start: int
    end: int
    weight_version: str
    reward: float | None = None
    """The step reward posted on this call (the latest), if any."""


@dataclass
class TrainingSample:
    """One root-to-leaf path of one agent in one session, ready for the trainer.

    Attributes:
        session_id, group_id, task: the session it came from (group = GRPO-style group id).
        agent_id, parent_agent: the agent whose calls these are, and the agent that spawned it.
        leaf_call_id: the last call of the path; `call_ids` are the calls root to leaf.
        tokens: the leaf call's prompt ids followed by its sampled ids, exactly as the engine
            saw and produced them.
        loss_mask: 1 on tokens sampled by a call on the path, 0 on everything else (prompts,
            tool results, template text, tokens a fork rewrote).
        logprobs: the engine's logprob of each masked token when it was sampled (behaviour
            policy); 0.0 where loss_mask is 0.
        advantages: one per token from advantages posted to the gateway per call (a scalar is
            spread over the call's sampled tokens), 0.0 on unmasked tokens and on sampled
            tokens of calls that got none; None when no call on the path got one.
        reward: the outcome: the agent's reward if one was posted, else the session's (the
            latest of each); None if none. Rewards posted on calls are step rewards, on `spans`.
        spans: which call sampled which masked range, at which weight version, and the step
            reward posted on that call.
        finish_reason: the leaf call's finish reason (SGLang's {"type": stop|length|abort, ...}).
    """

    session_id: str
    group_id: str | None
    task: dict[str, Any]
    agent_id: str
    parent_agent: str | None
    leaf_call_id: str
    call_ids: list[str]
    tokens: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    advantages: list[float] | None
    reward: float | None
    spans: list[SampledSpan] = field(default_factory=list)
    finish_reason: dict[str, Any] = field(default_factory=dict)

    @property
    def num_sampled(self) -> int:
        return sum(self.loss_mask)


def iter_training_samples(
    store: str | Path | TrajectoryReader,
    *,
    group_id: str | None = None,
    session_ids: Iterable[str] | None = None,
    status: str | None = "finished",
) -> Iterator[TrainingSample]:
    """Yield the samples of every matching session (by default: finished sessions only)."""
    reader = store if isinstance(store, TrajectoryReader) else TrajectoryReader(store)
    try:
        if session_ids is not None:
            sessions = [s for s in (reader.session(sid) for sid in session_ids) if s is not None]
        else:
            sessions = reader.sessions(group_id=group_id, status=status)
        for session in sessions:
            yield from session_samples(
                session, reader.calls(session.session_id), reader.rewards(session.session_id),
                reader.advantages(session.session_id),
            )
    finally:
        if reader is not store:
            reader.close()


def session_samples(
    session: SessionRecord,
    calls: list[CallRecord],
    rewards: list[RewardRecord],
    advantages: dict[str, AdvantageRecord],
) -> list[TrainingSample]:
    """The samples of one session, in call order of their leaves."""
    by_id = {c.call_id: c for c in calls if len(c.prompt_ids) > 0}
    extended = {
        c.parent_call_id
        for c in by_id.values()
        if c.kind == "extend" and c.parent_call_id in by_id
        and c.shared_prefix_len == by_id[c.parent_call_id].path_len
    }
    samples = []
    for call in by_id.values():
        if call.call_id in extended:
            continue
        samples.append(_path_sample(session, call, by_id, rewards, advantages))
    return samples


def _ancestors(leaf: CallRecord, by_id: dict[str, CallRecord]) -> list[tuple[CallRecord, int]]:
    """(call, how many of the leaf's tokens can still be that call's) from the leaf upwards."""
    chain = [(leaf, leaf.path_len)]
    limit = len(leaf.prompt_ids)
    seen = {leaf.call_id}
    node = leaf
    while node.parent_call_id in by_id and node.parent_call_id not in seen:
        limit = min(limit, node.shared_prefix_len)
        node = by_id[node.parent_call_id]
        seen.add(node.call_id)
        chain.append((node, limit))
    return chain


def _path_sample(
    session: SessionRecord,
    leaf: CallRecord,
    by_id: dict[str, CallRecord],
    rewards: list[RewardRecord],
    advantages: dict[str, AdvantageRecord],
) -> TrainingSample:
    tokens = list(leaf.prompt_ids) + list(leaf.sampled_ids)
    n = len(tokens)
    mask = [0] * n
    logprobs = [0.0] * n
    adv = [0.0] * n
    any_advantage = False
    spans = []
    step_rewards = {r.call_id: r.reward for r in rewards if r.call_id is not None}  # oldest first: latest wins
    chain = _ancestors(leaf, by_id)
    for call, limit in chain:
        start = len(call.prompt_ids)
        end = min(call.path_len, limit)
        if end <= start:
            continue
        # The shared prefix is shared by construction; checking it costs little and keeps a
        # damaged record from training on tokens the engine never sampled.
        if call is not leaf and list(call.sampled_ids[: end - start]) != tokens[start:end]:
            end = start + _common(call.sampled_ids, tokens, start, end)
            if end <= start:
                continue
        record = advantages.get(call.call_id)
        for i in range(start, end):
            mask[i] = 1
            logprobs[i] = call.sampled_logprobs[i - start]
        if record is not None:
            any_advantage = True
            for i in range(start, end):
                adv[i] = record.per_token[i - start] if record.per_token is not None else (record.value or 0.0)
        spans.append(SampledSpan(call.call_id, start, end, call.weight_version, step_rewards.get(call.call_id)))
    spans.reverse()
    return TrainingSample(
        session_id=session.session_id,
        group_id=session.group_id,
        task=session.task,
        agent_id=leaf.agent_id,
        parent_agent=leaf.parent_agent,
        leaf_call_id=leaf.call_id,
        call_ids=[c.call_id for c, _ in reversed(chain)],
        tokens=tokens,
        loss_mask=mask,
        logprobs=logprobs,
        advantages=adv if any_advantage else None,
        reward=_reward_for(leaf, rewards),
        spans=spans,
        finish_reason=leaf.finish_reason,
    )


def _common(sampled, tokens: list[int], start: int, end: int) -> int:
    count = 0
    for i in range(end - start):
        if sampled[i] != tokens[start + i]:
            break
        count += 1
    return count


def _reward_for(leaf: CallRecord, rewards: list[RewardRecord]) -> float | None:
    """The path's outcome: its agent's reward, else the session's. Rewards posted on calls are
    step rewards; they ride on each call (`CallRef.reward`), not here."""
    agent_reward = session_reward = None
    for r in rewards:  # oldest first, so the latest of each kind wins
        if r.call_id is not None:
            continue
        if r.agent_id is not None:
            if r.agent_id == leaf.agent_id:
                agent_reward = r.reward
        else:
            session_reward = r.reward
    return agent_reward if agent_reward is not None else session_reward
