"""`roost tinker serve`: the Tinker API for the official SDK, on roost's trainer (docs/tinker.md)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from roost.logging_setup import LogLevel, configure_logging, json_option, level_option
from roost.serving.listen import PORT_FILE_HELP

DEFAULT_STORE = Path(".roost/tinker/trajectories.sqlite")
"""In the server's run folder, `.roost/tinker` of its working folder: `roost view .roost/tinker` shows it."""


def _folders(base_models: list[str]) -> dict[str, Path]:
    from roost.rollout.engine.tiny_model import tiny_model_dir

    folders = {}
    for name in base_models:
        folder = tiny_model_dir() if name == "tiny" else Path(name)
        if not (folder / "config.json").is_file():
            raise typer.BadParameter(
                f"{name!r} is neither 'tiny' nor a Hugging Face checkpoint folder (no config.json)"
            )
        folders[name] = folder
    return folders


def serve(
    base_model: list[str] = typer.Option(
        ["tiny"], help="A base model clients may train: 'tiny' or a Hugging Face folder; repeat for several."
    ),
    host: str = typer.Option("127.0.0.1", help="Address to bind; beyond loopback only with --api-key."),
    port: int = typer.Option(8000, help="Port to bind; 0: any free one (see --port-file)."),
    port_file: Path = typer.Option(None, help=PORT_FILE_HELP),
    api_key: list[str] = typer.Option(
        None,
        envvar="ROOST_TINKER_KEY",
        show_envvar=True,
        help="A key clients send (default: one generated and printed). Repeat it (or list keys in "
        "ROOST_TINKER_KEY, separated by spaces) for several tenants: each key sees only the sessions, "
        "models, samplers and checkpoints made with it.",
    ),
    compress_fwdbwd: bool = typer.Option(
        False, help="Ask the SDK to zstd-compress forward_backward bodies (its proto_compress_fwdbwd flag)."
    ),
    full_weight: bool = typer.Option(
        False, help="Train every weight of each model (LoRA configs are recorded, not trained); default: LoRA."
    ),
    max_lora_rank: int = typer.Option(128, min=1, help="The largest LoRA rank a client may ask for."),
    store: Path = typer.Option(
        DEFAULT_STORE,
        help="SQLite trajectory store every sample is recorded in (roost view --store FILE shows it).",
    ),
    max_loaded_adapters: int = typer.Option(
        8,
        min=1,
        help="LoRA snapshots loaded into a base model's engine at once; the least recently sampled is unloaded.",
    ),
    log_level: LogLevel = level_option(),
    log_json: bool = json_option(),
) -> None:
    """Serve the Tinker API on HOST:PORT: point `tinker.ServiceClient(base_url=..., api_key=...)` here."""
    configure_logging(log_level, json=log_json)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from roost.rollout.keys import KeysRequired, serving_key

    from .app import TINKER_KEY
    from .app import serve as serve_app
    from .recording import check_store

    try:
        keys = list(api_key or []) or [serving_key("roost tinker serve", host, None, TINKER_KEY)]
        folders = _folders(base_model)
        check_store(store)
    except (KeysRequired, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    serve_app(
        folders,
        keys,
        host=host,
        port=port,
        port_file=port_file,
        compress_fwdbwd=compress_fwdbwd,
        full_weight=full_weight,
        max_lora_rank=max_lora_rank,
        store=store,
        max_loaded_adapters=max_loaded_adapters,
    )


def register(app: typer.Typer, bench: typer.Typer) -> None:
    tinker = typer.Typer(help="The Tinker API, served by roost's trainer.", no_args_is_help=True)
    tinker.command("serve")(serve)
    app.add_typer(tinker, name="tinker")
