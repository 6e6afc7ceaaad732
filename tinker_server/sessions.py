"""The SDK's sessions and the training models each owns.

A model id is `<session>:train:<seq>` (the SDK builds the same id itself). Requests find a model
by its id alone: the random session id in it keeps it from being guessed, but the server does not
yet tie a request to the caller's session, so whoever holds an id (and the key) can use the model.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .wire import LoraConfig

if TYPE_CHECKING:
    from .backend import TrainingBackend


class UnknownName(LookupError):
    """A session, model or request id this server does not know (HTTP 404)."""


class SessionFinished(LookupError):
    """A session its client closed (HTTP 410: the SDK stops its heartbeat on it)."""


@dataclass
class Session:
    session_id: str
    tags: list[str]
    sdk_version: str
    last_heartbeat: float = field(default_factory=time.monotonic)
    finished: str | None = None
    """How its client closed it (`success`, `errored`, `interrupted`); None while open."""


@dataclass
class TrainingModel:
    """A training client's model: its base, LoRA settings (None: full weight) and backend."""

    model_id: str
    session_id: str
    base_model: str
    lora: LoraConfig | None
    backend: TrainingBackend


@dataclass
class SavedState:
    """A `save_state` checkpoint: what it was trained from and the folder that holds it."""

    path: str
    """Its `tinker://<model_id>/weights/<name>` path."""
    base_model: str
    lora: LoraConfig | None
    """The LoRA config its model trained (None: every weight)."""
    folder: Path


class Registry:
    """Sessions, models and saved states, by id."""

    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}
        self.models: dict[str, TrainingModel] = {}
        self.pending: set[str] = set()
        """Ids of models being created: taken, though not usable yet."""
        self.states: dict[str, SavedState] = {}
        """Saved states by path; kept while the server runs, whoever closes their session."""

    def new_session(self, tags: list[str], sdk_version: str) -> Session:
        session = Session("ses-" + secrets.token_hex(8), tags, sdk_version)
        self.sessions[session.session_id] = session
        return session

    def session(self, session_id: str) -> Session:
        if session_id not in self.sessions:
            raise UnknownName(f"no session {session_id!r}; create one with POST /api/v1/create_session")
        return self.sessions[session_id]

    def open_session(self, session_id: str) -> Session:
        session = self.session(session_id)
        if session.finished is not None:
            raise SessionFinished(f"session {session_id!r} was closed ({session.finished}); create a new ServiceClient")
        return session

    def heartbeat(self, session_id: str) -> None:
        self.open_session(session_id).last_heartbeat = time.monotonic()

    def finish(self, session_id: str, reason: str) -> list[TrainingModel]:
        """Close the session (the first reason stays) and drop its models; the models dropped."""
        session = self.session(session_id)
        session.finished = session.finished or reason
        dropped = [m for m in self.models.values() if m.session_id == session_id]
        for model in dropped:
            del self.models[model.model_id]
        return dropped

    def reserve(self, model_id: str) -> bool:
        """Take `model_id` for a model about to be created; False if it is taken."""
        if model_id in self.models or model_id in self.pending:
            return False
        self.pending.add(model_id)
        return True

    def add_model(self, model: TrainingModel) -> None:
        self.pending.discard(model.model_id)
        self.models[model.model_id] = model

    def state(self, path: str) -> SavedState:
        if path not in self.states:
            raise UnknownName(f"no saved state at {path!r}; save_state(name) returns the path of one")
        return self.states[path]

    def model(self, model_id: str) -> TrainingModel:
        if model_id not in self.models:
            raise UnknownName(
                f"no training model {model_id!r} on this server; use the model_id create_model returned to your session"
            )
        return self.models[model_id]
