"""SFT data: expert transcripts rendered into `Sample`s, token for token as the gateway would
record the same conversation.

    transcripts = await play_transcripts(env_url, "train", SFTData(episodes=12), max_turns=40, seed=0)
    renderer = ChatRenderer.from_pretrained(model_folder)
    samples = [renderer.sample(tool_agent_messages(t), tools, session_id=..., group_id="sft") for t in transcripts]

A transcript is what a harness did: the first observation and each (command, observation).
`tool_agent_messages` turns it into the chat the built-in `tool` agent would have sent,
so a model fine-tuned on it meets the same prompts at rollout time. `ChatRenderer` plays the
chat through the gateway's own prompt path (message conversion, control-token escaping, the
model's template, prompt planning, tokenizer): each assistant message is a call whose prompt
the gateway plans from the messages before it, and whose reply is that message as the
template renders it, then the end-of-turn token (loss mask 1). Everything else, the text
between replies included, has loss mask 0: the loss falls on assistant tokens only.
"""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from roost.agents.protocol import AgentOutcome, EpisodeContext
from roost.agents.tool_agent import SYSTEM_PROMPT
from roost.envs.errors import InvalidActionError
from roost.envs.protocol import Action, Step, TextAction, ToolCall
from roost.rollout.chat.tokenizer import ChatTokenizer
from roost.rollout.gateway.chat_calls import plan_chat, render_chat
from roost.rollout.gateway.errors import InvalidRequest
from roost.rollout.gateway.messages import argument_defaults, extend_chain, message_key, to_template, tool_dicts
from roost.rollout.gateway.prompt_builder import PromptBuilder
from roost.rollout.gateway.recording import Sampled, node_for
from roost.rollout.gateway.token_tree import AgentTree, Node
from roost.rollout.gateway.wire import ChatMessage, Tool
from roost.rollout.store.samples import CallRef, Sample, SampledSpan, build_sample

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
    """Chats → `Sample`s as the gateway records them; `policy` is the gateway's reasoning policy
    (its default: keep) the calls are planned under."""

    def __init__(self, builder: PromptBuilder, policy: str = "keep") -> None:
        self.builder = builder
        self.policy = policy

    @classmethod
    def from_pretrained(cls, folder: str | Path, policy: str = "keep") -> ChatRenderer:
        return cls(PromptBuilder.from_pretrained(folder), policy)

    @property
    def tokenizer(self) -> ChatTokenizer:
        return self.builder.tokenizer

    def calls(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[Node]:
        """The gateway's token tree of the conversation: a call for each assistant message, its
        prompt planned by the gateway from the messages before it, its reply that message as
        the template renders it in the conversation plus the end-of-turn token. Each call
        must extend the one before, as one sample does."""
        replies = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        if not replies:
            raise RenderError("the conversation has no assistant message: nothing to train on")
        try:
            chats = [ChatMessage.model_validate(m) for m in messages]
            offered = [Tool.model_validate(t) for t in tools] if tools else None
            dicts = to_template(chats)
            _, whole = render_chat(self.builder, dicts, tool_dicts(offered), None)
            tree, calls = AgentTree(), []
            for number, index in enumerate(replies):
                plan, chain_end, prompt = plan_chat(self.builder, tree, chats[:index], offered, None, self.policy)
                if calls and (plan.kind != "extend" or plan.parent is not calls[-1]):
                    raise RenderError(
                        f"under reasoning policy {self.policy!r} the prompt of reply {number} does not extend the "
                        f"call before it ({plan.mismatch or 'the template renders earlier turns differently'}); "
                        "the gateway would record a fork, which one sample cannot hold")
                reply = Sampled(self._reply_ids(whole, prompt, number))
                call = node_for(f"reply-{number}", plan, reply, self.tokenizer,
                                extend_chain(chain_end, message_key(dicts[index],
                                                                    argument_defaults(tool_dicts(offered)))))
                tree.add(call)
                calls.append(call)
        except (ValidationError, InvalidRequest) as exc:
            raise RenderError(f"the gateway would refuse this conversation: {exc}") from exc
        return calls

    def _reply_ids(self, whole: str, prompt: str, number: int) -> array:
        """Reply `number`: the text after its prompt in the whole conversation up to the
        end-of-turn marker, tokenized as the gateway tokenizes text, then the end-of-turn token."""
        eos = self.tokenizer.eos_text
        if not whole.startswith(prompt):
            raise RenderError(f"the chat template renders the prompt of reply {number} differently inside the whole "
                              "chat; it cannot be trained on as one growing sample")
        end = whole.find(eos, len(prompt))
        if end < 0:
            raise RenderError(f"assistant reply {number} has no end-of-turn marker {eos!r}")
        ids = self.tokenizer.encode_array(whole[len(prompt):end])
        ids.append(self.tokenizer.eos_id)
        return ids

    def sample(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *,
               session_id: str, group_id: str = "sft", agent_id: str = "main", reward: float | None = None,
               untrained: list[int] | tuple[int, ...] = ()) -> Sample:
        """The conversation's last call's tokens, the loss on its replies but the `untrained`
        ones (indices of assistant replies that stay in the context without loss)."""
        calls = self.calls(messages, tools)
        trained = [call for number, call in enumerate(calls) if number not in untrained]
        spans = [SampledSpan(call.prompt_len, call.path_len,
                             CallRef(call_id=f"{session_id}/{agent_id}/{index}", weight_version="expert"),
                             [0.0] * (call.path_len - call.prompt_len))
                 for index, call in enumerate(trained)]
        return build_sample(list(calls[-1].path), spans, session_id=session_id, group_id=group_id,
                            agent_id=agent_id, reward=reward).validate()
