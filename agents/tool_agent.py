"""The built-in tool-calling agent, on the official `openai` client.

One chat: a system prompt, the first observation, then per turn the model's reply and
the env's answer. A tool call is sent to the env as a tool call and answered with a
`tool` message; a plain-text reply is sent as a text action and answered with a
`user` message. An inadmissible action is answered with the env's error text and
costs a turn. The tools stay the env's static schemas for the whole episode, so every
request extends the previous one (the gateway then records one growing sample).

With `allowed_replies_from` (an env info key, e.g. `admissible_commands`), each call sends the
list the env published there, at reset and after each step, as the gateway's `allowed_replies`:
the engine then samples only one of those strings, sent as a text action (never a tool call).
The recorded logprobs stay the model's own; the call's record keeps the list, so the trainer
(`trainer.grammar_mask`, on by default) trains the policy the engine sampled from: the model's
distribution renormalised over the tokens the list allowed.

With `screenshots`, each observation's screenshot (`Observation.image`, OSWorld's under
`observation_type: screenshot` or `screenshot_a11y_tree`) goes with its text as an `image_url`
part: in the user message that carries the observation, or, after tool calls (whose messages
take text only), in a user message of its own. Every screenshot stays in the history, so each
request extends the one before (the gateway records one growing sample, each image once).
"""

from __future__ import annotations

import hashlib
import ssl
from typing import Any

from roost.agents.protocol import AgentError, AgentOutcome, EpisodeContext, ModelUnavailable
from roost.envs.errors import InvalidActionError
from roost.envs.protocol import Observation, Step, TextAction, ToolCall

SYSTEM_PROMPT = (
    "You are an agent acting in a text environment. Read the observation, then act by calling "
    "one of the provided tools with exactly one command. Keep going until the task is done."
)


