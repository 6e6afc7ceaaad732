"""A decoder-only transformer (Qwen3, Qwen3-MoE, Qwen2, Llama) with a slot KV cache.

Module names mirror Hugging Face's (`model.layers.0.self_attn.q_proj`, ...), so a
checkpoint's state dict loads as it is. Two entry points: `prefill` runs the new prompt
tokens of a batch of requests into their cache slots; `decode_step` advances a batch of
requests by one token each, every request at its own position, so requests join and leave
freely between steps (continuous batching). Both take each request's LoRA adapter (or None),
applied to the projections it adapts (`lora_rows`). A mixture-of-experts model's sparse layers
(`moe`) also write each token's routed experts into the cache beside its keys and values.

A Qwen3-VL checkpoint adds its vision tower (`visual`, `vision_tower`): a prefill chunk's image
features replace the embeddings of its placeholder rows, its deepstack features are added to
those rows after the first decoder layers, and its tokens turn with interleaved 3-D mrope
positions (`roost.rollout.vision.mrope`); a decode step's token is text, whose three positions
are equal: its index plus the request's `rope_delta`, through plain RoPE.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from roost.rollout.engine.kv_cache import SlotKVCache
from roost.rollout.engine.lora_rows import NO_LORA, LoadedAdapter, LoraLinear, LoraRows
from roost.rollout.engine.model_spec import ModelSpec
from roost.rollout.engine.moe import SparseMoE
from roost.rollout.engine.prompt_images import ChunkImages, text_positions
from roost.rollout.engine.rope import inverse_frequencies
from roost.rollout.engine.vision_tower import VisionTower
from roost.rollout.vision.mrope import mrope_freqs


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary(nn.Module):
    """RoPE whose angles come from explicit position ids."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.register_buffer("inv_freq", inverse_frequencies(spec), persistent=False)
        self.mrope_section = spec.vision.mrope_section if spec.vision is not None else None

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.to(torch.float32)[..., None] * self.inv_freq[None, :]
        return _cos_sin(freqs, dtype)

    def mrope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of 3-D positions [3, ...] (temporal, height, width), interleaved by section."""
        return _cos_sin(mrope_freqs(self.inv_freq, positions, self.mrope_section), dtype)


def _cos_sin(freqs: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [B, heads, T, D]; cos/sin: [B, T, D]
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, layer: int):
        super().__init__()
        self.layer = layer
        self.heads, self.kv_heads, self.head_dim = spec.num_heads, spec.num_kv_heads, spec.head_dim
        hidden, bias = spec.hidden_size, spec.qkv_bias
        name = f"model.layers.{layer}.self_attn."
        self.q_proj = LoraLinear(hidden, self.heads * self.head_dim, bias=bias, name=name + "q_proj")
        self.k_proj = LoraLinear(hidden, self.kv_heads * self.head_dim, bias=bias, name=name + "k_proj")
        self.v_proj = LoraLinear(hidden, self.kv_heads * self.head_dim, bias=bias, name=name + "v_proj")
        self.o_proj = LoraLinear(self.heads * self.head_dim, hidden, bias=False, name=name + "o_proj")
        if spec.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, spec.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, spec.rms_norm_eps)
        self.qk_norm = spec.qk_norm

    def _project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, lora: LoraRows):
        batch, length, _ = x.shape
        q = self.q_proj(x, lora).view(batch, length, self.heads, self.head_dim)
        k = self.k_proj(x, lora).view(batch, length, self.kv_heads, self.head_dim)
        v = self.v_proj(x, lora).view(batch, length, self.kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v

    def prefill(
        self, x, cos, sin, cache: SlotKVCache, spans: list[tuple[int, int, int]], lora: LoraRows = NO_LORA
    ) -> torch.Tensor:
        """x: [1, N, hidden], requests' new tokens packed one after another; `spans` gives each
        request's (slot, start position, token count) in that order."""
        q, k, v = self._project(x, cos, sin, lora)
        outputs, offset = [], 0
        for slot, start, length in spans:
            end = offset + length
            cache.write_span(self.layer, slot, start, k[0, :, offset:end], v[0, :, offset:end])
            keys, values = cache.read_span(self.layer, slot, start + length)
            outputs.append(
                F.scaled_dot_product_attention(
                    q[:, :, offset:end],
                    keys[None],
                    values[None],
                    attn_mask=_prefill_mask(length, start),
                    enable_gqa=self.heads != self.kv_heads,
                )
            )
            offset = end
        out = torch.cat(outputs, dim=2)
        return self.o_proj(out.transpose(1, 2).reshape(1, x.shape[1], -1), lora)

    def decode(self, x, cos, sin, cache: SlotKVCache, slots, positions, mask, lora: LoraRows = NO_LORA) -> torch.Tensor:
        q, k, v = self._project(x, cos, sin, lora)
        cache.write_tokens(self.layer, slots, positions, k[:, :, 0], v[:, :, 0])
        keys, values = cache.gather(self.layer, slots, mask.shape[-1])
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=self.heads != self.kv_heads)
        return self.o_proj(out.transpose(1, 2).reshape(x.shape[0], 1, -1), lora)


