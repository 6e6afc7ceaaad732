"""From recorded trajectories to the trainer's groups of samples.

The one module that knows where the trainer's samples come from: the trajectory store
(SQLite, written by the gateway), whose root-to-leaf paths `roost.rollout.store.paths`
reads, or JSONL files of `Sample` records (`roost.rollout.store.sample_records`).

    groups = group_samples(samples_from_store(".roost/trajectories.sqlite", group_ids=["step-3/task-7"]))
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from roost.outcome import SessionStatus
from roost.rollout.store.paths import iter_training_samples
from roost.rollout.store.sample_records import read_sample_records, write_sample_records
from roost.rollout.store.samples import Refused, Sample

from .advantages import Group


def group_samples(samples: Iterable[Sample]) -> list[Group]:
    """Samples grouped by group id (GRPO groups by task), in first-seen order."""
    groups: dict[str, Group] = {}
    for sample in samples:
        groups.setdefault(sample.group_id, Group(sample.group_id, [])).samples.append(sample)
    return list(groups.values())


def samples_from_store(
    store: str | Path,
    *,
    group_ids: Iterable[str] | None = None,
    session_ids: Iterable[str] | None = None,
    status: SessionStatus | None = SessionStatus.FINISHED,
    refused: list[Refused] | None = None,
) -> Iterator[Sample]:
    """The root-to-leaf samples of the matching sessions that have something to train on.

    Sessions without a group id form a group of their own. Posted advantages keep their
    reach: a call's own posted advantage (scalar or per token) applies to its tokens only,
    and sampled tokens of calls that got none are left to the estimator. Paths without a
    sampled token carry nothing to train on and are skipped; so are paths through a call that is
    not training data (a pass-through call without token ids or logprobs), which is added to
    `refused` with why.
    """
    return with_sampled_tokens(
        iter_training_samples(store, group_ids=group_ids, session_ids=session_ids, status=status, refused=refused)
    )


def with_sampled_tokens(samples: Iterable[Sample]) -> Iterator[Sample]:
    """The samples that hold a sampled token: a path without one has nothing to train on."""
    return (sample for sample in samples if sample.num_sampled)


def write_jsonl(samples: Iterable[Sample], path: str | Path) -> Path:
    """Write `Sample` records, one a line: what `read_jsonl` and a samples export read and write."""
    write_sample_records(samples, path)
    return Path(path)


def read_jsonl(path: str | Path) -> list[Sample]:
    """Samples from a JSONL file of `Sample` records (one per line, as `roost trajectories export
    --kind samples` writes them), validated."""
    return read_sample_records(path)
