"""Checks that a process roost started does not outlive the roost process that started it."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil


def assert_gone(processes: list[psutil.Process], within_s: float = 30.0) -> None:
    """Each of `processes` exits within `within_s` (those left are killed, then reported)."""
    _, alive = psutil.wait_procs(processes, timeout=within_s)
    left = [" ".join(p.cmdline()) for p in alive]
    for process in alive:
        process.kill()
    assert not left, f"still running: {left}"


def assert_dies_with_parent(script: str, name: str) -> None:
    """Run `script` in a Python process until it has started a process called `name`, kill
    that Python process (SIGKILL), and check that `name` ends too."""
    parent = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while not children:
            assert time.monotonic() < deadline and parent.poll() is None, f"{name} never started"
            time.sleep(0.1)
            children = [p for p in psutil.Process(parent.pid).children(recursive=True) if p.name() == name]
        parent.kill()
        parent.wait()
        assert_gone(children)
    finally:
        parent.kill()
        parent.wait()
