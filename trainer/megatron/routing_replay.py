"""Rollout routing replay (R3): the trainer's MoE routers take the experts the engine chose.

An engine and a trainer compute a router's logits with different kernels, batches or weights (a
step of staleness), and a near tie between two experts' probabilities flips: the token goes
through other experts in training than in sampling, and its logprob, and every later one's,
jumps. R3 (as SkyRL and verl run it) replays the engine's choices: each token goes to the top-k
experts the engine recorded for it (`Sample.routed_experts`, packed per hidden row into
`Microbatch.routed_experts`), while the gating weights of those experts still come from the
trainer's router logits, so the router keeps its gradient. A token with nothing recorded (a row
of -1) is routed by the trainer's own top-k.

Megatron's `TopKRouter` asks its `router_replay` (Megatron's `RouterReplay` interface) for the
top-k of every forward; `replaying` installs a `ReplayedTopK` on each MoE layer's router of the
model, sets the microbatch's recorded experts for the forward and clears them after. No global
state: each router holds its own (Megatron's `RouterReplay` keeps every instance in a class-level
list instead).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch


class RoutingReplayError(ValueError):
    """Recorded experts that do not fit the model being trained."""


class ReplayedTopK:
    """A router's top-k for one forward: the recorded experts where a token has them, the router's
    own choice elsewhere. `chosen` keeps the last forward's experts ([tokens, top_k]) for checks."""

    def __init__(self) -> None:
        self.target: torch.Tensor | None = None
        self.chosen: torch.Tensor | None = None

    def get_replay_topk(
        self,
        scores: torch.Tensor,
        topk: int,
        num_groups: int | None = None,
        group_topk: int | None = None,
        default_compute_topk: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(scores of the chosen experts, their ids), each [tokens, topk]: Megatron's call, its scores
        the router's logits (softmax after top-k) or its probabilities (softmax before)."""
        probs, ids = default_compute_topk(scores, topk, num_groups=num_groups, group_topk=group_topk)
        if self.target is not None:
            if self.target.shape != ids.shape:
                raise RoutingReplayError(
                    f"recorded experts of shape {tuple(self.target.shape)} for a router that chose "
                    f"{tuple(ids.shape)} (tokens x top_k): the samples were recorded on another model"
                )
            target = self.target.to(ids.device)
            recorded = (target >= 0).all(dim=-1, keepdim=True)
            ids = torch.where(recorded, target, ids)
            probs = scores.gather(1, ids)
        self.chosen = ids.detach()
        return probs, ids


def moe_routers(model) -> list:
    """The `TopKRouter` of each MoE layer of a (possibly DDP-wrapped) GPTModel, in layer order."""
    module = getattr(model, "module", model)
    return [layer.mlp.router for layer in module.decoder.layers if hasattr(layer.mlp, "router")]


def replay_hooks(model) -> list[ReplayedTopK]:
    """Each MoE layer's `ReplayedTopK`, installed on its router on the first call."""
    hooks = []
    for router in moe_routers(model):
        if not isinstance(router.router_replay, ReplayedTopK):
            router.router_replay = ReplayedTopK()
        hooks.append(router.router_replay)
    return hooks


@contextlib.contextmanager
def replaying(model, routed: torch.Tensor | None, batch: int, sequence: slice | None = None) -> Iterator[None]:
    """Route the forward inside by `routed` ([batch * seq, layers x top_k] by hidden row, the
    flattened [batch, seq] layout; -1 rows: the router's own choice); None routes normally.
    `sequence`: the positions this rank's routers see (sequence parallelism), None all."""
    if routed is None:
        yield
        return
    hooks = replay_hooks(model)
    if not hooks:
        raise RoutingReplayError(
            "the samples carry routed experts but the model has no MoE layer: routing replay needs a "
            "mixture-of-experts checkpoint (turn trainer.routing_replay off for a dense one)"
        )
    if routed.shape[1] % len(hooks):
        raise RoutingReplayError(
            f"{routed.shape[1]} recorded expert ids per token do not split over {len(hooks)} MoE layers"
        )
    # Megatron's routers see the hidden states as [seq, batch] flattened
    per_layer = routed.reshape(batch, -1, len(hooks), routed.shape[1] // len(hooks)).transpose(0, 1)
    if sequence is not None:
        per_layer = per_layer[sequence]
    per_layer = per_layer.reshape(-1, len(hooks), per_layer.shape[-1])
    try:
        for layer, hook in enumerate(hooks):
            hook.target = per_layer[:, layer]
        yield
    finally:
        for hook in hooks:
            hook.target = None
