"""The control plane's bodies and answers (sessions, rewards, advantages, pause, health, the
training samples of groups) and the answers to harnesses' probes.

Both ends use these models: the gateway parses and answers with them, and its client
(`control/client.py`) sends and reads them; so this module imports nothing of the server.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator

from roost.outcome import EpisodeOutcome, SessionStatus
from roost.rollout.gateway.core.wire_base import Wire
from roost.rollout.store.program_times import ProgramTimes
from roost.rollout.store.samples import CallRef, Refused, Sample, SessionSamples

SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


class CreateSession(Wire):
    """`POST /sessions`."""

    group_id: str | None = Field(None, description="Group (e.g. GRPO group / training step) the session belongs to")
    task: dict[str, Any] = Field(default_factory=dict, description="Task metadata (id, split, env, seed, ...)")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Anything else to keep with the session")
    session_id: str | None = Field(None, description="Choose the id (default: random)")
    reasoning_policy: Literal["keep", "drop"] | None = Field(None, description="Override the gateway's policy")
    traceparent: str | None = Field(
        None,
        max_length=128,
        description=(
            "W3C traceparent of the episode's span (tracing on): the session's model calls that bring no "
            "traceparent of their own are its children (default: this request's own traceparent)"
        ),
    )

    @field_validator("session_id")
    @classmethod
    def _plain_token(cls, sid: str | None) -> str | None:
        # The id becomes a path segment of the session's base_url: `.`, `..`, `/` or `%2e` there
        # would be normalised by clients into another path (`/sessions/../v1` is `/v1`).
        if sid is not None and not SESSION_ID.fullmatch(sid):
            raise ValueError(
                "must be 1-128 letters, digits, '_' or '-', starting with a letter or digit "
                "(it is a path segment of the session's base_url); choose another or omit it"
            )
        return sid


class PostReward(Wire):
    """`POST /sessions/{sid}/reward`: to the session, or to one agent, or to one call."""

    reward: float
    agent: str | None = None
    call_id: str | None = None
    info: dict[str, Any] = Field(default_factory=dict)


class CallAdvantage(Wire):
    call_id: str
    advantage: float | list[float]


class PostAdvantages(Wire):
    """`POST /sessions/{sid}/advantages`: a scalar per call, or one value per sampled token."""

    advantages: list[CallAdvantage]


class FinishSession(Wire):
    """`POST /sessions/{sid}/finish`."""

    outcome: EpisodeOutcome | None = Field(None, description="how the episode ended: status, reward, kind, reason")
    info: dict[str, Any] = Field(
        default_factory=dict,
        description="anything else about the episode, for people "
        "(task id, steps, stop reason); without `outcome`, read for its `status` and `reward`",
    )


class PauseRequest(Wire):
    """`POST /admin/pause`: stop admitting calls; wait (bounded) for in-flight ones to finish."""

    drain_timeout_s: float = Field(60.0, ge=0.0)


class ServerVersion(Wire):
    version: str
    server: str


class OllamaShow(Wire):
    model_info: dict[str, int]
    parameters: str
    capabilities: list[str]
    details: dict[str, str]


class SessionCreated(Wire):
    """The answer to `POST /sessions`: `base_url` goes to the harness, `key` is its API key."""

    session_id: str
    key: str
    base_url: str
    group_id: str | None
    reasoning_policy: Literal["keep", "drop"]
    created_at: float


class SessionSummary(Wire):
    session_id: str
    group_id: str | None
    task: dict[str, Any]
    metadata: dict[str, Any]
    status: SessionStatus
    reasoning_policy: Literal["keep", "drop"]
    created_at: float
    finished_at: float | None
    outcome: EpisodeOutcome | None = None
    """How the episode ended; None while the session is open."""
    finish_info: dict[str, Any] | None


class SessionListItem(SessionSummary):
    calls: int


class SessionList(Wire):
    """`GET /sessions`."""

    sessions: list[SessionListItem]


class AgentView(Wire):
    agent_id: str
    parent_agent: str | None


class ImageView(Wire):
    """An image a call's prompt carried: `count` placeholder ids from `offset`; its bytes at
    `GET /images/{sha256}`."""

    sha256: str
    offset: int
    count: int


class CallView(Wire):
    call_id: str
    agent_id: str
    parent_agent: str | None
    seq: int
    endpoint: str
    parent_call_id: str | None
    kind: str
    reuse: str | None
    shared_prefix_len: int
    prompt_tokens: int
    completion_tokens: int
    finish_reason: dict[str, Any] | None
    weight_version: str | None
    timings: dict[str, Any]
    request: dict[str, Any] | None = None
    """The request as the harness sent it (its messages, tools, ...), for people and judges."""
    response: dict[str, Any] | None
    prompt_ids: list[int] | None = None
    sampled_ids: list[int] | None = None
    sampled_logprobs: list[float] | None = None
    images: list[ImageView] = []


class RewardView(Wire):
    reward: float
    agent: str | None
    call_id: str | None
    info: dict[str, Any]


class ProgramView(Wire):
    """A `ProgramTimes` (roost.rollout.store.program_times), field for field: where the
    session's time went, in milliseconds."""

    calls: int
    wall_ms: float
    engine_ms: float
    held_ms: float
    paused_ms: float
    tool_ms: float
    prefill_ms: float | None
    decode_ms: float | None
    split_calls: int

    @classmethod
    def of(cls, times: ProgramTimes) -> ProgramView:
        return cls.model_validate(asdict(times))


