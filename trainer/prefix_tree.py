"""Prefix-tree packing: the token trie over a microbatch's samples.

Samples of a GRPO group share their prompt; turns of an agentic session share everything
before a fork. The trie over their exact token ids (never text) holds each shared prefix
once. Laid out depth-first, every node's ancestors come before it and its subtree is one
contiguous run `[i, end[i])`, so the tree attention mask is "j is an ancestor of i or i
itself" = `j <= i < end[j]`, and the position id of a node is its depth. The logprob of a
sampled token is read from its parent's hidden state; gather maps carry each sample's
sampled tokens back to those rows, so the loss sees exactly the per-sample values of a
flat layout.

Microbatches are filled to a token budget by first-fit decreasing over trees (one tree per
group, split when a group alone exceeds the budget), then the microbatch's trie is built
over all its samples. `flat_microbatches` lays the same samples out one per row, the
layout the tree must match.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import torch


class PackingError(ValueError):
    """Samples cannot be packed as asked (for instance, one exceeds the token budget)."""


@dataclass
class Segment:
    """A maximal chain of the depth-first layout, slots [start, end), and the slots its
    queries attend to: the ancestors' slots, then its own (causally)."""

    start: int
    end: int
    keys: torch.Tensor
    mask: torch.Tensor | None
    """[end - start, len(keys)] bool, True = may attend; None when keys are the segment itself."""


@dataclass
class TreeLayout:
    """The tree's attention structure: subtree ends (dense mask) and chains (sparse form)."""

    subtree_end: torch.Tensor
    segments: list[Segment]

    def to(self, device: torch.device) -> TreeLayout:
        segments = [
            Segment(g.start, g.end, g.keys.to(device), None if g.mask is None else g.mask.to(device))
            for g in self.segments
        ]
        return TreeLayout(self.subtree_end.to(device), segments)

    def dense_mask(self) -> torch.Tensor:
        """[1, 1, n, n] bool in Megatron's convention: True = may NOT attend. Built on the device
        the layout is on (`Microbatch.to` moves it to the model's), never on the CPU first."""
        index = torch.arange(len(self.subtree_end), device=self.subtree_end.device)
        # node i may attend to node j iff j is i's ancestor or i itself: j <= i < end[j]
        may_attend = (index[None, :] <= index[:, None]) & (index[:, None] < self.subtree_end[None, :])
        return ~may_attend[None, None]


@dataclass(frozen=True)
class ImagePixels:
    """One image as the checkpoint's image processor gives it."""

    pixel_values: torch.Tensor
    """[t * h * w, patch values], as the image processor flattens them."""
    grid: tuple[int, int, int]
    """(t, h, w) patch grid (`image_grid_thw`)."""


@dataclass(frozen=True)
class MicrobatchImages:
    """A microbatch's images, each distinct one (by content address) once, and the hidden rows
    their features fill: `rows[sha][0]` are rows of the flattened [b * s] hidden states, and
    `rows[sha][1]` the index of the image's feature (its merged patch) each row takes. Several
    paths through one image share its rows in a tree; the image is encoded once either way."""

    pixels: dict[str, ImagePixels]
    rows: dict[str, tuple[torch.Tensor, torch.Tensor]]


