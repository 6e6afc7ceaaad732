"""The env server's OpenAPI document: schemathesis finds no server error and no answer that
differs from it (a bounded number of generated cases per operation, against a real server
hosting the toy counter env)."""

from __future__ import annotations

import asyncio
import threading

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode, checks

from roost.envs.episodes import ManagerConfig
from roost.envs.serve import ServerConfig, serving

TOY = "roost.tests.envs.toy_envs:make_factory"
CASES = 50  # per operation (100 ran clean too)
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
]
OPERATIONS = [
    "POST /episodes",
    "POST /episodes/{episode_id}/step",
    "GET /episodes/{episode_id}",
    "DELETE /episodes/{episode_id}",
    "GET /episodes/{episode_id}/workspace",
    "GET /tasks",
    "GET /info",
    "GET /health",
    "GET /metrics",
]


class ServerThread:
    """The env server on its own event loop in a thread, so the sync schemathesis client can call it."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.url: str | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with serving(self.config) as url:
            self.url = url
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> str:
        self._thread.start()
        if not self._ready.wait(120):
            raise TimeoutError("the env server did not start within 120 s")
        return self.url

    def __exit__(self, *exc: object) -> None:
        self._stop._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@pytest.fixture(scope="module")
def server():
    config = ServerConfig(TOY, port=0, manager=ManagerConfig(workers=1, max_episodes=256, lease_s=30))
    with ServerThread(config) as url:
        yield url


def test_every_route_is_documented(server):
    schema = schemathesis.openapi.from_url(f"{server}/openapi.json")
    assert sorted(op.label for op in (result.ok() for result in schema.get_all_operations())) == sorted(OPERATIONS)


@pytest.mark.parametrize("label", OPERATIONS)
def test_generated_requests_get_documented_answers_and_no_server_error(label, server):
    import httpx

    operation = schemathesis.openapi.from_url(f"{server}/openapi.json").find_operation_by_label(label)
    episode = httpx.post(f"{server}/episodes", json={"task_id": "count-0"}).json()["episode_id"]
    random = [operation.as_strategy(mode) for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)]
    aimed = (
        operation.as_strategy(GenerationMode.POSITIVE, path_parameters={"episode_id": episode})
        if "{episode_id}" in operation.path
        else random[0]
    )

    @given(st.one_of(*random, aimed))
    @settings(
        max_examples=CASES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
    )  # no shrinking: it calls the server
    def check(case):
        response = case.call(base_url=server, timeout=30)
        case.validate_response(response, checks=CHECKS)

    check()
    httpx.delete(f"{server}/episodes/{episode}")
