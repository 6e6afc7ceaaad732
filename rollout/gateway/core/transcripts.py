"""A whole conversation recorded as the gateway would record it, without an engine: the public way
to turn a chat someone else played (an expert's transcript) into the gateway's token tree.

    calls = conversation_calls(PromptBuilder.from_pretrained(folder), messages, tools, policy="keep")
    calls[-1].path          # the last call's prompt + reply ids: one growing sample

Each assistant message is a call: its prompt planned by the gateway from the messages before it
(message conversion, control-token escaping, the model's template, prompt planning, tokenizer),
its reply that message as the template renders it in the conversation, then the end-of-turn
token. Each call must extend the one before, as one sample does.
"""

from __future__ import annotations

from array import array
from typing import Any

from pydantic import ValidationError

from roost.rollout.gateway.core.errors import InvalidRequest
from roost.rollout.gateway.core.prompt_builder import PromptBuilder
from roost.rollout.gateway.core.recording import Sampled, node_for
from roost.rollout.gateway.core.template_messages import (
    argument_defaults,
    extend_chain,
    message_key,
    to_template,
    tool_dicts,
)
from roost.rollout.gateway.core.token_tree import AgentTree, Node
from roost.rollout.gateway.openai.chat_calls import plan_chat, render_chat
from roost.rollout.gateway.openai.wire import ChatMessage, Tool


class ConversationError(ValueError):
    """A conversation does not record as one growing token path (template, roles)."""


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
        dicts = to_template(chats)
        defaults = argument_defaults(tool_dicts(offered))
        _, whole = render_chat(builder, dicts, tool_dicts(offered), None)
        tree, calls = AgentTree(), []
        for number, index in enumerate(replies):
            plan, chain_end, prompt = plan_chat(builder, tree, chats[:index], offered, None, policy)
            if calls and (plan.kind != "extend" or plan.parent is not calls[-1]):
                raise ConversationError(
                    f"under reasoning policy {policy!r} the prompt of reply {number} does not extend the "
                    f"call before it ({plan.mismatch or 'the template renders earlier turns differently'}); "
                    "the gateway would record a fork, which one sample cannot hold"
                )
            reply = Sampled(_reply_ids(builder, whole, prompt, number))
            call = node_for(
                f"reply-{number}",
                plan,
                reply,
                builder.tokenizer,
                extend_chain(chain_end, message_key(dicts[index], defaults)),
            )
            tree.add(call)
            calls.append(call)
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
