"""A real `roost tinker serve` on 127.0.0.1 with the tiny model, shared by the module's tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from roost.lifetime import stop_process
from roost.serving.process import start_reporting

API_KEY = "tml-roost-test-key"


@contextmanager
def tinker_server(folder: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """`roost tinker serve ARGS` on a port the OS picks, its log and trajectory store in `folder`;
    its URL. `env` adds to the server's environment."""
    port_file = folder / "port"
    with (folder / "server.log").open("w") as log:
        command = [
            sys.executable,
            "-m",
            "roost.cli.main",
            "tinker",
            "serve",
            "--port",
            "0",
            "--port-file",
            str(port_file),
            "--store",
            str(folder / "trajectories.sqlite"),
        ]
        process, port = start_reporting(
            [*command, *args],
            port_file,
            "roost tinker serve",
            180.0,
            see=f" (see {folder / 'server.log'})",
            env={**os.environ, "ROOST_TINKER_KEY": API_KEY, **(env or {})},
            stdout=log,
            stderr=log,
        )
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            stop_process(process)


@pytest.fixture(scope="module")
def tinker_url(tmp_path_factory, tiny_model_path: Path):
    with tinker_server(tmp_path_factory.mktemp("tinker")) as url:
        yield url


@pytest.fixture(scope="module")
def service(tinker_url):
    """The SDK's ServiceClient on the module's server, closed (its session finished) after it."""
    import tinker

    client = tinker.ServiceClient(base_url=tinker_url, api_key=API_KEY)
    yield client
    client.close("success").result()


@pytest.fixture(scope="module")
def full_service(tmp_path_factory, tiny_model_path: Path):
    """A ServiceClient on a second server, run with --full-weight."""
    import tinker

    with tinker_server(tmp_path_factory.mktemp("tinker-full"), "--full-weight") as url:
        client = tinker.ServiceClient(base_url=url, api_key=API_KEY)
        yield client
        client.close("success").result()


@pytest.fixture(scope="session")
def megatron_world():
    """Megatron's parallel state for a one-process world, for roost's own trainer as the oracle."""
    from roost.trainer.megatron import parallel

    info = parallel.init(tp=1)
    yield info
    parallel.shutdown()


def pytest_collection_modifyitems(config, items):
    """Megatron-core's CPU fallbacks warn on every layer; keep these reports readable."""
    here = str(Path(__file__).parent)
    for item in items:
        if str(item.path).startswith(here):
            for category in ("DeprecationWarning", "UserWarning", "FutureWarning"):
                item.add_marker(pytest.mark.filterwarnings(f"ignore::{category}:megatron"))
