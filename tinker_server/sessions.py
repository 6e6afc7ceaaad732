"""The SDK's sessions and the training models each owns.

A model id is `<session>:train:<seq>` (the SDK builds the same id itself); a request naming
another session's model is refused as if the model did not exist, so one tenant cannot reach
another's weights by guessing.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .wire import LoraConfig

if TYPE_CHECKING:
    from .backend import TrainingBackend


class UnknownName(LookupError):
    """A session, model or request id this server does not know (HTTP 404)."""


@dataclass
class Session:
    session_id: str
    tags: list[str]
    sdk_version: str
    last_heartbeat: float = field(default_factory=time.monotonic)


@dataclass
class TrainingModel:
    """A training client's model: its base, LoRA settings (None: full weight) and backend."""

    model_id: str
    session_id: str
    base_model: str
    lora: LoraConfig | None
    backend: TrainingBackend


class Registry:
    """Sessions and models, by id."""

    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}
        self.models: dict[str, TrainingModel] = {}

    def new_session(self, tags: list[str], sdk_version: str) -> Session:
        session = Session("ses-" + secrets.token_hex(8), tags, sdk_version)
        self.sessions[session.session_id] = session
        return session

    def session(self, session_id: str) -> Session:
        if session_id not in self.sessions:
            raise UnknownName(f"no session {session_id!r}; create one with POST /api/v1/create_session")
        return self.sessions[session_id]

    def heartbeat(self, session_id: str) -> None:
        self.session(session_id).last_heartbeat = time.monotonic()

    def add_model(self, model: TrainingModel) -> None:
        self.models[model.model_id] = model

    def model(self, model_id: str) -> TrainingModel:
        if model_id not in self.models:
            raise UnknownName(
                f"no training model {model_id!r} on this server; use the model_id create_model returned to your session"
            )
        return self.models[model_id]
