"""`roost gateway`, `roost preflight` and `roost trajectories export`."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import typer

from roost.logging_setup import LogLevel, configure_logging, json_option, level_option
from roost.rollout.gateway.config import DEFAULT_MAX_IMAGES, DEFAULT_MAX_TOKENS
from roost.rollout.keys import ADMIN_KEY, ENGINE_KEY, KeysRequired, serving_key
from roost.serving.config_file import ConfigFileError, given_flags, read_config
from roost.serving.listen import PORT_FILE_HELP


class Backend(str, Enum):
    embedded = "embedded"
    sglang = "sglang"
    vllm = "vllm"
    openai = "openai"


class Policy(str, Enum):
    keep = "keep"
    drop = "drop"


class Sessionless(str, Enum):
    record = "record"
    reject = "reject"


def admission_programs_value(value: str | None) -> int | str | None:
    """`--admission-programs`: a number of sessions at once, or `auto` (the engines' reports)."""
    if value is None or value == "auto":
        return value
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise typer.BadParameter(f"{value!r}: give a number of sessions (1 or more) or auto")
    return number


def gateway(
    ctx: typer.Context,
    config_file: Path = typer.Option(
        None,
        "--config",
        help="The whole config as JSON (GatewayConfig's fields but the keys, which come from the "
        "environment; what a training run writes); flags given as well override its fields.",
    ),
    backend: Backend = typer.Option(
        Backend.embedded,
        help="embedded/sglang: SGLang-API engine; vllm: vLLM "
        "(roost engine --backend vllm); all three token-exact; openai: pass-through.",
    ),
    engine_url: list[str] = typer.Option(
        None,
        help="Engine base URL (openai backend: upstream base URL incl. /v1). "
        "embedded without it: start an embedded engine for --model. Given several times (token "
        "backends): engines of one model behind this gateway, each session pinned to one.",
    ),
    model: str = typer.Option(
        None, help="'tiny' or a checkpoint folder: tokenizer + chat template (default: the engine's)."
    ),
    host: str = typer.Option("127.0.0.1", help="Address to bind; beyond loopback only with --admin-key."),
    port: int = typer.Option(8000, help="Port to bind; 0: any free one (see --port-file)."),
    port_file: Path = typer.Option(None, help=PORT_FILE_HELP),
    workers: int = typer.Option(
        1,
        min=1,
        max=64,
        help="Gateway processes behind the port, all recording into the one --store: this process "
        "relays each request to one of them, every call of a session to the same one, and starts one "
        "again that dies (docs/scale.md). 1: this process serves.",
    ),
    admin_key: str = typer.Option(
        None,
        envvar=ADMIN_KEY.env,
        show_envvar=True,
        help="Key of the control plane (/sessions, /admin) and trajectory reads (default: generated and printed).",
    ),
    engine_key: str = typer.Option(
        None,
        envvar=ENGINE_KEY.env,
        show_envvar=True,
        help="The engine's key (its --api-key), sent with every engine request "
        "(default for the engine started without --engine-url: generated).",
    ),
    store: Path = typer.Option(Path(".roost/trajectories.sqlite"), help="SQLite trajectory store."),
    reasoning: Policy = typer.Option(
        Policy.keep, help="Past reasoning: keep (as sampled) or drop (as the template renders)."
    ),
    served_model_name: str = typer.Option(None, help="Model name clients use (default: model folder name or 'tiny')."),
    context_length: int = typer.Option(
        None,
        min=1,
        help="Longest prompt + completion, in tokens; also given to the "
        "embedded engine it starts (default: the engine's; an engine it starts "
        "takes the model's, capped at 4096).",
    ),
    default_max_tokens: int = typer.Option(
        DEFAULT_MAX_TOKENS,
        min=0,
        help="Most tokens a reply may take when its request sets no max_tokens or "
        "max_output_tokens (Codex sets none); 0: the rest of the context.",
    ),
    max_images_per_call: int = typer.Option(
        DEFAULT_MAX_IMAGES, min=1, help="A vision model: the most images one call may carry."
    ),
    public_url: str = typer.Option(None, help="URL harnesses reach the gateway at (for session base_urls)."),
    sessionless: Sessionless = typer.Option(
        Sessionless.record, help="Plain /v1 calls without a session key: record or reject."
    ),
    pause_wait_s: float = typer.Option(60.0, help="How long new calls wait while paused."),
    admission_programs: str = typer.Option(
        None,
        help="Program-aware admission: a new session's first call waits while this many sessions run "
        "(called, not finished), so running ones keep their engine cache; their later calls always go. "
        "auto: while one more would not fit what the engines report (requests at once, KV tokens). "
        "(default: off).",
        callback=lambda value: admission_programs_value(value),
    ),
    admission_wait_s: float = typer.Option(
        30.0, min=0, help="Longest a first call is held for admission before it goes anyway (fail-open)."
    ),
    sglang_sessions: bool = typer.Option(
        False,
        "--sglang-sessions",
        help="sglang backend: each session's calls go in an SGLang streaming session (SGLang holds its KV "
        "between calls; a call extending the last sends only its new tokens). Launch SGLang with "
        "--enable-streaming-session (default: off).",
    ),
    engine_timeout_s: float = typer.Option(600.0, help="Longest one engine request may take."),
    upstream_api_key: str = typer.Option(None, envvar="ROOST_UPSTREAM_API_KEY", help="openai backend: API key."),
    upstream_model: str = typer.Option(None, help="openai backend: model name sent upstream."),
    upstream_token_ids: bool = typer.Option(
        True,
        help="openai backend: ask upstream for token ids (return_token_ids; dropped for good if it "
        "answers 400 naming it). --no-upstream-token-ids: never ask.",
    ),
    trace: bool = typer.Option(
        False,
        "--trace",
        help="OpenTelemetry spans over OTLP/HTTP from the gateway and "
        "the engine it starts (also on with the OTEL_* variables; "
        "docs/tracing.md).",
    ),
    log_level: LogLevel = level_option(),
    log_json: bool = json_option(),
) -> None:
    """Serve the OpenAI-compatible gateway that records token-exact trajectories."""
    configure_logging(log_level, json=log_json)
    log_args = ["--log-level", log_level.value] + (["--log-json"] if log_json else [])
    from roost.rollout.gateway.config import GatewayConfig
    from roost.rollout.gateway.launch import serve

    flags = {
        "backend": ("backend", backend.value),
        "engine_url": ("engine_url", engine_url[0] if engine_url else None),
        "engine_urls": ("engine_url", list(engine_url) if engine_url and len(engine_url) > 1 else []),
        "model": ("model", model),
        "host": ("host", host),
        "port": ("port", port),
        "workers": ("workers", workers),
        "store_path": ("store", store),
        "engine_key": ("engine_key", engine_key),
        "reasoning_policy": ("reasoning", reasoning.value),
        "served_model_name": ("served_model_name", served_model_name),
        "public_url": ("public_url", public_url),
        "sessionless": ("sessionless", sessionless.value),
        "pause_wait_s": ("pause_wait_s", pause_wait_s),
        "admission_programs": ("admission_programs", admission_programs),
        "admission_wait_s": ("admission_wait_s", admission_wait_s),
        "sglang_sessions": ("sglang_sessions", sglang_sessions),
        "engine_timeout_s": ("engine_timeout_s", engine_timeout_s),
        "upstream_api_key": ("upstream_api_key", upstream_api_key),
        "upstream_model": ("upstream_model", upstream_model),
        "upstream_token_ids": ("upstream_token_ids", upstream_token_ids),
        "context_length": ("context_length", context_length),
        "trace": ("trace", trace),
        "default_max_tokens": ("default_max_tokens", default_max_tokens or None),
        "max_images_per_call": ("max_images_per_call", max_images_per_call),
    }
    given = given_flags(ctx, flags) if config_file else {name: value for name, (_, value) in flags.items()}
    try:
        host = read_config(GatewayConfig, config_file, given).host
        key = serving_key("roost gateway", host, admin_key, ADMIN_KEY)
        config = read_config(GatewayConfig, config_file, {**given, "admin_key": key})
    except (ConfigFileError, KeysRequired) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if config.backend == "embedded" and config.engine_url is None:
        from roost.rollout.engine.launch import EngineProcess

        # The embedded engine binds 127.0.0.1 whatever --host says; its key stays with this gateway.
        engine_args = ["--context-length", str(config.context_length)] if config.context_length else []
        engine_args += ["--trace"] if config.trace else []
        engine_args += log_args
        model = config.model or "tiny"
        engine = EngineProcess(model, extra_args=engine_args, api_key=config.engine_key)
        with engine as url:
            serve(
                config.model_copy(update={"engine_url": url, "model": model, "engine_key": engine.api_key}),
                port_file,
                log_args=log_args,
            )
        return
    serve(config, port_file, log_args=log_args)


def preflight(
    model: str = typer.Option("tiny", help="'tiny' or a checkpoint folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Check that multi-turn chats with tool calls and reasoning re-render as exact extensions."""
    from roost.rollout.gateway.preflight import format_report, run_preflight

    report = run_preflight(model)
    typer.echo(json.dumps(report.as_dict(), indent=2) if as_json else format_report(report))
    if not report.ok:
        raise typer.Exit(1)


def export(
    store: Path = typer.Option(Path(".roost/trajectories.sqlite"), help="The gateway's trajectory store."),
    fmt: str = typer.Option("jsonl", "--format", help="jsonl or parquet."),
    out: Path = typer.Option(..., help="Output file."),
    kind: str = typer.Option("calls", help="calls (one row per call) or samples (root-to-leaf training samples)."),
    group: str = typer.Option(None, help="Only sessions of this group."),
) -> None:
    """Export recorded calls or training samples (calls recorded without token ids or logprobs
    are left out of samples, counted as refused_calls and named on stderr)."""
    from roost.rollout.store.export import export as run_export
    from roost.rollout.store.samples import Refused

    refused: list[Refused] = []
    count = run_export(store, out, fmt=fmt, kind=kind, group_id=group, refused=refused)
    for entry in refused[:5]:
        typer.echo(entry.message(), err=True)
    if len(refused) > 5:
        typer.echo(f"... and {len(refused) - 5} more calls left out", err=True)
    summary = {"rows": count, "out": str(out), "format": fmt, "kind": kind}
    if kind == "samples":
        summary["refused_calls"] = len(refused)
    typer.echo(json.dumps(summary))


def register(app: typer.Typer, bench: typer.Typer) -> None:
    app.command("gateway")(gateway)
    app.command("preflight")(preflight)
    trajectories = typer.Typer(help="The trajectory store.", no_args_is_help=True)
    trajectories.command("export")(export)
    app.add_typer(trajectories, name="trajectories")
