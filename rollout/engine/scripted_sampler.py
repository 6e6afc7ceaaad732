"""The scripted sampler: the real engine, forced to say given text.

Tests elsewhere need the model to say something specific (a tool call, a final answer).
Rather than faking a server, the engine runs its real model and tokenizer and this
sampler picks the tokens: the reply text is tokenized with the real tokenizer and
emitted token by token, followed by the end-of-turn token. Logprobs stay the model's
own logprobs of the forced tokens.

Which reply? Each rule has a regular expression; the rule whose match ends latest in
the decoded prompt wins (so the newest message decides), ties go to the earlier rule,
and a rule without a pattern is the fallback. A rule's reply may be a list, said in turn (the
n-th request the rule answers gets item n modulo its length): the episodes of one group then
differ, as a sampled policy's would. A request may also force its reply directly with
`sampling_params.custom_params = {"scripted_reply": "..."}`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class ScriptRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    match: str | None = Field(None, description="Python regex searched in the decoded prompt; null = fallback")
    reply: str | list[str] = Field(
        description="text the model is made to say; a list: said in turn, one item per request this rule answers"
    )


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rules: list[ScriptRule] = Field(default_factory=list)


class ScriptError(ValueError):
    """A script that cannot be used: bad regex, or no rule for a prompt."""


@dataclass
class _CompiledRule:
    pattern: re.Pattern[str] | None
    replies: list[str]
    used: int = 0

    def next_reply(self) -> str:
        reply = self.replies[self.used % len(self.replies)]
        self.used += 1
        return reply


class ScriptedSampler:
    def __init__(self, script: Script):
        self._rules = [_compile(rule) for rule in script.rules]

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedSampler:
        return cls(Script.model_validate(json.loads(Path(path).read_text())))

    def reply_for(self, prompt_text: str) -> str:
        best: tuple[int, int] | None = None  # (match end, -rule index)
        fallback: _CompiledRule | None = None
        for index, rule in enumerate(self._rules):
            if rule.pattern is None:
                fallback = fallback or rule
                continue
            ends = [m.end() for m in rule.pattern.finditer(prompt_text)]
            if ends and (best is None or (ends[-1], -index) > best):
                best = (ends[-1], -index)
        if best is not None:
            return self._rules[-best[1]].next_reply()
        if fallback is not None:
            return fallback.next_reply()
        raise ScriptError("no scripted rule matches this prompt and the script has no fallback rule")


def _compile(rule: ScriptRule) -> _CompiledRule:
    replies = [rule.reply] if isinstance(rule.reply, str) else rule.reply
    if not replies:
        raise ScriptError(f"rule {rule.match!r} has an empty list of replies; give at least one")
    if rule.match is None:
        return _CompiledRule(None, replies)
    try:
        return _CompiledRule(re.compile(rule.match), replies)
    except re.error as exc:
        raise ScriptError(f"rule pattern {rule.match!r} is not a valid regex: {exc}") from exc