def _prefill_mask(length: int, start: int) -> torch.Tensor:
    # Query i (absolute position start+i) sees keys 0..start+i.
    rows = torch.arange(start, start + length)[:, None]
    cols = torch.arange(start + length)[None, :]
    return cols <= rows


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec, layer: int):
        super().__init__()
        hidden, inner, name = spec.hidden_size, spec.intermediate_size, f"model.layers.{layer}.mlp."
        self.gate_proj = LoraLinear(hidden, inner, bias=False, name=name + "gate_proj")
        self.up_proj = LoraLinear(hidden, inner, bias=False, name=name + "up_proj")
        self.down_proj = LoraLinear(inner, hidden, bias=False, name=name + "down_proj")

    def forward(self, x: torch.Tensor, lora: LoraRows = NO_LORA) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x, lora)) * self.up_proj(x, lora), lora)


class DecoderLayer(nn.Module):
    def __init__(self, spec: ModelSpec, layer: int):
        super().__init__()
        self.self_attn = Attention(spec, layer)
        self.sparse = spec.moe is not None and layer in spec.moe.layers
        self.mlp: nn.Module = SparseMoE(spec) if self.sparse else MLP(spec, layer)
        self.input_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)

    def finish(
        self, x: torch.Tensor, attn: torch.Tensor, lora: LoraRows = NO_LORA
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The layer's output, and each row's routed experts ([rows, top_k]; None for a dense MLP,
        which is the one LoRA adapts)."""
        x = x + attn
        normed = self.post_attention_layernorm(x)
        if self.sparse:
            out, experts = self.mlp(normed)
            return x + out, experts
        return x + self.mlp(normed, lora), None


class Body(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(spec, i) for i in range(spec.num_layers))
        self.norm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)


class CausalLM(nn.Module):
    """The engine's model. Returns logits only for the positions it is asked about."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.spec = spec
        self.model = Body(spec)
        self.rotary = Rotary(spec)
        if not spec.tie_word_embeddings:
            self.lm_head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        self.visual = VisionTower(spec.vision) if spec.vision is not None else None

    def logits(self, hidden: torch.Tensor, lora: LoraRows = NO_LORA) -> torch.Tensor:
        """[B, hidden] -> [B, vocab]; `lora`'s rows are the B rows (the unembedding may be adapted
        even when it is tied to the embedding, as PEFT adapts a tied `lm_head`)."""
        weight = self.model.embed_tokens.weight if self.spec.tie_word_embeddings else self.lm_head.weight
        normed = self.model.norm(hidden)
        return lora.delta("lm_head", normed, F.linear(normed, weight)).float()

    @torch.inference_mode()
    def prefill(
        self,
        chunks: list[torch.Tensor],
        starts: list[int],
        slots: list[int],
        cache: SlotKVCache,
        adapters: list[LoadedAdapter | None] | None = None,
        images: list[ChunkImages | None] | None = None,
    ) -> torch.Tensor:
        """Run request b's new tokens `chunks[b]` (1-D) at positions starts[b].. into slot
        slots[b], through its adapter `adapters[b]` (None: the base model), with its image
        features `images[b]` (None: text only); return each request's last-position logits,
        [B, vocab]. The requests go through the layers packed into one sequence (one call per
        weight matrix, however many requests); only attention runs request by request."""
        lengths = [len(chunk) for chunk in chunks]
        adapters = adapters or [None] * len(chunks)
        lora = LoraRows.of(adapters, lengths)
        x = self.model.embed_tokens(torch.cat(chunks))[None]
        positions = torch.cat([torch.arange(s, s + n) for s, n in zip(starts, lengths)])[None]
        if self.spec.vision is None:
            cos, sin = self.rotary(positions, x.dtype)
            deepstack = None
        else:
            x, cos, sin, deepstack = self._with_images(x, starts, lengths, images or [None] * len(chunks))
        spans = list(zip(slots, starts, lengths))
        row_slots = torch.cat([torch.full((n,), slot, dtype=torch.long) for slot, n in zip(slots, lengths)])
        for index, layer in enumerate(self.model.layers):
            attn = layer.self_attn.prefill(layer.input_layernorm(x), cos, sin, cache, spans, lora)
            x, experts = layer.finish(x, attn, lora)
            if experts is not None:
                cache.write_experts(index, row_slots, positions[0], experts)
            if deepstack is not None and index < len(deepstack[1]):
                x[0, deepstack[0]] += deepstack[1][index].to(x.dtype)
        last = torch.tensor(lengths).cumsum(0) - 1
        return self.logits(x[0, last], LoraRows.of(adapters))

    def _with_images(
        self, x: torch.Tensor, starts: list[int], lengths: list[int], images: list[ChunkImages | None]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[torch.Tensor, list[torch.Tensor]] | None]:
        """A vision model's packed prefill input: image features in place of their placeholder
        rows, mrope cos and sin, and (rows, per-layer features) of the deepstack additions."""
        parts = [
            text_positions(s, n) if chunk is None else chunk.positions for s, n, chunk in zip(starts, lengths, images)
        ]
        cos, sin = self.rotary.mrope(torch.cat(parts, dim=1)[:, None], x.dtype)
        given = [chunk for chunk in images if chunk is not None and bool(chunk.mask.any())]
        if not given:
            return x, cos, sin, None
        rows = torch.cat([torch.zeros(n, dtype=torch.bool) if c is None else c.mask for n, c in zip(lengths, images)])
        x = x.clone()
        x[0, rows] = torch.cat([chunk.embeds for chunk in given]).to(x.dtype)
        layers = [torch.cat([chunk.deepstack[i] for chunk in given]) for i in range(len(given[0].deepstack))]
        return x, cos, sin, (rows, layers)

    @torch.inference_mode()
    def decode_step(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
        cache: SlotKVCache,
        adapters: list[LoadedAdapter | None] | None = None,
        rope_deltas: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One token for each of B requests; `positions[b]` is where request b's token goes, and
        it turns at `positions[b] + rope_deltas[b]` (a vision model's prompt with images: its
        `rope_delta`; None: at its position)."""
        lora = LoraRows.of(adapters or [])
        x = self.model.embed_tokens(ids)[:, None]
        turns = positions if rope_deltas is None else positions + rope_deltas
        cos, sin = self.rotary(turns[:, None], x.dtype)
        span = int(positions.max()) + 1
        mask = (torch.arange(span)[None, :] <= positions[:, None])[:, None, None, :]
        for index, layer in enumerate(self.model.layers):
            attn = layer.self_attn.decode(layer.input_layernorm(x), cos, sin, cache, slots, positions, mask, lora)
            x, experts = layer.finish(x, attn, lora)
            if experts is not None:
                cache.write_experts(index, slots, positions, experts)
        return self.logits(x[:, 0], lora)
