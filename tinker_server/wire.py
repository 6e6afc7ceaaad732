"""The JSON bodies of the Tinker routes roost serves, as the pinned SDK (tinker 0.38) sends them.

Requests reject unknown fields, so a field a newer SDK adds fails loudly instead of being ignored.
Responses carry exactly what the SDK's own response models read.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class ClientConfigRequest(Strict):
    sdk_version: str


class CreateSessionRequest(Strict):
    tags: list[str]
    user_metadata: dict[str, Any] | None = None
    sdk_version: str
    project_id: str | None = None
    display_name: str | None = None
    type: Literal["create_session"] = "create_session"


class SessionHeartbeatRequest(Strict):
    session_id: str
    type: Literal["session_heartbeat"] = "session_heartbeat"


class FinishReason(Strict):
    type: Literal["success", "errored", "interrupted"]


class FinishSessionRequest(Strict):
    reason: FinishReason
    detail: str | None = None


class LoraConfig(Strict):
    rank: int = Field(gt=0)
    seed: int | None = None
    train_unembed: bool = True
    train_mlp: bool = True
    train_attn: bool = True


class OptimizerConfig(Strict):
    type: Literal["adamw"] = "adamw"


class CreateModelRequest(Strict):
    session_id: str
    model_seq_id: int
    base_model: str
    user_metadata: dict[str, Any] | None = None
    lora_config: LoraConfig | None = None
    optimizer_config: OptimizerConfig = OptimizerConfig()
    type: Literal["create_model"] = "create_model"


class GetInfoRequest(Strict):
    model_id: str
    type: Literal["get_info"] = "get_info"


class AdamParams(Strict):
    learning_rate: float = Field(default=1e-4, ge=0)
    beta1: float = Field(default=0.9, ge=0, lt=1)
    beta2: float = Field(default=0.95, ge=0, lt=1)
    eps: float = Field(default=1e-12, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    grad_clip_norm: float = Field(default=0.0, ge=0)


class OptimStepRequest(Strict):
    adam_params: AdamParams
    model_id: str
    seq_id: int | None = None
    type: Literal["optim_step"] = "optim_step"


class FutureRetrieveRequest(Strict):
    request_id: str
    allow_metadata_only: bool = False


class UntypedFuture(BaseModel):
    request_id: str
    model_id: str | None = None


class TryAgain(BaseModel):
    type: Literal["try_again"] = "try_again"
    request_id: str
    queue_state: Literal["active", "paused_capacity", "paused_rate_limit"] = "active"


class RequestFailed(BaseModel):
    """A request that was accepted but failed while it ran; the SDK raises `RequestFailedError`."""

    error: str
    category: Literal["unknown", "server", "user"]


class SupportedModel(BaseModel):
    model_name: str
    max_context_length: int
    trainable: bool
    sampleable: bool


class ModelData(BaseModel):
    arch: str | None = None
    model_name: str
    tokenizer_id: str


class GetInfoResponse(BaseModel):
    type: Literal["get_info"] = "get_info"
    model_data: ModelData
    model_id: str
    is_lora: bool
    lora_rank: int | None = None


class SaveWeightsForSamplerRequest(Strict):
    model_id: str
    path: str | None = None
    sampling_session_seq_id: int | None = None
    kind: Literal["snapshot", "inflight"] = "snapshot"
    seq_id: int | None = None
    ttl_seconds: int | None = None
    user_metadata: dict[str, str] | None = None
    type: Literal["save_weights_for_sampler"] = "save_weights_for_sampler"


class SaveWeightsRequest(Strict):
    """`save_state(name)`: the trained weights and Adam's state, at `tinker://<model_id>/weights/<name>`."""

    model_id: str
    path: str | None = None
    seq_id: int | None = None
    ttl_seconds: int | None = None
    overwrite: bool = False
    user_metadata: dict[str, str] | None = None
    type: Literal["save_weights"] = "save_weights"


