"""Prompt planning on the real Qwen3 tokenizer and template: continuations reuse ids and
tokenize only the new suffix; anything else forks at the longest common token prefix."""

from __future__ import annotations

from array import array

import pytest
from transformers import AutoTokenizer

from roost.rollout.chat.reply_parser import ReplyParser
from roost.rollout.chat.template import ChatTemplate
from roost.rollout.chat.tokenizer import ChatTokenizer
from roost.rollout.engine.tiny_model import resolve_model
from roost.rollout.gateway.core.prompt_builder import PromptBuilder
from roost.rollout.gateway.core.recording import Sampled, build_reply
from roost.rollout.gateway.core.template_messages import TemplateCall, to_template
from roost.rollout.gateway.core.transcripts import TranscriptRecorder
from roost.rollout.gateway.openai.wire import ChatMessage


@pytest.fixture(scope="module")
def builder():
    hf = AutoTokenizer.from_pretrained(str(resolve_model("tiny")))
    tok = ChatTokenizer(hf.backend_tokenizer, eos_token=hf.eos_token)
    return PromptBuilder(ChatTemplate(hf.chat_template, {}), tok)


class Agent:
    """Plays the gateway's part for one agent through its recorder: plan, 'sample' a reply, remember it."""

    def __init__(self, builder, policy="keep"):
        self.builder, self.recorder, self.n = builder, TranscriptRecorder(builder, policy), 0

    def call(self, messages, reply_text, tools=None):
        msgs = [ChatMessage.model_validate(m) for m in messages]
        plan, chain_end, text = self.recorder.plan(TemplateCall(to_template(msgs), tools))
        tok = self.builder.tokenizer
        sampled = Sampled(array("i", tok.encode(reply_text) + [tok.eos_id]), array("d"), {"type": "stop"})
        parser = ReplyParser(parse_tools=True)
        events = parser.feed(reply_text) + parser.finish()
        ids = [f"call_{self.n}_{i}" for i, e in enumerate(events) if e.kind == "tool_call"]
        _, message, key = build_reply(events, ids, chain_end)
        self.recorder.record(f"c{self.n}", plan, sampled, key)
        self.n += 1
        return plan, message, text


def test_continuation_reuses_ids_and_equals_fresh_tokenization(builder):
    agent = Agent(builder)
    convo = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
    p1, m1, _ = agent.call(convo, "Hello!")
    convo += [m1, {"role": "user", "content": "How are you?"}]
    p2, m2, text = agent.call(convo, "Fine.")
    assert (p2.kind, p2.reuse, p2.parent.call_id) == ("extend", "exact", "c0")
    assert list(p2.prompt_ids) == builder.tokenizer.encode_whole(text)
    assert p2.encoded_chars < len(text) / 2  # only the new suffix was tokenized


def test_resample_of_the_same_messages_forks_at_the_prompt(builder):
    agent = Agent(builder)
    convo = [{"role": "user", "content": "hi"}]
    p1, _, _ = agent.call(convo, "A")
    p2, _, _ = agent.call(convo, "B")
    assert p2.kind == "fork" and p2.shared_prefix_len == len(p1.prompt_ids)


def test_reasoning_dropped_by_template(builder):
    for policy in ("keep", "drop"):
        agent = Agent(builder, policy)
        convo = [{"role": "user", "content": "2+2?"}]
        p1, m1, _ = agent.call(convo, "<think>\nadd\n</think>\n\n4")
        assert m1["reasoning_content"] == "add" and m1["content"] == "4"
        convo += [m1, {"role": "user", "content": "3+3?"}]
        p2, _, text = agent.call(convo, "6")
        assert "<think>" not in text  # Qwen3 renders the past reply without its reasoning
        path_len = len(p1.prompt_ids) + len(builder.tokenizer.encode("<think>\nadd\n</think>\n\n4")) + 1
        if policy == "keep":
            assert (p2.kind, p2.reuse, p2.shared_prefix_len) == ("extend", "kept", path_len)
        else:
            assert p2.kind == "fork" and len(p1.prompt_ids) <= p2.shared_prefix_len < path_len
            assert list(p2.prompt_ids) == builder.tokenizer.encode_whole(text)
        assert p2.mismatch and "re-renders the reply differently" in p2.mismatch


def test_tool_chain_with_reasoning_is_exact(builder):
    agent = Agent(builder, "drop")
    tools = None
    convo = [{"role": "user", "content": "weather?"}]
    _, m1, _ = agent.call(
        convo, '<think>\nx\n</think>\n\n<tool_call>\n{"name": "w", "arguments": {"c": 1}}\n</tool_call>', tools
    )
    convo += [m1, {"role": "tool", "tool_call_id": m1["tool_calls"][0]["id"], "content": "sunny"}]
    p2, _, _ = agent.call(convo, "Sunny.")
    assert (p2.kind, p2.reuse) == ("extend", "exact")


def test_harness_reserialised_arguments_still_continue(builder):
    agent = Agent(builder)
    convo = [{"role": "user", "content": "weather?"}]
    _, m1, _ = agent.call(convo, '<tool_call>\n{"name": "w", "arguments": {"c": 1, "d": "x"}}\n</tool_call>')
    m1["tool_calls"][0]["function"]["arguments"] = '{"d":"x","c":1}'  # compact, keys reordered
    m1.pop("reasoning_content", None)
    convo += [m1, {"role": "tool", "content": "ok"}]
    p2, _, _ = agent.call(convo, "done")
    assert p2.kind == "extend" and p2.reuse == "kept"  # reused as sampled; template text differs


def test_edited_history_forks_at_longest_common_prefix(builder):
    agent = Agent(builder)
    convo = [{"role": "system", "content": "sys"}, {"role": "user", "content": "one"}]
    p1, m1, _ = agent.call(convo, "uno")
    convo2 = convo + [m1, {"role": "user", "content": "two"}]
    agent.call(convo2, "dos")
    edited = [{"role": "system", "content": "sys"}, {"role": "user", "content": "ONE"}]
    p3, _, _ = agent.call(edited, "UNO")
    assert p3.kind == "fork" and 0 < p3.shared_prefix_len < len(p1.prompt_ids)
    assert list(p3.prompt_ids[: p3.shared_prefix_len]) == list(p1.prompt_ids[: p3.shared_prefix_len])


def test_reply_sent_back_stripped_or_with_reasoning_in_content_still_continues(builder):
    agent = Agent(builder)
    convo = [{"role": "user", "content": "hi"}]
    _, m1, _ = agent.call(convo, "<think>\nhmm\n</think>\n\n Hello! \n")
    folded = {"role": "assistant", "content": "<think>hmm</think>" + m1["content"].strip()}
    p2, _, _ = agent.call(convo + [folded, {"role": "user", "content": "again"}], "ok")
    assert p2.kind == "extend" and p2.parent.call_id == "c0"
