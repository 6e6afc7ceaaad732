"""`roost demo`: SFT then GiGPO on ALFWorld on a laptop, with a before/after table.

    roost demo                    # ~15.5 minutes on 2 idle CPU cores (~13 with games cached)
    roost demo --quick            # a few minutes: the same pipeline, cut down
    roost demo --free-replies     # replies not held to the env's admissible commands (the earlier demo)

Everything is the real stack, as `roost train` runs it: an ALFWorld env server (real
TextWorld/PDDL games generated offline, three receptacles a room), the observing expert
(`roost.envs.alfworld.observing_expert`) for demonstrations, a Qwen3-architecture model of ~0.5M
parameters whose byte-level BPE tokenizer is trained here on the expert's transcripts
(ChatML template; saved as an ordinary Hugging Face checkpoint), the embedded engine, the
gateway recording every token, the `tool` agent (plain-text commands: a small model learns
far faster without a tool schema in every prompt; each reply held to the env's admissible
commands, so RL chooses among commands instead of spelling them), and the Megatron trainer on Ray.

 1. games         train and held-out (valid_unseen) games, cached under $ROOST_HOME
 2. demonstrations the observing expert on the train games, with deliberate slips it recovers
                   from (the slips stay in the context, untrained), cached too
 3. model         tokenizer + model built from the transcripts
 4. eval before   held-out success of the untrained model
 5. SFT           NLL on the expert's replies; eval after SFT
 6. RL (GiGPO)    groups of episodes per game through the gateway; groups all won or all lost
                  are left out, in the rest each turn is credited against the group's turns
                  from the same state; each token is trained over the tokens its reply's
                  grammar allowed (a KL term to the SFT policy instead with free replies);
                  eval after RL (evals are seeded: a row depends on the weights alone)
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roost.trainer.recipe import Recipe, validate_recipe

SYSTEM_PROMPT = "You are in a household text game. Reply with exactly one admissible command."


@dataclass(frozen=True)
class DemoConfig:
    train_games: int = 1600
    heldout_games: int = 400
    """Held-out games, one episode each in every eval row; the after-SFT and after-RL rows are
    paired game by game, and this many keep the gain's standard error to a few points."""
    before_episodes: int = 40
    """Held-out games in the untrained model's row (the first ones): it wins only by chance, and
    its episodes run every turn, so a few games say enough and cost little."""
    expert_episodes: int = 1600
    """Observing-expert demonstrations, one per train game: more distinct games generalise better
    than more episodes of fewer games, for the same cost."""
    slips: float = 0.25
    """Chance of a deliberate mistake before an expert turn, which the expert then recovers from;
    the slips stay in the context but are not trained on, so SFT shows recoveries."""
    hidden_size: int = 128
    num_layers: int = 2
    sft_steps: int = 200
    """SFT steps: fewer than SFT alone would take, so the demo's time goes to RL."""
    sft_batch: int = 8
    sft_lr: float = 5e-3
    rl_steps: int = 26
    groups_per_step: int = 12
    group_size: int = 8
    equal_outcomes: str = "drop"
    """`drop`: train only on groups that were both won and lost (DAPO's dynamic sampling). In a
    group all won or all lost the returns differ only by the luck of the step penalties, which
    the group's scaling makes as loud as a win."""
    rl_lr: float = 5e-4
    rl_updates_per_batch: int = 2
    """PPO epochs on each rollout batch: a step's rollouts cost several times one epoch on its
    kept groups, so a second epoch learns more for little time."""
    invalid_action_penalty: float = 0.1
    """Per invalid command, a step reward on the turn that chose it, so a turn that wastes the
    episode's time scores below its peers (success is still what the table reports)."""
    step_weight: float = 1.0
    """GiGPO's weight on the per-turn advantage (0 is GRPO with discounting)."""
    kl_coef: float | None = None
    """KL to the policy after SFT; None: 0 with replies held to the commands, 0.05 with free
    replies. Held replies need none: RL trains the policy the engine samples (`trainer.grammar_mask`:
    each token's logprob over the commands' tokens), which the grammar keeps from drifting, so a
    KL term would only hold it back. Free replies have no grammar to hold them, and drift without
    it."""
    eval_temperature: float = 1.0
    allowed_replies: bool = True
    """Hold each reply to the env's admissible commands (the tool agent's `allowed_replies_from:
    admissible_commands`), in the evals and the RL rollouts alike: no turn is lost to an invalid
    command, and RL chooses among commands instead of learning to spell them, each token trained
    over the commands' tokens (`trainer.grammar_mask`). The runs either way: docs/benchmarks.md."""
    max_turns: int = 15
    seed: int = 0

    @property
    def kl(self) -> float:
        if self.kl_coef is not None:
            return self.kl_coef
        return 0.0 if self.allowed_replies else 0.05

    @classmethod
    def quick(cls) -> DemoConfig:
        # every group kept: two steps of a barely trained model rarely win and lose in one group
        return cls(
            train_games=24,
            heldout_games=16,
            expert_episodes=48,
            sft_steps=60,
            rl_steps=2,
            groups_per_step=4,
            group_size=4,
            equal_outcomes="keep",
        )


