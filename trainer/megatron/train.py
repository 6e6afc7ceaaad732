"""The Megatron policy: load a Hugging Face checkpoint, train on scored samples, export.

    policy = MegatronPolicy(TrainConfig(checkpoint="path/to/hf", lr=1e-5))
    stats = policy.train_step(scored)            # scored = compute_advantages(...)[0]
    policy.export_hf("out/step-1")               # collective; tp0/dp0 writes the folder
    policy.save_adapter("out/step-1-adapter")    # with TrainConfig.lora: the adapter alone, PEFT's layout

`train_step` packs the samples into prefix-tree microbatches (same plan on every rank),
gives data-parallel rank r the microbatches r, r + dp, ..., runs forward → per-token
logprobs → policy loss → backward on each, then reduces gradients across data-parallel
ranks and takes one Megatron optimizer step. Per-token loss weights are fixed over the
whole batch first, so the update does not depend on packing, microbatching or DP size.
Call `parallel.init(tp=..., ep=...)` in every process before building the policy. Under expert
parallelism (a mixture-of-experts model, `ep` > 1) each rank holds its slice of the experts, a
rank with fewer microbatches runs one more at zero weight (every MoE layer is an all-to-all), and
`hf_state` gathers the experts back.

With `TrainConfig.lora` the base weights are frozen and only the adapters (`megatron/lora.py`)
train; `hf_state` and `export_hf` then give the merged weights (`W + scaling * B @ A`).

With `TrainConfig.critic` a value head (`megatron/critic.py`) rides on the same forward: `values`
gives every sampled token's value (for GAE), and `train_step` on samples that carry returns also
takes a step of PPO's clipped value loss; `update_policy=False` trains the head alone.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from roost.rollout.engine.model_spec import ModelSpec
from roost.rollout.engine.rope import inverse_frequencies
from roost.rollout.lora import AdapterError, LoraSpec, load_adapter
from roost.rollout.store.samples import Sample
from roost.tracing import Tracing

from .. import hf_checkpoint
from ..advantages import Scored
from ..allowed_tokens import AllowedTokens, allowed_counts
from ..losses import LossConfig, SampleTerms, policy_loss, token_weights, value_losses
from ..prefix_tree import Microbatch, build_microbatches
from ..recipe import CriticSection, TrainerConfig
from ..sample_images import PackingImages, SampleImages
from . import convert, lora, parallel
from .critic import CriticError, ValueHead
from .model import build_gpt_model, masked_logprobs, scored_hidden, scored_logprobs, transformer_config

# The recipe's trainer section is where a default lives; TrainConfig reads the fields the section
# has from it, so a policy built without a recipe trains as a recipe that leaves them out.
_RECIPE = TrainerConfig()

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class TrainConfig:
    """The trainer's settings, grouped: model, optimizer, packing, loss."""

    checkpoint: str
    """Hugging Face checkpoint folder to start from (Qwen3, Qwen2 or Llama dense, Qwen3-MoE, or Qwen3-VL)."""
    reference: str | None = None
    """Checkpoint of the reference model for the KL term (needed when loss.kl_coef > 0)."""
    dtype: str = _RECIPE.dtype
    attention: str | None = _RECIPE.attention
    """Core attention: `sdpa` (the default; None is it too), `local` or `te` (Transformer Engine,
    arbitrary mask type)."""
    lr: float = _RECIPE.lr
    weight_decay: float = _RECIPE.weight_decay
    adam_betas: tuple[float, float] = _RECIPE.adam_betas
    clip_grad: float = _RECIPE.clip_grad
    use_distributed_optimizer: bool = _RECIPE.use_distributed_optimizer
    token_budget: int = _RECIPE.token_budget
    """Most tokens in one microbatch (tree tokens in the tree layout)."""
    layout: str = _RECIPE.layout
    old_logprobs: str = _RECIPE.old_logprobs
    """The ratio's denominator: `current` (this forward, detached: exact for one update per
    rollout batch), `recompute` (a no-grad pass before the update) or `rollout` (the
    engine's). Truncated IS then weighs old against rollout logprobs."""
    grammar_mask: bool = _RECIPE.grammar_mask
    """Train a call held to a grammar on the distribution the engine sampled it from: each
    token's logprob over the tokens the grammar allowed (`allowed_tokens`), tokens it forced
    left out. False trains the model's own, unmasked, distribution."""
    routing_replay: bool = _RECIPE.routing_replay
    """Mixture-of-experts models (R3): each token goes through the experts the engine recorded
    (`Sample.routed_experts`; `megatron/routing_replay.py`); a token with none recorded, and every
    token when False, through the trainer router's own top-k."""
    moe_aux_loss_coeff: float = _RECIPE.moe_aux_loss_coeff
    """Mixture-of-experts models: Megatron's load-balancing loss weight (0: none)."""
    freeze_vision_tower: bool = _RECIPE.freeze_vision_tower
    """Vision-language models: the tower as loaded; False trains it (`megatron/vision.py`)."""
    loss: LossConfig = field(default_factory=LossConfig)
    lora: LoraSpec | None = None
    """Train LoRA adapters on these targets, the base weights frozen; None trains every weight."""
    adapter: str | None = None
    """A PEFT adapter folder to start the adapters from (resume); None: PEFT's fresh initialisation."""
    critic: CriticSection | None = None
    """A value head on the final hidden states, trained on the returns scored samples carry; None: no critic."""


