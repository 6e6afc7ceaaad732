"""The model's own chat template, rendered the way Hugging Face renders it.

We use transformers' compiled-template helper rather than a Jinja environment of our own:
the filters and globals it defines (`tojson` without HTML escaping, `raise_exception`,
`strftime_now`, a sandbox) are what the template was written against.
"""

from __future__ import annotations

from typing import Any

import jinja2


class TemplateRenderError(ValueError):
    """The chat template refused these messages (its own `raise_exception`, or a bad shape)."""


class ChatTemplate:
    def __init__(self, source: str, special_tokens: dict[str, str] | None = None):
        from transformers.utils.chat_template_utils import _compile_jinja_template

        if not source:
            raise ValueError("the tokenizer has no chat template; pass a model whose tokenizer_config.json has one")
        self.source = source
        self._compiled = _compile_jinja_template(source)
        self._globals = dict(special_tokens or {})

    @classmethod
    def from_pretrained(cls, path: str) -> ChatTemplate:
        from transformers import AutoTokenizer

        return cls.of(AutoTokenizer.from_pretrained(path))

    @classmethod
    def of(cls, hf: Any) -> ChatTemplate:
        """A loaded Hugging Face tokenizer's template, its special tokens as template globals."""
        tokens = {k: v for k, v in hf.special_tokens_map.items() if isinstance(v, str)}
        return cls(hf.chat_template, tokens)

    def render(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        template_kwargs: dict[str, Any] | None = None,
    ) -> str:
        try:
            return self._compiled.render(
                messages=messages,
                tools=tools or None,
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **self._globals,
                **(template_kwargs or {}),
            )
        except jinja2.TemplateError as exc:
            raise TemplateRenderError(f"the model's chat template cannot render these messages: {exc}") from exc
        except (TypeError, AttributeError, KeyError) as exc:
            raise TemplateRenderError(
                f"the model's chat template failed on these messages ({type(exc).__name__}: {exc}); "
                "check roles, content types and tool_calls"
            ) from exc