class SessionDetail(SessionSummary):
    """`GET /sessions/{sid}` (`?tokens=1` adds each call's ids and logprobs)."""

    agents: list[AgentView]
    calls: list[CallView]
    rewards: list[RewardView]
    program: ProgramView
    """The session's time over all its calls: engine (prefill, decode), held, paused, tools."""


class Ack(Wire):
    ok: Literal[True]


class AdvantagesAck(Ack):
    calls: int


class PauseState(Wire):
    """The answer to `POST /admin/pause` and `/admin/resume`; `drained` (pause only) says whether
    the in-flight calls finished within the drain timeout."""

    paused: bool
    drained: bool | None = None
    in_flight: int


WORKER_UNAVAILABLE = "gateway_worker_unavailable"
"""The error code of a 503 from `roost gateway --workers N` while the worker a request needs is
starting again (nothing was applied: send it again after Retry-After)."""


class WorkerHealth(Wire):
    """One gateway worker behind the port (`roost gateway --workers N`)."""

    index: int
    pid: int | None
    url: str | None
    """Where it serves, on this machine (none while it is down)."""
    status: Literal["ok", "degraded", "down"]
    restarts: int
    """How often it died and was started again."""


class AdmissionState(Wire):
    """Program-aware admission's state (`--admission-programs`), for a runner choosing how many
    episodes to start: `room` more programs fit the budget now (None: it bounds nothing)."""

    programs_running: int
    programs_waiting: int
    """First calls held now."""
    held_tokens: int
    """Tokens the running programs hold (each its longest call's prompt and reply)."""
    expected_tokens: int
    """What a new program is expected to hold at its largest (the mean peak of finished ones)."""
    capacity_programs: int | None
    capacity_tokens: int | None
    """The budget: given (`N`) or the engines' reports (`auto`); None: not bounded."""
    room: int | None


class GatewayHealth(Wire):
    """`GET /health` (open: no key); `degraded` (503) while the engine does not answer, or, with
    several workers, while one of them is down or degraded."""

    status: Literal["ok", "degraded"]
    engine: str
    paused: bool
    backend: str
    model: str | None
    in_flight: int
    workers: list[WorkerHealth] | None = None
    """With `--workers N`: each worker's own health; `in_flight` is their sum."""
    admission: AdmissionState | None = None
    """With program-aware admission on (with workers: their sums)."""


# --- `GET /samples`: the training samples of groups, paged ------------------------------------
# Floats go out as JSON numbers in their shortest round-trip form, so every logprob reads back
# bit for bit; a non-finite one (never trained on, but recorded) goes out as a string
# ("-Infinity") instead of JSON's null, and reads back as the same float.
_EXACT_FLOATS = ConfigDict(extra="forbid", ser_json_inf_nan="strings")

SAMPLES_PAGE_DEFAULT = 16
SAMPLES_PAGE_MAX = 256
"""Sessions per page of `GET /samples` (`limit`): the default and the most a page holds."""


class CallRefView(Wire):
    """A `CallRef` (roost.rollout.store.samples), field for field."""

    model_config = _EXACT_FLOATS

    call_id: str
    weight_version: str
    reward: float | None = None
    advantage: float | None = None
    constraint: tuple[str, Any] | None = None
    adapter: str = ""

    def call_ref(self) -> CallRef:
        return CallRef(**dict(self))