class ToolAgent:
    name = "tool"
    needs_model = True
    reset_options: dict[str, Any] = {}

    def __init__(
        self,
        temperature: float = 0.7,
        max_tokens: int = 256,
        system_prompt: str = SYSTEM_PROMPT,
        timeout_s: float = 600.0,
        seed: int | None = None,
        allowed_replies_from: str | None = None,
        screenshots: bool = False,
    ) -> None:
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.system_prompt = system_prompt
        self.timeout_s = timeout_s
        # With a seed, each call samples with a seed drawn from it, the task and the turn, so an
        # evaluation is reproducible: the same weights replay the same episodes (a task played
        # twice plays the same way twice), and two policies share their random draws.
        self.seed = seed
        # An env info key holding the replies a call may give (a list of strings), or None: free
        # replies. Needs a roost gateway on the embedded engine or SGLang (an OpenAI upstream
        # refuses `allowed_replies`).
        self.allowed_replies_from = allowed_replies_from
        # Send observations' screenshots to the model (a vision model behind the endpoint).
        self.screenshots = screenshots
        # one TLS context for all episodes: building one loads the CA store, and a client per
        # episode spent a fifth of a rollout worker's time there (profiled)
        self._tls = ssl.create_default_context()

    async def run(self, ctx: EpisodeContext) -> AgentOutcome:
        import openai

        if not ctx.base_url:
            raise AgentError(
                "the tool agent needs a model: pass --base-url (an OpenAI-compatible endpoint or a roost gateway)"
            )
        client = openai.AsyncOpenAI(
            base_url=ctx.base_url,
            api_key=ctx.api_key or "EMPTY",
            timeout=self.timeout_s,
            max_retries=2,
            http_client=openai.DefaultAsyncHttpxClient(verify=self._tls),
        )
        try:
            model = ctx.model or await _first_model(client)
            return await self._play(client, model, ctx)
        finally:
            await client.close()

    async def _play(self, client: Any, model: str, ctx: EpisodeContext) -> AgentOutcome:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": self._content(ctx.reset.observation.text, ctx.reset.observation)},
        ]
        outcome = AgentOutcome()
        allowed = self._allowed_replies(ctx.reset.info, "reset")
        while outcome.turns < ctx.max_turns:
            outcome.turns += 1
            reply = await self._complete(client, model, messages, ctx, allowed)
            if reply is None:
                outcome.stop_reason = "context_length"
                return outcome
            messages.append(_assistant_message(reply))
            step = await self._act(reply, messages, outcome, ctx)
            if step is not None and step.done:
                return outcome
            if step is not None:  # an invalid action left the env, and its commands, as they were
                allowed = self._allowed_replies(step.info, f"step {outcome.turns}")
        outcome.stop_reason = "max_turns"
        return outcome

    def _allowed_replies(self, info: dict[str, Any], where: str) -> list[str] | None:
        """The replies the next call may give, from the env's info after `where`; None: any."""
        if self.allowed_replies_from is None:
            return None
        replies = info.get(self.allowed_replies_from)
        if not (isinstance(replies, list) and replies and all(isinstance(r, str) and r for r in replies)):
            raise AgentError(
                f"allowed_replies_from={self.allowed_replies_from!r}: the env's info after {where} "
                f"holds {replies!r} there, not a non-empty list of strings; name an info key the "
                "env fills (ALFWorld's and WebShop's: admissible_commands) or drop the option"
            )
        return replies

    async def _complete(
        self, client: Any, model: str, messages: list[dict[str, Any]], ctx: EpisodeContext, allowed: list[str] | None
    ) -> Any:
        import openai
        from openai.types.chat import ChatCompletion

        body: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if ctx.tools:
            body["tools"] = ctx.tools
        if allowed is not None:
            body["allowed_replies"] = allowed  # roost's extension: the reply is one of them
        if self.seed is not None:
            body["seed"] = call_seed(self.seed, ctx.task.id, len(messages))
        try:
            # `post`, not `chat.completions.create`: create walks the whole (growing) message list
            # through its TypedDict transform on every call, a fifth of a rollout worker's time
            # (profiled); these messages are plain JSON already
            response = await client.post("/chat/completions", body=body, cast_to=ChatCompletion)
        except (openai.APIConnectionError, openai.InternalServerError, openai.RateLimitError) as exc:
            raise ModelUnavailable(f"model endpoint {ctx.base_url} failed: {exc}") from exc
        except openai.BadRequestError as exc:
            if "context" in str(exc).lower():
                return None
            raise AgentError(f"model endpoint refused the request: {exc}") from exc
        return response.choices[0].message

    async def _act(
        self, reply: Any, messages: list[dict[str, Any]], outcome: AgentOutcome, ctx: EpisodeContext
    ) -> Step | None:
        if reply.tool_calls:
            step = None
            for call in reply.tool_calls:
                action = ToolCall(call.function.name, call.function.arguments, call.id)
                step, text = await self._step(action, outcome, ctx)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
                if step is not None and step.done:
                    break
            if self.screenshots and step is not None and not step.done and step.observation.image:
                messages.append({"role": "user", "content": self._content("The screen now:", step.observation)})
            return step
        command = (reply.content or "").strip()
        if not command:
            messages.append({"role": "user", "content": "Act by calling a tool with one command."})
            outcome.invalid_actions += 1
            outcome.invalid_calls.append(outcome.turns - 1)
            return None
        step, text = await self._step(TextAction(command), outcome, ctx)
        messages.append({"role": "user", "content": self._content(text, step.observation if step else None)})
        return step

    def _content(self, text: str, observation: Observation | None) -> str | list[dict[str, Any]]:
        """`text`, with the observation's screenshot as an image part when screenshots are on."""
        if not (self.screenshots and observation is not None and observation.image):
            return text
        url = f"data:image/png;base64,{observation.image}"
        return [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]

    @staticmethod
    async def _step(
        action: TextAction | ToolCall, outcome: AgentOutcome, ctx: EpisodeContext
    ) -> tuple[Step | None, str]:
        try:
            step = await ctx.step(action)
        except InvalidActionError as exc:
            outcome.invalid_actions += 1
            outcome.invalid_calls.append(outcome.turns - 1)  # this turn's call chose the action
            return None, f"Invalid action: {exc}"
        return step, step.observation.text


def call_seed(seed: int, task_id: str, position: int) -> int:
    """The sampling seed of the call at `position` (its message count) in an episode of `task_id`."""
    digest = hashlib.sha256(f"{seed}/{task_id}/{position}".encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 1


async def _first_model(client: Any) -> str:
    import openai

    try:
        models = await client.models.list()
    except (openai.APIConnectionError, openai.InternalServerError) as exc:
        raise ModelUnavailable(f"could not list models: {exc}") from exc
    if not models.data:
        raise AgentError("the endpoint serves no models; pass --model")
    return models.data[0].id


def _assistant_message(reply: Any) -> dict[str, Any]:
    message = reply.model_dump(exclude_none=True)
    message["role"] = "assistant"
    message["content"] = reply.content or ""
    return message
