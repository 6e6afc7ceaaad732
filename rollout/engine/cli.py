"""`roost engine`: serve the embedded engine, or supervise a vLLM server (`--backend vllm`)."""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path

import typer

from roost.logging_setup import LogLevel, configure_logging, json_option, level_option
from roost.rollout.keys import ENGINE_KEY, KeysRequired, serving_key
from roost.serving.listen import PORT_FILE_HELP


class EngineBackend(str, Enum):
    embedded = "embedded"
    vllm = "vllm"


class Sampler(str, Enum):
    model = "model"
    scripted = "scripted"


def engine(
    model: str = typer.Option(
        "tiny",
        help="'tiny', 'tiny-vllm' (attention heads vLLM can serve on CPU) or a "
        "local Hugging Face Qwen2/Qwen3/Llama checkpoint folder.",
    ),
    backend: EngineBackend = typer.Option(
        EngineBackend.embedded,
        help="embedded: roost's engine; vllm: a vLLM server from its own "
        "virtualenv ($ROOST_VLLM_PYTHON or .venv-vllm/), supervised here.",
    ),
    vllm_args: str = typer.Option(
        None,
        help='vllm backend: further flags for vLLM, as one string (e.g. "--optimization-level 0 --max-num-seqs 64").',
    ),
    vllm_log: Path = typer.Option(Path(".roost/vllm.log"), help="vllm backend: where vLLM's output goes."),
    host: str = typer.Option("127.0.0.1", help="Address to bind; beyond loopback only with --api-key."),
    port: int = typer.Option(30000, help="Port to bind (SGLang's default); 0: any free one (see --port-file)."),
    port_file: Path = typer.Option(None, help=PORT_FILE_HELP),
    api_key: str = typer.Option(
        None,
        envvar=ENGINE_KEY.env,
        show_envvar=True,
        help="Key of the control routes (weights, pause, cache), as SGLang's --api-key "
        "(default: generated and printed).",
    ),
    context_length: int = typer.Option(None, help="Longest prompt + completion (default: model's, capped at 4096)."),
    max_running: int = typer.Option(64, help="Requests decoded together in one batch (vLLM's --max-num-seqs)."),
    dtype: str = typer.Option("float32", help="float32, bfloat16 or float16."),
    sampler: Sampler = typer.Option(Sampler.model, help="'scripted' forces replies from --script (tests, benchmarks)."),
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
        8192,
        help="New prompt tokens prefilled together in one "
        "batch (SGLang's flag; the last request admitted "
        "may take it past this).",
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
    from roost.rollout.engine.adapters import AdapterLimits
    from roost.rollout.engine.launch import build_engine, serve

    try:
        api_key = serving_key("roost engine", host, api_key, ENGINE_KEY)
    except KeysRequired as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if backend is EngineBackend.vllm:
        from roost.rollout.engine_api.vllm_serve import serve_vllm

        raise typer.Exit(
            serve_vllm(
                model,
                host=host,
                port=port,
                api_key=api_key,
                dtype=dtype,
                context_length=context_length,
                max_running=max_running,
                vllm_args=vllm_args,
                log_path=vllm_log,
                port_file=port_file,
                lora=(max_loras, max_lora_rank) if enable_lora else None,
            )
        )
    engine_ = build_engine(
        model,
        context_length=context_length,
        max_running=max_running,
        dtype=dtype,
        scripted=sampler is Sampler.scripted,
        script=script,
        reuse_prefixes=not disable_radix_cache,
        max_prefill_tokens=max_prefill_tokens,
        lora=AdapterLimits(max_loras=max_loras, max_lora_rank=max_lora_rank),
    )
    serve(engine_, host=host, port=port, api_key=api_key, trace=trace, port_file=port_file)


def register(app: typer.Typer, bench: typer.Typer) -> None:
    app.command("engine")(engine)
