"""The gymnasium wrapper, over an in-process env and over a server."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import gymnasium

from roost.envs.episodes import ManagerConfig
from roost.envs.gym_wrapper import GymEnv
from roost.envs.serve import ServerConfig, serving


def _play_expert(env: GymEnv, task_id: str) -> tuple[float, bool]:
    obs, info = env.reset(options={"task_id": task_id, "expert_plan": True})
    assert env.observation_space.contains(obs) and info["tools"][0]["function"]["name"] == "act"
    while True:
        obs, reward, terminated, truncated, info = env.step(info["expert_plan"][0])
        assert env.observation_space.contains(obs)
        if terminated or truncated:
            return reward, terminated


def test_in_process_env_is_a_gymnasium_env(alfworld_data: Path):
    env = GymEnv.make("alfworld", data_dir=str(alfworld_data))
    try:
        assert isinstance(env, gymnasium.Env) and isinstance(env.action_space, gymnasium.spaces.Text)
        task_id = env.tasks("train")[0].id
        assert _play_expert(env, task_id) == (1.0, True)
        env.reset(seed=3)
        obs, reward, terminated, truncated, info = env.step("walk into the wall")
        assert (reward, terminated, truncated) == (0.0, False, False)
        assert "not an admissible command" in obs and info["invalid_action"] == obs
        obs, *_ = env.step({"name": "act", "arguments": '{"command": "look"}'})
        assert "Admissible commands:" in obs
    finally:
        env.close()


def test_gym_env_over_a_server(alfworld_data: Path):
    ready, stop, urls = threading.Event(), threading.Event(), []

    async def serve() -> None:
        config = ServerConfig("alfworld", {"data_dir": str(alfworld_data)}, port=0, manager=ManagerConfig(workers=1))
        async with serving(config) as url:
            urls.append(url)
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)

    thread = threading.Thread(target=asyncio.run, args=(serve(),))
    thread.start()
    try:
        assert ready.wait(60)
        env = GymEnv.connect(urls[0])
        try:
            task_id = env.tasks("valid_seen")[0].id
            assert _play_expert(env, task_id) == (1.0, True)
        finally:
            env.close()
    finally:
        stop.set()
        thread.join(30)
