"""The gateway object: everything one gateway owns, started and stopped together."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from roost.rollout.chat.reply_parser import HERMES
from roost.rollout.engine_api.client import EngineClient, engine_client
from roost.rollout.engine_api.sglang_client import EngineError, EngineRejected, SGLangClient
from roost.rollout.engine_api.sglang_logprobs import TemperatureScaledLogprobs, check_original_logprobs
from roost.rollout.gateway.config import GatewayConfig
from roost.rollout.gateway.control.wire import AdmissionState
from roost.rollout.gateway.core.admission import Admission, Budget
from roost.rollout.gateway.core.admission_budget import EngineBudget, FixedBudget
from roost.rollout.gateway.core.backend import Backend
from roost.rollout.gateway.core.call_pipeline import TokenBackend
from roost.rollout.gateway.core.engine_context import EngineContext
from roost.rollout.gateway.core.image_parts import VisionModel
from roost.rollout.gateway.core.metrics import GatewayMetrics
from roost.rollout.gateway.core.passthrough import PassthroughBackend
from roost.rollout.gateway.core.pause import PauseGate
from roost.rollout.gateway.core.prompt_builder import PromptBuilder
from roost.rollout.gateway.core.recording import node_from_call
from roost.rollout.gateway.core.router import EngineMismatch, EngineSlot, Router, identity_of
from roost.rollout.gateway.core.sessions import SessionRegistry
from roost.rollout.store.trajectory_store import TrajectoryStore
from roost.rollout.vision.placeholders import ImagePlaceholders
from roost.tracing import Tracing

log = logging.getLogger("roost.gateway")


class GatewayStartupError(RuntimeError):
    """The gateway cannot start: no engine to learn the model from, or no tokenizer."""


class Gateway:
    def __init__(self, config: GatewayConfig):
        self.config = config
        self.metrics = GatewayMetrics()
        self.tracing = Tracing.start("gateway", flag=config.trace)
        self.store = TrajectoryStore(config.store_path)
        self.gate: PauseGate | None = None
        self.registry: SessionRegistry | None = None
        self.backend: Backend | None = None
        self.ctx: EngineContext | None = None
        """The token engine's context (tokenizer, template), for tools that read it; None behind a
        pass-through. Calls go through `backend` alone."""
        self.served_model = config.served_model_name or "model"
        self.router: Router | None = None
        """The engines behind a token backend; None behind a pass-through."""
        self._prober: asyncio.Task | None = None

    def _admission(self) -> Admission | None:
        """Program-aware admission against a fixed number of programs or the engines' reports."""
        config = self.config
        if config.admission_programs is None:
            return None
        if config.admission_programs == "auto":
            budget: Budget = EngineBudget(self.router, share=config.admission_share)
        else:
            budget = FixedBudget(max(1, int(config.admission_programs * config.admission_share)))
        return Admission(budget, config.admission_wait_s, config.admission_idle_s)

    async def admission_state(self) -> AdmissionState | None:
        """For `/health`: what admission holds now (None: off, or not a token backend)."""
        admission = self.backend.admission if isinstance(self.backend, TokenBackend) else None
        if admission is None:
            return None
        capacity = await admission.capacity()
        return AdmissionState(
            programs_running=admission.active,
            programs_waiting=admission.waiting,
            held_tokens=admission.held_tokens,
            expected_tokens=admission.expected_tokens,
            capacity_programs=capacity.programs,
            capacity_tokens=capacity.tokens,
            room=admission.room(capacity),
        )

    @property
    def token_exact(self) -> bool:
        return self.config.backend in ("embedded", "sglang", "vllm")

    async def start(self) -> None:
        config = self.config
        await asyncio.to_thread(self.store.open)
        self.gate = PauseGate(config.pause_wait_s, config.retry_after_s)
        tokenizer = None
        if self.token_exact:
            self.ctx = await self._engine_context()
            tokenizer = self.ctx.tokenizer
            self._prober = asyncio.create_task(self.router.probe_forever(config.engine_probe_s))
            self.backend = TokenBackend(self.ctx, self.gate, self._admission())
        else:
            self.backend = PassthroughBackend(config, self.store.record_call, self.metrics, self.tracing)
        self.served_model = self.backend.served_model
        self.registry = SessionRegistry(
            self.store,
            default_policy=config.reasoning_policy,
            max_nodes_per_agent=config.max_nodes_per_agent,
            max_in_memory=config.max_sessions_in_memory,
            node_from_call=(lambda call: node_from_call(call, tokenizer)) if tokenizer else _no_nodes,
        )
        m = self.metrics
        m.gauge("roost_gateway_in_flight", "Model calls in flight", lambda: self.gate.in_flight)
        if isinstance(self.backend, TokenBackend) and self.backend.admission is not None:
            admission = self.backend.admission
            m.gauge("roost_gateway_programs_running", "Sessions admitted and running", lambda: admission.active)
            m.gauge("roost_gateway_programs_waiting", "First calls held for admission", lambda: admission.waiting)
        m.gauge("roost_gateway_paused", "1 while paused for a weight update", lambda: float(self.gate.paused))
        m.gauge("roost_gateway_sessions_in_memory", "Sessions held in memory", lambda: self.registry.in_memory)
        m.gauge("roost_gateway_store_commits", "Store transactions committed", lambda: self.store.writer.batches)
        m.gauge("roost_gateway_store_writes", "Store writes committed", lambda: self.store.writer.writes)
        # transformers, tokenizers and jinja leave millions of long-lived objects; freezing
        # them keeps the collector from rescanning them all in the middle of a call.
        gc.freeze()
        log.info(
            "gateway serving %s through the %s backend at %s; recording to %s",
            self.served_model,
            config.backend,
            ", ".join(config.engines),
            config.store_path,
            extra={"model": self.served_model, "backend": config.backend, "store": str(config.store_path)},
        )

    async def stop(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
        if self.backend is not None:
            await self.backend.close()
        await asyncio.to_thread(self.store.close)
        await asyncio.to_thread(self.tracing.shutdown)

    def client_for(self, url: str) -> EngineClient:
        """A client of the engine at `url`, as every engine of this gateway gets one."""
        return engine_client(
            self.config.backend,
            url,
            sglang_sessions=self.config.sglang_sessions,
            api_key=self.config.engine_key,
            timeout_s=self.config.engine_timeout_s,
            trace_configs=self.tracing.aiohttp_trace_configs(),
        )

    async def join(self, url: str, *, wait: bool) -> tuple[EngineSlot, dict[str, Any]]:
        """Ask the engine at `url` what it serves and add it to the router (`EngineMismatch` when
        it serves another model; `GatewayStartupError` when it is not an engine of this backend).
        `wait`: give it the startup timeout to answer. Returns the slot and the engine's model info."""
        client = self.client_for(url)
        try:
            info = await self._model_info(client, url, wait=wait)
            if info and isinstance(client, SGLangClient):
                await check_original_logprobs(client)
            identity = await identity_of(info) if info else None
            return self.router.add(url, client, identity, info), info
        except TemperatureScaledLogprobs as exc:
            await client.close()
            raise GatewayStartupError(str(exc)) from None
        except (GatewayStartupError, EngineMismatch):
            await client.close()
            raise

    async def _engine_context(self) -> EngineContext:
        config = self.config
        if not config.engines:
            raise GatewayStartupError(f"--backend {config.backend} needs --engine-url (e.g. http://127.0.0.1:30000)")
        self.router = Router(config.max_sessions_in_memory, config.retry_after_s)
        infos = []
        for url in config.engines:
            try:
                _, info = await self.join(url, wait=True)
            except EngineMismatch as exc:
                await self.router.close()
                raise GatewayStartupError(str(exc)) from None
            except GatewayStartupError:
                await self.router.close()
                raise
            infos.append(info)
        info = next((i for i in infos if i), {})
        model = config.model or info.get("tokenizer_path") or info.get("model_path")
        if not model:
            raise GatewayStartupError(
                f"no engine of {config.engines} answered /get_model_info and no --model was given; "
                "start the engine first or pass --model (the tokenizer and chat template to use)"
            )
        folder = await asyncio.to_thread(_resolve, model)
        placeholders = await asyncio.to_thread(ImagePlaceholders.from_pretrained, folder)  # None: text only
        image_token = placeholders.image_token if placeholders is not None else None
        builder = await asyncio.to_thread(PromptBuilder.from_pretrained, folder, image_token)
        context_length = config.context_length or info.get("max_context_length") or _config_context(folder)
        served = config.served_model_name or ("tiny" if model == "tiny" else Path(str(model)).name)
        return EngineContext(
            config=config,
            router=self.router,
            tokenizer=builder.tokenizer,
            builder=builder,
            store=self.store,
            metrics=self.metrics,
            served_model=served,
            context_length=int(context_length),
            reply_format=HERMES,
            tracing=self.tracing,
            preparers=ThreadPoolExecutor(min(4, os.cpu_count() or 1), thread_name_prefix="roost-prepare"),
            vision=VisionModel(placeholders, config.max_images_per_call) if placeholders is not None else None,
        )

    async def _model_info(self, client: EngineClient, url: str, *, wait: bool) -> dict[str, Any]:
        # With --model given the engine may come up later; without it we must ask the engine. An
        # engine added at run time is asked once: the admin's request waits for nothing else.
        patience = (self.config.startup_timeout_s if not self.config.model else 2.0) if wait else 0.0
        deadline = asyncio.get_running_loop().time() + patience
        while True:
            try:
                info = await client.model_info()
            except EngineRejected as exc:  # it answers, but not as an SGLang engine does: waiting cannot help
                raise GatewayStartupError(self._not_sglang(url, str(exc))) from exc
            except EngineError as exc:
                if asyncio.get_running_loop().time() > deadline:
                    log.warning("engine at %s not answering /get_model_info: %s", url, exc)
                    return {}
                await asyncio.sleep(0.5)
                continue
            if not isinstance(info, dict) or "model_path" not in info:
                raise GatewayStartupError(self._not_sglang(url, f"/get_model_info answered {str(info)[:200]}"))
            return info

    def _not_sglang(self, url: str, answer: str) -> str:
        url = url.rstrip("/")
        upstream = url if url.endswith("/v1") else f"{url}/v1"
        if self.config.backend == "vllm":
            return (
                f"--backend vllm needs a vLLM server (0.32 or later), but the server at {url} is not one "
                f"({answer}); start one with `roost engine --backend vllm`"
            )
        return (
            f"--backend {self.config.backend} needs an SGLang-API engine, but the server at {url} is not one "
            f"({answer}). For vLLM use --backend vllm; for another OpenAI-compatible server (llama.cpp, "
            f"a hosted API) use --backend openai --engine-url {upstream}"
        )


def _no_nodes(call: Any) -> Any:
    raise RuntimeError("pass-through sessions keep no token trees")


def _resolve(model: str) -> Path:
    from roost.rollout.engine.tiny_model import resolve_model

    try:
        return resolve_model(model)
    except FileNotFoundError as exc:
        raise GatewayStartupError(str(exc)) from exc


def _config_context(folder: Path) -> int:
    try:
        return int(json.loads((folder / "config.json").read_text())["max_position_embeddings"])
    except (OSError, KeyError, ValueError):
        return 4096
