"""Commands run inside the desktop, each in its own process group, killed at its timeout.

Answers use the field names of OSWorld's in-VM server (`status`, `output`, `error`,
`returncode`), plus `timed_out` so a client can tell an endless loop from a failure.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Completed:
    returncode: int | None
    output: str
    error: str
    timed_out: bool = False


def as_argv(command: list[str] | str, shell: bool) -> list[str] | str:
    """OSWorld's rules: a string without `shell` is split like a shell would; `~/` args expand."""
    if isinstance(command, str) and not shell:
        command = shlex.split(command)
    if isinstance(command, list):
        command = [os.path.expanduser(a) if a.startswith("~/") else a for a in command]
    return command


def run(
    command: list[str] | str,
    *,
    shell: bool,
    env: dict[str, str],
    timeout_s: float,
    cwd: str | None = None,
    merge_stderr: bool = False,
) -> Completed:
    """Runs to completion or to `timeout_s`, when its whole process group is killed."""
    proc = subprocess.Popen(
        command,
        shell=shell,
        env=env,
        cwd=cwd or env.get("HOME"),
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        start_new_session=True,
        errors="replace",
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return Completed(proc.returncode, out or "", err or "")
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        out, err = proc.communicate()
        return Completed(None, out or "", (err or "") + f"\ntimed out after {timeout_s:g}s; killed", timed_out=True)


@contextmanager
def script_file(text: str, suffix: str) -> Iterator[str]:
    """The text as a file for the time of the block (tracebacks then name its lines)."""
    with tempfile.NamedTemporaryFile("w", suffix=suffix, prefix="roost-run-", delete=False) as file:
        file.write(text)
    try:
        yield file.name
    finally:
        os.unlink(file.name)


def run_bash(script: str, *, env: dict[str, str], timeout_s: float, cwd: str | None) -> Completed:
    with script_file(script if "#!/bin/bash" in script else "#!/bin/bash\n\n" + script, ".sh") as path:
        return run(["/bin/bash", path], shell=False, env=env, timeout_s=timeout_s, cwd=cwd, merge_stderr=True)


def spawn(command: list[str] | str, *, shell: bool, env: dict[str, str]) -> int:
    """Starts a program and leaves it running (an app); its pid."""
    proc = subprocess.Popen(
        command,
        shell=shell,
        env=env,
        cwd=env.get("HOME"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return proc.pid


def kill_group(pid: int) -> None:
    """SIGKILLs the process group `pid` leads (gone already: nothing to do)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
