"""A scripted-sampler rule set that plays each Hermes task with its reference solution.

For `roost engine --sampler scripted --script FILE`: the rule matching a task's instruction
answers with hermes-agent's own `terminal` tool call running the task's `solution`; the
command's result (hermes-agent's JSON, `"exit_code": N`) is answered with a closing message.
The whole pipeline (gateway session, the env's hermes-agent, its sandboxed tools, the
verifier, the recorded trajectory) then runs end to end without a trained model.
"""

from __future__ import annotations

import json
import re

from .task import HermesTask

DONE = "Done: the task is complete."


def tool_call(name: str, arguments: dict) -> str:
    """A tool call in the Qwen/Hermes format the gateway parses (`<tool_call>{json}</tool_call>`)."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def solution_rules(tasks: list[HermesTask]) -> dict:
    rules = [{"match": None, "reply": "I could not finish the task."}, {"match": r'"exit_code": -?\d+', "reply": DONE}]
    for task in tasks:
        if task.solution:
            rules.append(
                {"match": re.escape(task.instruction), "reply": tool_call("terminal", {"command": task.solution})}
            )
    return {"rules": rules}
