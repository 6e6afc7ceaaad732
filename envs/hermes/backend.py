"""hermes-agent's terminal backend over a roost Sandbox.

hermes-agent runs every terminal command, and every file tool (read_file, write_file, patch
and search_files are shell pipelines), through one `BaseEnvironment` per task id, kept in
`tools.terminal_tool._active_environments`. `SandboxTerminal` is such an environment whose
commands run in a roost `Sandbox` (the way hermes-agent's own Modal backend wraps an async
SDK); `attach` registers it for one conversation, as hermes-agent's RL environments register
their per-task sandboxes, and `detach` removes it.

`install_backend` (once per process; see process.py) makes "roost" a backend hermes-agent
knows: its terminal and file tools are offered (their availability checks otherwise probe
the configured backend), paths are sandbox paths (never resolved against the host's
filesystem), and the system prompt describes a sandbox instead of the host's OS, home and
working directory.

This module imports hermes-agent; import it only after `process.prepare_process`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import shlex
import threading
import time
import uuid
from typing import Any

from tools.environments.base import BaseEnvironment, _ThreadedProcessHandle

from roost.sandboxes import ExecResult, Outcome, Sandbox

BACKEND = "roost"
SANDBOX_TOOLS = ("terminal", "process", "read_file", "write_file", "patch", "search_files")
EXIT_TIMEOUT = 124
EXIT_KILLED = 137


def install_backend() -> None:
    import agent.prompt_builder as prompt_builder
    import model_tools  # noqa: F401 - importing it registers the built-in tools
    import tools.terminal_tool as terminal_tool
    from tools.registry import registry

    terminal_tool._CONTAINER_BACKENDS = terminal_tool._CONTAINER_BACKENDS | {BACKEND}
    prompt_builder._REMOTE_TERMINAL_BACKENDS = prompt_builder._REMOTE_TERMINAL_BACKENDS | {BACKEND}
    prompt_builder._BACKEND_FALLBACK_DESCRIPTIONS[BACKEND] = "a roost sandbox (Linux)"
    for name in SANDBOX_TOOLS:
        entry = registry.get_entry(name)
        if entry is None:
            raise RuntimeError(
                f"hermes-agent has no tool {name!r}; roost's Hermes env supports hermes-agent "
                "0.19 (pip install --no-deps hermes-agent==0.19.0)"
            )
        entry.check_fn = _sandbox_tools_available


def _sandbox_tools_available() -> bool:
    return True


class SandboxTerminal(BaseEnvironment):
    """Commands of one hermes-agent conversation, run in one roost sandbox.

    The sandbox belongs to an event loop on another thread (`loop`); hermes-agent calls from
    its own threads, so each command is handed over with `run_coroutine_threadsafe`. Sandboxes
    take no stdin, and hermes-agent's own fallback (a heredoc appended to the script) feeds
    only the script's last command, so stdin (file contents of write_file and patch) goes
    through a file in the sandbox's scratch folder.
    """

    def __init__(
        self,
        sandbox: Sandbox,
        loop: asyncio.AbstractEventLoop,
        *,
        timeout: int = 180,
        env: dict[str, str] | None = None,
    ) -> None:
        self._sandbox = sandbox
        self._loop = loop
        self._closed = threading.Event()
        super().__init__(cwd=sandbox.workdir, timeout=timeout, env=env)
        # Kept past the end of a turn: the verifier still runs in this sandbox (roost closes it).
        self._persistent = True

    def get_temp_dir(self) -> str:
        # hermes-agent keeps its shell snapshot here between commands: the sandbox's own
        # scratch folder, which lasts as long as the sandbox.
        return self._sandbox.scratch_dir

    def _run_bash(
        self, cmd_string: str, *, login: bool = False, timeout: int = 120, stdin_data: str | None = None
    ) -> Any:
        future: concurrent.futures.Future | None = None

        def run() -> tuple[str, int]:
            nonlocal future
            if self._closed.is_set():
                return "[the episode's sandbox is closed]", EXIT_KILLED
            # The sandbox's own limit comes first, so a runaway command is killed with its children.
            limit = max(float(timeout) - 1.0, 1.0)
            future = asyncio.run_coroutine_threadsafe(self._exec(cmd_string, stdin_data, limit), self._loop)
            result = future.result()
            if result.outcome is Outcome.exited and result.exit_code is not None:
                return result.output, result.exit_code
            note = {
                Outcome.timeout: f"\n[Command timed out after {timeout}s]",
                Outcome.output_limit: "\n[Command killed: it printed past the sandbox's output limit]",
                Outcome.oom_killed: "\n[Command killed: out of memory]",
            }.get(result.outcome, "")
            return result.output + note, EXIT_TIMEOUT if result.outcome is Outcome.timeout else EXIT_KILLED

        def cancel() -> None:
            if future is not None:
                future.cancel()

        return _ThreadedProcessHandle(run, cancel_fn=cancel)

    async def _exec(self, command: str, stdin_data: str | None, timeout_s: float) -> ExecResult:
        if stdin_data is None:
            return await self._sandbox.exec(command, timeout_s=timeout_s)
        path = f"{self._sandbox.scratch_dir.rstrip('/')}/hermes-stdin-{uuid.uuid4().hex}"
        await self._sandbox.write_file(path, stdin_data)
        quoted = shlex.quote(path)
        # A subshell, so the script's own `exit` still lets the stdin file be removed.
        wrapped = f"(\n{command}\n) < {quoted}; __roost_rc=$?; rm -f {quoted}; exit $__roost_rc"
        return await self._sandbox.exec(wrapped, timeout_s=timeout_s)

    def cleanup(self) -> None:
        self._closed.set()


def attach(task_id: str, terminal: SandboxTerminal) -> None:
    """Make `terminal` the backend of hermes-agent's tools for conversations run with `task_id`."""
    import tools.terminal_tool as terminal_tool

    # An override naming a backend is what hermes-agent reads as "isolate this task"; the cwd
    # override makes relative file-tool paths resolve in the sandbox's working directory.
    terminal_tool.register_task_env_overrides(task_id, {"env_type": BACKEND, "cwd": terminal.cwd})
    with terminal_tool._env_lock:
        terminal_tool._active_environments[task_id] = terminal
        terminal_tool._last_activity[task_id] = time.time()


def detach(task_id: str) -> None:
    import tools.terminal_tool as terminal_tool

    try:
        from tools.file_tools import clear_file_ops_cache

        clear_file_ops_cache(task_id)
    except ImportError:
        pass
    with terminal_tool._env_lock:
        terminal = terminal_tool._active_environments.pop(task_id, None)
        terminal_tool._last_activity.pop(task_id, None)
    terminal_tool.clear_task_env_overrides(task_id)
    if terminal is not None:
        terminal.cleanup()
