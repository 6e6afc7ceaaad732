"""Reading an offline W&B run file (`run-<id>.wandb`) back, to check what the trainer logged.

W&B writes its records as protobufs (`wandb_internal_pb2.Record`) in LevelDB's log format: after
a 7-byte file header (`:W&B`, magic, version), 32 KiB blocks of chunks, each with a 7-byte header
(CRC-32, length, type: a whole record, or its first, middle or last part)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def raw_records(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B run file (it starts {data[:4]!r})")
    pos, pending = HEADER, b""
    while pos + HEADER <= len(data):
        room = BLOCK - pos % BLOCK
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        if room < HEADER or kind == 0:  # the block's zero padding
            pos += room
            continue
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            yield pending + chunk


def history(path: Path) -> list[dict]:
    """The rows `wandb.log` wrote, in order: {key: value}, W&B's own `_step`, `_runtime`... included."""
    from wandb.proto import wandb_internal_pb2

    rows = []
    for raw in raw_records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.HasField("history"):
            rows.append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
    return rows


def finished_history(path: Path, timeout_s: float = 60.0) -> list[dict]:
    """`history` once the run file holds its exit record: `wandb.finish()` may return while W&B's
    service process is still writing the file (seen here on a loaded machine)."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2

    deadline = time.monotonic() + timeout_s
    while True:
        kinds = []
        try:
            for raw in raw_records(path):
                record = wandb_internal_pb2.Record()
                record.ParseFromString(raw)
                kinds.append(record.WhichOneof("record_type"))
        except DecodeError:  # a record still being written
            pass
        if "exit" in kinds or time.monotonic() > deadline:
            return history(path)
        time.sleep(0.2)
