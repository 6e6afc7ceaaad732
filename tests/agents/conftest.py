"""Fixtures of the agent tests: ALFWorld fixture games and a real gateway on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest

from roost.envs.alfworld.fixtures import FixtureSpec, cached_fixtures
from roost.rollout.keys import ADMIN_KEY, new_key


@pytest.fixture(scope="session")
def alfworld_data() -> Path:
    return cached_fixtures(FixtureSpec())


def start_gateway(engine_url: str, store: Path, admin_key: str, **settings):
    """A real gateway (embedded backend, tiny model's template) in a background thread;
    `settings`: more of its `GatewayConfig`."""
    from roost.rollout.gateway.config import GatewayConfig
    from roost.rollout.gateway.launch import GatewayThread

    return GatewayThread(
        GatewayConfig(engine_url=engine_url, model="tiny", store_path=store, port=0, admin_key=admin_key, **settings)
    )


@pytest.fixture
def admin_key() -> str:
    """The admin key of this test's `scripted_gateway` or `model_gateway`."""
    return new_key(ADMIN_KEY)


@pytest.fixture
def scripted_gateway(scripted_engine_url: str, tmp_path: Path, admin_key: str):
    with start_gateway(scripted_engine_url, tmp_path / "trajectories.sqlite", admin_key) as url:
        yield url


@pytest.fixture
def model_gateway(engine_url: str, tmp_path: Path, admin_key: str):
    with start_gateway(engine_url, tmp_path / "trajectories.sqlite", admin_key) as url:
        yield url
