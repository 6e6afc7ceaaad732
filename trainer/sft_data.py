"""SFT data: expert transcripts rendered into `Sample`s, token for token as the gateway would
record the same conversation.

    transcripts = await play_transcripts(tasks, host, ObservingExpert(), tools, RunConfig())
    renderer = ChatRenderer.from_pretrained(model_folder)
    samples = [renderer.sample(tool_agent_messages(t), tools, session_id=..., group_id="sft") for t in transcripts]

A transcript is what a harness did: the first observation and each (command, observation).
`tool_agent_messages` turns it into the chat the built-in `tool` agent would have sent,
so a model fine-tuned on it meets the same prompts at rollout time. `ChatRenderer` renders
with the model's own template and tokenizer, the way the gateway builds prompts: the first
prompt tokenized whole, each reply's tokens followed by the end-of-turn token (loss mask 1),
and the text between replies tokenized as one suffix (loss mask 0). The loss therefore falls
on assistant tokens only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roost.agents.protocol import AgentOutcome, EpisodeContext
from roost.agents.tool_agent import SYSTEM_PROMPT
from roost.envs.errors import InvalidActionError
from roost.envs.protocol import Action, Step, TextAction, ToolCall
from roost.rollout.store.samples import CallRef, Sample

TOOL_NAME = "act"


class RenderError(ValueError):
    """A conversation does not render into a training sample (template, roles)."""


@dataclass
class Transcript:
    """One episode as the harness played it."""

    task_id: str
    observation: str
    steps: list[tuple[str, str]] = field(default_factory=list)
    """(command, observation) per step."""
    reward: float = 0.0
    success: bool = False
    untrained: list[int] = field(default_factory=list)
    """Steps not to train on (an expert's deliberate slips; its recoveries are trained on)."""


class RecordingAgent:
    """Wraps a harness that acts with text commands and keeps each episode's transcript."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.name = agent.name
        self.needs_model = agent.needs_model
        self.reset_options = agent.reset_options
        self.transcripts: list[Transcript] = []

    async def run(self, ctx: EpisodeContext) -> AgentOutcome:
        transcript = Transcript(ctx.task.id, ctx.reset.observation.text)
        inner = ctx.step

        async def step(action: Action) -> Step:
            command = action.text if isinstance(action, TextAction) else _command(action)
            try:
                result = await inner(action)
            except InvalidActionError as exc:
                # what the `tool` agent answers an inadmissible command with
                transcript.steps.append((command, f"Invalid action: {exc}"))
                raise
            transcript.steps.append((command, result.observation.text))
            transcript.reward += result.reward
            transcript.success = result.terminated and transcript.reward > 0
            return result

        ctx.step = step
        outcome = await self.agent.run(ctx)
        transcript.untrained = list(outcome.extra.get("slips", []))
        self.transcripts.append(transcript)
        return outcome


def _command(action: ToolCall) -> str:
    return str(action.parsed_arguments().get("command", ""))


def tool_agent_messages(transcript: Transcript, system_prompt: str = SYSTEM_PROMPT, *,
                        tools: bool = True) -> list[dict[str, Any]]:
    """The chat the `tool` agent has after playing this transcript: each command an `act` tool
    call answered by a `tool` message, or, when the agent is offered no tools (`tools=False`),
    a plain-text reply answered by a `user` message."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt},
                                      {"role": "user", "content": transcript.observation}]
    for index, (command, observation) in enumerate(transcript.steps):
        if not tools:
            messages += [{"role": "assistant", "content": command}, {"role": "user", "content": observation}]
            continue
        call_id = f"call_{index}"
        messages.append({"role": "assistant", "content": "", "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": TOOL_NAME, "arguments": json.dumps({"command": command})}}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": observation})
    return messages


class ChatRenderer:
    """Chats → `Sample`s with the model's chat template and tokenizer (as the gateway renders)."""

    def __init__(self, template: Any, tokenizer: Any) -> None:
        self.template = template
        self.tokenizer = tokenizer
        self.eos = tokenizer.eos_text

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> ChatRenderer:
        from roost.rollout.chat.template import ChatTemplate
        from roost.rollout.chat.tokenizer import ChatTokenizer

        return cls(ChatTemplate.from_pretrained(str(folder)), ChatTokenizer.from_pretrained(folder))

    def texts(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[tuple[str, bool]]:
        """The conversation as (text, is_reply) pieces, up to the last assistant reply."""
        replies = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        if not replies:
            raise RenderError("the conversation has no assistant message: nothing to train on")
        whole = self.template.render(messages, tools=tools, add_generation_prompt=False)
        prompt = self.template.render(messages[: replies[0]], tools=tools, add_generation_prompt=True)
        if not whole.startswith(prompt):
            raise RenderError("the chat template renders the first prompt differently inside the whole chat; "
                              "it cannot be trained on as one growing sample")
        opener = prompt[len(self.template.render(messages[: replies[0]], tools=tools, add_generation_prompt=False)):]
        if not opener:
            raise RenderError("the chat template adds no generation prompt; cannot find where replies start")
        pieces: list[tuple[str, bool]] = [(prompt, False)]
        position = len(prompt)
        for number in range(len(replies)):
            end = whole.find(self.eos, position)
            if end < 0:
                raise RenderError(f"assistant reply {number} has no end-of-turn marker {self.eos!r}")
            pieces.append((whole[position:end] + self.eos, True))
            position = end + len(self.eos)
            if number + 1 < len(replies):
                start = whole.find(opener, position)
                if start < 0:
                    raise RenderError(f"no assistant turn after reply {number}")
                nxt = start + len(opener)
                pieces.append((whole[position:nxt], False))
                position = nxt
        return pieces

    def sample(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *,
               session_id: str, group_id: str = "sft", agent_id: str = "main", reward: float | None = None,
               untrained: list[int] | tuple[int, ...] = ()) -> Sample:
        """`untrained`: indices of assistant replies that stay in the context without loss."""
        tokens: list[int] = []
        mask: list[int] = []
        token_call: list[int] = []
        calls: list[CallRef] = []
        reply = -1
        for text, is_reply in self.texts(messages, tools):
            reply += is_reply
            trained = is_reply and reply not in untrained
            if is_reply:
                ids = self.tokenizer.encode(text[: -len(self.eos)]) + [self.tokenizer.eos_id]
            else:
                ids = self.tokenizer.encode(text)
            if trained:
                token_call += [len(calls)] * len(ids)
                calls.append(CallRef(call_id=f"{session_id}/{agent_id}/{len(calls)}", weight_version="expert"))
            else:
                token_call += [-1] * len(ids)
            tokens += ids
            mask += [int(trained)] * len(ids)
        return Sample(session_id=session_id, group_id=group_id, agent_id=agent_id, tokens=tokens, loss_mask=mask,
                      rollout_logprobs=[0.0] * len(tokens), token_call=token_call, calls=calls,
                      reward=reward).validate()
