"""Export a trajectory store as JSONL or Parquet: one row per call, or per training sample.

A call row says why the call is not training data (`untrainable`, null when it is). A sample row
is a `Sample` record (`sample_records`), which the trainer's `jsonl` source reads back; a samples
export leaves the paths through calls that are not training data out and reports them
(`refused`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from roost.rollout.store import routing_blob
from roost.rollout.store.paths import session_samples
from roost.rollout.store.reader import TrajectoryReader
from roost.rollout.store.records import FORMAT_VERSION, CallRecord
from roost.rollout.store.sample_records import sample_record
from roost.rollout.store.samples import Refused

FORMATS = ("jsonl", "parquet")
KINDS = ("calls", "samples")


def call_dict(call: CallRecord, session_group: str | None) -> dict[str, Any]:
    row = asdict(call)
    row["prompt_ids"] = list(call.prompt_ids)
    row["sampled_ids"] = list(call.sampled_ids)
    row["sampled_logprobs"] = list(call.sampled_logprobs)
    routing = routing_blob.unpack(call.routed_experts)
    row["routed_experts"] = routing.tolist() if routing is not None else None  # [path_len - 1][layers x top_k]
    row["group_id"] = session_group
    row["untrainable"] = call.untrainable
    row["format_version"] = FORMAT_VERSION
    return row


def iter_rows(
    reader: TrajectoryReader, kind: str, group_id: str | None, refused: list[Refused] | None = None
) -> Iterator[dict[str, Any]]:
    # an export is for people: unfinished sessions are included too
    for session in reader.sessions(group_id=group_id):
        if kind == "calls":
            for call in reader.calls(session.session_id):
                yield call_dict(call, session.group_id)
        else:
            for sample in session_samples(reader, session, refused):
                yield sample_record(sample)


def export(
    store: str | Path,
    out: str | Path,
    *,
    fmt: str = "jsonl",
    kind: str = "calls",
    group_id: str | None = None,
    refused: list[Refused] | None = None,
) -> int:
    """Write the rows to `out`; returns how many were written. A samples export adds the calls
    it left out (not training data) to `refused`."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if kind not in KINDS:
        raise ValueError(f"unknown export kind {kind!r}; expected one of {', '.join(KINDS)}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with TrajectoryReader(store) as reader:
        rows = iter_rows(reader, kind, group_id, refused)
        if fmt == "jsonl":
            return _write_jsonl(rows, out)
        return _write_parquet(rows, out, kind)


def _write_jsonl(rows: Iterator[dict[str, Any]], out: Path) -> int:
    count = 0
    with out.open("wb") as fh:
        for row in rows:
            fh.write(orjson.dumps(row, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
            count += 1
    return count


def _parquet_schema(pa: Any, kind: str) -> Any:
    text, i64, f64 = pa.string(), pa.int64(), pa.float64()
    if kind == "calls":
        columns = [
            ("call_id", text),
            ("session_id", text),
            ("group_id", text),
            ("agent_id", text),
            ("parent_agent", text),
            ("seq", i64),
            ("endpoint", text),
            ("backend", text),
            ("model", text),
            ("adapter", text),
            ("parent_call_id", text),
            ("shared_prefix_len", i64),
            ("kind", text),
            ("reuse", text),
            ("prompt_ids", pa.list_(pa.int32())),
            ("sampled_ids", pa.list_(pa.int32())),
            ("sampled_logprobs", pa.list_(f64)),
            ("routed_experts", pa.list_(pa.list_(pa.int16()))),
            ("finish_reason", text),
            ("sampling_params", text),
            ("weight_version", text),
            ("timings", text),
            ("request", text),
            ("response", text),
            ("created_at", f64),
            ("prompt_key", text),
            ("reply_key", text),
            ("render_len", i64),
            ("render_digest", text),
            ("turns_before", i64),
            ("images", text),
            ("untrainable", text),
            ("format_version", i64),
        ]
    else:
        columns = [
            ("session_id", text),
            ("group_id", text),
            ("agent_id", text),
            ("tokens", pa.list_(pa.int32())),
            ("loss_mask", pa.list_(pa.int8())),
            ("rollout_logprobs", pa.list_(f64)),
            ("token_call", pa.list_(pa.int32())),
            ("calls", text),
            ("reward", f64),
            ("advantages", pa.list_(f64)),
            ("task", text),
            ("parent_agent", text),
            ("leaf_call_id", text),
            ("call_ids", pa.list_(text)),
            ("finish_reason", text),
            ("images", pa.list_(text)),
            ("routed_experts", pa.list_(pa.list_(pa.int16()))),  # [tokens][layers x top_k], R3
            ("teacher_logprobs", pa.list_(f64)),
            ("format_version", i64),
        ]
    return pa.schema(columns)


def _write_parquet(rows: Iterator[dict[str, Any]], out: Path, kind: str, batch_rows: int = 1024) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _parquet_schema(pa, kind)
    # Free-form objects (messages, task metadata, finish reasons) go in as JSON text: their
    # shape differs from row to row, which a Parquet schema cannot hold.
    json_columns = {f.name for f in schema if f.type == pa.string()}

    def flatten(row: dict[str, Any]) -> dict[str, Any]:
        return {
            k: (orjson.dumps(v).decode() if k in json_columns and not isinstance(v, str) and v is not None else v)
            for k, v in row.items()
        }

    count = 0
    with pq.ParquetWriter(str(out), schema) as writer:
        batch: list[dict[str, Any]] = []
        for row in rows:
            batch.append(flatten(row))
            if len(batch) >= batch_rows:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                count += len(batch)
                batch = []
        writer.write_table(pa.Table.from_pylist(batch, schema=schema))
        count += len(batch)
    return count
