"""The live progress of `roost train` and `roost demo` (`roost.trainer.progress`), driven through
the loop's hooks as a run calls them and read back from what the console printed."""

from __future__ import annotations

import io
import re

from rich.console import Console

from roost.trainer.metrics import console_line
from roost.trainer.progress import progress_hooks


def test_each_stage_gets_a_bar_and_metric_lines_print_as_written():
    out = io.StringIO()
    with progress_hooks(Console(file=out, width=120, force_terminal=False)) as hooks:
        hooks.stage("sft", 2)
        hooks.advance("sft", 2, {"loss": 1.25})
        hooks.stage("rl", 3)
        hooks.echo(console_line("rl", 1, {"reward": 0.5, "success": 0.25}))
        hooks.advance("rl", 1, {"success": 0.25})
    text = out.getvalue()
    assert "[rl 1]  reward 0.500  success 0.25" in text  # brackets and all: no rich markup
    bars = {m.group(1): line for line in text.splitlines() if (m := re.search(r"(\w+) +━", line))}
    sft, rl = bars["sft"], bars["rl"]
    assert "2/2" in sft and "loss 1.250" in sft
    assert "1/3" in rl and "success 0.25" in rl
