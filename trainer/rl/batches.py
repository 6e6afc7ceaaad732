"""From finished rollout groups to a training batch, read over the gateway's API.

    async with GatewayClient(gateway_url, admin_key=admin_key) as gateway:
        batch = await collect_batch(gateway, group_ids, current_version=7, max_staleness=1)
    batch.groups, batch.counts        # counts: what was left out and why
    batch.refused                     # calls that are not training data, each with why

The trainer never opens the store file: it pages the groups' sessions, each with its outcome and
samples, through `GET /samples` (the gateway builds them with the store's one sample builder), and
`batch_of` keeps what is trained on. `batch_of` takes sessions read from a store file just the
same (`roost.rollout.store.paths.group_training_sessions`), for code that runs where the file is.

Only sessions that finished `ok` are trained on: an episode whose env server died, whose
engine went away (`infra_error`), whose harness failed or hung past its timeout
(`agent_error`, `timeout`) has no reward and is left out, and counted; so is an `ok` episode
that got no reward (`no_reward`: a command harness the env did not end that wrote no reward
file, `reward_source` none). A sample whose
oldest sampled token is more than `max_staleness` weight versions behind the trainer (or
ahead of it: weights lost to a crash) is dropped (`dropped_stale`); the rest are trained on with truncated importance sampling
against the engine's logprobs (the loss's `tis_cap`). A call recorded without token ids or
logprobs (the `openai` pass-through's upstream did not return them) is refused, with every
path through it, and counted (`untrainable_calls`); the run goes on without it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from roost.outcome import EpisodeOutcome, EpisodeStatus
from roost.rollout.store.samples import Refused, Sample, SessionSamples

from ..advantages import Group
from ..sample_sources import group_samples, with_sampled_tokens

if TYPE_CHECKING:
    from roost.rollout.gateway.control.client import GatewayClient


@dataclass
class Batch:
    groups: list[Group]
    counts: dict[str, int] = field(default_factory=dict)
    staleness: list[int] = field(default_factory=list)
    """Staleness of each kept sample, in weight versions."""
    rewards: list[float] = field(default_factory=list)
    """Reward of each kept session (for the step's metrics)."""
    refused: list[Refused] = field(default_factory=list)
    """Calls of kept sessions that are not training data, with why."""
    versions: list[list[int]] = field(default_factory=list)
    """The engine weight versions each kept sample's sampled tokens came from, oldest first
    (two or more: its episode ran on while new weights were loaded)."""
    images: dict[str, bytes] = field(default_factory=dict)
    """The file bytes of every image the kept samples name (`Sample.images`), by sha256."""


def sampled_versions(sample: Sample) -> list[int]:
    """The engine weight versions the sample's sampled tokens came from, oldest first (each
    recorded call carries the version that answered it; a non-numeric one, such as an expert's,
    is no engine version and is left out)."""
    versions = {_version(sample.calls[c].weight_version) for c, m in zip(sample.token_call, sample.loss_mask) if m}
    return sorted(v for v in versions if v is not None)


def staleness(sample: Sample, current_version: int) -> int:
    """How many weight versions behind `current_version` the sample's oldest sampled token is."""
    return _age(sampled_versions(sample), current_version)


def _age(versions: list[int], current_version: int) -> int:
    return current_version - versions[0] if versions else 0


# What vLLM and SGLang call the weights they were started with: the run's starting model,
# version 0 (the embedded engine's own name for it). A restarted engine serves them until the
# run's newest weights are reloaded; its calls in between are that stale.
BOOT_VERSION = "default"


def _version(text: str) -> int | None:
    if text == BOOT_VERSION:
        return 0
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


async def collect_batch(
    gateway: GatewayClient,
    group_ids: Iterable[str],
    *,
    current_version: int,
    max_staleness: int | None,
    page_size: int | None = None,
) -> Batch:
    """The batch of the groups' sessions, read page by page (`page_size` sessions; None: the
    gateway's default) from the gateway's `GET /samples`, with the bytes of the images its samples
    name (`GET /images/{sha256}`, each image once)."""
    sessions = [s async for s in gateway.training_sessions(group_ids, page_size)]
    batch = batch_of(sessions, current_version=current_version, max_staleness=max_staleness)
    named = sorted({sha for group in batch.groups for sample in group.samples for sha in sample.images})
    batch.images = {sha: await gateway.image(sha) for sha in named}
    return batch


def batch_of(sessions: Iterable[SessionSamples], *, current_version: int, max_staleness: int | None) -> Batch:
    """What of these sessions is trained on (in their order), and the counts of what is not."""
    collector = _Collector(current_version, max_staleness)
    for session in sessions:
        collector.add_session(session)
    return collector.batch()


@dataclass
class _Collector:
    """What `collect_batch` has kept so far, and the counts of what it left out."""

    current_version: int
    max_staleness: int | None
    counts: Counter[str] = field(default_factory=Counter)
    samples: list[Sample] = field(default_factory=list)
    ages: list[int] = field(default_factory=list)
    versions: list[list[int]] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)

    def add_session(self, session: SessionSamples) -> None:
        if not _trainable(session.outcome, self.counts):
            return
        self.refused.extend(session.refused)
        before = len(self.samples)
        for sample in with_sampled_tokens(session.samples):
            self.add_sample(sample)
        if len(self.samples) > before:  # a session whose samples were all dropped (stale) is not kept
            self.rewards.append(float(session.outcome.reward))

    def add_sample(self, sample: Sample) -> None:
        versions = sampled_versions(sample)
        age = _age(versions, self.current_version)
        # negative: sampled by weights a crash lost (the run resumed from an older checkpoint)
        if age < 0 or (self.max_staleness is not None and age > self.max_staleness):
            self.counts["dropped_stale"] += 1
            return
        self.samples.append(sample)
        self.ages.append(age)
        self.versions.append(versions)

    def batch(self) -> Batch:
        counts = {**self.counts, "samples": len(self.samples)}
        if self.refused:
            counts["untrainable_calls"] = len(self.refused)
        groups = group_samples(self.samples)
        return Batch(groups, counts, self.ages, self.rewards, refused=self.refused, versions=self.versions)


def _trainable(outcome: EpisodeOutcome | None, counts: Counter[str]) -> bool:
    """Count the session by its outcome; True for one trained on: finished `ok`, with a reward."""
    if outcome is None:
        counts["open"] += 1
        return False
    if outcome.status is EpisodeStatus.OK and outcome.reward is None:
        counts["no_reward"] += 1
        return False
    counts[outcome.status.value] += 1
    return outcome.status is EpisodeStatus.OK