@dataclass
class Microbatch:
    """One forward pass worth of samples, in tree or flat layout.

    Tree layout: one row, `tree` holds the attention structure. Flat layout: one sample
    per row, causal attention, `tree` is None. Hidden states are read as a flattened
    [b * s, hidden] array: `score_rows[k]` is the row whose next-token distribution scores
    `score_targets[k]`. Sample `sample_index[i]` finds its sampled tokens' logprobs, in
    token order, at `sample_scores[i]` (indices into the scored entries). `score_allowed[k]`
    (a bitmask, `allowed_tokens`) holds the tokens the sampling grammar allowed at entry k, where
    some sample of the microbatch was constrained; None where none was. `routed_experts[r]` (R3)
    holds the experts the engine routed the token at hidden row r to, layers x top_k ids, a row of
    -1 where none was recorded (the router then routes it itself); None when no sample carried
    any. `images` (a vision-language batch) holds its images and the rows their features fill;
    None without images.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    tree: TreeLayout | None
    score_rows: torch.Tensor
    score_targets: torch.Tensor
    sample_index: list[int]
    sample_scores: list[torch.Tensor]
    num_tokens: int
    layout: str
    score_allowed: torch.Tensor | None = None
    routed_experts: torch.Tensor | None = None
    images: MicrobatchImages | None = None

    def to(self, device: torch.device) -> Microbatch:
        """This microbatch with its tensors on `device` (gather maps stay where they are)."""
        if self.input_ids.device == torch.device(device):
            return self
        return Microbatch(
            input_ids=self.input_ids.to(device),
            position_ids=self.position_ids.to(device),
            tree=None if self.tree is None else self.tree.to(device),
            score_rows=self.score_rows.to(device),
            score_targets=self.score_targets.to(device),
            sample_index=self.sample_index,
            sample_scores=self.sample_scores,
            num_tokens=self.num_tokens,
            layout=self.layout,
            score_allowed=None if self.score_allowed is None else self.score_allowed.to(device),
            routed_experts=None if self.routed_experts is None else self.routed_experts.to(device),
            images=self.images,
        )

    @property
    def attention_mask(self) -> torch.Tensor | None:
        """The dense mask ([1, 1, n, n], True = masked) for trees; None (causal) for flat rows."""
        return None if self.tree is None else self.tree.dense_mask()

    def sample_logprobs(self, scored_logprobs: torch.Tensor) -> list[torch.Tensor]:
        """Per-sample logprobs of the sampled tokens, from the scored entries."""
        return [scored_logprobs[index.to(scored_logprobs.device)] for index in self.sample_scores]


@dataclass
class _Trie:
    tokens: list[int]
    parent: list[int]
    children: list[dict[Hashable, int]]

    @classmethod
    def empty(cls) -> _Trie:
        return cls(tokens=[], parent=[], children=[])

    def insert(
        self, sequence: Sequence[int], roots: dict[Hashable, int], keys: Sequence[Hashable] | None = None
    ) -> list[int]:
        """Add a sequence; return the node of each of its tokens. Two tokens share a node where
        their prefixes' keys match (`keys[i]`, the token itself when None)."""
        path = []
        level = roots
        parent = -1
        for token, key in zip(sequence, sequence if keys is None else keys, strict=True):
            node = level.get(key)
            if node is None:
                node = len(self.tokens)
                self.tokens.append(token)
                self.parent.append(parent)
                self.children.append({})
                level[key] = node
            path.append(node)
            parent = node
            level = self.children[node]
        return path


def trie_size(sequences: Sequence[Sequence[int]]) -> int:
    """Number of unique prefixes (= tree tokens) over the sequences."""
    trie = _Trie.empty()
    roots: dict[Hashable, int] = {}
    for sequence in sequences:
        trie.insert(sequence, roots)
    return len(trie.tokens)


def _depth_first(trie: _Trie, roots: dict[Hashable, int]) -> tuple[list[int], list[int]]:
    """Depth-first order of the nodes and each node's subtree end in that order."""
    order: list[int] = []
    end = [0] * len(trie.tokens)
    stack: list[tuple[int, bool]] = [(node, False) for node in reversed(list(roots.values()))]
    while stack:
        node, done = stack.pop()
        if done:
            end[node] = len(order)
            continue
        order.append(node)
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(list(trie.children[node].values())))
    return order, end