class LoadWeightsRequest(Strict):
    """A saved state loaded into `model_id`, or into a new model (`session_id` and `model_seq_id`)."""

    model_id: str | None = None
    seq_id: int | None = None
    session_id: str | None = None
    model_seq_id: int | None = None
    base_model: str | None = None
    user_metadata: dict[str, Any] | None = None
    path: str
    optimizer: bool
    optimizer_config: OptimizerConfig | None = None
    weights_access_token: None = None
    """Checkpoints of other accounts are not served: sending a token fails validation."""
    type: Literal["load_weights"] = "load_weights"


class CreateSamplingSessionRequest(Strict):
    session_id: str
    sampling_session_seq_id: int
    base_model: str | None = None
    model_path: str | None = None
    type: Literal["create_sampling_session"] = "create_sampling_session"


class EncodedTextChunk(Strict):
    tokens: list[int]
    type: Literal["encoded_text"] = "encoded_text"


class ModelInput(Strict):
    chunks: list[EncodedTextChunk]
    """Token chunks only: image and audio chunks are refused (no multimodal base model here)."""


class SamplingParams(Strict):
    max_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    stop: str | list[str] | list[int] | None = None
    temperature: float = Field(default=1.0, ge=0)
    top_k: int = -1
    top_p: float = Field(default=1.0, gt=0, le=1)


class SampleRequest(Strict):
    num_samples: int = Field(default=1, ge=1, le=64)
    prompt: ModelInput
    sampling_params: SamplingParams
    base_model: str | None = None
    model_path: str | None = None
    sampling_session_id: str | None = None
    seq_id: int | None = None
    prompt_logprobs: bool | None = None
    topk_prompt_logprobs: int = Field(default=0, ge=0, le=1024)
    topk_sample_logprobs: int = 0
    target_prompt_logprobs: dict[str, Any] | None = None
    prompt_alt_tokens_k: int = 0
    prompt_logprobs_last_n: int | None = None
    record_stability_info: bool | None = None
    type: Literal["sample"] = "sample"

    def unserved(self) -> list[str]:
        """The options set here that this server does not serve yet."""
        asked = {
            "topk_sample_logprobs": self.topk_sample_logprobs,
            "target_prompt_logprobs": self.target_prompt_logprobs,
            "prompt_alt_tokens_k": self.prompt_alt_tokens_k,
            "prompt_logprobs_last_n": self.prompt_logprobs_last_n,
            "record_stability_info": self.record_stability_info,
        }
        return [name for name, value in asked.items() if value]


class Cursor(BaseModel):
    offset: int
    limit: int
    total_count: int


class Checkpoint(BaseModel):
    """A saved state (`checkpoint_type` "training"), named sampler weights ("sampler") or external weights."""

    checkpoint_id: str
    """`weights/<name>`, `sampler_weights/<name>` or `external_weights/<name>`: the path after the run id."""
    checkpoint_type: Literal["training", "sampler", "external"]
    time: datetime
    tinker_path: str
    size_bytes: int
    public: bool = False


class CheckpointsList(BaseModel):
    checkpoints: list[Checkpoint]
    cursor: Cursor | None = None


class TrainingRun(BaseModel):
    training_run_id: str
    base_model: str
    model_owner: str
    """The tenant (a digest of the API key) whose session made it."""
    is_lora: bool
    lora_rank: int | None = None
    last_request_time: datetime
    last_checkpoint: Checkpoint | None = None
    last_sampler_checkpoint: Checkpoint | None = None


class TrainingRuns(BaseModel):
    training_runs: list[TrainingRun]
    cursor: Cursor


class WeightsInfoRequest(Strict):
    tinker_path: str


class WeightsInfo(BaseModel):
    base_model: str
    is_lora: bool
    lora_rank: int | None = None
    train_unembed: bool | None = None
    train_mlp: bool | None = None
    train_attn: bool | None = None


class SaveWeightsExternalRequest(Strict):
    """`save_weights_external(name)`: the weights as others load them, at `tinker://<model_id>/external_weights/<name>`."""

    model_id: str
    path: str
    seq_id: int | None = None
    ttl_seconds: int | None = None
    age_encryption_recipients: list[str] | None = None
    type: Literal["save_weights_external"] = "save_weights_external"


class ExternalWeightsUrls(BaseModel):
    urls: dict[str, str]
    """A signed URL per file, keyed by its path in the checkpoint."""
    expires: datetime


class TtlRequest(Strict):
    ttl_seconds: int | None = None
