"""What the `openai` pass-through asks an upstream for beyond the harness's request, and what
it reads back: each sampled token's logprob and the token ids, to record; the answer as the
harness asked for it, to return.

An upstream that refuses a parameter the gateway added (a hosted API answers 400 to
`return_token_ids`, a reasoning model to `logprobs`) is asked again without it, and not asked
for it again. What an upstream does not return is recorded as absent, never as a stand-in
(`CallRecord.untrainable` says why such a call is not training data).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TOKEN_IDS = "return_token_ids"
"""vLLM's and roost's extension: prompt ids on the answer, sampled ids on each choice."""
LOGPROBS = "logprobs"


@dataclass(frozen=True)
class Added:
    """What the gateway added to a request that the harness did not ask for."""

    logprobs: bool = False
    token_ids: bool = False

    def names(self) -> list[str]:
        return [name for name, on in ((LOGPROBS, self.logprobs), (TOKEN_IDS, self.token_ids)) if on]


def ask_for_tokens(body: dict[str, Any], path: str, refused: set[str], token_ids: bool) -> Added:
    """Ask, in `body`, for each sampled token's logprob and (when `token_ids`) for token ids,
    unless the harness asked already or the upstream refused that parameter before."""
    logprobs = False
    if LOGPROBS not in refused:
        if path == "completions" and body.get(LOGPROBS) is None:
            body[LOGPROBS] = 0  # text completions: 0 asks for the sampled tokens' logprobs alone
            logprobs = True
        elif path != "completions" and not body.get(LOGPROBS):
            body[LOGPROBS] = True
            if body.get("top_logprobs") is None:
                body["top_logprobs"] = 0
            logprobs = True
    ids = token_ids and TOKEN_IDS not in refused and not body.get(TOKEN_IDS)
    if ids:
        body[TOKEN_IDS] = True
    return Added(logprobs, ids)


def refused_parameter(status: int, error: dict[str, Any], added: Added) -> str | None:
    """The parameter the gateway added that a 400 answer names, if any (then the call is sent
    again without it)."""
    if status != 400:
        return None
    text = f"{error.get('param') or ''} {error.get('message') or ''}"
    return next((name for name in added.names() if name in text), None)


def as_asked(answer: dict[str, Any], added: Added) -> bool:
    """Take out of an answer (or stream chunk) what the harness did not ask for; True if changed."""
    if not (added.logprobs or added.token_ids):
        return False
    if added.token_ids:
        answer.pop("prompt_token_ids", None)
    for choice in answer.get("choices") or ():
        if added.logprobs and choice.get(LOGPROBS) is not None:
            choice[LOGPROBS] = None
        if added.token_ids:
            choice.pop("token_ids", None)
            choice.pop("prompt_token_ids", None)
    return True


def prompt_ids_of(answer: dict[str, Any], choice: dict[str, Any]) -> list[int]:
    """The prompt's ids: on the answer (chat) or on each choice (vLLM's text completions)."""
    return answer.get("prompt_token_ids") or choice.get("prompt_token_ids") or []


def logprob_values(logprobs: dict[str, Any] | None) -> list[float | None]:
    """The sampled tokens' logprobs of a choice (or a stream chunk's choice), chat's shape
    (`content[].logprob`) or text completions' (`token_logprobs`); None where one is missing."""
    if not logprobs:
        return []
    if logprobs.get("content") is not None:
        return [entry.get("logprob") for entry in logprobs["content"]]
    return list(logprobs.get("token_logprobs") or [])


def sampled_logprobs(values: list[float | None], sampled: int) -> list[float]:
    """One logprob per sampled token, or none at all (absent) when the upstream did not give
    exactly that."""
    if len(values) != sampled or any(v is None for v in values):
        return []
    return [float(v) for v in values]  # type: ignore[arg-type]


class StreamAccumulator:
    """Rebuilds the full answer from OpenAI stream chunks, to record it: text, tool calls, and
    the token ids and logprobs each chunk carries (vLLM sends them on every chunk)."""

    def __init__(self) -> None:
        self.answer: dict[str, Any] = {}
        self.choices: dict[int, dict[str, Any]] = {}
        self.finished = False

    def add(self, chunk: dict[str, Any]) -> None:
        for key in ("id", "model", "system_fingerprint", "prompt_token_ids", "usage"):
            if chunk.get(key) is not None:
                self.answer[key] = chunk[key]
        for c in chunk.get("choices") or ():
            slot = self.choices.setdefault(
                c.get("index", 0),
                {
                    "content": "",
                    "reasoning": "",
                    "text": "",
                    "calls": {},
                    "token_ids": None,
                    "prompt_token_ids": None,
                    "logprobs": [],
                    "finish_reason": None,
                },
            )
            delta = c.get("delta") or {}
            slot["content"] += delta.get("content") or ""
            slot["reasoning"] += delta.get("reasoning_content") or ""
            slot["text"] += c.get("text") or ""
            if c.get("token_ids") is not None:
                slot["token_ids"] = (slot["token_ids"] or []) + list(c["token_ids"])
            if c.get("prompt_token_ids") is not None:
                slot["prompt_token_ids"] = c["prompt_token_ids"]
            slot["logprobs"] += logprob_values(c.get(LOGPROBS))
            for call in delta.get("tool_calls") or ():
                entry = slot["calls"].setdefault(call.get("index", 0), {"id": None, "name": "", "arguments": ""})
                entry["id"] = call.get("id") or entry["id"]
                fn = call.get("function") or {}
                entry["name"] += fn.get("name") or ""
                entry["arguments"] += fn.get("arguments") or ""
            if c.get("finish_reason"):
                slot["finish_reason"] = c["finish_reason"]
                self.finished = True

    def result(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The answer and its choices, shaped as a non-streamed answer's."""
        choices = []
        for index, slot in sorted(self.choices.items()):
            calls = [
                {"id": e["id"], "type": "function", "function": {"name": e["name"], "arguments": e["arguments"]}}
                for _, e in sorted(slot["calls"].items())
            ]
            message: dict[str, Any] = {"role": "assistant", "content": slot["content"] or (None if calls else "")}
            if slot["reasoning"]:
                message["reasoning_content"] = slot["reasoning"]
            if calls:
                message["tool_calls"] = calls
            choice = {
                "index": index,
                "finish_reason": slot["finish_reason"],
                "token_ids": slot["token_ids"],
                "prompt_token_ids": slot["prompt_token_ids"],
                LOGPROBS: {"token_logprobs": slot["logprobs"]},
            }
            if slot["text"]:
                choice["text"] = slot["text"]
            else:
                choice["message"] = message
            choices.append(choice)
        return self.answer, choices