def tree_microbatch(
    sequences: Sequence[Sequence[int]],
    scored: Sequence[Sequence[int]],
    sample_index: Sequence[int],
    allowed: Sequence[torch.Tensor | None] | None = None,
    keys: Sequence[Sequence[Hashable]] | None = None,
    mrope_positions: Sequence[torch.Tensor] | None = None,
    routing: Sequence[Sequence[Sequence[int]] | None] | None = None,
    images: Mapping[str, ImagePixels] | None = None,
) -> Microbatch:
    """Pack sequences into one depth-first token trie.

    A vision-language batch gives `keys[i]`, a key per token of sequence i that tells image
    tokens apart (their ids are one placeholder id whatever the image: key them by the image's
    content hash and the token's index in it), and `mrope_positions[i]` ([3, len]), its
    multimodal RoPE positions; a node's positions depend only on its prefix, so they are the
    same on every path through it, and the microbatch's `position_ids` are [3, 1, n]. An image
    token's key is the pair (image sha256, index of the token in the image's run); `images` maps
    each sha256 that keys name to its pixels (`MicrobatchImages`).

    `scored[i]` lists the token positions of sequence i whose logprob is needed (its
    sampled tokens; never position 0); `allowed[i]`, when given, the bitmask of the tokens its
    grammar allowed at each (a row per position; None: a free reply). Two samples share a scored
    node only where they also share its allowed tokens.

    `routing[i]`, when given, is sequence i's recorded experts (`Sample.routed_experts`; None: none
    recorded). A shared node takes the first recorded row of the sequences through it: a prefix
    the engine ran for several calls routes alike in each, up to rounding in its batches.
    """
    trie = _Trie.empty()
    roots: dict[Hashable, int] = {}
    paths = [trie.insert(sequence, roots, None if keys is None else keys[i]) for i, sequence in enumerate(sequences)]
    order, end = _depth_first(trie, roots)
    slot = [0] * len(order)
    for position, node in enumerate(order):
        slot[node] = position
    n = len(order)
    tokens = torch.tensor([trie.tokens[node] for node in order], dtype=torch.long)
    parent = torch.tensor([slot[trie.parent[node]] if trie.parent[node] >= 0 else -1 for node in order])
    depth = torch.zeros(n, dtype=torch.long)
    for position in range(n):  # parents precede children in depth-first order
        if parent[position] >= 0:
            depth[position] = depth[parent[position]] + 1
    subtree_end = torch.tensor([end[node] for node in order], dtype=torch.long)

    masks = _masks(scored, allowed)
    score_slot: dict[tuple[int, bytes | None], int] = {}
    mask_rows: list[torch.Tensor | None] = []
    sample_scores = []
    for path, positions, rows in zip(paths, scored, masks):
        entries = []
        for k, position in enumerate(positions):
            if position <= 0:
                raise PackingError("position 0 cannot be scored: no token precedes it")
            row = None if rows is None else rows[k]
            key = (slot[path[position]], None if row is None else row.numpy().tobytes())
            if key not in score_slot:
                score_slot[key] = len(score_slot)
                mask_rows.append(row)
            entries.append(score_slot[key])
        sample_scores.append(torch.tensor(entries, dtype=torch.long))
    scored_nodes = torch.tensor([node for node, _ in score_slot], dtype=torch.long)
    rows = [[slot[node] for node in path] for path in paths]
    return Microbatch(
        input_ids=tokens[None, :],
        position_ids=depth[None, :] if mrope_positions is None else _tree_positions(mrope_positions, paths, slot, n),
        tree=TreeLayout(subtree_end, _segments(parent.tolist())),
        score_rows=parent[scored_nodes] if len(scored_nodes) else scored_nodes,
        score_targets=tokens[scored_nodes] if len(scored_nodes) else scored_nodes,
        sample_index=list(sample_index),
        sample_scores=sample_scores,
        num_tokens=n,
        layout="tree",
        score_allowed=_stack(mask_rows, masks),
        routed_experts=_routing_rows(routing, rows, n),
        images=_image_rows(keys, rows, images),
    )


