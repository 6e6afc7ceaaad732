"""Prompt ids for a call: reuse what the engine already saw, tokenize only what is new.

For a chat call the gateway renders the messages with the model's template. If they
continue a recorded call (its messages, then the reply the gateway returned, then new
messages), the prompt is that call's prompt ids + sampled ids, verbatim, followed by the
tokens of the text the template puts after the reply's end-of-turn marker. Whether the
template re-renders the reply exactly as sampled is checked every time:

- exact: the template's text up to the reply's end equals the parent's prompt text plus
  the sampled text. Reuse is then just the template's own rendering.
- not exact (Qwen3 drops past `<think>` blocks, a template rewrites tool-call JSON, ...):
  policy `keep` still reuses the sampled ids (the engine sees its own past reasoning);
  policy `drop` follows the template and records a fork at the first differing token.

Anything else (edited, truncated, summarised history; a retry) is tokenized whole and
recorded as a fork of the recorded path sharing the longest token prefix.

An image renders as the template's one placeholder token; its ids are that token repeated as
many times as the image takes (`expand_images`), in the suffix tokenized for the call: reused
ids already hold their images' placeholders. The plan says which images the prompt carries and
where (`PromptPlan.images`); the token tree compares them when it looks for a shared prefix.

Client strings are rendered with their control-token spellings escaped, so that only the
template's markup makes control tokens (rollout/chat/control_text.py). A builder may plan
calls on several threads at once.
"""

from __future__ import annotations

import hashlib
import threading
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from roost.rollout.chat.template import ChatTemplate
from roost.rollout.chat.tokenizer import ChatTokenizer, TooManyTokens
from roost.rollout.gateway.core.token_tree import AgentTree, Node
from roost.rollout.store.records import ImageSpan

POLICIES = ("keep", "drop")


@dataclass
class PromptPlan:
    prompt_ids: array
    parent: Node | None
    shared_prefix_len: int
    kind: str  # root | extend | fork
    reuse: str  # exact | kept | none
    render_len: int = 0
    render_digest: bytes = b""
    turns_before: int = 0
    prompt_key: bytes | None = None
    encoded_chars: int = 0  # characters tokenized for this call (the rest was reused)
    mismatch: str | None = None  # why a continuation did not re-render exactly, if it did not
    images: tuple[ImageSpan, ...] = ()  # the images the prompt carries, in token order


class ImagesNotRendered(ValueError):
    """The template rendered another number of image placeholders than the call has images."""


@dataclass(frozen=True)
class PromptImage:
    """An image of a call as the prompt needs it: its content address and how many ids it takes."""

    sha256: str
    tokens: int


def digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class PromptBuilder:
    def __init__(
        self,
        template: ChatTemplate,
        tokenizer: ChatTokenizer,
        *,
        render_cache_entries: int = 2048,
        image_token: str | None = None,
    ):
        self.template = template
        self.tokenizer = tokenizer
        self.image_id = tokenizer.added_ids.get(image_token) if image_token else None
        """The id of the template's image placeholder; None: a model that reads text only."""
        self._renders: dict[bytes, str] = {}
        self._render_cache_entries = render_cache_entries
        self._renders_lock = threading.Lock()

    @classmethod
    def from_pretrained(cls, folder: str | Path, image_token: str | None = None) -> PromptBuilder:
        """The model folder's chat template and tokenizer, its end-of-turn token its eos;
        `image_token`: a vision model's image placeholder."""
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(str(folder))
        tokenizer = ChatTokenizer(hf.backend_tokenizer, eos_token=hf.eos_token)
        return cls(ChatTemplate.of(hf), tokenizer, image_token=image_token)

    def render(
        self,
        key: bytes,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        template_kwargs: dict[str, Any] | None,
    ) -> str:
        """Render with a cache keyed by the messages' chain key: retries, resamples and
        parallel rollouts of one prompt render it once."""
        text = self._renders.get(key)  # a dict lookup is atomic: no lock to read
        if text is None:
            escape = self.tokenizer.control.escape
            text = self.template.render(escape(messages), tools=escape(tools), template_kwargs=escape(template_kwargs))
            with self._renders_lock:
                if len(self._renders) >= self._render_cache_entries:
                    for old in list(self._renders)[: self._render_cache_entries // 4]:
                        del self._renders[old]
                self._renders[key] = text
        return text

    def build_chat(
        self,
        tree: AgentTree,
        chain: list[bytes],
        text: str,
        policy: str,
        limit: int | None = None,
        images: Sequence[PromptImage] = (),
    ) -> PromptPlan:
        """`chain`: the messages' chain keys (which name the images); `text`: their rendering with
        a generation prompt; `images`: the messages' images in order. Raises TooManyTokens once
        the prompt is known to pass `limit` tokens, ImagesNotRendered when the template did not
        render one placeholder per image."""
        eos = self.tokenizer.eos_text
        turns = text.count(eos)
        found = tree.continuation_of(chain)
        mismatch = None
        if found is not None:
            plan, mismatch = self._continue(found[0], text, policy, limit, images)
            if plan is not None:
                plan.turns_before, plan.prompt_key = turns, chain[-1]
                return plan
        ids, spans = self.expand_images(self.tokenizer.encode_array(text, limit), images, 0, limit)
        candidates = tree.related(chain)
        if found is not None and found[0] not in candidates:
            candidates.insert(0, found[0])
        plan = self._fork(ids, candidates, spans)
        plan.render_len, plan.render_digest, plan.turns_before = len(text), digest(text), turns
        plan.prompt_key, plan.encoded_chars = chain[-1], len(text)
        plan.mismatch = mismatch
        return plan

    def build_text(self, tree: AgentTree, ids: array) -> PromptPlan:
        return self._fork(ids, tree.newest(), ())

    def expand_images(
        self, ids: array, images: Sequence[PromptImage], start: int, limit: int | None
    ) -> tuple[array, tuple[ImageSpan, ...]]:
        """`ids` (which begin at prompt position `start`) with each image placeholder repeated as
        many times as its image takes, and where each image landed in the prompt."""
        if self.image_id is None:
            if images:
                raise ImagesNotRendered(f"{len(images)} images for a model that reads text only")
            return ids, ()
        at = np.flatnonzero(np.frombuffer(ids, dtype=np.int32) == self.image_id).tolist() if len(ids) else []
        if len(at) != len(images):
            raise ImagesNotRendered(
                f"the model's chat template rendered {len(at)} image placeholders for {len(images)} images "
                "(it renders images in user and tool messages only)"
            )
        if not images:
            return ids, ()
        out = array("i")
        spans = []
        previous = 0
        for index, image in zip(at, images):
            out.extend(ids[previous:index])
            spans.append(ImageSpan(image.sha256, start + len(out), image.tokens))
            out.extend(array("i", [self.image_id]) * image.tokens)
            previous = index + 1
        out.extend(ids[previous:])
        if limit is not None and len(out) > limit:
            raise TooManyTokens(len(out), limit)
        return out, tuple(spans)

    def _continue(
        self, parent: Node, text: str, policy: str, limit: int | None, images: Sequence[PromptImage]
    ) -> tuple[PromptPlan | None, str | None]:
        eos = self.tokenizer.eos_text
        same_prefix = len(text) > parent.render_len and digest(text[: parent.render_len]) == parent.render_digest
        if same_prefix:
            end = text.find(eos, parent.render_len)
        else:
            end = _nth(text, eos, parent.turns_before + 1)
        if end < 0:
            return None, "the rendering has no end-of-turn marker after the reply"
        boundary = end + len(eos)
        sampled = parent.reply_text if parent.ends_with_eos else parent.reply_text + eos
        exact = same_prefix and text[parent.render_len : boundary] == sampled
        mismatch = None if exact else _describe_mismatch(text, parent, boundary, sampled, same_prefix)
        if mismatch is not None and policy != "keep":
            return None, mismatch
        # After a reply that ended without its end-of-turn token (length, stop string) the
        # marker is new text the engine has not seen: it goes into the suffix.
        start = boundary if parent.ends_with_eos else end
        suffix = text[start:]
        ids = array("i", parent.path)
        inherited = len(parent.images)
        rest = None if limit is None else limit - len(ids)
        try:
            new, spans = self.expand_images(
                self.tokenizer.encode_array(suffix, rest), images[inherited:], len(ids), rest
            )
        except TooManyTokens as exc:
            raise TooManyTokens(len(ids) + exc.at_least, limit) from None
        ids.extend(new)
        plan = PromptPlan(
            prompt_ids=ids,
            parent=parent,
            shared_prefix_len=parent.path_len,
            kind="extend",
            reuse="exact" if exact else "kept",
            render_len=len(text),
            render_digest=digest(text),
            encoded_chars=len(suffix),
            mismatch=mismatch,
            images=parent.images + spans,
        )
        return plan, mismatch

    @staticmethod
    def _fork(ids: array, candidates: list[Node], images: tuple[ImageSpan, ...]) -> PromptPlan:
        parent, shared = AgentTree.best_prefix(ids, candidates, images)
        if parent is None:
            return PromptPlan(ids, None, 0, "root", "none", images=images)
        kind = "extend" if shared == parent.path_len else "fork"
        return PromptPlan(ids, parent, shared, kind, "none", images=images)


def _nth(text: str, needle: str, n: int) -> int:
    index = -1
    for _ in range(n):
        index = text.find(needle, index + 1)
        if index < 0:
            return -1
    return index


def _describe_mismatch(text: str, parent: Node, boundary: int, sampled: str, same_prefix: bool) -> str:
    if not same_prefix:
        return (
            "the text before this reply renders differently once the reply is in the history "
            "(the template rewrites earlier turns or drops part of the generation prompt)"
        )
    rendered = text[parent.render_len : boundary]
    n = next((i for i, (a, b) in enumerate(zip(rendered, sampled)) if a != b), min(len(rendered), len(sampled)))
    return (
        f"the template re-renders the reply differently from how it was sampled, from character {n}: "
        f"sampled {sampled[n : n + 40]!r}, re-rendered {rendered[n : n + 40]!r}"
    )
