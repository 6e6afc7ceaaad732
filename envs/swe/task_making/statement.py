"""The problem statement of a made task: the failing tests and what they report, from a template.

Written as a user's bug report would be: which tests fail and how, never where the bug is.
"""

from __future__ import annotations

MAX_TESTS = 5
MAX_MESSAGE = 300

TEMPLATE = """{project} {version}: {count} of its own tests fail.

After a recent change, these tests of {project}'s test suite fail:

{failures}

They passed before, and the library's documented behaviour has not changed. Find the cause in
{project}'s source and fix it there so that these tests pass again; do not change the tests,
and keep the rest of the test suite passing."""


def problem_statement(project: str, version: str, failing: list[str], output: str) -> str:
    messages = failure_messages(output)
    lines = []
    for name in failing[:MAX_TESTS]:
        message = messages.get(name, "")
        lines.append(f"- `{name}`" + (f"\n  {message}" if message else ""))
    if len(failing) > MAX_TESTS:
        lines.append(f"- ... and {len(failing) - MAX_TESTS} more")
    noun = "one" if len(failing) == 1 else str(len(failing))
    return TEMPLATE.format(project=project, version=version, count=noun, failures="\n".join(lines))


def failure_messages(output: str) -> dict[str, str]:
    """Test name → the message pytest's short summary gives for it (`FAILED name - message`)."""
    messages = {}
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")) and " - " in line:
            name, message = line.split(" ", 1)[1].split(" - ", 1)
            message = message.strip()
            messages[name.strip()] = message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE] + " ..."
    return messages
