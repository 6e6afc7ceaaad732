"""`roost engine --backend vllm`: one vLLM server in the foreground, stopped with this process."""

from __future__ import annotations

from pathlib import Path

import typer

from roost.lifetime import stop_on_sigterm
from roost.rollout.engine.tiny_model import resolve_model
from roost.rollout.engine_api.vllm_launch import VLLMLaunchError, VLLMServer
from roost.serving.listen import report_port


def serve_vllm(
    model: str,
    *,
    host: str,
    port: int,
    api_key: str | None,
    dtype: str,
    context_length: int | None,
    max_running: int,
    vllm_args: list[str],
    log_path: Path,
    port_file: Path | None = None,
    lora: tuple[int, int] | None = None,
) -> int:
    """Start vLLM for `model`, wait until it serves, then until it exits; its exit status (2 when
    it could not start, after printing why and the end of its log). `max_running` is vLLM's
    --max-num-seqs; flags in `vllm_args` come last and win. Port 0: vLLM takes any free port, and
    the one it got is written to `port_file`. `lora`: (max loras, max rank) to serve LoRA adapters
    loaded at run time (vLLM's --enable-lora)."""
    extra = ["--max-num-seqs", str(max_running)]
    if lora is not None:
        extra += ["--enable-lora", "--max-loras", str(lora[0]), "--max-lora-rank", str(lora[1])]
    extra += vllm_args
    try:
        server = VLLMServer(
            resolve_model(model),
            port,
            host=host,
            api_key=api_key,
            dtype=dtype,
            context_length=context_length,
            extra_args=extra,
            log_path=log_path,
        )
    except FileNotFoundError as exc:
        typer.echo(f"error: {exc}", err=True)
        return 2
    with stop_on_sigterm():
        try:
            url = server.start()
            report_port(server.port, port_file)
            typer.echo(f"vLLM serves {server.model_dir} at {url} (log: {log_path})", err=True)
            return server.wait()
        except VLLMLaunchError as exc:
            typer.echo(f"error: {exc}", err=True)
            return 2
        finally:
            server.stop()