def _image_rows(
    keys: Sequence[Sequence[Hashable]] | None, rows: list[list[int]], images: Mapping[str, ImagePixels] | None
) -> MicrobatchImages | None:
    """The microbatch's images and the rows each fills (`rows[i][p]`: the hidden row of sequence i's
    token p), read from the image tokens' (sha256, index) keys; None when no key names an image or
    no pixels are given (a packing that needs only the layout)."""
    if images is None:
        return None
    found: dict[str, dict[int, int]] = defaultdict(dict)
    for own_keys, where in zip(keys or [], rows):
        for key, row in zip(own_keys, where):
            if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str):
                found[key[0]][row] = int(key[1])
    if not found:
        return None
    missing = sorted(set(found) - set(images))
    if missing:
        raise PackingError(
            f"image tokens key image(s) {[sha[:12] for sha in missing]} whose pixels were not given: pass each "
            "image the keys name in `images`, by its sha256"
        )
    return MicrobatchImages(
        pixels={sha: images[sha] for sha in found},
        rows={
            sha: (torch.tensor(list(at), dtype=torch.long), torch.tensor(list(at.values()), dtype=torch.long))
            for sha, at in found.items()
        },
    )


def _routing_rows(
    routing: Sequence[Sequence[Sequence[int]] | None] | None, rows: list[list[int]], n: int
) -> torch.Tensor | None:
    """[n, layers x top_k] recorded expert ids by hidden row (`rows[i][p]`: the row of sequence i's
    token p), -1 where none was recorded; the first recorded row of a row wins. None when no
    sequence carries any."""
    given = [(r, own) for r, own in zip(rows, routing or []) if own is not None]
    width = next((len(row) for _, own in given for row in own if len(row)), 0)
    if not width:
        return None
    out = torch.full((n, width), -1, dtype=torch.long)
    filled = torch.zeros(n, dtype=torch.bool)
    for where, own in given:
        if len(own) != len(where):
            raise PackingError(f"{len(own)} routed-expert rows for a sequence of {len(where)} tokens")
        for row, ids in zip(where, own):
            if len(ids) and not filled[row]:
                if len(ids) != width:
                    raise PackingError(f"a token's routed experts hold {len(ids)} ids, another's {width}")
                out[row] = torch.tensor(ids, dtype=torch.long)
                filled[row] = True
    return out


def _tree_positions(
    mrope_positions: Sequence[torch.Tensor], paths: list[list[int]], slot: list[int], n: int
) -> torch.Tensor:
    """Each tree slot's 3-D positions, [3, 1, n], from any sequence through it; a sequence
    that disagrees with another on a shared node is a packing error (its keys were too coarse)."""
    positions = torch.full((3, n), -1, dtype=torch.long)
    for path, own in zip(paths, mrope_positions, strict=True):
        where = torch.tensor([slot[node] for node in path], dtype=torch.long)
        seen = positions[:, where]
        if ((seen >= 0) & (seen != own)).any():
            raise PackingError("two sequences give a shared token different multimodal RoPE positions")
        positions[:, where] = own.long()
    return positions[:, None, :]


def _masks(scored: Sequence[Sequence[int]], allowed: Sequence[torch.Tensor | None] | None) -> list[torch.Tensor | None]:
    masks = list(allowed) if allowed is not None else [None] * len(scored)
    for positions, rows in zip(scored, masks):
        if rows is not None and len(rows) != len(positions):
            raise PackingError(f"{len(rows)} allowed-token rows for {len(positions)} scored positions")
    return masks


def _stack(rows: list[torch.Tensor | None], masks: list[torch.Tensor | None]) -> torch.Tensor | None:
    """The scored entries' bitmask rows (every token allowed where a reply was free); None when no
    sample was constrained."""
    given = next((m for m in masks if m is not None), None)
    if given is None:
        return None
    every = torch.full((given.shape[1],), -1, dtype=torch.int32)
    return torch.stack([every if row is None else row for row in rows]) if rows else given[:0]


