"""Stores and run folders the viewer cannot fully read: a clear page each time, and it keeps serving."""

from __future__ import annotations

import sqlite3
from array import array
from html import unescape
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from roost.cli.main import build_app as build_cli
from roost.rollout.store.records import CallRecord, SessionRecord
from roost.rollout.store.trajectory_store import TrajectoryStore
from roost.tests.viewer.conftest import viewer_server
from roost.viewer.app import ViewerConfig

MILLION = 1_000_000


def page(url: str, path: str, status: int) -> str:
    response = httpx.get(url + path)
    assert response.status_code == status, response.text[:400]
    return unescape(response.text)


def test_older_schema_store_is_named_on_every_page(tmp_path):
    store = tmp_path / "old.sqlite"
    with sqlite3.connect(store) as conn:  # a store from before calls had weight versions and token blobs
        conn.executescript(
            "CREATE TABLE sessions (session_id TEXT, group_id TEXT, status TEXT);"
            "CREATE TABLE calls (call_id TEXT, session_id TEXT, messages TEXT);"
        )
    with viewer_server(ViewerConfig(store=store)) as url:
        assert "older schema" in page(url, "/", 200)  # the run page still renders
        text = page(url, "/groups", 400)
        assert "older schema" in text and "calls.weight_version" in text and "export it with the roost" in text
        assert page(url, "/health", 200) == "ok"


def test_a_file_that_is_not_a_store(tmp_path):
    store = tmp_path / "notes.sqlite"
    store.write_text("these are not the trajectories you are looking for\n" * 100)
    with viewer_server(ViewerConfig(store=store)) as url:
        assert "is not a trajectory store" in page(url, "/sessions/x", 400)


def test_half_written_run_folder(tmp_path):
    (tmp_path / "evals.json").write_text('{"before": {"split": "valid_un')
    (tmp_path / "metrics.jsonl").write_text('{"stage": "sft", "step": 0, "loss": 2.5}\n{"stage": "sf')
    with viewer_server(ViewerConfig(run_dir=tmp_path)) as url:
        run = page(url, "/", 200)
        assert "evals.json is not a JSON object (half-written?)" in run
        assert "metrics.jsonl: 1 line(s) could not be read" in run and 'data-metric="loss"' in run
        assert "no trajectory store at" in run and "trajectories.sqlite" in run
        assert "no trajectory store at" in page(url, "/groups", 400)


async def one_call_store(folder, session_id: str, **call) -> Path:
    """A store holding one session with one call, written by the store's own writer."""
    path = folder / "trajectories.sqlite"
    store = TrajectoryStore(path).open()
    try:
        await store.create_session(SessionRecord(session_id=session_id, key_hash="h", group_id="g"))
        await store.record_call(
            CallRecord(
                session_id=session_id,
                agent_id="main",
                parent_agent=None,
                seq=0,
                endpoint="chat",
                parent_call_id=None,
                shared_prefix_len=0,
                kind="root",
                reuse="none",
                sampling_params={},
                timings={},
                response={"message": {"role": "assistant", "content": "ok"}},
                created_at=0.0,
                **call,
            )
        )
    finally:
        store.close()
    return path


@pytest.fixture
async def huge_call_store(tmp_path):
    """A store holding one call of a million prompt tokens."""
    return await one_call_store(
        tmp_path,
        "big",
        call_id="huge",
        backend="embedded",
        model="unknown-model",
        prompt_ids=array("i", (i % 5000 for i in range(MILLION))),
        sampled_ids=array("i", [7, 8]),
        sampled_logprobs=array("d", [-0.1, -2.0]),
        finish_reason={"type": "length"},
        weight_version="3",
        request={"messages": [{"role": "user", "content": "x" * MILLION}]},
    )


