"""PPO's critic: a value head `hidden -> 1` on the policy's final hidden states.

    head = ValueHead(spec.hidden_size, lr=1e-3)
    values = head(scored_hidden(model, microbatch, inv_freq))   # one value per scored entry
    loss.backward(); head.step()                                 # Adam, gradients summed over DP

The design verl and OpenRLHF give their critics (a linear value head on a transformer's last hidden
states), put on the policy's own trunk rather than on a second model: a separate critic model
would hold a second copy of the weights, with its optimizer state, and run a second forward over
every batch; this head reads the rows the policy's forward already computes. The value of token t
is read from the row that samples t (the row its logprob comes from): the state before the action,
gathered per sample by the same prefix-tree maps, so a packed tree gives each sample the values a
flat run of it alone would.

The head reads the trunk detached: the value loss trains the head only, so the policy's update is
the one it would be without a critic (and a critic warm-up leaves the policy exactly as it was),
and returns on the scale of the rewards never pull the language model. The head has its own Adam
(its learning rate apart from the policy's, untouched by the policy's warmup and SFT). Under
tensor parallelism the decoder's output is whole on every rank, so every rank holds the whole head
and computes the same values; under data parallelism each rank's loss is its microbatches' share
of the batch mean, and `step` sums the gradients over the data-parallel group first. roost runs no
pipeline parallelism: every rank is the last stage, where the head belongs.
"""

from __future__ import annotations

from typing import Any

import torch


class CriticError(ValueError):
    """A value head cannot be built or restored as asked."""


class ValueHead:
    """A linear value head (fp32, zero-initialised: every value starts at 0, on every rank alike)
    with its own Adam optimizer."""

    def __init__(self, hidden_size: int, lr: float, device: torch.device | str = "cpu") -> None:
        self.linear = torch.nn.Linear(hidden_size, 1, device=device, dtype=torch.float32)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)
        self.optimizer = torch.optim.Adam(self.linear.parameters(), lr=lr)

    def __call__(self, rows: torch.Tensor) -> torch.Tensor:
        """The value of each row of final hidden states, [num_rows]; differentiable in the head only."""
        return self.linear(rows.detach().float())[:, 0]

    def step(self) -> float:
        """Sum the head's gradients over the data-parallel ranks, take one Adam step and clear them;
        the gradient's norm. A rank without microbatches takes part with zero gradients."""
        import torch.distributed as dist
        from megatron.core import parallel_state

        params = list(self.linear.parameters())
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if parallel_state.get_data_parallel_world_size() > 1:
            for p in params:
                dist.all_reduce(p.grad, group=parallel_state.get_data_parallel_group())
        norm = float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def state_dict(self) -> dict[str, Any]:
        """The head's weights and optimizer state, for the trainer's checkpoint."""
        return {"linear": self.linear.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any], source: str) -> None:
        """Restore what `state_dict` gave; a head of another shape (another model's hidden size) is
        refused, never loaded in part or replaced by a fresh one."""
        saved = {name: tuple(t.shape) for name, t in state["linear"].items()}
        expected = {name: tuple(t.shape) for name, t in self.linear.state_dict().items()}
        if saved != expected:
            raise CriticError(
                f"{source} holds a value head of shapes {saved}; this policy's head has {expected} "
                f"(hidden size {self.linear.in_features}): the checkpoint is another model's critic; "
                "resume with the model it was trained on, or start a new run (another output_dir)"
            )
        self.linear.load_state_dict(state["linear"])
        self.optimizer.load_state_dict(state["optimizer"])
