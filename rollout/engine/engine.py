"""The embedded engine: model, tokenizer, KV cache and scheduler behind an async API."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer

from roost.rollout.engine.adapters import AdapterLimits, AdapterSet
from roost.rollout.engine.grammar import Grammar, Grammars
from roost.rollout.engine.kv_cache import SlotKVCache
from roost.rollout.engine.lora_rows import LoadedAdapter, LoraLinear
from roost.rollout.engine.model import CausalLM, Rotary
from roost.rollout.engine.model_spec import ModelSpec
from roost.rollout.engine.prompt_images import PromptImages, read_prompt_images
from roost.rollout.engine.request import EngineRequest, RequestPlan, StepOutput
from roost.rollout.engine.sampling import SamplingConfig
from roost.rollout.engine.scheduler import Scheduler
from roost.rollout.engine.scripted_sampler import ScriptedSampler, ScriptError
from roost.rollout.engine.vision_tower import engine_names
from roost.rollout.engine.weights import check_fits, read_checkpoint
from roost.rollout.engine_api.wire import RequestError, SamplingParams
from roost.rollout.vision.placeholders import image_pad_runs
from roost.rollout.vision.processor import load_image_processor

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class EngineConfig:
    model_path: Path
    context_length: int | None = None
    """Longest prompt + completion; default: the model's max_position_embeddings, capped at 4096."""
    max_running: int = 64
    """Requests decoded together; more wait in line."""
    dtype: str = "float32"
    scripted: ScriptedSampler | None = None
    """When set, every reply is forced by the scripted sampler (tests, benchmarks)."""
    reuse_prefixes: bool = True
    """Keep finished requests' keys and values for the next request that extends them
    (SGLang's radix cache; off with --disable-radix-cache)."""
    max_prefill_tokens: int = 8192
    """Waiting prompts are prefilled together until a batch holds this many new tokens (SGLang's
    --max-prefill-tokens; the last request admitted may take it past that)."""
    lora: AdapterLimits = field(default_factory=AdapterLimits)
    """How many LoRA adapters may be loaded at once, and their highest rank."""
    kv_budget_tokens: int | None = None
    """Retain each session's keys and values between its calls, these many tokens at most over all
    sessions (None: no retention; every free slot is reused by recency)."""


@dataclass
class Completion:
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: dict | None = None
    weight_version: str = "0"
    cached_tokens: int = 0
    constraint: dict | None = None
    """What held the reply to a grammar (`Grammar.meta`), if anything did."""
    first_token_at: float | None = None
    """When the first sampled token reached the server (`time.perf_counter`): the prefill's end."""
    routed_experts: np.ndarray | None = None
    """The routed experts the request asked for, [tokens, layers, top_k] (`RequestPlan.routed_experts_from`)."""

    def add(self, outputs: list[StepOutput]) -> list[int]:
        """Take in one event's step outputs; return the token ids it added."""
        new_ids = [out.token_id for out in outputs if out.token_id >= 0]  # -1: an event with no token
        if new_ids and self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        self.output_ids += new_ids
        self.logprobs += [out.logprob for out in outputs if out.token_id >= 0]
        last = outputs[-1]
        if last.routed_experts is not None:
            self.routed_experts = last.routed_experts
        self.finish_reason, self.weight_version, self.cached_tokens = (
            last.finish_reason,
            last.weight_version,
            last.cached_tokens,
        )
        return new_ids


