"""From recorded trajectories to the trainer's groups of samples.

The one module that knows where samples come from: the trajectory store (SQLite, written
by the gateway), whose root-to-leaf paths `roost.rollout.store.samples` builds, or JSONL
files of `Sample` records.

    groups = group_samples(samples_from_store(".roost/trajectories.sqlite", group_ids=["step-3/task-7"]))
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path

from .advantages import Group
from .samples import CallRef, Sample


def group_samples(samples: Iterable[Sample]) -> list[Group]:
    """Samples grouped by group id (GRPO groups by task), in first-seen order."""
    groups: dict[str, Group] = {}
    for sample in samples:
        groups.setdefault(sample.group_id, Group(sample.group_id, [])).samples.append(sample)
    return list(groups.values())


def samples_from_store(
    store: str | Path, *, group_ids: Iterable[str] | None = None, session_ids: Iterable[str] | None = None,
    status: str | None = "finished",
) -> Iterator[Sample]:
    """The root-to-leaf samples of the matching sessions, as trainer `Sample`s.

    Sessions without a group id form a group of their own. Posted advantages keep their
    reach: a call's own posted advantage (scalar or per token) applies to its tokens only,
    and sampled tokens of calls that got none are left to the estimator. Paths without a
    sampled token carry nothing to train on and are skipped.
    """
    from roost.rollout.store.reader import TrajectoryReader
    from roost.rollout.store.samples import session_samples

    with TrajectoryReader(store) as reader:
        if session_ids is not None:
            sessions = [s for s in (reader.session(sid) for sid in session_ids) if s is not None]
        elif group_ids is not None:
            sessions = [s for group in group_ids for s in reader.sessions(group_id=group, status=status)]
        else:
            sessions = reader.sessions(status=status)
        for session in sessions:
            rewards = reader.rewards(session.session_id)
            posted = reader.advantages(session.session_id)
            for path in session_samples(session, reader.calls(session.session_id), rewards, posted):
                if path.num_sampled:
                    yield _to_sample(path, posted)


def _to_sample(path, posted: dict) -> Sample:
    token_call = [-1] * len(path.tokens)
    calls = []
    advantages: list[float | None] = [None] * len(path.tokens)
    for index, span in enumerate(path.spans):
        calls.append(CallRef(call_id=span.call_id, weight_version=span.weight_version,
                             reward=span.reward))
        token_call[span.start : span.end] = [index] * (span.end - span.start)
        if span.call_id in posted and path.advantages is not None:
            advantages[span.start : span.end] = path.advantages[span.start : span.end]
    return Sample(
        session_id=path.session_id, group_id=path.group_id or path.session_id, agent_id=path.agent_id,
        tokens=list(path.tokens), loss_mask=list(path.loss_mask), rollout_logprobs=list(path.logprobs),
        token_call=token_call, calls=calls, reward=path.reward,
        advantages=advantages if any(a is not None for a in advantages) else None,
        metadata={"leaf_call_id": path.leaf_call_id, "task": path.task, "parent_agent": path.parent_agent},
    )


def write_jsonl(samples: Iterable[Sample], path: str | Path) -> Path:
    path = Path(path)
    with path.open("w") as f:
        for sample in samples:
            f.write(json.dumps(asdict(sample)) + "\n")
    return path


def read_jsonl(path: str | Path) -> list[Sample]:
    """Samples from a JSONL file of `Sample` records (one per line), validated."""
    out = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        record["calls"] = [CallRef(**call) for call in record["calls"]]
        try:
            out.append(Sample(**record).validate())
        except TypeError as exc:
            raise ValueError(f"{path}:{number}: not a Sample record: {exc}") from exc
    return out
