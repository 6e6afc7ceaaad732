"""Any command as a harness: `roost run --command "..."`.

The command runs on the host in its own process group, with its model and its episode given
through the environment:

    ROOST_BASE_URL, OPENAI_BASE_URL   the episode's OpenAI base URL (a gateway session: recorded)
    OPENAI_API_KEY                    the session key ('EMPTY' without a gateway; the gateway's and
                                      the engine's keys are taken out of the command's environment)
    ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY  the same session for Anthropic clients (Claude Code):
                                      the base URL without its `/v1`, the session key
    ROOST_SESSION_ID                  the gateway session id ('' without a gateway)
    ROOST_TASK_JSON                   {"id", "split", "metadata", "observation", "tools", "info"}
    ROOST_ENV_STEP_URL                POST an action here (the env wire format: {"type": "text",
                                      "text": ...} or {"type": "tool_call", "name": ..., "arguments": ...});
                                      the answer is the step (observation, reward, terminated, ...)
    ROOST_REWARD_FILE                 where the command may write {"reward": <float>, ...}
    ROOST_WORKSPACE                   with `workspace`: the copy of the episode's working tree the
                                      command runs in (its diff is submitted as the patch)

The reward is the env's verdict when the episode ended (if the command exits first and the env
offers a `submit` tool, the adapter submits for it), else the command's reward file, else none
(the runner decides, from the `AgentOutcome` this harness returns). A command past its timeout
is killed with its whole process group; if the roost process running it dies, the command
itself is killed (processes it started are not).

`roost run` is `roost eval` with this harness (`command_eval`): the common runner plays each
episode.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from roost.agents.evaluate import EvalConfig
from roost.agents.protocol import AgentError, AgentOutcome, EpisodeContext
from roost.agents.workspace import Checkout, checkout, diff_since_start
from roost.envs.errors import EnvError, EnvFaultError, EpisodeFinishedError, InvalidActionError, NoWorkspaceError
from roost.envs.protocol import Step, ToolCall
from roost.lifetime import die_with_parent
from roost.outcome import RewardSource
from roost.rollout.keys import without_server_keys

SESSION_IN_URL = re.compile(r"/sessions/([^/]+)/")


class CommandConfig(BaseModel):
    """Keyword arguments of CommandAgent (`--agent-arg KEY=VALUE`)."""

    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1)
    """A shell command line."""
    timeout_s: float = Field(3600.0, gt=0)
    """Past this the command's process group is killed."""
    submit_tool: str | None = "submit"
    """Called when the command exits and the episode is still open (if the env offers it)."""
    output_chars: int = Field(20_000, gt=0)
    """How much of the command's output (its tail) is kept in the outcome."""
    workspace: bool = False
    """Run the command in a copy of the episode's working tree (envs that hand one out: SWE; its
    path is also ROOST_WORKSPACE), and submit that copy's diff as the `patch`."""


class CommandAgent:
    """roost's Agent protocol around an external command."""

    name = "command"
    needs_model = False
    reset_options: dict[str, Any] = {}

    def __init__(self, **kwargs: Any) -> None:
        self.config = CommandConfig(**kwargs)

    async def run(self, ctx: EpisodeContext) -> AgentOutcome:
        proxy = StepProxy(ctx)
        with tempfile.TemporaryDirectory(prefix="roost-command-") as tmp:
            reward_file = Path(tmp) / "reward.json"
            work = await self._checkout(ctx, Path(tmp))
            async with proxy:
                code, output = await self._run_command(ctx, proxy.url, reward_file, work)
            if not proxy.finished and self.config.submit_tool in {t["function"]["name"] for t in ctx.tools}:
                arguments = {"patch": await diff_since_start(work)} if isinstance(work, Checkout) else {}
                try:
                    proxy.record(await ctx.step(ToolCall(self.config.submit_tool, arguments)))
                except EpisodeFinishedError:
                    pass
            file_reward = _read_reward(reward_file)
        if proxy.fault is not None:
            raise EnvFaultError(f"the env failed while the command acted: {proxy.fault}")
        stop = "done" if proxy.finished else ("timeout" if code is None else "gave_up")
        return AgentOutcome(
            turns=proxy.steps,
            invalid_actions=proxy.invalid,
            stop_reason=stop,
            reward=file_reward,
            reward_source=RewardSource.FILE,
            exit_code=code,
            output_tail=output,
        )

    async def _checkout(self, ctx: EpisodeContext, tmp: Path) -> Checkout | Path:
        """Where the command runs: a copy of the episode's working tree (`workspace`), else `tmp`."""
        if not self.config.workspace:
            return tmp
        if ctx.workspace is None:
            raise AgentError("workspace=true needs an episode whose env hands out its working tree")
        try:
            archive = await ctx.workspace()
        except NoWorkspaceError as exc:
            raise AgentError(f"workspace=true, but {exc}") from exc
        return await checkout(archive, tmp / "workspace")

    async def _run_command(
        self, ctx: EpisodeContext, step_url: str, reward_file: Path, work: Checkout | Path
    ) -> tuple[int | None, str]:
        cwd = work.folder if isinstance(work, Checkout) else work
        env = {**without_server_keys(os.environ), **command_environment(ctx, step_url, reward_file)}
        if isinstance(work, Checkout):
            # no __pycache__ in the diff: the SWE env's sandboxes set the same
            env.update(ROOST_WORKSPACE=str(cwd), PYTHONDONTWRITEBYTECODE="1")
        proc = await asyncio.create_subprocess_shell(
            self.config.command,
            cwd=cwd,
            env=env,
            start_new_session=True,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            preexec_fn=die_with_parent(signal.SIGKILL),
        )
        tail = bytearray()

        async def read() -> None:
            while chunk := await proc.stdout.read(1 << 16):
                tail.extend(chunk)
                del tail[: -self.config.output_chars]

        try:
            await asyncio.wait_for(asyncio.gather(read(), proc.wait()), self.config.timeout_s)
            code: int | None = proc.returncode
        except TimeoutError:
            code = None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # what it left running goes too
            except (ProcessLookupError, PermissionError):
                pass
        return code, tail.decode("utf-8", errors="replace")


