"""Image placeholders in planned prompts: each image's one placeholder becomes as many ids as the
image takes, a turn that resends the same image extends the recorded call (its ids reused), and a
turn with a different image at the same place forks at that image's first placeholder id. The
template here is a test's own ChatML with image parts (Qwen-VL's markup) over the real Qwen3
tokenizer (tests/rollout/test_gateway_vision_engine.py runs the tiny VLM's own template end to
end)."""

from __future__ import annotations

from array import array

import pytest
from transformers import AutoTokenizer

from roost.rollout.chat.reply_parser import ParsedReply
from roost.rollout.chat.template import ChatTemplate
from roost.rollout.chat.tokenizer import ChatTokenizer
from roost.rollout.engine.tiny_model import resolve_model
from roost.rollout.gateway.core.prompt_builder import ImagesNotRendered, PromptBuilder, PromptImage
from roost.rollout.gateway.core.recording import Sampled, node_for, reply_key
from roost.rollout.gateway.core.template_messages import chain_keys, header_key, message_key
from roost.rollout.gateway.core.token_tree import AgentTree

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content is string %}{{ m.content }}"
    "{% else %}{% for p in m.content %}{% if p.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ p.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def builder():
    hf = AutoTokenizer.from_pretrained(str(resolve_model("tiny")))
    tokenizer = ChatTokenizer(hf.backend_tokenizer, eos_token=hf.eos_token)
    return PromptBuilder(ChatTemplate(TEMPLATE), tokenizer, image_token="<|image_pad|>")


def user(sha: str, text: str) -> dict:
    return {"role": "user", "content": [{"type": "image", "sha256": sha}, {"type": "text", "text": text}]}


def plan(builder, tree, messages, images):
    chain = chain_keys(header_key(None, None), [message_key(m) for m in messages])
    text = builder.template.render(messages)
    return builder.build_chat(tree, chain, text, "keep", None, images), chain[-1]


def record(builder, tree, p, chain_end, reply: str, call_id: str):
    sampled = Sampled(ids=array("i", builder.tokenizer.encode(reply) + [builder.tokenizer.eos_id]))
    key = reply_key(chain_end, ParsedReply(content=reply, reasoning=None))
    tree.add(node_for(call_id, p, sampled, builder.tokenizer, key))
    return sampled


def test_images_expand_extend_and_fork_by_hash(builder):
    pad = builder.image_id
    tree = AgentTree()
    a, b = PromptImage("a" * 64, 6), PromptImage("b" * 64, 6)
    first, end = plan(builder, tree, [user(a.sha256, "What is it?")], [a])
    ids = list(first.prompt_ids)
    [span] = first.images
    assert ids[span.offset : span.offset + 6] == [pad] * 6 and ids.count(pad) == 6 and first.kind == "root"
    record(builder, tree, first, end, "A cat.", "c1")
    history = [user(a.sha256, "What is it?"), {"role": "assistant", "content": "A cat."}]
    again, _ = plan(builder, tree, [*history, {"role": "user", "content": "Sure?"}], [a])
    path = list(tree.nodes["c1"].path)
    assert again.kind == "extend" and list(again.prompt_ids[: len(path)]) == path and again.images == first.images
    other = [
        user(b.sha256, "What is it?"),
        {"role": "assistant", "content": "A cat."},
        {"role": "user", "content": "Sure?"},
    ]
    forked, _ = plan(builder, tree, other, [b])
    # the same ids through the placeholders, but another image: shared only up to its first id
    assert list(forked.prompt_ids[: len(path)]) == path
    assert forked.kind == "fork" and forked.parent.call_id == "c1" and forked.shared_prefix_len == span.offset


def test_a_placeholder_per_image_or_a_refusal(builder):
    with pytest.raises(ImagesNotRendered, match="1 image placeholders for 2 images"):
        plan(builder, AgentTree(), [user("a" * 64, "x")], [PromptImage("a" * 64, 4), PromptImage("b" * 64, 4)])
