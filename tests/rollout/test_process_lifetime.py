"""`roost gateway --model tiny` leaves nothing running when it is stopped (SIGTERM: it stops
its embedded engine first) or killed (SIGKILL: the engine dies with it)."""

from __future__ import annotations

import signal
import subprocess
import sys

import psutil
import pytest

from roost.tests.child_processes import assert_gone
from roost.rollout.server_process import free_port, wait_healthy

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_stopped_or_killed_gateway_leaves_no_engine_behind(tmp_path, sig):
    port = free_port()
    gateway = subprocess.Popen([sys.executable, "-m", "roost.cli.main", "gateway", "--model", "tiny",
                                "--port", str(port), "--store", str(tmp_path / "t.sqlite")], start_new_session=True)
    try:
        wait_healthy(gateway, f"http://127.0.0.1:{port}", "roost gateway", timeout_s=240)
        descendants = psutil.Process(gateway.pid).children(recursive=True)
        assert any("engine" in p.cmdline() for p in descendants)
        gateway.send_signal(sig)
        code = gateway.wait(timeout=60)
        assert_gone(descendants)
        assert code == (143 if sig == signal.SIGTERM else -signal.SIGKILL)  # 143: exited on its own, cleaned up
    finally:
        gateway.kill()
        gateway.wait()
