"""The demo's gateway tour records a token-exact tool-calling conversation and prints it."""

import pytest
from rich.console import Console

from roost.rollout.gateway.tour import run_tour

pytestmark = pytest.mark.slow


def test_tour_prints_the_recorded_calls():
    console = Console(record=True, width=140)
    run_tour(console)
    text = console.export_text()
    assert "call 0 kind=root" in text
    assert "call 1 kind=extend reuse=exact" in text
    assert "'</tool_call>'" in text and "' sunny'" in text
    assert "<tool_response>" in text  # the tool result is the only new text of call 1
