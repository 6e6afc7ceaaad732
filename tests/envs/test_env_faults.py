"""Environment faults: a worker that dies or an env that raises ends the episode as env_error (5xx),
frees its slot, and leaves the server serving."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import httpx
import pytest

from roost.envs.client import EnvClient
from roost.envs.episodes import EpisodeManager, ManagerConfig
from roost.envs.errors import EnvFaultError
from roost.envs.protocol import TextAction
from roost.envs.serve import ServerConfig, serving
from roost.envs.worker import WorkerConfig
from roost.tests.prometheus_samples import sample

TOY = "roost.tests.envs.toy_envs:make_factory"


@pytest.fixture
async def server():
    async with serving(ServerConfig(TOY, port=0, manager=ManagerConfig(workers=1, max_episodes=2))) as url:
        yield url


async def test_a_crashed_worker_fails_its_episodes_and_frees_their_slots(server: str):
    async with EnvClient(server) as client, httpx.AsyncClient(base_url=server) as raw:
        first, _ = await client.create(task_id="count-0")
        second, _ = await client.create(task_id="count-1")
        assert (await client.step(first, TextAction("inc"))).observation.text == "n=1"
        crash = await raw.post(f"/episodes/{first}/step", json={"action": {"type": "text", "text": "crash"}})
        assert crash.status_code == 500 and crash.json()["error"]["type"] == "env_error"
        assert "died" in crash.json()["error"]["message"]
        for episode in (first, second):  # both lived in the dead worker
            status = await client.status(episode)
            assert status.state == "failed" and "died" in status.error
            with pytest.raises(EnvFaultError):
                await client.step(episode, TextAction("inc"))
        assert (await client.health()).live_episodes == 0
        fresh = [(await client.create())[0] for _ in range(2)]  # both slots are free again
        steps = [await client.step(e, TextAction("inc")) for e in fresh]
        assert [s.observation.text for s in steps] == ["n=1", "n=1"]
        assert sample((await raw.get("/metrics")).text, "roost_env_worker_restarts_total") == 1


async def test_an_env_exception_is_an_env_error_and_frees_the_slot(server: str):
    async with EnvClient(server) as client:
        broken, _ = await client.create()
        other, _ = await client.create()
        with pytest.raises(EnvFaultError, match="RuntimeError: the toy env broke"):
            await client.step(broken, TextAction("boom"))
        assert (await client.status(broken)).state == "failed"
        assert (await client.step(other, TextAction("inc"))).observation.text == "n=1"
        replacement, _ = await client.create()
        assert (await client.status(replacement)).state == "running"


async def test_a_hanging_env_is_killed_after_the_call_timeout():
    config = ServerConfig(TOY, port=0, manager=ManagerConfig(workers=1), call_timeout_s=1.0)
    async with serving(config) as url, EnvClient(url) as client:
        stuck, _ = await client.create()
        with pytest.raises(EnvFaultError, match="did not answer within 1s"):
            await client.step(stuck, TextAction("hang"))
        assert (await client.status(stuck)).state == "failed"
        fresh, _ = await client.create()
        assert (await client.step(fresh, TextAction("inc"))).observation.text == "n=1"


async def test_stopping_the_manager_ends_its_worker_processes():
    manager = EpisodeManager(WorkerConfig(TOY, {}), ManagerConfig(workers=2))
    async with manager:
        processes = [w.process for w in manager.workers]
        assert all(p.poll() is None for p in processes)
    assert all(p.poll() is not None for p in processes)


async def _hosts(client: EnvClient, n: int) -> list[int]:
    """Start `n` episodes and end them again; the pids of the workers that hosted them."""
    created = [await client.create() for _ in range(n)]
    for episode, _ in created:
        await client.delete(episode)
    return [reset.info["pid"] for _, reset in created]


async def _wait_for_health(raw: httpx.AsyncClient, status: int, within_s: float = 30.0) -> httpx.Response:
    deadline = time.monotonic() + within_s
    while (response := await raw.get("/health")).status_code != status:
        assert time.monotonic() < deadline, f"/health still answers {response.status_code}: {response.text}"
        await asyncio.sleep(0.05)
    return response


async def test_an_idle_worker_that_dies_is_replaced_and_health_is_degraded_meanwhile():
    # Workers take a second to load the env, so the replacement's loading shows in /health.
    config = ServerConfig(TOY, {"load_s": 1.0}, port=0, manager=ManagerConfig(workers=2, check_interval_s=0.1))
    async with serving(config) as url, EnvClient(url) as client, httpx.AsyncClient(base_url=url) as raw:
        assert (await raw.get("/health")).json()["workers"] == {"alive": 2, "wanted": 2}
        before = await _hosts(client, 2)
        assert len(set(before)) == 2
        os.kill(before[0], signal.SIGKILL)  # no request in flight: only the pool's own check can notice
        degraded = await _wait_for_health(raw, 503)
        assert degraded.json() == {"status": "degraded", "live_episodes": 0, "workers": {"alive": 1, "wanted": 2}}
        assert (await client.health()).status == "degraded"
        healthy = await _wait_for_health(raw, 200)
        assert healthy.json() == {"status": "ok", "live_episodes": 0, "workers": {"alive": 2, "wanted": 2}}
        assert sample((await raw.get("/metrics")).text, "roost_env_worker_restarts_total") == 1
        after = await _hosts(client, 2)
        assert len(set(after)) == 2 and before[0] not in after  # spread over the survivor and the new one


async def test_a_silent_worker_is_killed_and_its_call_fails_fast():
    config = ServerConfig(TOY, port=0, manager=ManagerConfig(workers=2, check_interval_s=0.1), hang_timeout_s=2.0)
    async with serving(config) as url, EnvClient(url, timeout_s=30) as client, httpx.AsyncClient(base_url=url) as raw:
        episode, reset = await client.create()
        os.kill(reset.info["pid"], signal.SIGSTOP)  # stopped: it answers nothing, not even heartbeats
        with pytest.raises(EnvFaultError, match="sent no heartbeat"):  # long before call_timeout_s (120 s)
            await client.step(episode, TextAction("inc"))
        assert (await client.status(episode)).state == "failed"
        await _wait_for_health(raw, 200)
        assert sample((await raw.get("/metrics")).text, "roost_env_worker_restarts_total") == 1
        fresh, _ = await client.create()
        assert (await client.step(fresh, TextAction("inc"))).observation.text == "n=1"
