"""Sequence parallelism for a mixture-of-experts model under tensor parallelism.

Megatron's MoE layer refuses tensor parallelism in training without sequence parallelism: each
tensor-parallel rank routes its own slice of the sequence, and the token dispatcher gathers the
slices. roost's forward (`model.scored_hidden`) keeps its own shape around that: the embedding
stays whole (so image features land at their rows first), the packed rows are padded to a
multiple of the tensor-parallel size and scattered along the sequence, the decoder runs on
slices (Megatron's column-parallel layers gather them, its row-parallel ones scatter back), and
the decoder's output is gathered whole again before the scored rows are picked. The output layer
then reads whole rows, so it must not gather a second time (`whole_row_output_layer`).

Torch's RMSNorm, Megatron's CPU norm, refuses sequence parallelism because its weight's gradient
would be one slice's: `SequenceParallelRMSNorm` flags its weight so Megatron's
`finalize_model_grads` sums it over the tensor-parallel group, as it does Megatron's fused norms.
"""

from __future__ import annotations

import dataclasses

import torch

from ..prefix_tree import Microbatch, Segment, TreeLayout


class HeadRMSNorm(torch.nn.RMSNorm):
    """Torch's RMSNorm built from Megatron's norm arguments, for the query and key heads (Qwen3's qk
    norm): after the column-parallel projection gathers the sequence, each rank norms every token of
    its own heads; Megatron's `finalize_model_grads` sums these weights' gradients by their names."""

    def __init__(self, config, hidden_size: int, eps: float = 1e-5, **_: object) -> None:
        super().__init__(hidden_size, eps=eps)


class SequenceParallelRMSNorm(HeadRMSNorm):
    """The norm of the hidden states, its weight flagged `sequence_parallel` (each rank sees a slice
    of the tokens: the gradients are summed over the tensor-parallel group)."""

    def __init__(self, config, hidden_size: int, eps: float = 1e-5, **_: object) -> None:
        super().__init__(config, hidden_size, eps)
        self.weight.sequence_parallel = True


def whole_row_output_layer(model) -> None:
    """Let the output layer take whole rows under sequence parallelism: no gather of its input in
    the forward, its input gradient all-reduced over the tensor-parallel group in the backward (as
    without sequence parallelism)."""
    layer = model.output_layer
    layer.sequence_parallel = False
    layer.allreduce_dgrad = True


def pad_rows(microbatch: Microbatch, multiple: int) -> Microbatch:
    """`microbatch` with each row padded at its end to a multiple of `multiple` tokens: pad tokens
    (id 0, position 0) that attend only to each other, score nothing and carry no recorded
    experts; the scored and routed rows renumbered for the wider rows. Unchanged when no padding is
    needed."""
    b, s = microbatch.input_ids.shape
    pad = -s % multiple
    if pad == 0:
        return microbatch
    if microbatch.images is not None:
        raise ValueError("sequence parallelism runs text microbatches only; this one carries images")
    width = s + pad
    input_ids = torch.nn.functional.pad(microbatch.input_ids, (0, pad))
    position_ids = torch.nn.functional.pad(microbatch.position_ids, (0, pad))
    return dataclasses.replace(
        microbatch,
        input_ids=input_ids,
        position_ids=position_ids,
        tree=None if microbatch.tree is None else _pad_tree(microbatch.tree, s, width),
        score_rows=_renumber(microbatch.score_rows, s, width),
        routed_experts=None if microbatch.routed_experts is None else _pad_routed(microbatch.routed_experts, b, width),
    )


def _renumber(rows: torch.Tensor, width: int, padded: int) -> torch.Tensor:
    """Rows of a flattened [b, width] array as rows of the same tokens in [b, padded]."""
    return rows // width * padded + rows % width


def _pad_tree(tree: TreeLayout, n: int, width: int) -> TreeLayout:
    """The tree with a chain of pad tokens after its last slot, their own causal chain."""
    device = tree.subtree_end.device
    ends = torch.cat([tree.subtree_end, torch.full((width - n,), width, dtype=tree.subtree_end.dtype, device=device)])
    pads = Segment(n, width, torch.arange(n, width, device=device), None)
    return TreeLayout(ends, [*tree.segments, pads])


def _pad_routed(routed: torch.Tensor, b: int, width: int) -> torch.Tensor:
    """[b * s, ids] recorded experts as [b * width, ids], pad rows -1 (routed by the router)."""
    rows = routed.reshape(b, -1, routed.shape[-1])
    return torch.nn.functional.pad(rows, (0, 0, 0, width - rows.shape[1]), value=-1).reshape(-1, routed.shape[-1])


def scatter(hidden: torch.Tensor) -> torch.Tensor:
    """This rank's slice of the sequence of [s, b, h] hidden states (the gradient gathered back)."""
    from megatron.core import tensor_parallel

    return tensor_parallel.scatter_to_sequence_parallel_region(hidden)


def gather(hidden: torch.Tensor) -> torch.Tensor:
    """The whole sequence from each rank's slice, [s, b, h]. Its gradient is this rank's slice of
    the incoming one, which is whole on every rank: what reads the gathered rows (the output layer
    all-reducing its input's gradient, the value head) gives every rank the same gradient."""
    from megatron.core import tensor_parallel

    return tensor_parallel.gather_from_sequence_parallel_region(hidden, tensor_parallel_output_grad=False)


def rank_slice(rows: int) -> slice:
    """This tensor-parallel rank's rows of a sequence of `rows` (a multiple of the group's size)."""
    from megatron.core import parallel_state

    size = parallel_state.get_tensor_model_parallel_world_size()
    part = rows // size
    start = parallel_state.get_tensor_model_parallel_rank() * part
    return slice(start, start + part)