def test_a_call_of_a_million_tokens_pages(huge_call_store):
    with viewer_server(ViewerConfig(store=huge_call_store)) as url:
        first = httpx.get(url + "/calls/huge")
        assert first.status_code == 200 and len(first.content) < 1_000_000
        text = unescape(first.text)
        assert f"Tokens 0–2000 of {MILLION + 2}" in text and "no tokenizer found: ids shown" in text
        assert "[996000 more characters]" in text  # the message text is cut, not sent whole
        last = page(url, f"/calls/huge?start={MILLION - 1}", 200)
        assert f"Tokens {MILLION - 1}–{MILLION + 2} of" in last
        assert "⟨4999⟩" in last and "⟨7⟩" in last and "logprob -2.0000" in last and "weights v3" in last
        assert "past its end" in page(url, f"/calls/huge?start={MILLION + 50}", 200)
        assert f"{MILLION}+2 tokens" in page(url, "/sessions/big", 200)


async def test_a_call_with_ids_but_no_logprobs_shows_its_sampled_tokens(tmp_path):
    # the openai pass-through stores what its upstream returned: here ids without logprobs
    await one_call_store(
        tmp_path,
        "pt",
        call_id="nolp",
        backend="openai",
        model="upstream",
        prompt_ids=array("i", [11, 12]),
        sampled_ids=array("i", [21, 22, 23]),
        sampled_logprobs=array("d"),
        finish_reason={"type": "stop"},
        weight_version="upstream",
        request={"messages": [{"role": "user", "content": "hi"}]},
    )
    with viewer_server(ViewerConfig(store=tmp_path / "trajectories.sqlite")) as url:
        text = page(url, "/calls/nolp", 200)
        assert "Tokens 0–5 of 5" in text
        assert "⟨23⟩" in text and "id 23" in text and "(no logprob)" in text


def test_view_binds_loopback_only(tmp_path):
    result = CliRunner().invoke(build_cli(), ["view", str(tmp_path), "--host", "0.0.0.0"])
    assert result.exit_code != 0 and "loopback only" in result.output
    result = CliRunner().invoke(build_cli(), ["view"])
    assert result.exit_code != 0 and "give a run folder" in result.output


async def test_trace_ids_link_to_a_tracing_ui_only_when_well_formed(tmp_path):
    trace = "0af7651916cd43dd8448eb211c80319c"
    for folder, session, trace_id in ((tmp_path / "ok", "t1", trace), (tmp_path / "odd", "t2", "x" + trace[1:])):
        folder.mkdir()
        await one_call_store(
            folder,
            session,
            call_id=session,
            backend="embedded",
            model="m",
            prompt_ids=array("i", [1]),
            sampled_ids=array("i", [2]),
            sampled_logprobs=array("d", [-0.5]),
            finish_reason={"type": "stop"},
            weight_version="0",
            request={"messages": [{"role": "user", "content": "hi"}]},
            trace_id=trace_id,
            span_id="b7ad6b7169203331",
        )
    jaeger = "http://127.0.0.1:16686/trace/{trace_id}"
    with viewer_server(ViewerConfig(store=tmp_path / "ok" / "trajectories.sqlite", trace_url=jaeger)) as url:
        assert f'<a href="http://127.0.0.1:16686/trace/{trace}"><code>{trace}</code></a>' in page(url, "/calls/t1", 200)
    with viewer_server(ViewerConfig(store=tmp_path / "ok" / "trajectories.sqlite")) as url:
        text = page(url, "/calls/t1", 200)
        assert f"trace <code>{trace}</code>" in text and "16686" not in text
    with viewer_server(ViewerConfig(store=tmp_path / "odd" / "trajectories.sqlite", trace_url=jaeger)) as url:
        text = page(url, "/calls/t2", 200)  # a stored id that is not a W3C trace id is shown, never linked
        assert "x" + trace[1:] in text and "16686" not in text


@pytest.mark.parametrize(
    "template",
    ["http://jaeger/trace/", "http://jaeger/{trace_id}/{span_id}", "javascript:{trace_id}", "http://jaeger/{trace_id"],
)
def test_a_trace_url_without_one_trace_id_field_is_refused(tmp_path, template):
    result = CliRunner().invoke(build_cli(), ["view", str(tmp_path), "--trace-url", template])
    assert result.exit_code == 2 and "--trace-url" in result.output and "{trace_id}" in result.output
