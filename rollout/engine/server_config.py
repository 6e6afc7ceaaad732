"""`roost engine`'s configuration: one typed object, built by its CLI from flags or read from
`--config FILE` (what a training run writes), each field documented. The engine's key is no
field: it travels in ROOST_ENGINE_KEY (or `--api-key`), never in a file."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class EngineServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        "tiny",
        description="'tiny', 'tiny-vllm' (attention heads vLLM can serve on CPU), 'tiny-moe' (Qwen3-MoE) or a "
        "local Hugging Face Qwen2/Qwen3/Qwen3-MoE/Llama checkpoint folder",
    )
    backend: Literal["embedded", "vllm"] = Field(
        "embedded", description="embedded: roost's engine; vllm: a vLLM server from its own virtualenv, supervised"
    )
    host: str = Field("127.0.0.1", description="Address to bind; beyond loopback only with a key")
    port: int = Field(30000, ge=0, description="Port to bind (SGLang's default); 0: any free one")
    context_length: int | None = Field(
        None, ge=1, description="Longest prompt + completion (default: the model's, capped at 4096)"
    )
    max_running: int = Field(64, ge=1, description="Requests decoded together in one batch (vLLM's --max-num-seqs)")
    dtype: str = Field("float32", description="float32, bfloat16 or float16")
    sampler: Literal["model", "scripted"] = Field(
        "model", description="scripted: replies forced from `script` (tests, benchmarks)"
    )
    script: Path | None = Field(None, description='Scripted sampler rules: JSON {"rules": [{"match", "reply"}]}')
    reuse_prefixes: bool = Field(
        True, description="Reuse the keys and values of an earlier call the prompt extends (off: SGLang's radix off)"
    )
    max_prefill_tokens: int = Field(8192, ge=1, description="New prompt tokens prefilled together in one batch")
    kv_budget_tokens: int | None = Field(
        None,
        ge=1,
        description="Retain each session's keys and values (session_params.id) between its calls, this many "
        "tokens at most over all sessions (none: no retention)",
    )
    vllm_args: list[str] = Field([], description="vllm backend: further flags for vLLM, passed unchanged")
    vllm_log: Path = Field(Path(".roost/vllm.log"), description="vllm backend: where vLLM's output goes")
    trace: bool = Field(False, description="OpenTelemetry spans over OTLP/HTTP (docs/tracing.md)")
    max_loras: int = Field(8, ge=1, description="LoRA adapters loaded at once (load with POST /v1/load_lora_adapter)")
    max_lora_rank: int = Field(64, ge=1, description="Largest LoRA rank an adapter may have")
    enable_lora: bool = Field(False, description="vllm backend: serve LoRA adapters (the embedded engine always does)")
