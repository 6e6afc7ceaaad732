"""mini-swe-agent as a roost harness: its own agent loop, its own litellm model, roost's env.

The loop is mini-swe-agent's `DefaultAgent` with the templates of one of its config files
(default: its SWE-bench config) and its `LitellmModel` (tool calls; or the text-based model)
pointed at the episode's `base_url` — the gateway session, so every call is recorded. Its
Environment is `EnvStepEnvironment`: each command goes to the roost env as a `bash` tool call
through the runner's `step`, so it runs in the episode's sandbox. When the env ends the episode
(a submission graded, a step limit) the adapter raises mini-swe-agent's own `Submitted` /
`LimitsExceeded`, and the runner takes the reward from the env.

mini-swe-agent prints a banner and writes a config folder when imported; the adapter imports
it lazily with MSWEA_SILENT_STARTUP set and its config folder under roost's cache.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from roost.agents.protocol import AgentError, AgentOutcome, EpisodeContext, ModelUnavailable
from roost.envs.errors import EnvFaultError, InvalidActionError
from roost.envs.protocol import Step, ToolCall

MODEL_CLASSES = {
    "litellm": "minisweagent.models.litellm_model:LitellmModel",
    "litellm_textbased": "minisweagent.models.litellm_textbased_model:LitellmTextbasedModel",
}


class MiniSweConfig(BaseModel):
    """Keyword arguments of MiniSweAgent (`--agent-arg KEY=VALUE`)."""

    model_config = ConfigDict(extra="forbid")

    config_file: str = "benchmarks/swebench"
    """A mini-swe-agent config (its name, e.g. 'benchmarks/swebench', or a YAML path): templates."""
    model_class: Literal["litellm", "litellm_textbased"] = "litellm"
    """mini-swe-agent's tool-call model, or its text-based (```mswea_bash_command```) one."""
    step_limit: int | None = Field(None, gt=0)
    """Model calls per episode; default: the runner's max_turns."""
    temperature: float = 0.0
    max_tokens: int = Field(1024, gt=0)
    timeout_s: float = Field(600.0, gt=0)
    """Longest single model call."""


class MiniSweAgent:
    """roost's Agent protocol around mini-swe-agent's DefaultAgent."""

    name = "mini-swe-agent"
    needs_model = True
    reset_options: dict[str, Any] = {}

    def __init__(self, **kwargs: Any) -> None:
        self.config = MiniSweConfig(**kwargs)

    async def run(self, ctx: EpisodeContext) -> AgentOutcome:
        if not ctx.base_url:
            raise AgentError("mini-swe-agent needs a model: pass --base-url (a gateway or an OpenAI endpoint)")
        model_name = ctx.model or await _first_model(ctx.base_url, ctx.api_key)
        env = EnvStepEnvironment(ctx, asyncio.get_running_loop())
        agent = await asyncio.to_thread(self._build, ctx, model_name, env)
        task = (ctx.reset.info.get("task") or {}).get("problem_statement") or ctx.reset.observation.text
        try:
            result = await asyncio.to_thread(agent.run, task)
        except Exception as exc:
            raise _classify(exc) from exc
        exit_status = result.get("exit_status", "")
        stop = "done" if env.finished else ("max_turns" if exit_status == "LimitsExceeded" else exit_status.lower())
        return AgentOutcome(
            turns=agent.n_calls,
            invalid_actions=env.invalid_actions,
            stop_reason=stop or "gave_up",
            extra={"exit_status": exit_status, "trajectory_format": "mini-swe-agent-1.1"},
        )

    def _build(self, ctx: EpisodeContext, model_name: str, env: EnvStepEnvironment):
        import importlib

        import yaml

        _quiet_import()
        import litellm
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.config import get_config_path

        litellm.suppress_debug_info = True  # its "Provider List" banner on every unpriced model

        spec = yaml.safe_load(get_config_path(self.config.config_file).read_text())
        model_spec = {
            k: v for k, v in (spec.get("model") or {}).items() if k not in ("model_name", "model_kwargs", "model_class")
        }
        module, _, attr = MODEL_CLASSES[self.config.model_class].partition(":")
        model = getattr(importlib.import_module(module), attr)(
            **model_spec,
            model_name=f"openai/{model_name}",
            cost_tracking="ignore_errors",
            model_kwargs={
                "api_base": ctx.base_url,
                "api_key": ctx.api_key or "EMPTY",
                "drop_params": True,
                "temperature": self.config.temperature,
                "max_tokens": self.config.max_tokens,
                "timeout": self.config.timeout_s,
                "num_retries": 0,
            },
        )
        agent_spec = {k: v for k, v in (spec.get("agent") or {}).items() if k not in ("output_path",)}
        agent_spec |= {"step_limit": self.config.step_limit or ctx.max_turns, "cost_limit": 0.0}
        return DefaultAgent(model, env, **agent_spec)