class SampleView(Wire):
    """A `Sample` (roost.rollout.store.samples), field for field: token ids and logprobs exact."""

    model_config = _EXACT_FLOATS

    session_id: str
    group_id: str
    agent_id: str
    tokens: list[int]
    loss_mask: list[int]
    rollout_logprobs: list[float]
    token_call: list[int]
    calls: list[CallRefView]
    reward: float | None = None
    advantages: list[float | None] | None = None
    task: dict[str, Any] = Field(default_factory=dict)
    parent_agent: str | None = None
    leaf_call_id: str | None = None
    call_ids: list[str] = Field(default_factory=list)
    finish_reason: dict[str, Any] = Field(default_factory=dict)
    teacher_logprobs: list[float] | None = None
    """None as the gateway sends it: a teacher's scores are the trainer's, added after (`roost.trainer.distill`)."""
    images: list[str] = Field(default_factory=list)
    """The sha256 of each image of the path, in token order (bytes: `GET /images/{sha256}`)."""
    routed_experts: list[list[int]] | None = None
    """Each token's recorded experts (R3; `Sample.routed_experts`), with the gateway's record_routing."""

    @classmethod
    def of(cls, sample: Sample) -> SampleView:
        return cls.model_validate(asdict(sample))

    def sample(self) -> Sample:
        """The `Sample` as the gateway built it (not validated here: the store's own reader does
        not validate either, and the batch must be the same whichever way it was read)."""
        return Sample(**{**dict(self), "calls": [c.call_ref() for c in self.calls]})


class RefusedView(Wire):
    """A `Refused` call: not training data, and why."""

    session_id: str
    agent_id: str
    call_id: str
    reason: str


class SessionSamplesView(Wire):
    """One session of `GET /samples`: its outcome, its samples, the calls refused on the way."""

    model_config = _EXACT_FLOATS

    session_id: str
    group_id: str | None
    status: SessionStatus
    outcome: EpisodeOutcome | None
    samples: list[SampleView]
    refused: list[RefusedView]

    @classmethod
    def of(cls, s: SessionSamples) -> SessionSamplesView:
        return cls(
            session_id=s.session_id,
            group_id=s.group_id,
            status=s.status,
            outcome=s.outcome,
            samples=[SampleView.of(x) for x in s.samples],
            refused=[RefusedView.model_validate(asdict(r)) for r in s.refused],
        )

    def session_samples(self) -> SessionSamples:
        refused = [Refused(**dict(r)) for r in self.refused]
        samples = [x.sample() for x in self.samples]
        return SessionSamples(self.session_id, self.group_id, self.status, self.outcome, samples, refused)


class SamplesPage(Wire):
    """`GET /samples?group=G&group=H&limit=N&cursor=C`: the groups' sessions in order (group by
    group, each by creation time), at most `limit` a page; `next_cursor` asks for the next page
    (the same page each time it is sent), null on the last."""

    model_config = _EXACT_FLOATS

    sessions: list[SessionSamplesView]
    next_cursor: str | None


class EngineView(Wire):
    """One engine behind the gateway (`GET /admin/engines`): `up` takes calls, `down` did not
    answer (probed again), `stale` serves another weight version than the gateway's (synced back
    in by the next weight sync)."""

    engine_id: str
    url: str
    state: Literal["up", "down", "stale"]
    in_flight: int = Field(description="Engine requests in flight now")
    calls: int = Field(description="Engine requests sent to it so far (a retried call counts on each engine)")
    sessions: int = Field(description="Sessions pinned to it")
    weight_version: str = Field(description="The version it reported when last asked")
    error: str = Field("", description="Why it is down or stale")


class EngineList(Wire):
    """`GET /admin/engines`, and the answer of `POST /admin/weight_version`."""

    weight_version: str = Field(description="The version every engine in rotation serves")
    engines: list[EngineView]


class AddEngine(Wire):
    """`POST /admin/engines`: an engine of the gateway's model to take sessions."""

    url: str = Field(pattern=r"^https?://\S+$", description="The engine's base URL, e.g. http://127.0.0.1:30001")


class SetWeightVersion(Wire):
    """`POST /admin/weight_version`: the weight-sync barrier. Every engine is asked its version;
    those that do not report this one leave rotation (`stale`)."""

    weight_version: str = Field(min_length=1, description="The version the synced engines now report")
