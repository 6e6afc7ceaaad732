"""Fixtures for the trainer tests: a one-process Megatron world (multi-process tests start
their own worlds in child processes). Sample builders live in `trainer_fixtures`."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def megatron_world():
    """Megatron's parallel state for a one-process world (tp=1, dp=1)."""
    from roost.trainer.megatron import parallel

    info = parallel.init(tp=1)
    yield info
    parallel.shutdown()


def pytest_collection_modifyitems(config, items):
    """Megatron-core and Apex fallbacks warn on every layer; keep the trainer's reports readable."""
    here = str(config.rootpath / "tests" / "trainer")
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.filterwarnings("ignore::DeprecationWarning:megatron"))
            item.add_marker(pytest.mark.filterwarnings("ignore::UserWarning:megatron"))
            item.add_marker(pytest.mark.filterwarnings("ignore::FutureWarning:megatron"))
