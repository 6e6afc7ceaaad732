"""One hermes-agent conversation (`AIAgent.run_conversation`) on its own thread.

hermes-agent's loop is synchronous and runs for minutes; the env's requests must stay short.
So the conversation runs on a thread from `start`, and `wait` (awaitable) returns when it ends
or after a timeout. The tool calls seen so far are kept for the env's progress observations.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

# hermes-agent's classification of an API failure (its FailoverReason) that means the endpoint,
# not the policy, failed: the episode is then not scored.
ENDPOINT_FAILURES = {
    "timeout",
    "server_error",
    "overloaded",
    "rate_limit",
    "upstream_rate_limit",
    "auth",
    "auth_permanent",
    "billing",
    "model_not_found",
    "ssl_cert_verification",
    "unknown",
}


@dataclass(frozen=True)
class AgentSettings:
    """How the episode's AIAgent is built."""

    base_url: str
    api_key: str
    model: str
    max_iterations: int
    toolsets: tuple[str, ...]
    max_tokens: int | None = None
    temperature: float | None = None


@dataclass
class Outcome:
    """What the conversation left: hermes-agent's own result dict, or the error that ended it."""

    result: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None
    endpoint_error: str | None = None
    """The model endpoint's last refusal (e.g. the gateway's 400 for a prompt past the window):
    hermes-agent only logs it, and its own `error` names its estimate instead."""

    @property
    def status(self) -> str:
        """finished | max_iterations | context_length | model_unavailable | failed | crashed"""
        if self.error is not None:
            return "crashed"
        r = self.result
        reason = str(r.get("turn_exit_reason") or "")
        if r.get("completed"):
            return "finished"
        if r.get("compression_exhausted"):  # the conversation outgrew the window, compressing did not help
            return "context_length"
        exhausted = str(r.get("final_response") or "").startswith("API call failed after")
        if reason == "all_retries_exhausted_no_response" or (
            r.get("failed") and (exhausted or r.get("failure_reason") in ENDPOINT_FAILURES)
        ):
            return "model_unavailable"
        if reason.startswith("max_iterations_reached") or reason == "budget_exhausted":
            return "max_iterations"
        return "failed"


HERMES_LOOP_LOGGER = "agent.conversation_loop"
"""hermes-agent's agent loop; it logs each failed model call there, with the endpoint's answer."""


class EndpointRefusals(logging.Handler):
    """Keeps what the model endpoint last answered to a failed call of one conversation (its thread)."""

    def __init__(self, thread: int) -> None:
        super().__init__(logging.WARNING)
        self.thread = thread
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread != self.thread:
            return
        message = record.getMessage()
        if message.startswith("API call failed"):
            # "API call failed (attempt 1/3) error_type=BadRequestError ... summary=HTTP 400: ..."
            self.last = message.partition(" summary=")[2] or message


class Conversation:
    def __init__(self, settings: AgentSettings, instruction: str, task_id: str, terminal: Any) -> None:
        self.settings, self.instruction, self.task_id, self.terminal = settings, instruction, task_id, terminal
        self.tool_calls: list[str] = []
        self.api_calls = 0
        self._done: concurrent.futures.Future[Outcome] = concurrent.futures.Future()
        self._agent: Any = None
        self._finished = False
        self._finishing = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"hermes-{task_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    async def wait(self, timeout_s: float) -> Outcome | None:
        """The outcome, or None if the conversation is still running after `timeout_s`."""
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(self._done)), timeout_s)
        except TimeoutError:
            return None

    def interrupt(self) -> None:
        """Ask a running agent to stop (it finishes its current tool or model call first). A
        finished one is left alone: hermes-agent marks an interrupt on its thread's id, the mark
        outlives the thread, and a later thread given the same id (another episode's) saw its
        commands end `[Command interrupted]` at once."""
        with self._finishing:
            if self._agent is not None and not self._finished:
                self._agent.interrupt("the roost episode was closed")

    def _run(self) -> None:
        from agent.thread_scoped_output import thread_scoped_silence

        # hermes-agent prints its progress even in quiet mode; an env server's stdout is not
        # the place (`roost eval --json` writes there). Its log is in HERMES_HOME/logs.
        refusals = EndpointRefusals(threading.get_ident())
        log = logging.getLogger(HERMES_LOOP_LOGGER)
        log.addHandler(refusals)
        try:
            with thread_scoped_silence():
                try:
                    self._agent = self._build()
                    self.terminal.init_session()
                    result = self._agent.run_conversation(self.instruction, task_id=self.task_id)
                    outcome = Outcome(result=result)
                except BaseException as exc:  # noqa: BLE001 - the env reports it; the thread must not die silently
                    outcome = Outcome(error=exc)
        finally:
            log.removeHandler(refusals)
            self._finish_thread()
        outcome.endpoint_error = refusals.last
        self._done.set_result(outcome)

    def _finish_thread(self) -> None:
        """Clear an interrupt that landed on this thread, before another thread can take its id."""
        from tools.interrupt import set_interrupt

        with self._finishing:
            self._finished = True
            set_interrupt(False)

    def _build(self) -> Any:
        from run_agent import AIAgent

        s = self.settings
        overrides = {} if s.temperature is None else {"temperature": s.temperature}
        return AIAgent(
            base_url=s.base_url,
            api_key=s.api_key,
            model=s.model,
            max_iterations=s.max_iterations,
            enabled_toolsets=list(s.toolsets),
            max_tokens=s.max_tokens,
            request_overrides=overrides,
            # No pause between tools, no console output, nothing read from or written to the
            # host's project files or memory: the episode is the sandbox and the instruction.
            tool_delay=0.0,
            quiet_mode=True,
            skip_context_files=True,
            skip_memory=True,
            save_trajectories=False,
            tool_complete_callback=self._on_tool,
            step_callback=self._on_step,
        )

    def _on_tool(self, call_id: str, name: str, args: Any, result: Any) -> None:
        self.tool_calls.append(name)

    def _on_step(self, api_calls: int, tools: Any) -> None:
        self.api_calls = api_calls