def _segments(parent: list[int]) -> list[Segment]:
    """Split the depth-first layout into chains; each attends to its ancestors' slots."""
    starts = [i for i in range(len(parent)) if i == 0 or parent[i] != i - 1]
    bounds = list(zip(starts, starts[1:] + [len(parent)]))
    segment_of = {}
    for number, (start, end) in enumerate(bounds):
        segment_of.update(dict.fromkeys(range(start, end), number))
    segments = []
    for start, end in bounds:
        ranges = [(start, end)]
        node = parent[start]
        while node >= 0:
            chain_start = bounds[segment_of[node]][0]
            ranges.append((chain_start, node + 1))
            node = parent[chain_start]
        ranges.reverse()
        keys = torch.cat([torch.arange(a, b) for a, b in ranges])
        prefix = len(keys) - (end - start)
        mask = None
        if prefix:
            own = torch.ones(end - start, end - start, dtype=torch.bool).tril()
            mask = torch.cat([torch.ones(end - start, prefix, dtype=torch.bool), own], dim=1)
        segments.append(Segment(start, end, keys, mask))
    return segments


def flat_microbatch(
    sequences: Sequence[Sequence[int]],
    scored: Sequence[Sequence[int]],
    sample_index: Sequence[int],
    allowed: Sequence[torch.Tensor | None] | None = None,
    pad_id: int = 0,
    routing: Sequence[Sequence[Sequence[int]] | None] | None = None,
    keys: Sequence[Sequence[Hashable]] | None = None,
    mrope_positions: Sequence[torch.Tensor] | None = None,
    images: Mapping[str, ImagePixels] | None = None,
) -> Microbatch:
    """Lay sequences out one per row (right-padded), causal attention: the reference layout;
    `routing`, `keys`, `mrope_positions` and `images` as in `tree_microbatch` (`position_ids` are
    then [3, b, width], padding at 0)."""
    masks = _masks(scored, allowed)
    width = max(len(sequence) for sequence in sequences)
    rows = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    score_rows: list[int] = []
    score_targets: list[int] = []
    sample_scores = []
    for row, (sequence, positions) in enumerate(zip(sequences, scored)):
        rows[row, : len(sequence)] = torch.tensor(list(sequence), dtype=torch.long)
        start = len(score_rows)
        for position in positions:
            if position <= 0:
                raise PackingError("position 0 cannot be scored: no token precedes it")
            score_rows.append(row * width + position - 1)
            score_targets.append(sequence[position])
        sample_scores.append(torch.arange(start, len(score_rows)))
    hidden_rows = [[row * width + p for p in range(len(sequence))] for row, sequence in enumerate(sequences)]
    return Microbatch(
        input_ids=rows,
        position_ids=_flat_positions(mrope_positions, len(sequences), width),
        tree=None,
        score_rows=torch.tensor(score_rows, dtype=torch.long),
        score_targets=torch.tensor(score_targets, dtype=torch.long),
        sample_index=list(sample_index),
        sample_scores=sample_scores,
        num_tokens=sum(len(sequence) for sequence in sequences),
        layout="flat",
        score_allowed=_stack(
            [
                row
                for positions, rows in zip(scored, masks)
                for row in (rows if rows is not None else [None] * len(positions))
            ],
            masks,
        ),
        routed_experts=_routing_rows(routing, hidden_rows, len(sequences) * width),
        images=_image_rows(keys, hidden_rows, images),
    )


def _flat_positions(mrope_positions: Sequence[torch.Tensor] | None, b: int, width: int) -> torch.Tensor:
    """[b, width] token indices, or each row's 3-D positions [3, b, width] (padding at 0)."""
    if mrope_positions is None:
        return torch.arange(width).expand(b, width).contiguous()
    out = torch.zeros(3, b, width, dtype=torch.long)
    for row, own in enumerate(mrope_positions):
        out[:, row, : own.shape[1]] = own.long()
    return out


