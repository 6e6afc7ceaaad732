"""`roost engine`: serve the embedded engine, or supervise a vLLM server (`--backend vllm`)."""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path

import typer

from roost.logging_setup import LogLevel, configure_logging, json_option, level_option
from roost.rollout.engine.server_config import EngineServerConfig
from roost.rollout.keys import ENGINE_KEY, KeysRequired, serving_key
from roost.serving.config_file import ConfigFileError, given_flags, read_config
from roost.serving.listen import PORT_FILE_HELP


class EngineBackend(str, Enum):
    embedded = "embedded"
    vllm = "vllm"


class Sampler(str, Enum):
    model = "model"
    scripted = "scripted"


_DEFAULT = EngineServerConfig.model_fields


def _default(field: str):
    return _DEFAULT[field].default


def engine(
    ctx: typer.Context,
    config_file: Path = typer.Option(
        None,
        "--config",
        help="The whole config as JSON (EngineServerConfig's fields, what a training run writes); "
        "flags given as well override its fields.",
    ),
    model: str = typer.Option(
        _default("model"),
        help="'tiny', 'tiny-vllm' (attention heads vLLM can serve on CPU), 'tiny-moe' (Qwen3-MoE) or a "
        "local Hugging Face Qwen2/Qwen3/Qwen3-MoE/Llama checkpoint folder.",
    ),
    backend: EngineBackend = typer.Option(
        EngineBackend(_default("backend")),
        help="embedded: roost's engine; vllm: a vLLM server from its own "
        "virtualenv ($ROOST_VLLM_PYTHON or .venv-vllm/), supervised here.",
    ),
    vllm_args: str = typer.Option(
        None,
        help='vllm backend: further flags for vLLM, as one string (e.g. "--optimization-level 0 --max-num-seqs 64").',
    ),
    vllm_log: Path = typer.Option(_default("vllm_log"), help="vllm backend: where vLLM's output goes."),
    host: str = typer.Option(_default("host"), help="Address to bind; beyond loopback only with --api-key."),
    port: int = typer.Option(
        _default("port"), help="Port to bind (SGLang's default); 0: any free one (see --port-file)."
    ),
    port_file: Path = typer.Option(None, help=PORT_FILE_HELP),
    api_key: str = typer.Option(
        None,
        envvar=ENGINE_KEY.env,
        show_envvar=True,
        help="Key of the control routes (weights, pause, cache), as SGLang's --api-key "
        "(default: generated and printed).",
    ),
    context_length: int = typer.Option(None, help="Longest prompt + completion (default: model's, capped at 4096)."),
    max_running: int = typer.Option(
        _default("max_running"), help="Requests decoded together in one batch (vLLM's --max-num-seqs)."
    ),
    dtype: str = typer.Option(_default("dtype"), help="float32, bfloat16 or float16."),
    sampler: Sampler = typer.Option(
        Sampler(_default("sampler")), help="'scripted' forces replies from --script (tests, benchmarks)."
    ),
    script: Path = typer.Option(
        None, help='Scripted sampler rules: JSON {"rules": [{"match": regex|null, "reply": text}]}.'
    ),
    disable_radix_cache: bool = typer.Option(
        False,
        "--disable-radix-cache",
        help="Prefill every prompt in full (SGLang's flag): no reuse of the "
        "keys and values of an earlier call that the prompt extends.",
    ),
    max_prefill_tokens: int = typer.Option(
        _default("max_prefill_tokens"),
        help="New prompt tokens prefilled together in one "
        "batch (SGLang's flag; the last request admitted "
        "may take it past this).",
    ),
    kv_budget_tokens: int = typer.Option(
        None,
        min=1,
        help="Keep each session's keys and values (a /generate with session_params.id) between its calls, "
        "this many tokens at most over all sessions; past that, or when a request finds no free slot, the "
        "session predicted to call again last is evicted whole. POST /close_session releases one (default: "
        "no retention).",
    ),
    max_loras: int = typer.Option(
        8, help="LoRA adapters loaded at once (POST /v1/load_lora_adapter; SGLang's --max-loaded-loras)."
    ),
    max_lora_rank: int = typer.Option(64, help="Highest rank of a LoRA adapter the engine loads (vLLM's flag)."),
    enable_lora: bool = typer.Option(
        False,
        "--enable-lora",
        help="vllm backend: serve LoRA adapters loaded at run time (vLLM's --enable-lora, with --max-loras and "
        "--max-lora-rank); the embedded engine always does.",
    ),
    trace: bool = typer.Option(
        False,
        "--trace",
        help="OpenTelemetry spans over OTLP/HTTP (also on with the OTEL_* variables; docs/tracing.md).",
    ),
    log_level: LogLevel = level_option(),
    log_json: bool = json_option(),
) -> None:
    """Serve the embedded rollout engine (SGLang native API subset) on HOST:PORT, or a vLLM server there."""
    configure_logging(log_level, json=log_json)
    # Idle OpenMP threads must not spin on cores that the gateway and envs need; this has
    # to be set before torch loads its OpenMP runtime.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from roost.rollout.engine.launch import run_server
    from roost.rollout.engine_api.vllm_launch import parse_vllm_args

    flags = {
        "model": ("model", model),
        "backend": ("backend", backend.value),
        "vllm_args": ("vllm_args", parse_vllm_args(vllm_args)),
        "vllm_log": ("vllm_log", vllm_log),
        "host": ("host", host),
        "port": ("port", port),
        "context_length": ("context_length", context_length),
        "max_running": ("max_running", max_running),
        "dtype": ("dtype", dtype),
        "sampler": ("sampler", sampler.value),
        "script": ("script", script),
        "reuse_prefixes": ("disable_radix_cache", not disable_radix_cache),
        "max_prefill_tokens": ("max_prefill_tokens", max_prefill_tokens),
        "kv_budget_tokens": ("kv_budget_tokens", kv_budget_tokens),
        "trace": ("trace", trace),
        "max_loras": ("max_loras", max_loras),
        "max_lora_rank": ("max_lora_rank", max_lora_rank),
        "enable_lora": ("enable_lora", enable_lora),
    }
    given = given_flags(ctx, flags) if config_file else {name: value for name, (_, value) in flags.items()}
    try:
        config = read_config(EngineServerConfig, config_file, given)
        api_key = serving_key("roost engine", config.host, api_key, ENGINE_KEY)
    except (ConfigFileError, KeysRequired) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(run_server(config, api_key, port_file))


def register(app: typer.Typer, bench: typer.Typer) -> None:
    app.command("engine")(engine)
