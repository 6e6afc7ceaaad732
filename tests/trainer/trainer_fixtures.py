"""Sample batches of known shape for the trainer tests."""

from __future__ import annotations

import random

from roost.rollout.store.samples import CallRef, Sample


def rand_tokens(rng: random.Random, n: int, vocab: int = 151936) -> list[int]:
    return [rng.randrange(vocab) for _ in range(n)]


def grpo_batch(
    seed: int = 0, groups: int = 2, size: int = 4, prompt: int = 24, answer: int = 8, vocab: int = 151936
) -> list[Sample]:
    """Groups of rollouts sharing a prompt; some answers share their first tokens."""
    rng = random.Random(seed)
    out = []
    for g in range(groups):
        head = rand_tokens(rng, prompt, vocab)
        shared = rand_tokens(rng, 3, vocab)
        for i in range(size):
            ans = (shared if i % 2 else []) + rand_tokens(rng, answer - (3 if i % 2 else 0), vocab)
            lps = [-rng.random() * 3 for _ in ans]
            out.append(
                Sample.from_turns(
                    [(head, ans, lps)], session_id=f"g{g}s{i}", group_id=f"g{g}", reward=float(rng.randint(0, 3))
                )
            )
    return out


def agentic_batch(seed: int = 1, vocab: int = 151936) -> list[Sample]:
    """Branching multi-turn, multi-agent sessions: each session's planner forks once, and a
    solver agent (its own prompt) runs two turns; two sessions share a group."""
    rng = random.Random(seed)
    system = rand_tokens(rng, 10, vocab)
    out = []
    for s in range(2):
        task = system + rand_tokens(rng, 6, vocab)
        turn1 = (task, rand_tokens(rng, 5, vocab), None)
        obs = rand_tokens(rng, 4, vocab)
        reward = float(s)
        for branch in range(2):  # the planner's history forks after turn 1
            turn2 = (obs + rand_tokens(rng, branch + 1, vocab), rand_tokens(rng, 4, vocab), None)
            turn3 = (rand_tokens(rng, 3, vocab), rand_tokens(rng, 6, vocab), None)
            turns = [(c, a, [-rng.random() for _ in a]) for c, a, _ in (turn1, turn2, turn3)]
            out.append(
                Sample.from_turns(turns, session_id=f"a{s}", group_id="agentic", agent_id="planner", reward=reward)
            )
        solver = [
            (system + rand_tokens(rng, 5, vocab), rand_tokens(rng, 7, vocab), None),
            (rand_tokens(rng, 3, vocab), rand_tokens(rng, 5, vocab), None),
        ]
        out.append(
            Sample.from_turns(
                [(c, a, [-rng.random() for _ in a]) for c, a, _ in solver],
                session_id=f"a{s}",
                group_id="agentic",
                agent_id="solver",
                reward=1.0 - reward,
            )
        )
    return out


COMMANDS = ["go to cabinet 1", "go to cabinet 2", "open drawer 3", "take apple 1 from countertop 2"]


def constrained_group(checkpoint, seed: int = 2) -> list[Sample]:
    """A GRPO group whose replies were held to `COMMANDS` (`choice`): each reply is a command's
    tokens and the end-of-sequence token, as the engine samples them under that grammar."""
    from transformers import AutoTokenizer

    from roost.rollout.engine.model_spec import ModelSpec

    rng = random.Random(seed)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    eos = ModelSpec.from_folder(checkpoint).eos_token_ids[0]
    head = rand_tokens(rng, 16)
    out = []
    for i, command in enumerate(COMMANDS):
        reply = tokenizer.encode(command, add_special_tokens=False) + [eos]
        sample = Sample.from_turns(
            [(head, reply, [-rng.random() for _ in reply])],
            session_id=f"c{i}",
            group_id="commands",
            reward=float(i % 2),
        )
        sample.calls[0] = CallRef(sample.calls[0].call_id, "0", constraint=("choice", COMMANDS))
        out.append(sample)
    return out


def make_sample(
    tokens,
    mask,
    reward=1.0,
    session="s",
    group="g",
    agent="main",
    calls=None,
    token_call=None,
    logprobs=None,
    advantages=None,
) -> Sample:
    calls = calls or [CallRef(call_id=f"{session}/{agent}/0", weight_version="0")]
    return Sample(
        session_id=session,
        group_id=group,
        agent_id=agent,
        tokens=list(tokens),
        loss_mask=list(mask),
        rollout_logprobs=logprobs or [-1.0 * m for m in mask],
        token_call=token_call or [0 if m else -1 for m in mask],
        calls=calls,
        reward=reward,
        advantages=advantages,
    )