def demo_recipe(config: DemoConfig, run_dir: Path, cache_dir: Path) -> Recipe:
    """The demo as a recipe: the same `roost train` pipeline, its sizes chosen for 2 cores."""
    key = hashlib.sha256(
        repr((config.train_games, config.heldout_games, config.expert_episodes, config.slips, config.seed)).encode()
    ).hexdigest()[:12]
    return validate_recipe(
        {
            "name": "demo",
            "description": "SFT → GiGPO on ALFWorld with a small-vocabulary Qwen3 model.",
            "env": {
                "name": "alfworld",
                "split": "train",
                "prepare": "roost.envs.alfworld.prepare:fixtures",
                "prepare_args": {
                    "train": config.train_games,
                    "valid_seen": 0,
                    "valid_unseen": config.heldout_games,
                    "receptacles": 3,
                    "distractors": 2,
                    "seed": config.seed,
                },
                "server": {"workers": 2, "max_episodes": 128},
            },
            "agent": {
                "harness": "tool",
                "tools": False,
                "max_turns": config.max_turns,
                "timeout_s": 300,
                "args": agent_args(config),
            },
            "model": {
                "small_vocab": {
                    "vocab_size": 1024,
                    "hidden_size": config.hidden_size,
                    "intermediate_size": 3 * config.hidden_size,
                    "num_hidden_layers": config.num_layers,
                    "num_attention_heads": 4,
                    "num_key_value_heads": 2,
                    "head_dim": config.hidden_size // 4,
                    "seed": config.seed,
                }
            },
            "engine": {"backend": "embedded", "max_running": 128},
            "sft": {
                "data": {
                    "source": "expert",
                    "episodes": config.expert_episodes,
                    "harness_args": {"order": "random", "slips": config.slips},
                    "cache": str(cache_dir / f"transcripts-{key}.jsonl"),
                },
                "steps": config.sft_steps,
                "batch_size": config.sft_batch,
                "lr": config.sft_lr,
                "warmup_steps": 20,
                "min_lr_ratio": 0.1,
            },
            "trainer": {
                "lr": config.rl_lr,
                "adam_betas": [0.9, 0.95],
                "token_budget": 16384,
                "threads": 2,
                "old_logprobs": "rollout",
                # each episode counts once, however many turns it ran (failures run longest)
                "loss": {
                    "kind": "ppo",
                    "clip_low": 0.2,
                    "clip_high": 0.28,
                    "tis_cap": 2.0,
                    "aggregation": "seq_mean_token_mean",
                    "kl_coef": config.kl,
                },
            },
            # GiGPO: a turn is credited against the group's turns from the same observation, so a
            # good move in a failed episode is not pushed down, nor a wasted turn in a won one
            "algorithm": {
                "advantage": {
                    "name": "gigpo",
                    "options": {
                        "gamma": 0.95,
                        "step_weight": config.step_weight,
                        "equal_outcomes": config.equal_outcomes,
                    },
                },
                "mode": "sync",
                "updates_per_batch": config.rl_updates_per_batch,
            },
            "rollout": {
                "groups_per_step": config.groups_per_step,
                "group_size": config.group_size,
                "concurrency": config.groups_per_step * config.group_size,
                "invalid_action_penalty": config.invalid_action_penalty,
            },
            # seeded: each row is a function of the weights alone, so two rows differ by training,
            # not by the luck of the draw
            "eval": {
                "split": "valid_unseen",
                "episodes": config.heldout_games,
                "before_episodes": min(config.before_episodes, config.heldout_games),
                "args": {"temperature": config.eval_temperature, "seed": config.seed},
            },
            "schedule": {
                "steps": config.rl_steps,
                "checkpoint_every": 0,
                "keep_checkpoints": 1,
                "output_dir": str(run_dir),
                "resume": False,
                "seed": config.seed,
            },
            "placement": {"num_cpus": os.cpu_count() or 2, "trainer_cpus": 1},
            "metrics": {"console": False, "jsonl": True},
        },
        "roost demo",
    )


def agent_args(config: DemoConfig) -> dict[str, Any]:
    args: dict[str, Any] = {"temperature": 1.0, "max_tokens": 12, "system_prompt": SYSTEM_PROMPT}
    if config.allowed_replies:
        # the grammar ends each reply with its command, so the limit only has to fit the longest
        # command (12 tokens cut some short)
        args.update(allowed_replies_from="admissible_commands", max_tokens=32)
    return args


@dataclass
class DemoResult:
    evals: dict[str, dict[str, Any]]
    run_dir: Path
    store: Path
    seconds: float


def run_demo(config: DemoConfig, run_dir: Path, console: Any) -> DemoResult:
    """Run the pipeline with progress bars on `console` (a rich Console)."""
    import time

    from roost.trainer.progress import progress_hooks
    from roost.trainer.rl.loop import train

    started = time.perf_counter()
    home = Path(os.environ.get("ROOST_HOME", Path.home() / ".cache" / "roost")).expanduser()
    shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run each time; games and transcripts stay cached
    recipe = demo_recipe(config, run_dir, home / "demo")
    with progress_hooks(console) as hooks:
        summary = train(recipe, hooks)
    return DemoResult(summary.evals, summary.run_dir, summary.store, time.perf_counter() - started)


def table(result: DemoResult) -> Any:
    from rich.table import Table

    from roost.trainer.eval_compare import paired_gain

    gain = paired_gain(result.evals.get("after_sft", {}), result.evals.get("final", {}))
    out = Table(
        title="held-out success (ALFWorld valid_unseen games)",
        caption=f"RL over SFT: {gain}, paired game by game" if gain else None,
    )
    for column in ("stage", "success rate", "episodes", "mean reward"):
        out.add_column(column)
    for label, name in (("before", "before SFT"), ("after_sft", "after SFT"), ("final", "after RL")):
        row = result.evals.get(label)
        if row is None:
            continue
        rate = row.get("success_rate")
        out.add_row(
            name,
            "n/a" if rate is None else f"{rate:.1%}",
            f"{row['scored']}/{row['episodes']}",
            "n/a" if row.get("mean_reward") is None else f"{row['mean_reward']:.2f}",
        )
    return out
