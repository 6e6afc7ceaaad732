"""`Sample`s as records: the one format a samples export writes and the trainer reads back.

    write_sample_records(samples, "samples.jsonl")     # what `roost trajectories export --kind samples` writes
    samples = read_sample_records("samples.jsonl")     # what SFT's `jsonl` source reads

A record is the sample's own fields (`dataclasses.asdict`) plus `format_version`; reading one
gives back an equal `Sample`, validated.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from roost.rollout.store.records import FORMAT_VERSION
from roost.rollout.store.samples import CallRef, Sample, SampleError

# Rows of `--kind samples` exports before they were Sample records: read by nothing, named here
# so a reader can say what such a file is.
_OLD_EXPORT_FIELDS = {"logprobs", "spans"}


def sample_record(sample: Sample) -> dict[str, Any]:
    return {**asdict(sample), "format_version": FORMAT_VERSION}


def sample_from_record(record: dict[str, Any]) -> Sample:
    """The `Sample` of one record, validated; raises `SampleError` saying what is wrong."""
    record = dict(record)
    version = record.pop("format_version", None)
    if _OLD_EXPORT_FIELDS <= record.keys():
        raise SampleError(
            f"a samples export row of format version {version} (fields logprobs and spans), not a "
            "Sample record; export the store again with this roost "
            "(roost trajectories export --kind samples)"
        )
    # Records written before the store and the trainer shared `Sample` keep the store's
    # fields in a free-form `metadata`; the trainer never read its other keys.
    metadata = record.pop("metadata", None) or {}
    for key in ("task", "parent_agent", "leaf_call_id"):
        if key in metadata:
            record.setdefault(key, metadata[key])
    try:
        record["calls"] = [_call_ref(call) for call in record["calls"]]
        return Sample(**record).validate()
    except (KeyError, TypeError) as exc:
        raise SampleError(
            f"not a Sample record ({exc}); expected the fields of roost.rollout.store.samples.Sample"
        ) from exc


def _call_ref(call: dict[str, Any]) -> CallRef:
    constraint = call.get("constraint")
    return CallRef(**{**call, "constraint": tuple(constraint) if constraint is not None else None})


def write_sample_records(samples: Iterable[Sample], path: str | Path) -> int:
    """Write one record a line to `path`; returns how many."""
    count = 0
    with Path(path).open("wb") as fh:
        for sample in samples:
            fh.write(orjson.dumps(sample_record(sample)) + b"\n")
            count += 1
    return count


def read_sample_records(path: str | Path) -> list[Sample]:
    """The samples of a JSONL file of records, validated; a bad line raises `SampleError`
    naming the file and line."""
    out = []
    for number, line in enumerate(Path(path).read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(sample_from_record(orjson.loads(line)))
        except (SampleError, orjson.JSONDecodeError) as exc:
            raise SampleError(f"{path}:{number}: {exc}") from exc
    return out