def command_environment(ctx: EpisodeContext, step_url: str, reward_file: Path) -> dict[str, str]:
    base_url = ctx.base_url or ""
    match = SESSION_IN_URL.search(base_url)
    task = {
        "id": ctx.task.id,
        "split": ctx.task.split,
        "metadata": ctx.task.metadata,
        "observation": ctx.reset.observation.text,
        "tools": ctx.tools,
        "info": ctx.reset.info,
    }
    return {
        "ROOST_BASE_URL": base_url,
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": ctx.api_key or "EMPTY",
        "ROOST_SESSION_ID": match.group(1) if match else "",
        "ROOST_TASK_JSON": json.dumps(task, default=str),
        "ROOST_ENV_STEP_URL": step_url,
        "ROOST_REWARD_FILE": str(reward_file),
        "ANTHROPIC_BASE_URL": base_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": ctx.api_key or "EMPTY",
        **({"ROOST_MODEL": ctx.model} if ctx.model else {}),
    }


class StepProxy:
    """`POST /step` on a free 127.0.0.1 port → the episode's `step`; remembers whether it ended
    (the runner keeps its rewards)."""

    def __init__(self, ctx: EpisodeContext) -> None:
        self.ctx = ctx
        self.url = ""
        self.steps = self.invalid = 0
        self.finished = False
        self.fault: EnvError | None = None

    def record(self, step: Step) -> None:
        self.steps += 1
        self.finished = self.finished or step.done

    async def __aenter__(self) -> StepProxy:
        from aiohttp import web

        app = web.Application(client_max_size=16 << 20)
        app.router.add_post("/step", self._step)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/step"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()

    async def _step(self, request):
        from aiohttp import web

        from roost.envs.wire import StepRequest
        from roost.serving.json_bounds import load_json

        try:
            # the body is the action itself: its arguments sit one level down
            raw = load_json(await request.text(), "tool-call arguments", enclosing=1, error=InvalidActionError)
            action = StepRequest.of_body({"action": raw}).to_protocol()
        except InvalidActionError as exc:
            return self._refused(web, exc)
        except ValueError as exc:  # not JSON, not an action (a ValidationError is a ValueError)
            return _error(
                web,
                400,
                "bad_request",
                f"not an action ({exc}); send {{'type': 'text', 'text': ...}} "
                "or {'type': 'tool_call', 'name': ..., 'arguments': {...}}",
            )
        try:
            step = await self.ctx.step(action)
        except EnvError as exc:
            return self._refused(web, exc)
        self.record(step)
        return web.json_response(
            {
                "observation": step.observation.text,
                "reward": step.reward,
                "terminated": step.terminated,
                "truncated": step.truncated,
                "info": step.info,
            },
            dumps=lambda o: json.dumps(o, default=str),
        )

    def _refused(self, web, exc: EnvError):
        self.invalid += exc.code == "invalid_action"
        if isinstance(exc, EnvFaultError):
            self.fault = exc
        status = {"invalid_action": 400, "episode_finished": 409}.get(exc.code, 502)
        return _error(web, status, exc.code, str(exc))


def _error(web, status: int, code: str, message: str):
    return web.json_response({"error": {"type": code, "message": message}}, status=status)


def _read_reward(path: Path) -> float | None:
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text())
        return float(value["reward"] if isinstance(value, dict) else value)
    except (ValueError, KeyError, TypeError) as exc:
        raise AgentError(f'the command\'s reward file {path} is not {{"reward": <number>}}: {exc}') from exc


COMMAND_GRACE_S = 60.0
"""How long past a command's own timeout the runner waits before it cuts the episode off."""


def command_eval(
    command: str,
    env: str,
    *,
    timeout_s: float = 3600.0,
    submit: bool = True,
    workspace: bool = False,
    concurrency: int = 1,
    episodes: int | None = None,
    **fields: Any,
) -> EvalConfig:
    """`roost run`'s evaluation: `command` as the harness, each task once (or `episodes`, the
    tasks in turn), no progress bar; `fields` are the other `EvalConfig` fields."""
    agent_kwargs = {
        "command": command,
        "timeout_s": timeout_s,
        "submit_tool": "submit" if submit else None,
        "workspace": workspace,
    }
    # The command's own limit ends it first (killed, its output kept); the runner's is the backstop.
    return EvalConfig(
        env,
        agent=CommandAgent.name,
        agent_kwargs=agent_kwargs,
        concurrency=concurrency,
        workers=max(1, min(concurrency, 4)),
        episodes=episodes,
        progress=False,
        timeout_s=timeout_s + COMMAND_GRACE_S,
        **fields,
    )
