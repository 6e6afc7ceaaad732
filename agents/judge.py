"""The judge: an episode's reward from a model's verdict on its transcript (a generative reward).

    async with Judge("critic", Rubric(scale=(0, 1)), GatewayClient(judge_url, admin_key=key)) as judge:
        verdict = await judge.verdict(JudgedEpisode(session_id, task, 0.0, False), episodes, "run-1")
    verdict.reward        # "SCORE: 0.8" read by the rubric's pattern, mapped by its scale: 0.8

The transcript comes from the policy's gateway (`episodes`): the episode session's last call, its
messages and its reply. The judge is asked over OpenAI chat on its own gateway, in a session of
its own (group `judge/RUN/TASK`, metadata naming the judged session), finished with kind `judge`:
its calls are recorded beside the episode's and never become the policy's training samples.
Whatever keeps a verdict from coming (the judge's gateway down or slower than the rubric's
`timeout_s`, a reply the pattern does not read, a score off the scale) raises `JudgeError`, and the
runner makes the episode `infra_error`: a judge that failed never scores an episode 0.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from roost.envs.protocol import Task
from roost.outcome import EpisodeKind, EpisodeOutcome, EpisodeStatus, RewardSource
from roost.rollout.gateway.control.client import ControlPlaneError, GatewayClient
from roost.rollout.gateway.control.wire import CallView, SessionCreated, SessionDetail

log = logging.getLogger(__name__)

DEFAULT_PROMPT = """You are judging how well an agent did its task.

Task: {task}

The agent's last exchange with its model (its prompt, then its reply):
{transcript}

Say briefly whether the agent's actions accomplish the task or make progress on it. Then end your
answer with one line "SCORE: N", where N is a number from {low} to {high} (higher is better)."""

PROMPT_FIELDS = ("task", "transcript", "env_reward", "success", "low", "high")
"""The fields a rubric's prompt may name, as `{transcript}`."""


class JudgeError(RuntimeError):
    """No verdict came: the episode is an infra error, not the policy's doing."""

    def __init__(self, message: str, session_id: str | None = None) -> None:
        super().__init__(message)
        self.session_id = session_id
        """The judge's session, when one was opened (finished `infra_error` with this message)."""


class Rubric(BaseModel):
    """How the judge is asked and how its verdict is read."""

    model_config = ConfigDict(extra="forbid")

    prompt: str = DEFAULT_PROMPT
    """The judge's one user message, a Python format string over `PROMPT_FIELDS` ({task},
    {transcript}, {env_reward}, {success}, {low}, {high}; `{{` for a literal brace)."""
    pattern: str = r"SCORE:\s*(-?[0-9]+(?:\.[0-9]+)?)"
    """A regex whose first group is the score; its last match in the reply counts."""
    scale: tuple[float, float] = (0.0, 10.0)
    """The scores the prompt asks for, low to high: mapped linearly onto rewards 0 to 1; a score off
    the scale is no verdict."""
    mode: Literal["replace", "add"] = "replace"
    """replace: the reward is the judge's; add: the env's reward plus `weight` times the judge's (an
    episode with no env reward gets the weighted verdict alone)."""
    weight: float = Field(1.0, ge=0)
    timeout_s: float = Field(120.0, gt=0)
    """A verdict that takes longer (the judge's session opened, asked and answered) is none."""
    max_tokens: int = Field(512, ge=1)
    sampling: dict[str, Any] = {}
    """More fields of the judge's chat request, as OpenAI names them (temperature, seed, ...)."""

    @field_validator("pattern")
    @classmethod
    def _one_group(cls, pattern: str) -> str:
        try:
            groups = re.compile(pattern).groups
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        if groups < 1:
            raise ValueError("needs a group around the score, e.g. SCORE:\\s*([0-9.]+)")
        return pattern

    @field_validator("scale")
    @classmethod
    def _low_to_high(cls, scale: tuple[float, float]) -> tuple[float, float]:
        if scale[0] >= scale[1]:
            raise ValueError(f"[{scale[0]:g}, {scale[1]:g}] must go from low to high, e.g. [0, 10]")
        return scale

    @field_validator("prompt")
    @classmethod
    def _known_fields(cls, prompt: str) -> str:
        try:
            prompt.format(**dict.fromkeys(PROMPT_FIELDS, ""))
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"names a field it cannot have ({exc}); it may name {', '.join(PROMPT_FIELDS)} "
                "in braces, and a literal brace is written twice"
            ) from None
        return prompt

    def render(self, task: str, transcript: str, env_reward: float | None, success: bool) -> str:
        low, high = self.scale
        return self.prompt.format(
            task=task, transcript=transcript, env_reward=env_reward, success=success, low=f"{low:g}", high=f"{high:g}"
        )

    def read(self, reply: str) -> tuple[float, float]:
        """(score, reward) of the judge's reply; `JudgeError` when it holds no score on the scale."""
        matches = list(re.finditer(self.pattern, reply))
        if not matches:
            raise JudgeError(f"the judge's reply has no verdict matching {self.pattern!r}: {reply[-300:]!r}")
        try:
            score = float(matches[-1].group(1))
        except ValueError:
            raise JudgeError(f"the judge's verdict {matches[-1].group(0)!r} holds no number") from None
        low, high = self.scale
        if not low <= score <= high:
            raise JudgeError(f"the judge's score {score:g} is off its scale [{low:g}, {high:g}]")
        return score, (score - low) / (high - low)

    def combine(self, env_reward: float | None, judged: float) -> float:
        """The episode's reward from the env's and the judge's (see `mode`)."""
        if self.mode == "replace":
            return judged
        return (env_reward or 0.0) + self.weight * judged


