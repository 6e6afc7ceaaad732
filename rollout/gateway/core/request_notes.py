"""What a request carried that the gateway accepted without acting on it: said once in the
log, and kept with the call.

Harnesses move faster than this gateway: a newer Claude Code or Codex sends top-level fields,
tools and items it does not know yet. Refusing them stops the harness at its first call;
acting as if they were honoured would mislead whoever reads the trajectory. So they are
accepted, warned about once per gateway (a harness sends the same field on every call), and
listed as `notes` in the call's stored response, beside its request as sent.
"""

from __future__ import annotations

import logging
import threading

from pydantic import BaseModel

log = logging.getLogger("roost.gateway")


def unknown_fields(req: BaseModel, where: str) -> list[str]:
    """A note for each field of `req` (a `Lenient` model) that its type does not declare."""
    return [
        f"{where}: field {name!r} is not one this gateway knows; accepted and recorded, not acted on"
        for name in sorted(req.model_extra or {})
    ]


class NoteLog:
    """Logs each distinct note once for the gateway's lifetime."""

    def __init__(self) -> None:
        self._said: set[str] = set()
        self._lock = threading.Lock()  # calls are planned on several threads

    def warn(self, notes: list[str]) -> None:
        for note in notes:
            with self._lock:
                if note in self._said:
                    continue
                self._said.add(note)
            log.warning("%s (said once; every call's record lists it under response.notes)", note)
