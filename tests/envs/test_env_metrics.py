"""`GET /metrics` of the env server: Prometheus text from the server's own registry, so two
servers in one process count apart."""

from __future__ import annotations

import httpx
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4 as PROMETHEUS_TEXT

from roost.envs.client import EnvClient
from roost.envs.episodes import ManagerConfig
from roost.envs.protocol import TextAction
from roost.envs.serve import ServerConfig, serving
from roost.tests.prometheus_samples import sample

TOY = "roost.tests.envs.toy_envs:make_factory"


def _config() -> ServerConfig:
    return ServerConfig(TOY, port=0, manager=ManagerConfig(workers=1, max_episodes=4))


async def test_two_env_servers_in_one_process_keep_their_own_counts():
    async with serving(_config()) as first, serving(_config()) as second, EnvClient(first) as client:
        episode, _ = await client.create()
        await client.step(episode, TextAction("inc"))
        await client.step(episode, TextAction("inc"))
        async with httpx.AsyncClient() as http:
            busy, idle = [await http.get(f"{url}/metrics") for url in (first, second)]
    assert busy.headers["content-type"] == PROMETHEUS_TEXT
    assert sample(busy.text, "roost_env_steps_total") == 2 and sample(idle.text, "roost_env_steps_total") == 0
    assert sample(busy.text, "roost_env_live_episodes") == 1 and sample(idle.text, "roost_env_live_episodes") == 0
    assert sample(busy.text, "roost_env_op_seconds_count", op="step") == 2
    assert sample(idle.text, "roost_env_op_seconds_count", op="step") is None


async def test_a_scraper_that_asks_for_openmetrics_gets_it():
    async with serving(_config()) as url, httpx.AsyncClient() as http:
        answer = await http.get(f"{url}/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"})
    assert answer.headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert answer.text.endswith("# EOF\n")
    assert "roost_env_episodes_started_total 0.0" in answer.text
