"""Building an engine from a model name, serving it, and starting one for tests or tools."""

from __future__ import annotations

import logging
from pathlib import Path

from roost.rollout.engine.adapters import AdapterLimits
from roost.rollout.engine.engine import Engine, EngineConfig
from roost.rollout.engine.scripted_sampler import Script, ScriptedSampler
from roost.rollout.engine.server_config import EngineServerConfig
from roost.rollout.engine.tiny_model import resolve_model
from roost.rollout.keys import ENGINE_KEY, new_key
from roost.serving.listen import bind_listener, report_port
from roost.serving.process import ServerProcess
from roost.tracing import Tracing

log = logging.getLogger(__name__)


def build_engine(
    model: str,
    *,
    context_length: int | None = None,
    max_running: int = 64,
    dtype: str = "float32",
    scripted: bool = False,
    script: Path | None = None,
    reuse_prefixes: bool = True,
    max_prefill_tokens: int = 8192,
    lora: AdapterLimits | None = None,
    kv_budget_tokens: int | None = None,
) -> Engine:
    sampler = None
    if scripted:
        sampler = ScriptedSampler.from_file(script) if script else ScriptedSampler(Script())
    config = EngineConfig(
        resolve_model(model),
        context_length,
        max_running,
        dtype,
        sampler,
        reuse_prefixes,
        max_prefill_tokens,
        lora or AdapterLimits(),
        kv_budget_tokens,
    )
    return Engine(config)


def run_server(config: EngineServerConfig, api_key: str, port_file: Path | None = None) -> int:
    """Serve `config` until stopped: the embedded engine, or vLLM supervised (its exit status)."""
    if config.backend == "vllm":
        from roost.rollout.engine_api.vllm_serve import serve_vllm

        return serve_vllm(
            config.model,
            host=config.host,
            port=config.port,
            api_key=api_key,
            dtype=config.dtype,
            context_length=config.context_length,
            max_running=config.max_running,
            vllm_args=config.vllm_args,
            log_path=config.vllm_log,
            port_file=port_file,
            lora=(config.max_loras, config.max_lora_rank) if config.enable_lora else None,
        )
    engine = build_engine(
        config.model,
        context_length=config.context_length,
        max_running=config.max_running,
        dtype=config.dtype,
        scripted=config.sampler == "scripted",
        script=config.script,
        reuse_prefixes=config.reuse_prefixes,
        max_prefill_tokens=config.max_prefill_tokens,
        lora=AdapterLimits(max_loras=config.max_loras, max_lora_rank=config.max_lora_rank),
        kv_budget_tokens=config.kv_budget_tokens,
    )
    serve(engine, host=config.host, port=config.port, api_key=api_key, trace=config.trace, port_file=port_file)
    return 0


def serve(
    engine: Engine, *, host: str, port: int, api_key: str, trace: bool = False, port_file: Path | None = None
) -> None:
    """Serve until stopped (port 0: any free port, written to `port_file`); logs go where the
    process's logging sends them (`roost.logging_setup`)."""
    import uvicorn

    from roost.rollout.engine.server import create_app

    sock = bind_listener(host, port)
    port = report_port(sock, port_file)
    tracing = Tracing.start("engine", flag=trace)
    engine.start()
    log.info(
        "engine serving %s on http://%s:%d (%s, context %d tokens, %d requests at once)",
        engine.config.model_path,
        host,
        port,
        engine.spec.family,
        engine.context_length,
        engine.config.max_running,
        extra={"model": str(engine.config.model_path), "weight_version": engine.weight_version, "port": port},
    )
    try:
        config = uvicorn.Config(create_app(engine, api_key, tracing), log_config=None, access_log=False)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        engine.stop()
        tracing.shutdown()


class EngineProcess(ServerProcess):
    """`roost engine` in a subprocess on 127.0.0.1 (the port it binds, unless `port` names one); a
    `ServerHandle`. `api_key` is
    the key of its control routes (generated unless given, handed over in the environment).

    >>> with EngineProcess(scripted=True) as url: ...
    """

    def __init__(
        self,
        model: str = "tiny",
        *,
        scripted: bool = False,
        script: Path | None = None,
        extra_args: list[str] | None = None,
        port: int = 0,
        startup_timeout_s: float = 120.0,
        api_key: str | None = None,
    ):
        args = ["--model", model]
        if scripted:
            args += ["--sampler", "scripted"]
        if script is not None:
            args += ["--script", str(script)]
        self.api_key = api_key or new_key(ENGINE_KEY)
        super().__init__(
            "engine",
            args + (extra_args or []),
            port=port,
            startup_timeout_s=startup_timeout_s,
            env={ENGINE_KEY.env: self.api_key},
        )
