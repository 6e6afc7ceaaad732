"""How long roost's child processes live: no longer than the roost process that started them.

Every long-lived child roost starts (an engine or gateway server, an env worker, an env
server for a training run, a harness command, a sandboxed command) asks the kernel for a
signal when its parent dies, however it dies (`die_with_parent`, Linux `PR_SET_PDEATHSIG`):
a parent killed with SIGKILL leaves nothing running. A parent stopped with SIGTERM unwinds
instead (`stop_on_sigterm`), so its `finally` blocks and context managers stop its children
in order (`stop_process`: terminate, wait, kill).

Docker containers are not children: each backend labels its own and removes them when it
closes; see docs/sandboxes.md for what a SIGKILL leaves.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A `preexec_fn` (for `subprocess.Popen` and `asyncio.create_subprocess_*`) that has the
    child sent `sig` when this process dies; None where the kernel offers no such request.

    The kernel sends it when the *thread* that started the child ends, so start long-lived
    children from the main thread or from one that lives as long as they should (an event
    loop's, a supervisor's). The request survives `exec`, but not the child's own forks.
    """
    if sys.platform != "linux":
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent:  # the parent died before the request was made
            os._exit(1)

    return arm


def stop_process(process: subprocess.Popen | None, timeout_s: float = 15.0) -> None:
    """Terminate `process` if it still runs; kill it if it has not exited within `timeout_s`."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """Within this block SIGTERM unwinds the main thread as Ctrl-C does (it raises SystemExit
    with status 143), so cleanup runs before the process ends; a second SIGTERM does not cut
    that cleanup short. uvicorn catches SIGTERM while it serves and raises it again once it
    has shut down, which lands here. A no-op off the main thread, which signals never reach."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _exit_once)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_once(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(128 + signum)
