"""A real OTLP receiver for the tracing tests: Arize Phoenix (`make phoenix` builds `.venv-phoenix`).

    with PhoenixServer(tmp_path) as phoenix:          # OTLP/HTTP at phoenix.url (/v1/traces)
        spans = phoenix.trace(trace_id, names={...})  # read back through its REST API
        [step] = phoenix.named("train.step")           # spans of any trace, by name

Phoenix's dependencies clash with roost's pins, so it runs from its own virtualenv. The tests
are skipped without one, except with ROOST_REQUIRE_PHOENIX=1 (CI), where they fail.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from roost.lifetime import die_with_parent, stop_process
from roost.rollout.engine_api.vllm_launch import checkout_dir

PHOENIX_BIN_ENV = "ROOST_PHOENIX_BIN"
STARTUP_S = 180.0


def phoenix_bin() -> Path:
    """`phoenix` of `.venv-phoenix` (or $ROOST_PHOENIX_BIN); skips the test without one, fails it
    with ROOST_REQUIRE_PHOENIX=1."""
    given = os.environ.get(PHOENIX_BIN_ENV)
    venv = checkout_dir() / ".venv-phoenix"
    binary = Path(given) if given else venv / "bin" / "phoenix"
    if binary.is_file() and (given or (venv / ".stamp-install").is_file()):
        return binary
    reason = f"no Phoenix at {binary} (run `make phoenix`, or set ${PHOENIX_BIN_ENV})"
    if os.environ.get("ROOST_REQUIRE_PHOENIX") == "1":
        pytest.fail(f"ROOST_REQUIRE_PHOENIX=1 but {reason}")
    pytest.skip(reason)


@dataclass
class Span:
    """A span as Phoenix stores it."""

    name: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, Any]
    trace_id: str = ""

    @classmethod
    def of(cls, raw: dict[str, Any]) -> Span:
        return cls(
            raw["name"],
            raw["context"]["span_id"],
            raw.get("parent_id"),
            raw.get("attributes") or {},
            raw["context"]["trace_id"],
        )


SERVING_LINE = re.compile(rb"Uvicorn running on http://[^\s:]+:(\d+)")
"""uvicorn's start line, which names the port it bound (Phoenix's own banner repeats port 0)."""


class PhoenixServer:
    """`phoenix serve` on 127.0.0.1, its database in `folder`; a context manager. Phoenix binds
    port 0 (the OS picks: no port is chosen before it is bound) and its HTTP port is read from
    its log; its gRPC receiver, unused here, gets one too."""

    def __init__(self, folder: Path):
        self.port = 0
        self.url = ""
        self.env = {
            **os.environ,
            "PHOENIX_PORT": "0",
            "PHOENIX_GRPC_PORT": "0",
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_WORKING_DIR": str(folder),
            "PHOENIX_TELEMETRY_ENABLED": "false",
        }
        self.log = folder / "phoenix.log"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> PhoenixServer:
        binary = phoenix_bin()
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [str(binary), "serve"], env=self.env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent()
            )
        deadline = time.monotonic() + STARTUP_S
        while not self._serving():
            if self.process.poll() is not None or time.monotonic() > deadline:
                stop_process(self.process)
                raise RuntimeError(
                    f"phoenix serve did not come up on 127.0.0.1 ({self.url or 'no port reported'}); "
                    f"its log:\n{self.log.read_text()[-3000:]}"
                )
            time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        stop_process(self.process)

    def _serving(self) -> bool:
        if not self.port:
            found = SERVING_LINE.search(self.log.read_bytes())
            if found is None:
                return False
            self.port = int(found.group(1))
            self.url = f"http://127.0.0.1:{self.port}"
        return self._healthy()

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def spans(self, trace_id: str) -> list[Span]:
        return self._query({"trace_id": trace_id})

    def named(self, name: str, wait_s: float = 60.0) -> list[Span]:
        """The spans called `name`, of every trace, once one has arrived (or none by `wait_s`)."""
        deadline = time.monotonic() + wait_s
        while not (spans := self._query({"name": name})) and time.monotonic() < deadline:
            time.sleep(0.5)
        return spans

    def _query(self, filters: dict[str, str]) -> list[Span]:
        answer = httpx.get(f"{self.url}/v1/projects/default/spans", params={**filters, "limit": 1000}, timeout=10.0)
        if answer.status_code == 404:  # no project yet: nothing has arrived
            return []
        answer.raise_for_status()
        return [Span.of(raw) for raw in answer.json()["data"]]

    def trace(self, trace_id: str, names: set[str], wait_s: float = 60.0) -> list[Span]:
        """The spans of `trace_id` once every one of `names` has arrived (or what arrived by `wait_s`)."""
        deadline = time.monotonic() + wait_s
        while True:
            spans = self.spans(trace_id)
            if names <= {s.name for s in spans} or time.monotonic() > deadline:
                return spans
            time.sleep(0.5)