def plan_microbatches(sequences: Sequence[Sequence[int]], groups: Sequence[str], token_budget: int) -> list[list[int]]:
    """Assign sequences to microbatches of at most `token_budget` tree tokens.

    One tree per group (sequences of a group share prefixes); a group whose tree exceeds
    the budget is split into several trees of neighbouring sequences. Trees are placed
    first-fit decreasing. Returns sequence indices per microbatch.
    """
    for index, sequence in enumerate(sequences):
        if len(sequence) > token_budget:
            raise PackingError(
                f"sample {index} has {len(sequence)} tokens, over the microbatch token budget of "
                f"{token_budget}; raise the budget or cap the rollout length (max_new_tokens, turns)"
            )
    by_group: dict[str, list[int]] = defaultdict(list)
    for index, group in enumerate(groups):
        by_group[group].append(index)
    trees: list[tuple[int, list[int]]] = []
    for members in by_group.values():
        trees.extend(_split_group(sequences, members, token_budget))
    trees.sort(key=lambda tree: -tree[0])
    bins: list[list[int]] = []
    loads: list[int] = []
    for size, members in trees:
        for b, load in enumerate(loads):
            if load + size <= token_budget:
                bins[b].extend(members)
                loads[b] += size
                break
        else:
            bins.append(list(members))
            loads.append(size)
    return [sorted(members) for members in bins]


def _split_group(
    sequences: Sequence[Sequence[int]], members: list[int], token_budget: int
) -> list[tuple[int, list[int]]]:
    ordered = sorted(members, key=lambda index: list(sequences[index]))
    trees: list[tuple[int, list[int]]] = []
    current: list[int] = []
    trie, roots = _Trie.empty(), {}
    for index in ordered:
        before = len(trie.tokens)
        trie.insert(sequences[index], roots)
        if len(trie.tokens) > token_budget and current:
            trees.append((before, current))
            trie, roots = _Trie.empty(), {}
            trie.insert(sequences[index], roots)
            current = []
        current.append(index)
    if current:
        trees.append((len(trie.tokens), current))
    return trees


def build_microbatches(
    sequences: Sequence[Sequence[int]],
    scored: Sequence[Sequence[int]],
    groups: Sequence[str],
    token_budget: int,
    layout: str = "tree",
    allowed: Sequence[torch.Tensor | None] | None = None,
    routing: Sequence[Sequence[Sequence[int]] | None] | None = None,
    keys: Sequence[Sequence[Hashable]] | None = None,
    mrope_positions: Sequence[torch.Tensor] | None = None,
    images: Mapping[str, ImagePixels] | None = None,
) -> list[Microbatch]:
    """Plan and pack microbatches in the `tree` or `flat` layout (same token budget); `allowed`,
    `routing`, `keys`, `mrope_positions` and `images` as in `tree_microbatch`."""
    if layout == "tree":
        plan = plan_microbatches(sequences, groups, token_budget)
        make = tree_microbatch
    elif layout == "flat":
        plan = _plan_flat(sequences, token_budget)
        make = flat_microbatch
    else:
        raise ValueError(f"unknown layout {layout!r}; use 'tree' or 'flat'")
    masks = _masks(scored, allowed)
    routes = list(routing) if routing is not None else [None] * len(sequences)
    return [
        make(
            [sequences[i] for i in ids],
            [scored[i] for i in ids],
            ids,
            [masks[i] for i in ids],
            routing=[routes[i] for i in ids],
            keys=None if keys is None else [keys[i] for i in ids],
            mrope_positions=None if mrope_positions is None else [mrope_positions[i] for i in ids],
            images=images,
        )
        for ids in plan
    ]


def _plan_flat(sequences: Sequence[Sequence[int]], token_budget: int) -> list[list[int]]:
    plan: list[list[int]] = []
    width = 0
    for index in sorted(range(len(sequences)), key=lambda i: -len(sequences[i])):
        length = len(sequences[index])
        if length > token_budget:
            raise PackingError(f"sample {index} has {length} tokens, over the token budget of {token_budget}")
        if plan and max(width, length) * (len(plan[-1]) + 1) <= token_budget:
            plan[-1].append(index)
            width = max(width, length)
        else:
            plan.append([index])
            width = length
    return [sorted(ids) for ids in plan]
