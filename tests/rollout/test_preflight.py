"""`roost preflight --model tiny` finds Qwen3's non-extending turns and says what happens."""

from __future__ import annotations

import json
import subprocess
import sys

from roost.rollout.gateway.preflight import run_preflight


def test_preflight_reports_reasoning_turns():
    report = run_preflight("tiny")
    assert report.ok and report.segmented_tokenization and report.control_text_as_text
    by_scenario: dict[str, list] = {}
    for check in report.checks:
        if check.wire == "chat":
            by_scenario.setdefault(check.scenario, []).append(check)
    assert all(c.exact for c in by_scenario["plain multi-turn"])
    assert all(c.exact for c in by_scenario["tool call and result"])
    assert all(c.exact for c in by_scenario["parallel tool calls"])
    reasoning = by_scenario["reasoning, plain replies"]
    assert [c.exact for c in reasoning] == [True, False, False]
    assert "keeps the sampled reply" in reasoning[1].keep and "forks" in reasoning[1].drop
    assert "re-renders the reply differently" in reasoning[1].detail
    chain = by_scenario["reasoning with tool calls"]
    assert [c.exact for c in chain] == [True, True, False, True]  # only the new user turn drops reasoning
    for check in report.checks:
        if check.exact:
            assert check.retokenizes_equal, check


def test_preflight_plays_every_wire_alike():
    """Messages and Responses carry each scenario to the same plans as chat: every turn that
    extends on chat extends on them (Responses has no template arguments: it skips one)."""
    report = run_preflight("tiny")
    by_wire: dict[str, dict] = {}
    for check in report.checks:
        by_wire.setdefault(check.wire, {})[(check.scenario, check.turn)] = (check.exact, check.keep, check.drop)
    assert set(by_wire) == {"chat", "messages", "responses"}
    assert by_wire["messages"] == by_wire["chat"]
    assert ("thinking disabled", 1) not in by_wire["responses"]
    assert by_wire["responses"] == {k: v for k, v in by_wire["chat"].items() if k[0] != "thinking disabled"}


def test_preflight_cli_json():
    out = subprocess.run(
        [sys.executable, "-m", "roost.cli.main", "preflight", "--model", "tiny", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] and any(not t["exact"] for t in report["turns"])
