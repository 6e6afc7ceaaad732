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


def run(command: list[str] | str, *, shell: bool, env: dict[str, str], timeout_s: float,
        cwd: str | None = None, merge_stderr: bool = False) -> Completed:
    """Runs to completion or to `timeout_s`, when its whole process group is killed."""
    proc = subprocess.Popen(command, shell=shell, env=env, cwd=cwd or env.get("HOME"), text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                            start_new_session=True, errors="replace")
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return Completed(proc.returncode, out or "", err or "")
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        return Completed(None, out or "", (err or "") + f"\ntimed out after {timeout_s:g}s; killed",
                         timed_out=True)


def run_python(code: str, *, python: str, env: dict[str, str], timeout_s: float) -> Completed:
    """The code as a script file (tracebacks name its lines), run by the desktop's python."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", prefix="roost-run-", delete=False) as script:
        script.write(code)
    try:
        return run([python, script.name], shell=False, env=env, timeout_s=timeout_s)
    finally:
        os.unlink(script.name)


def run_bash(script: str, *, env: dict[str, str], timeout_s: float, cwd: str | None) -> Completed:
    with tempfile.NamedTemporaryFile("w", suffix=".sh", prefix="roost-run-", delete=False) as file:
        file.write(script if "#!/bin/bash" in script else "#!/bin/bash\n\n" + script)
    try:
        return run(["/bin/bash", file.name], shell=False, env=env, timeout_s=timeout_s, cwd=cwd,
                   merge_stderr=True)
    finally:
        os.unlink(file.name)


def spawn(command: list[str] | str, *, shell: bool, env: dict[str, str]) -> int:
    """Starts a program and leaves it running (an app); its pid."""
    proc = subprocess.Popen(command, shell=shell, env=env, cwd=env.get("HOME"), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    return proc.pid


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