@dataclass
class StepStats:
    loss: float
    grad_norm: float
    updated: bool
    samples: int
    sampled_tokens: int
    microbatches: int
    tree_tokens: int
    seconds: float
    extra: dict[str, float] = field(default_factory=dict)


class MegatronPolicy:
    """A GPTModel with its optimizer, built from (and exported to) Hugging Face weights."""

    def __init__(self, config: TrainConfig):
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

        from .attention import check_tree_attention

        self.config = config
        self.info = parallel.info()
        self.source = Path(config.checkpoint)
        self.spec = ModelSpec.from_folder(self.source)
        hf_checkpoint.check_tokenizer(self.source, self.spec.vocab_size)
        dtype = _DTYPES[config.dtype]
        if self.info.ep_size > 1 and self.spec.moe is None:
            raise ValueError(
                f"expert parallelism (ep {self.info.ep_size}) splits a mixture-of-experts model's experts; "
                f"{config.checkpoint} is a dense {self.spec.family} checkpoint: call parallel.init without ep"
            )
        if config.routing_replay and self.spec.moe is None:
            raise ValueError(
                f"trainer.routing_replay replays a mixture-of-experts model's routing; {config.checkpoint} is a "
                f"dense {self.spec.family} checkpoint: turn routing_replay off"
            )
        self.mcore_config = transformer_config(
            self.spec,
            tp=self.info.tp_size,
            dtype=dtype,
            moe_aux_loss_coeff=config.moe_aux_loss_coeff,
            calculate_per_token_loss=True,
            expert_model_parallel_size=self.info.ep_size,
        )
        if config.lora and self.mcore_config.sequence_parallel:
            raise ValueError(
                f"LoRA on a mixture-of-experts model under tensor parallelism (tp {self.info.tp_size}): roost's "
                "adapters read whole sequences, and Megatron's MoE layer splits them there; use tp 1 (dp and ep "
                "split the work instead)"
            )
        model = build_gpt_model(self.spec, self.mcore_config, config.attention)
        if self.spec.vision is not None and not config.freeze_vision_tower:
            if config.lora:
                raise ValueError("LoRA trains its adapters alone: keep freeze_vision_tower with lora")
            model.vision.requires_grad_(True)  # before DDP and the optimizer take the trained parameters
        if config.layout == "tree":
            check_tree_attention(model)
        self.te_names = model.roost_attention == "te"
        self._load(model, self.source)
        self.lora_hosts = self._attach_lora(model) if config.lora else {}
        if torch.cuda.is_available():
            model.cuda()
        self.model = DistributedDataParallel(
            self.mcore_config,
            DistributedDataParallelConfig(
                grad_reduce_in_fp32=True, use_distributed_optimizer=config.use_distributed_optimizer
            ),
            model,
        )
        self.optimizer = get_megatron_optimizer(
            OptimizerConfig(
                optimizer="adam",
                lr=config.lr,
                weight_decay=config.weight_decay,
                adam_beta1=config.adam_betas[0],
                adam_beta2=config.adam_betas[1],
                clip_grad=config.clip_grad,
                bf16=dtype == torch.bfloat16,
                params_dtype=dtype,
                use_distributed_optimizer=config.use_distributed_optimizer,
            ),
            [self.model],
        )
        self.inv_freq = inverse_frequencies(self.spec)
        self.images = SampleImages(self.source, self.spec.vision) if self.spec.vision is not None else None
        self.reference = self._reference_model() if config.loss.kl_coef else None
        self.allowed = AllowedTokens(self.source, self.spec)
        self.critic = (
            ValueHead(self.spec.hidden_size, config.critic.lr, next(model.parameters()).device)
            if config.critic
            else None
        )
        self.steps = 0

    def reset_optimizer(self) -> None:
        """Forget the optimizer's moments and step counts, keeping the weights: the next step is
        the first step of a new optimizer, as when a separate run starts from these weights."""
        for optimizer in getattr(self.optimizer, "chained_optimizers", [self.optimizer]):
            optimizer.optimizer.state.clear()

    def _load(self, model: Any, folder: Path, spec: ModelSpec | None = None) -> None:
        hf = hf_checkpoint.read_weights(folder)
        state = convert.hf_to_megatron(
            hf, spec or self.spec, tp_rank=self.info.tp_rank, tp_size=self.info.tp_size, te=self.te_names
        )
        if self.info.ep_size > 1:  # this rank's experts alone
            state = convert.expert_parallel_slice(
                state, spec or self.spec, ep_rank=self.info.ep_rank, ep_size=self.info.ep_size
            )
        convert.load_into(model, {k: v.to(self.mcore_config.params_dtype) for k, v in state.items()})

    def _attach_lora(self, model: Any) -> dict[str, tuple[str, ...]]:
        spec = self.config.lora
        hosts = lora.attach(model, spec, self.spec, tp_size=self.info.tp_size)
        if self.config.adapter is None:
            weights = lora.fresh_weights(spec, self.spec)
        else:
            adapter = load_adapter(self.config.adapter)
            if (adapter.spec.rank, adapter.spec.alpha, set(adapter.spec.targets)) != (
                spec.rank,
                spec.alpha,
                set(spec.targets),
            ):
                raise AdapterError(
                    f"adapter {self.config.adapter} has rank {adapter.spec.rank}, alpha {adapter.spec.alpha}, targets "
                    f"{sorted(adapter.spec.targets)}; trainer.lora asks rank {spec.rank}, alpha {spec.alpha}, "
                    f"targets {sorted(spec.targets)}: make them agree or start a new run"
                )
            weights = adapter.weights
        lora.load_weights(model, hosts, weights, tp_rank=self.info.tp_rank, tp_size=self.info.tp_size)
        return hosts

    def _reference_model(self) -> Any:
        if self.config.reference is None:
            raise ValueError("loss.kl_coef > 0 needs TrainConfig.reference (a checkpoint folder)")
        # its own reading: a LoRA run's merged unembedding is untied from the embedding
        spec = ModelSpec.from_folder(self.config.reference)
        reference = build_gpt_model(spec, self.mcore_config, self.config.attention)
        self._load(reference, Path(self.config.reference), spec)
        reference.requires_grad_(False)
        return reference.eval()

    def microbatches(
        self,
        samples: list[Sample],
        layout: str | None = None,
        scored: tuple[list[list[int]], list[torch.Tensor | None]] | None = None,
    ) -> list[Microbatch]:
        """The whole batch's microbatches (same plan on every rank), scoring every sampled token,
        or the positions and allowed tokens of `scored` (`scored_positions`); with `routing_replay`, each
        token's recorded experts ride along; a vision-language policy's samples carry their images
        (`use_images`)."""
        positions, masks = scored or ([[i for i, m in enumerate(s.loss_mask) if m] for s in samples], None)
        images = self.images.pack_inputs(samples) if self.images is not None else PackingImages(None, None, {})
        return build_microbatches(
            [s.tokens for s in samples],
            positions,
            [s.group_id for s in samples],
            self.config.token_budget,
            layout or self.config.layout,
            masks,
            routing=[s.routed_experts for s in samples] if self.config.routing_replay else None,
            keys=images.keys,
            mrope_positions=images.positions,
            images=images.pixels,
        )

    def use_images(self, images: Mapping[str, bytes]) -> None:
        """The bytes (by sha256, as the store holds them) of the images the next samples name, in
        place of the last ones: a vision-language policy packs each sample's image tokens with them."""
        if self.images is None:
            raise ValueError(f"{self.source} is a text checkpoint: its samples carry no images")
        self.images.use(images)

    def scored_positions(self, samples: list[Sample]) -> tuple[list[list[int]], list[torch.Tensor | None]]:
        """Each sample's positions to train on and, with `grammar_mask`, the tokens its grammar
        allowed at each (None for a free reply). A token the grammar forced (the only one allowed)
        is left out: its logprob over the allowed tokens is 0 whatever the weights."""
        positions = [[i for i, m in enumerate(s.loss_mask) if m] for s in samples]
        if not self.config.grammar_mask:
            return positions, [None] * len(samples)
        masks = [self.allowed.masks(s) for s in samples]
        for k, mask in enumerate(masks):
            if mask is not None:
                free = allowed_counts(mask) > 1
                positions[k] = [p for p, keep in zip(positions[k], free.tolist()) if keep]
                masks[k] = mask[free]
        return positions, masks

    def my_microbatches(self, microbatches: list[Microbatch]) -> list[Microbatch]:
        return microbatches[self.info.dp_rank :: self.info.dp_size]

    def padding(self, microbatches: list[Microbatch], mine: list[Microbatch]) -> list[Microbatch]:
        """Microbatches this rank runs with zero weight so that it calls the model as often as
        every other rank: under expert parallelism each MoE layer's forward and backward is an
        all-to-all over the ranks, which must all take part (the first data-parallel rank has
        the most microbatches); none without it."""
        if self.info.ep_size == 1 or not microbatches:
            return []
        most = -(-len(microbatches) // self.info.dp_size)
        return [microbatches[0]] * (most - len(mine))

    @torch.no_grad()
    def logprobs(self, samples: list[Sample], model: Any = None, layout: str | None = None) -> list[torch.Tensor]:
        """Logprobs of every sample's sampled tokens (all samples, on every rank), in the configured
        layout or `layout`."""
        out: list[torch.Tensor | None] = [None] * len(samples)
        for microbatch in self.microbatches(samples, layout):
            values = scored_logprobs(model or self.model, microbatch, self.inv_freq)
            for index, lp in zip(microbatch.sample_index, microbatch.sample_logprobs(values)):
                out[index] = lp
        return [lp for lp in out if lp is not None]

    @torch.no_grad()
    def values(self, samples: list[Sample]) -> list[list[float]]:
        """The value head's value at every token of every sample (all samples, on every rank), in
        the configured layout: a sampled token's from the row that samples it, 0.0 at the context
        tokens (no steps of GAE)."""
        if self.critic is None:
            raise CriticError("this policy has no value head (TrainConfig.critic is None): set algorithm.critic")
        out = [[0.0] * len(s.tokens) for s in samples]
        positions = [[i for i, m in enumerate(s.loss_mask) if m] for s in samples]
        for microbatch in self.microbatches(samples):
            entries = self.critic(scored_hidden(self.model, microbatch, self.inv_freq))
            # the logprobs' per-sample gather serves any per-entry value
            for index, values in zip(microbatch.sample_index, microbatch.sample_logprobs(entries)):
                for position, value in zip(positions[index], values.tolist()):
                    out[index][position] = value
        return out

    def train_step(self, scored: list[Scored], tracing: Tracing | None = None, update_policy: bool = True) -> StepStats:
        """One optimizer step on a batch of scored samples (the same list on every rank): the
        policy's, unless `update_policy` is False, and the value head's on the samples that carry
        returns; `tracing`: `train.pack`, `train.forward_backward` and `train.optimizer` spans."""
        tracing = tracing or Tracing()
        critic = self.critic is not None and any(item.returns is not None for item in scored)
        if not (update_policy or critic):
            raise CriticError(
                "train_step(update_policy=False) trains the value head alone, and there is none to train: "
                "it needs TrainConfig.critic and scored samples with returns (and values)"
            )
        started = time.perf_counter()
        samples = [item.sample for item in scored]
        with tracing.span("train.pack", {"roost.samples": len(samples)}):
            self.allowed.refused.clear()
            positions, masks = self.scored_positions(samples)
            microbatches = self.microbatches(samples, scored=(positions, masks))
        weights = token_weights([len(p) for p in positions], self.config.loss.aggregation)
        mine = self.my_microbatches(microbatches)
        padding = self.padding(microbatches, mine)
        with tracing.span("train.forward_backward", {"roost.microbatches": len(mine)}):
            total_loss, sums = self._forward_backward(
                scored, samples, mine, positions, weights, update_policy, critic, padding
            )
        sums["grammar_replay_failures"] = float(len(self.allowed.refused))
        # R3: this rank's tree tokens routed by recorded experts (summed over data-parallel ranks)
        sums["replayed_tokens"] = float(
            sum(int((mb.routed_experts >= 0).all(-1).sum()) for mb in mine if mb.routed_experts is not None)
        )
        with tracing.span("train.optimizer"):
            updated, grad_norm = self._policy_step() if update_policy else (False, 0.0)
            if critic:
                self.critic.step()
        self.steps += int(bool(updated))
        return StepStats(
            loss=_dp_sum(total_loss),
            grad_norm=grad_norm,
            updated=updated,
            samples=len(samples),
            sampled_tokens=sum(len(p) for p in positions),
            microbatches=len(microbatches),
            tree_tokens=sum(mb.num_tokens for mb in microbatches),
            seconds=time.perf_counter() - started,
            extra=sums,
        )

    def _policy_step(self) -> tuple[bool, float]:
        from megatron.core.distributed import finalize_model_grads

        finalize_model_grads([self.model])
        updated, grad_norm, _ = self.optimizer.step()
        return bool(updated), float(grad_norm or 0.0)

    def _forward_backward(
        self,
        scored: list[Scored],
        samples: list[Sample],
        mine: list[Microbatch],
        positions: list[list[int]],
        weights: list[float],
        update_policy: bool = True,
        critic: bool = False,
        padding: Sequence[Microbatch] = (),
    ) -> tuple[float, dict[str, float]]:
        """The policy loss of this rank's microbatches, its gradients accumulated (computed, not
        backpropagated, without `update_policy`), and with `critic` the value loss's on the head;
        (policy loss, summed statistics). `padding` runs forward and backward at zero weight."""
        old = self._old_logprobs([*mine, *padding]) if self.config.old_logprobs == "recompute" else {}
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        total_loss = 0.0
        sums: dict[str, float] = {}
        # the value loss is a token mean over the tokens with returns, as the policy's token_mean
        value_weight = 1.0 / max(sum(len(p) for p, item in zip(positions, scored) if item.returns is not None), 1)
        for microbatch in mine:
            with torch.set_grad_enabled(update_policy):
                rows = scored_hidden(self.model, microbatch, self.inv_freq)
                loss, stats = self._policy_loss(scored, samples, microbatch, rows, positions, weights, old)
            if update_policy:
                loss.backward()
            if critic:
                value_loss, value_stats = self._value_loss(scored, microbatch, rows, positions, value_weight)
                value_loss.backward()
                stats.update(value_stats)
            total_loss += float(loss.detach())
            for key, value in stats.items():
                sums[key] = sums.get(key, 0.0) + value
        for microbatch in padding:
            with torch.set_grad_enabled(update_policy):
                rows = scored_hidden(self.model, microbatch, self.inv_freq)
                loss, _ = self._policy_loss(scored, samples, microbatch, rows, positions, weights, old)
            if update_policy:
                (loss * 0.0).backward()
        return total_loss, sums

    def _policy_loss(
        self,
        scored: list[Scored],
        samples: list[Sample],
        microbatch: Microbatch,
        rows: torch.Tensor,
        positions: list[list[int]],
        weights: list[float],
        old: dict[int, torch.Tensor],
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The policy loss of one microbatch from its forward's `rows`, and its statistics."""
        values, masses = masked_logprobs(self.model, microbatch, self.inv_freq, rows)
        logprobs, allowed_mass = microbatch.sample_logprobs(values), microbatch.sample_logprobs(masses.detach())
        ref = self._reference_logprobs(microbatch)
        terms = []
        for j, index in enumerate(microbatch.sample_index):
            pos = positions[index]
            current = logprobs[j]
            # the engine's logprob over the allowed tokens, renormalised by this policy's mass
            # (the rollout policy's on a batch's first update)
            rollout = (
                torch.tensor([samples[index].rollout_logprobs[i] for i in pos], device=current.device) - allowed_mass[j]
            )
            terms.append(
                SampleTerms(
                    logprobs=current,
                    old_logprobs=old.get(index, rollout if self.config.old_logprobs == "rollout" else current.detach()),
                    rollout_logprobs=rollout,
                    advantages=torch.tensor([scored[index].advantages[i] for i in pos], device=current.device),
                    weight=weights[index],
                    ref_logprobs=None if ref is None else ref[j],
                )
            )
        loss, stats = policy_loss(terms, self.config.loss)
        stats["allowed_mass"] = float(sum(mass.exp().sum() for mass in allowed_mass))
        return loss, stats

    def _value_loss(
        self,
        scored: list[Scored],
        microbatch: Microbatch,
        rows: torch.Tensor,
        positions: list[list[int]],
        weight: float,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """PPO's clipped value loss of one microbatch's sampled tokens (their share of the batch
        mean, on the head only), and its summed statistics."""
        entries = self.critic(rows)
        total = entries.sum() * 0.0  # connected to the head even with no entries: every rank steps it
        stats = dict.fromkeys(("value_loss", "value_clipped", "value_tokens", "values", "returns"), 0.0)
        for index, values in zip(microbatch.sample_index, microbatch.sample_logprobs(entries)):
            item, pos = scored[index], positions[index]
            if item.returns is None:
                continue
            old = torch.tensor([item.values[i] for i in pos], device=values.device)
            returns = torch.tensor([item.returns[i] for i in pos], device=values.device)
            losses, clipped = value_losses(values, old, returns, self.config.critic.value_clip)
            total = total + weight * losses.sum()
            stats["value_loss"] += weight * float(losses.detach().sum())
            stats["value_clipped"] += float(clipped.sum())
            stats["value_tokens"] += len(pos)
            stats["values"] += float(values.detach().sum())
            stats["returns"] += float(returns.sum())
        return total, stats

    @torch.no_grad()
    def _old_logprobs(self, microbatches: list[Microbatch]) -> dict[int, torch.Tensor]:
        old = {}
        for microbatch in microbatches:
            values, _ = masked_logprobs(self.model, microbatch, self.inv_freq)
            old.update(zip(microbatch.sample_index, microbatch.sample_logprobs(values)))
        return old

    @torch.no_grad()
    def _reference_logprobs(self, microbatch: Microbatch) -> list[torch.Tensor] | None:
        if self.reference is None:
            return None
        return microbatch.sample_logprobs(masked_logprobs(self.reference, microbatch, self.inv_freq)[0])

    def hf_state(self) -> dict[str, torch.Tensor]:
        """The current weights as a Hugging Face state dict (collective over tensor and expert
        parallel); with LoRA, the adapters merged in."""
        from megatron.core import parallel_state

        local = {k: v for k, v in convert.model_state(self.model).items() if not lora.is_adapter_name(k)}
        if self.info.ep_size > 1:  # every rank's experts (numbered alike on every rank), the rest as is
            experts = {name: tensor for name, tensor in local.items() if convert.is_local_expert(name)}
            states = _gather_ranks(experts, parallel_state.get_expert_model_parallel_group(), self.info.ep_size)
            states[0].update({name: t for name, t in local.items() if name not in experts})
            local = convert.merge_expert_parallel(states, self.spec)
        if self.info.tp_size == 1:
            shards = [local]
        else:
            shards = _gather_ranks(local, parallel_state.get_tensor_model_parallel_group(), self.info.tp_size)
        hf = convert.megatron_to_hf(shards, self.spec, te=self.te_names)
        return lora.merge(hf, self.adapter_state(), self.config.lora) if self.config.lora else hf

    def adapter_state(self) -> dict[str, torch.Tensor]:
        """The adapters under PEFT's keys in full shapes (collective over tensor parallel)."""
        if self.config.lora is None:
            raise AdapterError("this policy trains every weight (no trainer.lora): it has no adapter")
        return lora.gather_weights(self.model, self.lora_hosts, tp_size=self.info.tp_size)

    def export_hf(self, folder: str | Path) -> Path:
        """Write the weights as a Hugging Face checkpoint (collective; one rank writes); with LoRA the
        merged weights, for engines that load no adapter."""
        import torch.distributed as dist

        state = self.hf_state()
        # an adapted unembedding, merged, is no longer the embedding
        untied = {"tie_word_embeddings": False} if self.spec.tie_word_embeddings and "lm_head.weight" in state else None
        if self.info.writes_checkpoints:
            hf_checkpoint.write_checkpoint(state, self.source, folder, config=untied)
        dist.barrier()
        return Path(folder)

    def save_adapter(self, folder: str | Path) -> Path:
        """Write the adapters alone as a PEFT folder (collective; one rank writes)."""
        import torch.distributed as dist

        from roost.rollout.lora import save_adapter

        weights = self.adapter_state()
        if self.info.writes_checkpoints:
            save_adapter(folder, self.config.lora, weights, base_model=str(self.source))
        dist.barrier()
        return Path(folder)


def _dp_sum(value: float) -> float:
    import torch.distributed as dist
    from megatron.core import parallel_state

    if parallel_state.get_data_parallel_world_size() == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor, group=parallel_state.get_data_parallel_group())
    return float(tensor[0])


def _gather_ranks(tensors: dict[str, torch.Tensor], group: Any, size: int) -> list[dict[str, torch.Tensor]]:
    """Each of the `size` ranks' `tensors` (the same names on every rank), gathered over `group`."""
    import torch.distributed as dist

    out: list[dict[str, torch.Tensor]] = [{} for _ in range(size)]
    for name, tensor in tensors.items():
        gathered = [torch.empty_like(tensor) for _ in range(size)]
        dist.all_gather(gathered, tensor.contiguous(), group=group)
        for rank, piece in enumerate(gathered):
            out[rank][name] = piece.cpu()
    return out
