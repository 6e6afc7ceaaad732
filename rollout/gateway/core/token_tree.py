"""Each agent's token tree: the calls it made, indexed for prefix reuse and fork lookup.

A node is one recorded call: its token path (prompt ids + sampled ids) and the keys of the
messages that produced it. Nodes are found by key (exact continuation of a conversation) or
by longest common token prefix (forks). Two different images become the same placeholder ids,
so a token prefix is shared only up to the first image the two paths carry differently. Memory is bounded: the oldest nodes of an agent
are forgotten past `max_nodes` (they stay in the store; a call continuing one of them is
then recorded as a fork of a newer node or as a root).
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice

import numpy as np

from roost.rollout.store.records import ImageSpan


@dataclass
class Node:
    call_id: str
    path: array  # prompt ids + sampled ids, array('i')
    prompt_len: int
    ends_with_eos: bool
    reply_text: str  # the sampled ids decoded with special tokens kept
    prompt_key: bytes | None = None  # chain key of the call's messages
    reply_key: bytes | None = None  # chain key of its messages + the reply it returned
    render_len: int = 0  # length of the template rendering of its prompt
    render_digest: bytes = b""
    turns_before: int = 0  # end-of-turn markers in that rendering
    images: tuple[ImageSpan, ...] = ()  # the images of its prompt, in token order

    @property
    def path_len(self) -> int:
        return len(self.path)


def common_prefix(a: array, b: array) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    x = np.frombuffer(a, dtype=np.int32, count=n)
    y = np.frombuffer(b, dtype=np.int32, count=n)
    diff = np.flatnonzero(x != y)
    return int(diff[0]) if diff.size else n


def shared_prefix(ids: array, images: Sequence[ImageSpan], node: Node) -> int:
    """How many leading tokens `ids` shares with `node`'s path: equal ids, and up to the first
    image where the two differ (a different image has the same placeholder ids)."""
    n = common_prefix(ids, node.path)
    for mine, theirs in zip(images, node.images):
        if mine.offset >= n:
            break
        if mine != theirs:
            return min(mine.offset, theirs.offset)
    return n


class AgentTree:
    def __init__(self, max_nodes: int = 4096, recent: int = 4):
        self.max_nodes = max_nodes
        self.recent = recent
        self.nodes: OrderedDict[str, Node] = OrderedDict()
        self.by_reply: dict[bytes, Node] = {}
        self.by_prompt: dict[bytes, Node] = {}
        # Calls are planned on the gateway's loop or, when big, on its prepare threads.
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.nodes)

    def add(self, node: Node) -> None:
        with self._lock:
            self.nodes[node.call_id] = node
            if node.reply_key is not None:
                self.by_reply[node.reply_key] = node
            if node.prompt_key is not None:
                self.by_prompt[node.prompt_key] = node
            while len(self.nodes) > self.max_nodes:
                _, old = self.nodes.popitem(last=False)
                if old.reply_key is not None and self.by_reply.get(old.reply_key) is old:
                    del self.by_reply[old.reply_key]
                if old.prompt_key is not None and self.by_prompt.get(old.prompt_key) is old:
                    del self.by_prompt[old.prompt_key]

    def continuation_of(self, chain: list[bytes]) -> tuple[Node, int] | None:
        """The call whose messages + reply are the longest proper prefix of these messages,
        and how many messages that prefix holds."""
        with self._lock:
            for k in range(len(chain) - 2, 0, -1):
                node = self.by_reply.get(chain[k])
                if node is not None:
                    return node, k
        return None

    def related(self, chain: list[bytes]) -> list[Node]:
        """Nodes worth comparing tokens with: those sharing the most messages, and the newest."""
        found: list[Node] = []
        with self._lock:
            for k in range(len(chain) - 1, 0, -1):
                for index in (self.by_prompt, self.by_reply):
                    node = index.get(chain[k])
                    if node is not None and node not in found:
                        found.append(node)
                if found:
                    break
            for node in islice(reversed(self.nodes.values()), self.recent):
                if node not in found:
                    found.append(node)
        return found

    def newest(self) -> list[Node]:
        with self._lock:
            return list(islice(reversed(self.nodes.values()), self.recent))

    @staticmethod
    def best_prefix(ids: array, candidates: list[Node], images: Sequence[ImageSpan] = ()) -> tuple[Node | None, int]:
        """The candidate sharing the longest prefix with `ids` (whose images are `images`)."""
        best, best_len = None, 0
        for node in candidates:
            n = shared_prefix(ids, images, node)
            if n > best_len:
                best, best_len = node, n
        return best, best_len
