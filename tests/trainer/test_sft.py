"""SFT: the NLL loss on loss-masked tokens, the schedule and batch order, the observing expert
(with slips it recovers from) and its transcripts, where slips stay in the context untrained."""

from __future__ import annotations

import torch

from roost.agents.player import PlayerAgent
from roost.envs.alfworld.observing_expert import ObservingExpert, parse_goal
from roost.trainer.losses import LossConfig, SampleTerms, policy_loss
from roost.trainer.recipe import SFTConfig
from roost.trainer.sft.data import ChatRenderer, Transcript, tool_agent_messages
from roost.trainer.sft.train import batch_indices, lr_at


def test_the_sft_loss_is_the_weighted_nll_of_the_sampled_tokens():
    logprobs = torch.tensor([-0.5, -1.5, -2.0], requires_grad=True)
    terms = [SampleTerms(logprobs, logprobs.detach(), torch.zeros(3), torch.zeros(3), weight=0.25)]
    loss, stats = policy_loss(terms, LossConfig(kind="sft"))
    assert float(loss) == 0.25 * 4.0 and stats["tokens"] == 3 and stats["neg_logprob"] == 4.0
    loss.backward()
    assert torch.equal(logprobs.grad, torch.full((3,), -0.25))


def test_warmup_then_cosine_and_every_sample_once_an_epoch():
    config = SFTConfig(steps=100, lr=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, config) == 1e-4 and lr_at(9, config) == 1e-3
    assert abs(lr_at(99, config) - 1e-4) < 2e-6 and lr_at(50, config) < lr_at(20, config)
    epoch = [i for step in range(5) for i in batch_indices(step, 4, 20, seed=3)]
    assert sorted(epoch) == list(range(20)) and epoch != list(range(20))
    assert batch_indices(7, 4, 20, seed=3) == batch_indices(7, 4, 20, seed=3)


def test_slipped_replies_stay_in_the_context_without_loss(tiny_model_path):
    transcript = Transcript(
        "t",
        "You are in the middle of a room.\n\nYour task is to: put a apple in fridge.",
        [
            ("go to fridge 1", "You arrive at fridge 1."),
            ("go to fridge 1", "Invalid action: 'go to fridge 1' is not an admissible command here."),
            ("go to countertop 1", "You arrive at countertop 1."),
        ],
        untrained=[1],
    )
    renderer = ChatRenderer.from_pretrained(tiny_model_path)
    messages = tool_agent_messages(transcript, "Play.", tools=False)
    assert [m["role"] for m in messages] == ["system", "user"] + ["assistant", "user"] * 3
    full = renderer.sample(messages, session_id="a")
    masked = renderer.sample(messages, session_id="b", untrained=transcript.untrained)
    assert full.tokens == masked.tokens and len(full.calls) == 3 and len(masked.calls) == 2
    trained = renderer.tokenizer.decode([t for t, m in zip(masked.tokens, masked.loss_mask) if m])
    assert trained.count("go to fridge 1") == 1 and "countertop" in trained


def test_the_goal_is_read_from_the_observation():
    goal = parse_goal("You are in a room.\n\nYour task is to: heat some egg and put it in diningtable.")
    assert (goal.kind, goal.obj, goal.recep) == ("heat", "egg", "diningtable")
    assert parse_goal("Your task is to: find two cd and put them in safe.").count == 2
    assert parse_goal("Your task is to: examine the alarmclock with the desklamp.").recep == "desklamp"


def test_the_second_object_joins_the_first_in_the_same_receptacle():
    from roost.envs.alfworld.observing_expert import _Memory, next_command

    memory = _Memory(parse_goal("Your task is to: put two cd in shelf."), ["shelf 1", "shelf 2", "desk 1"])
    memory.seen = {
        "shelf 1": "You arrive at shelf 1. On the shelf 1, you see a cd 1.",
        "shelf 2": "You arrive at shelf 2. On the shelf 2, you see a cd 2.",
    }
    memory.target, memory.placed = "shelf 1", 1
    admissible = ["go to shelf 1", "go to desk 1", "take cd 2 from shelf 2", "move cd 3 to shelf 2"]
    assert next_command(memory, "You arrive at shelf 2.", admissible) == "take cd 2 from shelf 2"
    memory.holding = "cd 2"
    assert next_command(memory, "You arrive at shelf 2.", admissible) == "go to shelf 1"
    assert next_command(memory, "You arrive at shelf 1.", ["move cd 2 to shelf 1"]) == "move cd 2 to shelf 1"


async def test_the_observing_expert_wins_every_game_even_with_slips():
    from roost.agents.runner import RunConfig, run_episodes
    from roost.envs.alfworld.fixtures import FixtureSpec, cached_fixtures
    from roost.envs.episodes import EpisodeManager, ManagerConfig
    from roost.envs.worker import WorkerConfig
    from roost.trainer.sft.data import RecordingAgent

    data = cached_fixtures(FixtureSpec())
    manager = EpisodeManager(WorkerConfig("alfworld", {"data_dir": str(data)}), ManagerConfig(workers=2))
    async with manager:
        tasks = await manager.tasks("train")
        agent = RecordingAgent(PlayerAgent(ObservingExpert(order="random", slips=0.3, seed=1)))
        results = await run_episodes(
            tasks, manager, agent, manager.info.tools, RunConfig(concurrency=3, max_turns=40, progress=False)
        )
    assert all(r.success for r in results), [(r.task_id, r.error) for r in results]
    assert all(t.success for t in agent.transcripts)
    slipped = [t for t in agent.transcripts if t.untrained]
    assert slipped and any(obs.startswith("Invalid action:") for t in slipped for _, obs in t.steps)