class EnvStepEnvironment:
    """mini-swe-agent's Environment protocol over a roost episode: commands become `bash` actions."""

    def __init__(self, ctx: EpisodeContext, loop: asyncio.AbstractEventLoop) -> None:
        self.ctx, self.loop = ctx, loop
        self.config = {"cwd": ctx.reset.info.get("workdir", ""), "env": "roost"}
        self.finished = False
        self.invalid_actions = 0

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        from minisweagent.exceptions import LimitsExceeded, Submitted

        command = action.get("command", "")
        try:
            step = asyncio.run_coroutine_threadsafe(
                self.ctx.step(ToolCall("bash", {"command": command})), self.loop
            ).result()
        except InvalidActionError as exc:
            self.invalid_actions += 1
            return {"output": str(exc), "returncode": -1, "exception_info": f"invalid action: {exc}"}
        if step.done:
            self.finished = True
            status = "Submitted" if step.terminated else "LimitsExceeded"
            extra = {"exit_status": status, "submission": step.info.get("patch", ""), "reward": step.reward}
            error = Submitted if step.terminated else LimitsExceeded
            raise error({"role": "exit", "content": step.observation.text, "extra": extra})
        return _output(step)

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**self.config, **kwargs}

    def serialize(self) -> dict:
        return {"info": {"config": {"environment": self.config, "environment_type": "roost.agents.mini_swe"}}}


def _output(step: Step) -> dict[str, Any]:
    code = step.info.get("returncode")
    outcome = step.info.get("outcome", "exited")
    exception = "" if outcome == "exited" else f"the command was killed ({outcome})"
    output = step.info["output"] if "output" in step.info else step.observation.text
    return {"output": output, "returncode": -1 if code is None else code, "exception_info": exception}


def _quiet_import() -> None:
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    if "MSWEA_GLOBAL_CONFIG_DIR" not in os.environ:
        home = Path(os.environ.get("ROOST_HOME", Path.home() / ".cache" / "roost")).expanduser()
        os.environ["MSWEA_GLOBAL_CONFIG_DIR"] = str(home / "mini-swe-agent")
    os.environ.setdefault("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")
    # litellm otherwise fetches its model price list from the internet on import.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def _classify(exc: Exception) -> Exception:
    if isinstance(exc, EnvFaultError):
        return exc
    try:
        import litellm
    except ImportError:
        return AgentError(f"mini-swe-agent failed: {type(exc).__name__}: {exc}")
    unavailable = (
        litellm.exceptions.APIConnectionError,
        litellm.exceptions.ServiceUnavailableError,
        litellm.exceptions.InternalServerError,
        litellm.exceptions.Timeout,
    )
    if isinstance(exc, unavailable):
        return ModelUnavailable(f"the model endpoint failed: {type(exc).__name__}: {exc}")
    return AgentError(f"mini-swe-agent failed: {type(exc).__name__}: {exc}")


async def _first_model(base_url: str, api_key: str | None) -> str:
    import httpx

    try:
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.get(
                f"{base_url.rstrip('/')}/models", headers={"Authorization": f"Bearer {api_key or 'EMPTY'}"}
            )
            response.raise_for_status()
            return response.json()["data"][0]["id"]
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
        raise ModelUnavailable(f"could not list the models of {base_url}: {exc}; pass --model") from exc
