"""Fixtures shared by the gateway's wire tests."""

from __future__ import annotations

import pytest

from roost.tests.rollout.gateway_helpers import spied_gateway


@pytest.fixture(scope="module")
def spied_scripted_gateway(scripted_engine_url, tmp_path_factory):
    """A gateway on the scripted engine behind a spy, one per test module: (server, store, spy)."""
    with spied_gateway(scripted_engine_url, tmp_path_factory.mktemp("store") / "trajectories.sqlite") as running:
        yield running
