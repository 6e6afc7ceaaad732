"""Root-to-leaf paths of each agent's token tree, read from the store as `Sample`s.

    from roost.rollout.store.paths import iter_training_samples
    for sample in iter_training_samples(".roost/trajectories.sqlite", group_ids=["step-3"]):
        sample.tokens, sample.loss_mask, sample.rollout_logprobs, sample.calls, sample.reward

A call `extend`s its parent when its prompt starts with the parent's whole token path; such
a parent is inside its child's sample and is not a sample of its own. Every other call is a
leaf: its sample is its own prompt + sampled ids, where the prompt already holds the tokens
of its ancestors (shared verbatim, see the gateway's token tree). The loss mask is 1 exactly
on tokens some call on the path sampled and that are still present, unchanged, in the leaf.

A call that is not training data (`CallRecord.untrainable`: a pass-through call without token
ids or logprobs) is refused: no path through it becomes a sample, and a caller that passes a
`refused` list learns which calls were left out and why.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from roost.outcome import SessionStatus
from roost.rollout.engine_api.wire import constraint_of
from roost.rollout.store import routing_blob
from roost.rollout.store.reader import TrajectoryReader
from roost.rollout.store.records import AdvantageRecord, CallRecord, IdArray, RewardRecord, SessionRecord
from roost.rollout.store.samples import CallRef, Refused, Sample, SampledSpan, SessionSamples, build_sample


def iter_training_samples(
    store: str | Path | TrajectoryReader,
    *,
    group_ids: Iterable[str] | None = None,
    session_ids: Iterable[str] | None = None,
    status: SessionStatus | None = SessionStatus.FINISHED,
    refused: list[Refused] | None = None,
) -> Iterator[Sample]:
    """Yield the samples of every matching session (by default: finished sessions only);
    calls that are not training data are added to `refused`."""
    reader = store if isinstance(store, TrajectoryReader) else TrajectoryReader(store)
    try:
        if session_ids is not None:
            sessions = [s for s in (reader.session(sid) for sid in session_ids) if s is not None]
        elif group_ids is not None:
            sessions = [s for group in group_ids for s in reader.sessions(group_id=group, status=status)]
        else:
            sessions = reader.sessions(status=status)
        for session in sessions:
            yield from session_samples(reader, session, refused)
    finally:
        if reader is not store:
            reader.close()


def training_sessions(reader: TrajectoryReader, sessions: Iterable[SessionRecord]) -> list[SessionSamples]:
    """Each session with its outcome, its samples and the calls refused on the way."""
    return [_training_session(reader, session) for session in sessions]


def _training_session(reader: TrajectoryReader, session: SessionRecord) -> SessionSamples:
    refused: list[Refused] = []
    samples = session_samples(reader, session, refused)
    return SessionSamples(session.session_id, session.group_id, session.status, session.outcome, samples, refused)


def group_training_sessions(store: str | Path, group_ids: Iterable[str]) -> list[SessionSamples]:
    """The groups' sessions read from a store file, in the order `GET /samples` pages them: what
    runs where the file is (a finished run's checks, exports); the RL loop reads the gateway's API."""
    with TrajectoryReader(store) as reader:
        return [s for group in group_ids for s in training_sessions(reader, reader.sessions(group_id=group))]


def session_samples(
    reader: TrajectoryReader, session: SessionRecord, refused: list[Refused] | None = None
) -> list[Sample]:
    """The samples of one session, in call order of their leaves; each call that is not
    training data is added to `refused` once."""
    calls = reader.calls(session.session_id)
    rewards = reader.rewards(session.session_id)
    advantages = reader.advantages(session.session_id)
    by_id = {c.call_id: c for c in calls if len(c.prompt_ids) > 0}
    refusals = {c.call_id: _refusal(session, c) for c in calls if c.call_id not in by_id}
    extended = {
        c.parent_call_id
        for c in by_id.values()
        if c.kind == "extend" and c.parent_call_id in by_id and c.shared_prefix_len == by_id[c.parent_call_id].path_len
    }
    samples = []
    for call in by_id.values():
        if call.call_id in extended:
            continue
        sample = _path_sample(session, call, by_id, rewards, advantages)
        if isinstance(sample, Sample):
            samples.append(sample)
        for refusal in sample if isinstance(sample, list) else ():
            refusals.setdefault(refusal.call_id, refusal)
    if refused is not None:
        refused.extend(refusals.values())
    return samples


def _refusal(session: SessionRecord, call: CallRecord) -> Refused:
    return Refused(session.session_id, call.agent_id, call.call_id, call.untrainable or "no token ids")


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
) -> Sample | list[Refused]:
    """The leaf's sample; or, where calls on its path are not training data, those calls."""
    tokens = list(leaf.prompt_ids) + list(leaf.sampled_ids)
    spans: list[SampledSpan] = []
    blocked: list[Refused] = []
    step_rewards = {r.call_id: r.reward for r in rewards if r.call_id is not None}  # oldest first: latest wins
    path = list(reversed(_ancestors(leaf, by_id)))
    for call, limit in path:  # root first; each call's tokens come after its ancestors'
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
        if call.untrainable:
            blocked.append(_refusal(session, call))
            continue
        ref = CallRef(
            call.call_id,
            call.weight_version,
            reward=step_rewards.get(call.call_id),
            constraint=constraint_of(call.sampling_params),
            adapter=call.adapter,
        )
        spans.append(
            SampledSpan(
                start,
                end,
                ref,
                call.sampled_logprobs[: end - start],
                _posted(advantages.get(call.call_id), end - start),
            )
        )
    if blocked:
        return blocked
    return build_sample(
        tokens,
        spans,
        session_id=session.session_id,
        group_id=session.group_id or session.session_id,
        agent_id=leaf.agent_id,
        reward=_reward_for(leaf, rewards),
        task=session.task,
        parent_agent=leaf.parent_agent,
        leaf_call_id=leaf.call_id,
        call_ids=[c.call_id for c, _ in path],
        finish_reason=leaf.finish_reason,
        images=[image.sha256 for image in leaf.images],  # the leaf's prompt holds its ancestors' images
        routed_experts=_routed_experts(path, len(tokens)),
    )


def _routed_experts(path: list[tuple[CallRecord, int]], n: int) -> list[list[int]] | None:
    """Each of the path's `n` tokens' recorded experts (`Sample.routed_experts`): a call's row i
    is the token at path position i, up to where the call's path leaves this one (`_ancestors`'
    limit); a later call's rows replace an earlier one's (the leaf's, run last, are the routing
    its own tokens were sampled under). None when no call on the path recorded any."""
    rows: list[list[int]] = [[] for _ in range(n)]
    recorded = False
    for call, limit in path:  # root first
        ids = routing_blob.unpack(call.routed_experts)
        if ids is None:
            continue
        recorded = True
        for i, row in enumerate(ids[: min(limit, n)].tolist()):
            rows[i] = row
    return rows if recorded else None


def _posted(record: AdvantageRecord | None, n: int) -> list[float | None] | None:
    """The advantages posted for a call's first `n` sampled tokens (a scalar covers them all)."""
    if record is None:
        return None
    if record.per_token is not None:
        return list(record.per_token[:n])
    return [record.value or 0.0] * n


def _common(sampled: IdArray, tokens: list[int], start: int, end: int) -> int:
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
