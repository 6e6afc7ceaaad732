"""Fixtures of the agent tests: ALFWorld fixture games and a real gateway on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest
from roost.envs.alfworld.fixtures import FixtureSpec, cached_fixtures


@pytest.fixture(scope="session")
def alfworld_data() -> Path:
    return cached_fixtures(FixtureSpec())


def start_gateway(engine_url: str, store: Path):
    """A real gateway (embedded backend, tiny model's template) in a background thread."""
    from roost.rollout.gateway.config import GatewayConfig
    from roost.rollout.gateway.launch import GatewayThread

    return GatewayThread(GatewayConfig(engine_url=engine_url, model="tiny", store_path=store, port=0))


@pytest.fixture
def scripted_gateway(scripted_engine_url: str, tmp_path: Path):
    with start_gateway(scripted_engine_url, tmp_path / "trajectories.sqlite") as url:
        yield url


@pytest.fixture
def model_gateway(engine_url: str, tmp_path: Path):
    with start_gateway(engine_url, tmp_path / "trajectories.sqlite") as url:
        yield url