class Engine:
    def __init__(self, config: EngineConfig):
        self.config = config
        self.spec = ModelSpec.from_folder(config.model_path)
        self.tokenizer = AutoTokenizer.from_pretrained(config.model_path)
        self.dtype = DTYPES[config.dtype]
        self.model = _load_model(self.spec, config.model_path, self.dtype)
        self.context_length = config.context_length or min(self.spec.max_position_embeddings, 4096)
        cache = SlotKVCache(
            layers=self.spec.num_layers,
            slots=config.max_running,
            kv_heads=self.spec.num_kv_heads,
            max_len=self.context_length,
            head_dim=self.spec.head_dim,
            dtype=self.dtype,
            reuse_prefixes=config.reuse_prefixes,
            budget_tokens=config.kv_budget_tokens,
            top_k=self.spec.moe.top_k if self.spec.moe is not None else 0,
        )
        self.scheduler = Scheduler(
            self.model, cache, max_running=config.max_running, prefill_tokens=config.max_prefill_tokens
        )
        self.scripted = config.scripted
        self.grammars = Grammars(self.tokenizer, self.spec.vocab_size, list(self.spec.eos_token_ids))
        self.adapters = AdapterSet(_adaptable_shapes(self.model), self.spec.num_layers, self.dtype, config.lora)
        self.image_processor = load_image_processor(config.model_path) if self.spec.vision is not None else None
        self.started_at = time.time()

    @property
    def weight_version(self) -> str:
        return self.scheduler.weight_version

    def start(self) -> None:
        self.scheduler.start()

    def stop(self) -> None:
        self.scheduler.stop()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def check_prompt(self, ids: list[int]) -> None:
        if not ids:
            raise RequestError("the prompt is empty")
        bad = [t for t in ids if not 0 <= t < self.spec.vocab_size]
        if bad:
            raise RequestError(f"token id(s) {bad[:5]} outside the vocabulary [0, {self.spec.vocab_size})")
        if len(ids) >= self.context_length:
            raise RequestError(
                f"the prompt has {len(ids)} tokens; the context length is {self.context_length} "
                "(prompt plus at least one generated token must fit)"
            )

    def check_routed_experts(self, start: int, prompt_len: int, max_new_tokens: int) -> None:
        """A request for routed experts (SGLang's `return_routed_experts`, from position `start`)
        that this model and request can answer; raises RequestError otherwise."""
        if self.spec.moe is None:
            raise RequestError(
                f"return_routed_experts: the model served here ({self.spec.family}) is dense and routes "
                "no experts; ask it of a mixture-of-experts model (such as `tiny-moe`), or leave it unset"
            )
        if not 0 <= start <= prompt_len:
            raise RequestError(
                f"routed_experts_start_len {start} must be between 0 and the prompt's {prompt_len} tokens"
            )
        if max_new_tokens < 1:
            raise RequestError(
                "return_routed_experts needs max_new_tokens >= 1: the routing is recorded as tokens run "
                "through the model, and a request that generates nothing runs none"
            )

    def plan(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        grammar: Grammar | None = None,
        adapter: LoadedAdapter | None = None,
    ) -> RequestPlan:
        stop_ids = set(params.stop_token_ids or [])
        if not params.ignore_eos:
            stop_ids |= set(self.spec.eos_token_ids)
        return RequestPlan(
            sampling=SamplingConfig(params.temperature, params.top_p, params.top_k, params.min_p),
            max_new_tokens=min(params.max_new_tokens, self.context_length - len(prompt_ids)),
            stop_token_ids=frozenset(stop_ids),
            stop_strings=tuple(params.stop_strings()),
            min_new_tokens=params.min_new_tokens,
            forced_ids=self._forced_ids(prompt_ids, params, grammar),
            seed=params.sampling_seed,
            grammar=grammar,
            adapter=adapter,
        )

    def _forced_ids(self, prompt_ids: list[int], params: SamplingParams, grammar: Grammar | None) -> list[int] | None:
        custom = params.custom_params or {}
        reply = custom.get("scripted_reply")
        if reply is None and self.scripted is not None:
            try:
                reply = self.scripted.reply_for(self.decode(prompt_ids, skip_special_tokens=False))
            except ScriptError as exc:
                raise RequestError(str(exc)) from exc
        if reply is None:
            return None
        if not isinstance(reply, str):
            raise RequestError("custom_params.scripted_reply must be a string")
        forced = self.encode(reply) + [self.spec.eos_token_ids[0]]
        if grammar is not None and not grammar.accepts(forced):
            raise RequestError(f"the scripted reply {reply!r} does not match the request's {grammar.kind}")
        return forced

    async def prepare(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        lora: str | None = None,
        image_data: list[str] | None = None,
    ) -> RequestPlan:
        """Validate a request, find its LoRA adapter (`lora`: a loaded adapter's name), read its
        images (`image_data`: data URLs, one per placeholder run), compile its grammar and fix its
        plan; raises RequestError before anything runs."""
        self.check_prompt(prompt_ids)
        adapter = None if lora is None else self.adapters.get(lora)
        images = await self.read_images(prompt_ids, image_data or [])
        constraint = params.constraint()
        grammar = None if constraint is None else await self.grammars.compile(*constraint)
        plan = self.plan(prompt_ids, params, grammar, adapter)
        plan.images = images
        return plan

    async def read_images(self, prompt_ids: list[int], image_data: list[str]) -> PromptImages | None:
        """The prompt's images, decoded and processed off the event loop (None: a prompt without
        any); raises RequestError for images a text model is sent, or ones the prompt does not fit."""
        vision = self.spec.vision
        if vision is None:
            if image_data:
                raise RequestError(
                    f"image_data: the model served here ({self.spec.family}) is text only; serve a "
                    "vision-language checkpoint (such as `tiny-vl`) to send images"
                )
            return None
        if not image_data and not image_pad_runs(prompt_ids, vision.image_token_id):
            return None
        return await asyncio.to_thread(read_prompt_images, image_data, prompt_ids, self.image_processor, vision)

    async def stream(
        self, prompt_ids: list[int], plan: RequestPlan, *, skip_special_tokens: bool = True, rid: str | None = None
    ) -> AsyncIterator[list[StepOutput]]:
        """Submit a prepared request; yield its step outputs as they come, until it finishes."""
        if plan.max_new_tokens <= 0:  # nothing to generate: answer without touching the model
            yield [StepOutput(-1, 0.0, {"type": "length", "length": 0}, self.weight_version)]
            return
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[list[StepOutput]] = asyncio.Queue()

        def emit(outputs: list[StepOutput]) -> None:
            loop.call_soon_threadsafe(inbox.put_nowait, outputs)

        request = EngineRequest(
            rid=rid or uuid.uuid4().hex,
            prompt_ids=list(prompt_ids),
            plan=plan,
            emit=emit,
            decode=lambda ids: self.decode(ids, skip_special_tokens),
        )
        self.scheduler.submit(request)
        try:
            while True:
                outputs = await inbox.get()
                yield outputs
                if outputs[-1].finish_reason is not None:
                    return
        finally:
            request.cancelled = not request.finished

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, rid: str | None = None, plan: RequestPlan | None = None
    ) -> Completion:
        plan = plan or await self.prepare(prompt_ids, params)
        completion = Completion(constraint=plan.constraint_meta())
        async for outputs in self.stream(prompt_ids, plan, skip_special_tokens=params.skip_special_tokens, rid=rid):
            completion.add(outputs)
        return completion

    async def close_session(self, session: str) -> int:
        """The session is over: its retained keys and values are released; the tokens freed."""
        return await asyncio.wrap_future(self.scheduler.call(lambda: self.scheduler.cache.close(session)))

    async def update_weights(self, path: str, weight_version: str | None) -> str:
        """Read and check the new weights off the event loop, then swap them in between steps."""
        tensors = await asyncio.to_thread(read_checkpoint, path)
        return await self.swap_weights(tensors, weight_version)

    async def swap_weights(self, tensors: dict[str, torch.Tensor], weight_version: str | None) -> str:
        """Check `tensors` (under the checkpoint's names, mapped as a load maps them) against the
        model (WeightMismatch), then swap them in between steps, dropping the prefix cache; returns
        the version now served."""
        expected = dict(self.model.state_dict())
        tied = self.spec.tie_word_embeddings
        fitted = await asyncio.to_thread(check_fits, expected, engine_names(tensors), tied_embeddings=tied)

        def swap() -> str:
            self.model.load_state_dict(fitted, strict=True)
            self.scheduler.cache.forget()
            self.scheduler.weight_version = weight_version or _next_version(self.scheduler.weight_version)
            return self.scheduler.weight_version

        return await asyncio.wrap_future(self.scheduler.call(swap))

    async def swap_adapter(self, adapter: LoadedAdapter, *, replace: bool, weight_version: str | None) -> str:
        """Serve a checked adapter (`replace`: in place of the one of its name), drop the prefix
        cache and set the version, all between two steps; returns the version now served."""

        def swap() -> str:
            self.adapters.add(adapter, replace=replace)
            self.scheduler.cache.forget()
            self.scheduler.weight_version = weight_version or _next_version(self.scheduler.weight_version)
            return self.scheduler.weight_version

        return await asyncio.wrap_future(self.scheduler.call(swap))

    async def load_lora(self, name: str, path: str, *, replace: bool = False) -> LoadedAdapter:
        """Read and check an adapter folder off the event loop, then serve it under `name` (`replace`:
        in place of the adapter of that name)."""
        adapter = await asyncio.to_thread(self.adapters.read, name, path)
        await asyncio.wrap_future(self.scheduler.call(lambda: self.adapters.add(adapter, replace=replace)))
        return adapter

    async def set_weight_version(self, version: str) -> str:
        """The version later steps report; set between steps, as a weight swap sets it."""

        def set_version() -> str:
            self.scheduler.weight_version = version
            return version

        return await asyncio.wrap_future(self.scheduler.call(set_version))

    async def unload_lora(self, name: str) -> int:
        """Take `name` away from new requests; the running and waiting requests that use it finish
        with it (they hold it). Returns how many those are."""

        def remove() -> int:
            return self.adapters.in_use(self.adapters.remove(name), self.scheduler.requests())

        return await asyncio.wrap_future(self.scheduler.call(remove))


def _adaptable_shapes(model: CausalLM) -> dict[str, tuple[int, int]]:
    shapes = {m.lora_name: (m.in_features, m.out_features) for m in model.modules() if isinstance(m, LoraLinear)}
    shapes["lm_head"] = (model.spec.hidden_size, model.spec.vocab_size)
    return shapes


def _next_version(current: str) -> str:
    return str(int(current) + 1) if current.isdigit() else f"{current}+1"


def _load_model(spec: ModelSpec, folder: Path, dtype: torch.dtype) -> CausalLM:
    with torch.device("meta"):
        model = CausalLM(spec)
    model = model.to_empty(device="cpu").to(dtype)
    model.rotary = Rotary(spec)  # not in checkpoints: rebuild off meta
    if model.visual is not None:
        model.visual.rebuild_buffers()
    tensors = check_fits(
        {k: v for k, v in model.state_dict().items()},
        {k: v.to(dtype) for k, v in engine_names(read_checkpoint(folder)).items()},
        tied_embeddings=spec.tie_word_embeddings,
    )
    model.load_state_dict(tensors, strict=True)
    return model.eval()
