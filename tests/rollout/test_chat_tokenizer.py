"""The chat tokenizer and template against Hugging Face's own, on the real Qwen3 tokenizer."""

from __future__ import annotations

import random

import pytest
from transformers import AutoTokenizer

from roost.rollout.chat.detokenize import IncrementalDecoder
from roost.rollout.chat.template import ChatTemplate, TemplateRenderError
from roost.rollout.chat.tokenizer import ChatTokenizer, TooManyTokens
from roost.rollout.engine.tiny_model import resolve_model


@pytest.fixture(scope="module")
def hf():
    return AutoTokenizer.from_pretrained(str(resolve_model("tiny")))


@pytest.fixture(scope="module")
def tok(hf):
    return ChatTokenizer(hf.backend_tokenizer, eos_token=hf.eos_token)


PIECES = [
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "\n",
    "\n\n",
    " ",
    "  ",
    "user",
    "assistant",
    "Hello",
    " wörld",
    "日本語",
    "😀",
    '{"a": 1}',
    "\t",
    "123",
    "'s",
    "ab",
]


def test_segmented_encoding_equals_whole_encoding(tok):
    assert tok.segmented and tok.eos_id == 151645
    rng = random.Random(7)
    for _ in range(300):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 30)))
        assert tok.encode(text) == tok.encode_whole(text), repr(text)
        assert tok.encode(text) == tok.encode(text)  # cached path


def test_character_bound_is_a_lower_bound_on_tokens(tok):
    rng = random.Random(11)
    texts = [" " * 5000, "=" * 5000, "\n" * 3000, "ab" * 4000, "😀" * 500]
    texts += ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 200))) for _ in range(100)]
    for text in texts:
        assert len(tok.encode_whole(text)) >= tok.tokens_at_least(len(text)) > 0, repr(text[:40])
    with pytest.raises(TooManyTokens) as refused:
        tok.encode_array("x" * 10 * tok.max_chars_per_token, limit=5)
    assert refused.value.at_least == 10  # refused from the length alone


def test_incremental_decoder_never_splits_characters(tok):
    text = "Hé 😀 日本語 <tool_call>\n{}\n</tool_call> done"
    ids = tok.encode(text)
    decoder = IncrementalDecoder(tok, skip_special_tokens=False)
    out = "".join(decoder.push([i]) for i in ids) + decoder.flush()
    assert out == text


def test_template_matches_hugging_face(hf):
    template = ChatTemplate(hf.chat_template, {k: v for k, v in hf.special_tokens_map.items() if isinstance(v, str)})
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "r",
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}],
        },
        {"role": "tool", "content": "42"},
    ]
    for kwargs in ({}, {"enable_thinking": False}):
        ours = template.render(messages, tools=tools, template_kwargs=kwargs)
        theirs = hf.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True, **kwargs)
        assert ours == theirs


def test_template_errors_are_named(hf):
    template = ChatTemplate(hf.chat_template, {})
    with pytest.raises(TemplateRenderError, match="cannot render|failed on"):
        template.render([{"role": "user"}])