@dataclass(frozen=True)
class JudgedEpisode:
    session_id: str
    """The episode's session on the policy's gateway, whose transcript is judged."""
    task: Task
    env_reward: float | None
    success: bool


@dataclass(frozen=True)
class Verdict:
    session_id: str
    """The judge's own session, on its gateway."""
    score: float
    reward: float
    """The score mapped onto [0, 1] by the rubric's scale."""


class Judge:
    """One judge (a model behind its own gateway) and its rubric; closes its connections at the end."""

    def __init__(self, name: str, rubric: Rubric, gateway: GatewayClient, *, model: str | None = None) -> None:
        """`model`: the name to ask the judge's gateway for; None: the first it lists."""
        self.name, self.rubric, self.gateway, self.model = name, rubric, gateway, model
        self._http = httpx.AsyncClient(timeout=rubric.timeout_s)

    async def __aenter__(self) -> Judge:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()
        await self.gateway.aclose()

    async def verdict(self, episode: JudgedEpisode, episodes: GatewayClient, run_id: str) -> Verdict:
        """The judge's verdict on the episode whose session `episodes` (the policy's gateway) recorded."""
        try:
            detail = await episodes.session(episode.session_id)
        except ControlPlaneError as exc:
            raise JudgeError(f"could not read the transcript of session {episode.session_id}: {exc}") from exc
        prompt = self.rubric.render(episode.task.id, transcript(detail), episode.env_reward, episode.success)
        session: SessionCreated | None = None
        try:
            async with asyncio.timeout(self.rubric.timeout_s):
                session = await self._open(episode, run_id)
                score, reward = self.rubric.read(await self._ask(session, prompt))
        except (JudgeError, ControlPlaneError, httpx.HTTPError, TimeoutError) as exc:
            error = self._error(exc, session)
            if session is not None:
                await self._finish(session, EpisodeOutcome(status=EpisodeStatus.INFRA_ERROR, reason=str(error)[:4000]))
            raise error from exc
        done = EpisodeOutcome(status=EpisodeStatus.OK, reward=reward, reward_source=RewardSource.JUDGE)
        await self._finish(session, done)
        return Verdict(session.session_id, score, reward)

    def _error(self, exc: Exception, session: SessionCreated | None) -> JudgeError:
        sid = session.session_id if session is not None else None
        if isinstance(exc, JudgeError):
            return JudgeError(f"judge {self.name}: {exc}", sid)
        if isinstance(exc, TimeoutError):
            return JudgeError(f"judge {self.name} gave no verdict within its {self.rubric.timeout_s:g}s timeout", sid)
        return JudgeError(f"judge {self.name} failed: {type(exc).__name__}: {exc}", sid)

    async def _open(self, episode: JudgedEpisode, run_id: str) -> SessionCreated:
        task = {"id": episode.task.id, "split": episode.task.split, **episode.task.metadata}
        metadata = {"judged_session": episode.session_id, "judge": self.name, "run_id": run_id}
        return await self.gateway.create_session(f"judge/{run_id}/{episode.task.id}", task, metadata)

    async def _ask(self, session: SessionCreated, prompt: str) -> str:
        headers = {"Authorization": f"Bearer {session.key}"}
        model = self.model or await self._first_model(session, headers)
        body = {
            **self.rubric.sampling,
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": self.rubric.max_tokens,
        }
        response = await self._http.post(f"{session.base_url}/chat/completions", json=body, headers=headers)
        return _answer(response, "POST /chat/completions", lambda a: a["choices"][0]["message"].get("content") or "")

    async def _first_model(self, session: SessionCreated, headers: dict[str, str]) -> str:
        response = await self._http.get(f"{session.base_url}/models", headers=headers)
        self.model = _answer(response, "GET /models", lambda a: str(a["data"][0]["id"]))
        return self.model

    async def _finish(self, session: SessionCreated, outcome: EpisodeOutcome) -> None:
        judged = outcome.model_copy(update={"kind": EpisodeKind.JUDGE})
        try:
            await self.gateway.finish(session.session_id, judged)
        except ControlPlaneError as exc:  # its outcome is for people; the episode's does not depend on it
            log.warning("could not finish judge session %s: %s", session.session_id, exc)


def _answer(response: httpx.Response, request: str, read: Callable[[Any], str]) -> str:
    """What `read` takes from the judge gateway's OpenAI answer to `request`; `JudgeError` for a
    refusal or an answer of another shape."""
    if not response.is_success:
        raise JudgeError(f"its gateway answered {response.status_code} to {request}: {response.text[:300]}")
    try:
        return read(response.json())
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise JudgeError(f"its gateway's answer to {request} is not OpenAI's: {response.text[:300]}") from None


def transcript(detail: SessionDetail) -> str:
    """The session's last call as text: each message of its prompt, then its reply."""
    if not detail.calls:
        return "(the agent made no model calls)"
    last: CallView = max(detail.calls, key=lambda c: c.seq)
    messages = list((last.request or {}).get("messages") or [])
    reply = (last.response or {}).get("message")
    if isinstance(reply, dict):
        messages.append(reply)
    return "\n\n".join(_message_text(m) for m in messages if isinstance(m, dict))


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts: their text, the rest by type
        content = "\n".join(p.get("text") or f"[{p.get('type')}]" for p in content if isinstance(p, dict))
    lines = [f"[{message.get('role', '?')}] {content or ''}".rstrip()]
    lines += [f"[tool call] {json.dumps(call.get('function', call))}" for call in message.get("tool_calls") or []]
    return "\n".join(lines)
