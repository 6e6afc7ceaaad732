"""`roost gateway --model tiny` leaves nothing running when it is stopped (SIGTERM: it stops
its embedded engine first) or killed (SIGKILL: the engine dies with it)."""

from __future__ import annotations

import signal
import sys

import psutil
import pytest

from roost.serving.process import start_reporting
from roost.tests.child_processes import assert_gone

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_stopped_or_killed_gateway_leaves_no_engine_behind(tmp_path, sig):
    port_file = tmp_path / "port"
    gateway, _ = start_reporting(
        [
            sys.executable,
            "-m",
            "roost.cli.main",
            "gateway",
            "--model",
            "tiny",
            "--port",
            "0",
            "--port-file",
            str(port_file),
            "--store",
            str(tmp_path / "t.sqlite"),
        ],
        port_file,
        "roost gateway",
        240,
        start_new_session=True,
    )
    try:
        descendants = psutil.Process(gateway.pid).children(recursive=True)
        assert any("engine" in p.cmdline() for p in descendants)
        gateway.send_signal(sig)
        code = gateway.wait(timeout=60)
        assert_gone(descendants)
        assert code == (143 if sig == signal.SIGTERM else -signal.SIGKILL)  # 143: exited on its own, cleaned up
    finally:
        gateway.kill()
        gateway.wait()
