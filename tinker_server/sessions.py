"""The SDK's sessions, the training models each owns and the states they saved, each owned by a tenant.

A tenant is an API key (`tenant_of` names it without keeping the key): the SDK sends no session
id with a model's requests, only its key, so the key is what a request can be tied to. A session
belongs to the tenant that created it, and its models and saved states with it; another tenant's
request naming one gets the 404 of a name this server does not know, and changes nothing. The
sessions of one tenant share its models and states (so `create_training_client_from_state` in a
new ServiceClient resumes an earlier one's run).

A model id is `<session>:train:<seq>` (the SDK builds the same id itself).
"""

from __future__ import annotations

import hashlib
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


def tenant_of(api_key: str) -> str:
    """The tenant an API key stands for: a digest of it, so the registry holds no key."""
    return "tenant-" + hashlib.sha256(api_key.encode()).hexdigest()[:16]


@dataclass
class Session:
    session_id: str
    tenant: str
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
    tenant: str
    base_model: str
    lora: LoraConfig | None
    backend: TrainingBackend


@dataclass
class TrainingRun:
    """What the REST client reads of a model (`get_training_run`): kept after its session closed
    and its model was dropped, as its saved states are."""

    training_run_id: str
    session_id: str
    tenant: str
    base_model: str
    lora_rank: int | None
    """None: every weight trains."""
    last_request: float = field(default_factory=time.time)
    """When a request last named its model (Unix time)."""


@dataclass
class SavedState:
    """A `save_state` checkpoint: what it was trained from and the folder that holds it."""

    path: str
    """Its `tinker://<model_id>/weights/<name>` path."""
    tenant: str
    base_model: str
    lora: LoraConfig | None
    """The LoRA config its model trained (None: every weight)."""
    folder: Path
    created: float = field(default_factory=time.time)


class Registry:
    """Sessions, models and saved states, by id."""

    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}
        self.models: dict[str, TrainingModel] = {}
        self.pending: set[str] = set()
        """Ids of models being created: taken, though not usable yet."""
        self.states: dict[str, SavedState] = {}
        """Saved states by path; kept while the server runs (or until deleted), whoever closes their session."""
        self.runs: dict[str, TrainingRun] = {}
        """Every model made, by id, in the order made; kept while the server runs."""
        self.external: dict[str, SavedState] = {}
        """`save_weights_external` exports by path (their `lora` as the state's); downloaded, not loaded."""
        self.deleted: dict[str, str] = {}
        """tinker:// paths of deleted checkpoints (states and sampler weights) → their tenant."""

    def new_session(self, tags: list[str], sdk_version: str, tenant: str) -> Session:
        session = Session("ses-" + secrets.token_hex(8), tenant, tags, sdk_version)
        self.sessions[session.session_id] = session
        return session

    def session(self, session_id: str, tenant: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None or session.tenant != tenant:
            raise UnknownName(f"no session {session_id!r}; create one with POST /api/v1/create_session")
        return session

    def open_session(self, session_id: str, tenant: str) -> Session:
        session = self.session(session_id, tenant)
        if session.finished is not None:
            raise SessionFinished(f"session {session_id!r} was closed ({session.finished}); create a new ServiceClient")
        return session

    def heartbeat(self, session_id: str, tenant: str) -> None:
        self.open_session(session_id, tenant).last_heartbeat = time.monotonic()

    def finish(self, session_id: str, reason: str, tenant: str) -> list[TrainingModel]:
        """Close the session (the first reason stays) and drop its models; the models dropped."""
        session = self.session(session_id, tenant)
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
        lora = model.backend.lora
        self.runs[model.model_id] = TrainingRun(
            model.model_id, model.session_id, model.tenant, model.base_model, None if lora is None else lora.rank
        )

    def run(self, training_run_id: str, tenant: str) -> TrainingRun:
        run = self.runs.get(training_run_id)
        if run is None or run.tenant != tenant:
            raise UnknownName(
                f"no training run {training_run_id!r}; list_training_runs() lists yours (a run id is a model_id)"
            )
        return run

    def state(self, path: str, tenant: str) -> SavedState:
        saved = self.states.get(path)
        if saved is None or saved.tenant != tenant:
            self.check_not_deleted(path, tenant)
            raise UnknownName(f"no saved state at {path!r}; save_state(name) returns the path of one")
        return saved

    def check_not_deleted(self, path: str, tenant: str) -> None:
        """`UnknownName` saying so when the tenant deleted the checkpoint at `path`."""
        if self.deleted.get(path) == tenant:
            raise UnknownName(
                f"the checkpoint at {path!r} was deleted (delete_checkpoint); save a new one and use its path"
            )

    def model(self, model_id: str, tenant: str) -> TrainingModel:
        """The tenant's model `model_id`, marked as just used."""
        model = self.models.get(model_id)
        if model is None or model.tenant != tenant:
            raise UnknownName(
                f"no training model {model_id!r} on this server; use the model_id create_model returned to your session"
            )
        self.runs[model_id].last_request = time.time()
        return model
