"""OpenAI stop sequences: left out of the reply text, even when streamed."""

from __future__ import annotations

from typing import Any


class StopTrimmer:
    """Hold back the tail of streamed text until we know whether a stop string ends it.

    OpenAI leaves the stop sequence out of the reply; the engine reports which one matched
    only with its last chunk, by which time its first characters may already be streamed.
    """

    def __init__(self, stops: list[str]):
        self.hold = max((len(s) for s in stops), default=0)
        self.hold = self.hold + 16 if self.hold else 0
        self._tail = ""

    def feed(self, text: str) -> str:
        if not self.hold:
            return text
        self._tail += text
        if len(self._tail) <= self.hold:
            return ""
        out, self._tail = self._tail[: -self.hold], self._tail[-self.hold :]
        return out

    def finish(self, finish_reason: dict[str, Any]) -> str:
        tail, self._tail = self._tail, ""
        return trim_stop(tail, finish_reason)


def trim_stop(text: str, finish_reason: dict[str, Any]) -> str:
    matched = finish_reason.get("matched")
    if finish_reason.get("type") == "stop" and isinstance(matched, str) and matched:
        cut = text.find(matched)
        if cut >= 0:
            return text[:cut]
    return text
