"""The gateway's configuration: one typed object, each field documented. `roost gateway` builds it
from flags or reads it from `--config FILE` (what a training run writes); the keys are left out of
every dump (`exclude`), so a file never holds one: they travel in the environment."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from roost.rollout.keys import ADMIN_KEY, new_key

DEFAULT_MAX_TOKENS = 4096
DEFAULT_MAX_IMAGES = 16


class GatewayConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["embedded", "sglang", "vllm", "openai"] = Field(
        "embedded",
        description="embedded/sglang: an SGLang-API engine; vllm: vLLM's token-in API (all three "
        "token-exact); openai: pass-through",
    )
    engine_url: str | None = Field(
        None, description="The engine's (or upstream OpenAI server's) base URL; with engine_urls: the first of them"
    )
    engine_urls: list[str] = Field(
        default_factory=list,
        description="Several engines of one model behind this gateway (token backends): sessions are "
        "pinned to one each, placed on the least loaded (default: [engine_url])",
    )
    engine_probe_s: float = Field(2.0, gt=0, description="How often an engine that is down or stale is asked again")
    model: str | None = Field(
        None,
        description="Tokenizer + chat template: 'tiny' or a checkpoint folder (default: the engine's tokenizer_path)",
    )
    served_model_name: str | None = Field(
        None, description="Name in /v1/models and accepted in requests (default: the model folder's name, or 'tiny')"
    )
    host: str = Field("127.0.0.1", description="Address to bind")
    admin_key: str = Field(
        default_factory=lambda: new_key(ADMIN_KEY),
        min_length=8,
        exclude=True,
        description="Key of the control plane and trajectory reads (default: generated)",
    )
    engine_key: str | None = Field(
        None, exclude=True, description="Key sent to the engine (its --api-key), if it has one"
    )
    port: int = Field(8000, description="Port to bind")
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="Gateway processes behind the port, all recording into the one store: the port's "
        "process relays each request to one, each session to the same one (1: this process serves)",
    )
    public_url: str | None = Field(
        None,
        description="URL harnesses reach the gateway at, for session base_urls "
        "(default: taken from each request's Host)",
    )
    store_path: Path = Field(Path(".roost/trajectories.sqlite"), description="SQLite trajectory store")
    reasoning_policy: Literal["keep", "drop"] = Field(
        "keep", description="keep: past reasoning stays in the prompt as sampled; drop: follow the chat template"
    )
    sessionless: Literal["record", "reject"] = Field(
        "record", description="Calls to plain /v1 without a session key: record in an anonymous session, or 401"
    )
    pause_wait_s: float = Field(60.0, ge=0, description="How long a new call waits while paused before a 503")
    admission_programs: Annotated[int, Field(ge=1)] | Literal["auto"] | None = Field(
        None,
        description="Program-aware admission (token backends): a new session's first call waits while this "
        "many sessions run (made a call, not finished), so a running one keeps its engine cache; auto: while "
        "one more would not fit what the engines report they hold (requests at once, KV tokens); None: off",
    )
    admission_share: float = Field(
        1.0,
        gt=0,
        le=1,
        description="This process's part of the admission budget (set for each of --workers N: 1/N)",
    )
    admission_wait_s: float = Field(
        30.0, ge=0, description="Longest a session's first call is held for admission before it goes anyway"
    )
    admission_idle_s: float = Field(
        300.0, gt=0, description="A running session with no call for this long no longer counts against admission"
    )
    sglang_sessions: bool = Field(
        False,
        description="sglang backend: each session's calls go in an SGLang streaming session, so SGLang holds "
        "its KV between calls and a call that extends the last sends only its new tokens (launch SGLang "
        "with --enable-streaming-session; an SGLang without them refuses, and the calls go plain)",
    )
    record_routing: bool = Field(
        False,
        description="embedded/sglang backends on a mixture-of-experts model: ask the engine for each token's routed "
        "experts (return_routed_experts) and store them beside the call's logprobs, for routing replay (R3)",
    )
    engine_timeout_s: float = Field(600.0, gt=0, description="Longest a single engine request may take")
    retry_after_s: int = Field(2, ge=0, description="Retry-After sent with 503s")
    max_body_bytes: int = Field(32 * 1024 * 1024, description="Largest request body accepted")
    max_images_per_call: int = Field(
        DEFAULT_MAX_IMAGES,
        ge=1,
        description="A vision model: the most images one call may carry (more is a 400 naming the first past it)",
    )
    max_nodes_per_agent: int = Field(4096, ge=1, description="Calls per agent kept in memory for prefix reuse")
    max_sessions_in_memory: int = Field(20000, ge=1, description="Sessions whose token trees stay in memory")
    default_max_tokens: int | None = Field(
        DEFAULT_MAX_TOKENS,
        ge=1,
        description="The reply's bound when a request sets none (Codex sends none): "
        "without one a model that does not stop generates until the context is full; None: the rest of the context",
    )
    context_length: int | None = Field(None, description="Override the engine's max_context_length")
    upstream_api_key: str | None = Field(None, exclude=True, description="openai backend: API key sent upstream")
    upstream_model: str | None = Field(None, description="openai backend: model name sent upstream")
    upstream_token_ids: bool = Field(
        True,
        description="openai backend: ask upstream for token ids "
        "(return_token_ids, vLLM/roost extension) until it refuses the parameter",
    )
    startup_timeout_s: float = Field(60.0, description="How long to wait for the engine at startup")
    trace: bool = Field(
        False, description="OpenTelemetry spans over OTLP/HTTP (also on with the OTEL_* variables; docs/tracing.md)"
    )

    @model_validator(mode="after")
    def _sglang_sessions_need_sglang(self) -> GatewayConfig:
        if self.sglang_sessions and self.backend != "sglang":
            raise ValueError(
                f"sglang_sessions is for the sglang backend, not {self.backend}: roost's engine keeps its "
                "sessions without them, vLLM has no session API (its prefix cache works by content)"
            )
        return self

    @model_validator(mode="after")
    def _record_routing_needs_sglang(self) -> GatewayConfig:
        if self.record_routing and self.backend not in ("embedded", "sglang"):
            raise ValueError(
                f"record_routing is for the embedded and sglang backends, not {self.backend}: "
                "only SGLang's generate API answers routed experts"
            )
        return self

    @model_validator(mode="after")
    def _one_engine_list(self) -> GatewayConfig:
        """With `engine_urls`, `engine_url` is their first."""
        if not self.engine_urls:
            return self
        if self.engine_url is None:
            self.engine_url = self.engine_urls[0]
        elif self.engine_url != self.engine_urls[0]:
            raise ValueError(
                f"engine_url {self.engine_url!r} is not the first of engine_urls {self.engine_urls}; "
                "give engine_urls alone (or the same engine first)"
            )
        if len(set(self.engine_urls)) != len(self.engine_urls):
            raise ValueError(f"engine_urls lists an engine twice: {self.engine_urls}")
        if self.backend == "openai" and len(self.engine_urls) > 1:
            raise ValueError("the openai pass-through backend forwards to one upstream: give one engine_url")
        return self

    @property
    def engines(self) -> list[str]:
        """The engines' base URLs: `engine_urls`, else `engine_url` alone."""
        return self.engine_urls or ([self.engine_url] if self.engine_url else [])
