"""SFT data: expert transcripts rendered into `Sample`s, token for token as the gateway would
record the same conversation.

    transcripts = await play_transcripts(env_url, "train", SFTData(episodes=12), max_turns=40, seed=0)
    renderer = ChatRenderer.from_pretrained(model_folder)
    samples = [renderer.sample(tool_agent_messages(t), tools, session_id=..., group_id="sft") for t in transcripts]

A transcript is what a harness did: the first observation and each (command, observation).
`tool_agent_messages` turns it into the chat the built-in `tool` agent would have sent,
so a model fine-tuned on it meets the same prompts at rollout time. `ChatRenderer` records the
chat as the gateway would (`roost.rollout.gateway.core.transcripts`): each assistant message is a
call whose prompt the gateway plans from the messages before it, and whose reply is that
message as the template renders it, then the end-of-turn token (loss mask 1). Everything else,
the text between replies included, has loss mask 0: the loss falls on assistant tokens only.
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
from roost.rollout.chat.tokenizer import ChatTokenizer
from roost.rollout.gateway.core.prompt_builder import PromptBuilder
from roost.rollout.gateway.core.token_tree import Node
from roost.rollout.gateway.core.transcripts import conversation_calls
from roost.rollout.store.samples import CallRef, Sample, SampledSpan, build_sample

TOOL_NAME = "act"


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


def tool_agent_messages(
    transcript: Transcript, system_prompt: str = SYSTEM_PROMPT, *, tools: bool = True
) -> list[dict[str, Any]]:
    """The chat the `tool` agent has after playing this transcript: each command an `act` tool
    call answered by a `tool` message, or, when the agent is offered no tools (`tools=False`),
    a plain-text reply answered by a `user` message."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": transcript.observation},
    ]
    for index, (command, observation) in enumerate(transcript.steps):
        if not tools:
            messages += [{"role": "assistant", "content": command}, {"role": "user", "content": observation}]
            continue
        call_id = f"call_{index}"
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": TOOL_NAME, "arguments": json.dumps({"command": command})},
                    }
                ],
            }
        )
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
        """The gateway's token tree of the conversation (`conversation_calls`): a call for each
        assistant message, each extending the one before."""
        return conversation_calls(self.builder, messages, tools, self.policy)

    def sample(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        session_id: str,
        group_id: str = "sft",
        agent_id: str = "main",
        reward: float | None = None,
        untrained: list[int] | tuple[int, ...] = (),
    ) -> Sample:
        """The conversation's last call's tokens, the loss on its replies but the `untrained`
        ones (indices of assistant replies that stay in the context without loss)."""
        calls = self.calls(messages, tools)
        trained = [call for number, call in enumerate(calls) if number not in untrained]
        spans = [
            SampledSpan(
                call.prompt_len,
                call.path_len,
                CallRef(call_id=f"{session_id}/{agent_id}/{index}", weight_version="expert"),
                [0.0] * (call.path_len - call.prompt_len),
            )
            for index, call in enumerate(trained)
        ]
        return build_sample(
            list(calls[-1].path), spans, session_id=session_id, group_id=group_id, agent_id=agent_id, reward=reward
        ).validate()
