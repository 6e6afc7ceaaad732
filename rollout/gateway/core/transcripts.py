"""A whole conversation recorded as the gateway would record it, without an engine: the public way
to turn a chat someone else played (an expert's transcript) into the gateway's token tree.

    calls = conversation_calls(PromptBuilder.from_pretrained(folder), messages, tools, policy="keep")
    calls[-1].path          # the last call's prompt + reply ids: one growing sample

Each assistant message is a call: its prompt planned by the gateway from the messages before it
(message conversion, control-token escaping, the model's template, prompt planning, tokenizer),
its reply that message as the template renders it in the conversation, then the end-of-turn
token. Each call must extend the one before, as one sample does.

`TranscriptRecorder` is the step under it, for replies that come from anywhere but an engine (an
expert, preflight's scripted replies): a call planned on one agent's token tree, then added to it,
as the call pipeline plans and records every call of every wire.
"""

from __future__ import annotations

from array import array
from typing import Any

from pydantic import ValidationError

from roost.rollout.gateway.core.errors import InvalidRequest
from roost.rollout.gateway.core.prompt_builder import PromptBuilder, PromptPlan
from roost.rollout.gateway.core.recording import Sampled, node_for
from roost.rollout.gateway.core.template_messages import (
    TemplateCall,
    argument_defaults,
    extend_chain,
    message_key,
    to_template,
    tool_dicts,
)
from roost.rollout.gateway.core.token_tree import AgentTree, Node
from roost.rollout.gateway.openai.chat_calls import plan_template, render_chat
from roost.rollout.gateway.openai.wire import ChatMessage, Tool


class ConversationError(ValueError):
    """A conversation does not record as one growing token path (template, roles)."""


class TranscriptRecorder:
    """One agent's calls recorded as the call pipeline records them, without an engine or a store:
    `plan` a call's prompt on the agent's token tree, then `record` it with its reply."""

    def __init__(self, builder: PromptBuilder, policy: str = "keep") -> None:
        self.builder = builder
        self.policy = policy
        """The reasoning policy, as a session's (`prompt_builder.POLICIES`)."""
        self.tree = AgentTree()

    def plan(self, call: TemplateCall) -> tuple[PromptPlan, bytes, str]:
        """The call's plan (from any wire's `template_call`), its messages' chain key and the
        rendered prompt."""
        return plan_template(self.builder, self.tree, call.messages, call.tools, call.template_kwargs, self.policy)

    def record(self, call_id: str, plan: PromptPlan, reply: Sampled, reply_key: bytes | None) -> Node:
        """The call added to the tree (later calls extend or fork from it); its node."""
        node = node_for(call_id, plan, reply, self.builder.tokenizer, reply_key)
        self.tree.add(node)
        return node


def conversation_calls(
    builder: PromptBuilder, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, policy: str = "keep"
) -> list[Node]:
    """The gateway's token tree of the conversation under reasoning policy `policy`: a call for
    each assistant message, root to leaf."""
    replies = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if not replies:
        raise ConversationError("the conversation has no assistant message: nothing to train on")
    try:
        chats = [ChatMessage.model_validate(m) for m in messages]
        offered = [Tool.model_validate(t) for t in tools] if tools else None
        dicts, rendered_tools = to_template(chats), tool_dicts(offered)
        defaults = argument_defaults(rendered_tools)
        _, whole = render_chat(builder, dicts, rendered_tools, None)
        recorder, calls = TranscriptRecorder(builder, policy), []
        for number, index in enumerate(replies):
            plan, chain_end, prompt = recorder.plan(TemplateCall(to_template(chats[:index]), rendered_tools))
            if calls and (plan.kind != "extend" or plan.parent is not calls[-1]):
                raise ConversationError(
                    f"under reasoning policy {policy!r} the prompt of reply {number} does not extend the "
                    f"call before it ({plan.mismatch or 'the template renders earlier turns differently'}); "
                    "the gateway would record a fork, which one sample cannot hold"
                )
            reply = Sampled(_reply_ids(builder, whole, prompt, number))
            key = extend_chain(chain_end, message_key(dicts[index], defaults))
            calls.append(recorder.record(f"reply-{number}", plan, reply, key))
    except (ValidationError, InvalidRequest) as exc:
        raise ConversationError(f"the gateway would refuse this conversation: {exc}") from exc
    return calls


def _reply_ids(builder: PromptBuilder, whole: str, prompt: str, number: int) -> array[int]:
    """Reply `number`: the text after its prompt in the whole conversation up to the end-of-turn
    marker, tokenized as the gateway tokenizes text, then the end-of-turn token."""
    tokenizer = builder.tokenizer
    eos = tokenizer.eos_text
    if not whole.startswith(prompt):
        raise ConversationError(
            f"the chat template renders the prompt of reply {number} differently inside the "
            "whole chat; it cannot be trained on as one growing sample"
        )
    end = whole.find(eos, len(prompt))
    if end < 0:
        raise ConversationError(f"assistant reply {number} has no end-of-turn marker {eos!r}")
    ids = tokenizer.encode_array(whole[len(prompt) : end])
    ids.append(tokenizer.eos_id)
    return ids
