"""The run's engine pool with two engines behind a real gateway, one of them on "another node"
(`away`: it cannot read the weights' folder). A restart of that one cannot reload the newest
weights: it takes itself out of the gateway's rotation (`stale`), and the pool's next check sends
it the weights, after which the gateway takes it back. The engine on the loop's node reloads
them itself."""

from __future__ import annotations

import time

import httpx
import pytest

from roost.rollout.engine.server_config import EngineServerConfig
from roost.rollout.gateway.config import GatewayConfig
from roost.rollout.gateway.launch import GatewayThread
from roost.rollout.keys import ENGINE_KEY, bearer, new_key
from roost.tests.trainer.test_rl_loop import local_ray  # noqa: F401 (a fixture)
from roost.trainer.rl.engine_pool import EnginePool, SyncTarget
from roost.trainer.rl.replicas import Replica
from roost.trainer.rl.services import ServiceActor, server_command
from roost.trainer.weight_sync import sync_weights

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def engines_view(gateway_url: str, admin_key: str) -> dict[str, tuple[str, str]]:
    """Each engine behind the gateway: its state and the weight version it reported."""
    answer = httpx.get(f"{gateway_url}/admin/engines", headers=bearer(admin_key)).json()
    return {e["url"]: (e["state"], e["weight_version"]) for e in answer["engines"]}


def wait_for(predicate, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def no_replacement(index: int, avoid: set[str]) -> Replica:
    raise AssertionError(f"engine {index} was replaced, though its actor is alive")


def test_a_restarted_engine_away_from_the_weights_leaves_rotation_until_the_pool_sends_them(
    tiny_model_path,
    tmp_path,
    local_ray,  # noqa: F811
):
    import asyncio

    import ray

    key = new_key(ENGINE_KEY)
    config = EngineServerConfig(model=str(tiny_model_path), port=0)
    actor = ray.remote(ServiceActor).options(num_cpus=0, max_concurrency=4)
    local, away = (
        actor.remote(
            name, server_command("engine"), "127.0.0.1", 0, str(tmp_path / "logs"), {ENGINE_KEY.env: key}, config
        )
        for name in ("engine", "engine-1")
    )
    urls = ray.get([local.start.remote(), away.start.remote()])
    gateway_config = GatewayConfig(
        engine_urls=urls,
        model=str(tiny_model_path),
        store_path=tmp_path / "s.sqlite",
        engine_key=key,
        engine_probe_s=0.2,
    )
    try:
        with GatewayThread(gateway_config) as gateway_url:

            def view() -> dict[str, tuple[str, str]]:
                return engines_view(gateway_url, gateway_config.admin_key)

            target = SyncTarget(key, gateway_url, gateway_config.admin_key, "http")
            pool = EnginePool(
                [Replica(0, urls[0], local), Replica(1, urls[1], away, away=True)], no_replacement, target
            )
            common = dict(transport="http", engine_key=key, gateway_url=gateway_url, admin_key=gateway_config.admin_key)
            asyncio.run(sync_weights(pool.url, tiny_model_path, weight_version="7", **common))
            pool.loaded(str(tiny_model_path), "7", None)
            assert view() == {urls[0]: ("up", "7"), urls[1]: ("up", "7")}

            ray.get(away.kill.remote())
            # back on its port with its starting weights, and out of rotation until it has the newest
            wait_for(lambda: ray.get(away.restarts.remote()) == 1 and ray.get(away.wait_serving.remote(0)), 120)
            assert view()[urls[1]][0] == "stale"
            assert view()[urls[0]] == ("up", "7")

            pool.ensure_serving(print)
            assert httpx.get(f"{urls[1]}/get_model_info").json()["weight_version"] == "7"
            wait_for(lambda: view()[urls[1]] == ("up", "7"))  # the gateway's probe took it back

            ray.get(local.kill.remote())  # on the loop's node: it reloads the weights itself
            wait_for(lambda: ray.get(local.restarts.remote()) == 1 and ray.get(local.wait_serving.remote(0)), 120)
            assert httpx.get(f"{urls[0]}/get_model_info").json()["weight_version"] == "7"
    finally:
        for handle in (local, away):
            ray.get(handle.stop.remote())
            ray.kill(handle)
