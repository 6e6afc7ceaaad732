"""The gateway workers' processes: started together, each started again when it dies.

All run on a thread of their own that lives as long as the relay: the kernel ends a child
started with `die_with_parent` when the *thread* that started it ends, and a restart must not
hold the relay's event loop for the seconds a gateway takes to load its tokenizer.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from roost.lifetime import stop_process
from roost.rollout.gateway.config import GatewayConfig
from roost.rollout.keys import ADMIN_KEY, ENGINE_KEY
from roost.serving.config_file import write_config
from roost.serving.handle import ServerStartError
from roost.serving.process import await_reporting, launch_reporting, roost_command

log = logging.getLogger("roost.gateway.workers")

UPSTREAM_KEY_ENV = "ROOST_UPSTREAM_API_KEY"
POLL_S = 0.25
RETRY_S = 2.0
"""How long a worker that failed to start waits before its next try."""


@dataclass
class WorkerSlot:
    """One worker: its process and the URL it serves at (None while it is down)."""

    index: int
    process: subprocess.Popen | None = None
    url: str | None = None
    restarts: int = 0
    retry_at: float = 0.0
    """When a worker that is down is next started (monotonic time; 0: at once)."""

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None


class WorkerSupervisor:
    """Starts `config.workers` gateway workers (each `roost gateway --config F` on 127.0.0.1,
    port 0) and keeps them running until `stop`."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        log_args: list[str] | None = None,
        bring_up: Callable[[str, Callable[[], None]], None] | None = None,
    ):
        """`bring_up(url, publish)`: run on a worker once it answers /health; it calls `publish`
        when the worker may take calls (the relay first sends it the control writes the others
        have)."""
        self.config = config
        self._bring_up = bring_up
        self.slots = [WorkerSlot(i) for i in range(config.workers)]
        self._log_args = log_args or []
        self._folder = Path(tempfile.mkdtemp(prefix="roost-gateway-workers-"))
        self._config_file = write_config(
            config.model_copy(
                update={"host": "127.0.0.1", "port": 0, "workers": 1, "admission_share": 1.0 / config.workers}
            ),
            self._folder / "worker.json",
        )
        self._env = {**os.environ, ADMIN_KEY.env: config.admin_key}
        if config.engine_key:
            self._env[ENGINE_KEY.env] = config.engine_key
        if config.upstream_api_key:
            self._env[UPSTREAM_KEY_ENV] = config.upstream_api_key
        self._stopping = threading.Event()
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="roost-gateway-workers", daemon=True)

    def start(self) -> None:
        """Start every worker; returns once all answer /health (raises `ServerStartError` if one
        does not within the gateway's startup timeout)."""
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        shutil.rmtree(self._folder, ignore_errors=True)

    def _run(self) -> None:
        try:
            self._start_all()
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._error = exc
            self._stop_all()
            self._started.set()
            return
        self._started.set()
        try:
            while not self._stopping.wait(POLL_S):
                for slot in self.slots:
                    if slot.process is not None and slot.process.poll() is not None:
                        self._lost(slot)
                    if slot.process is None and time.monotonic() >= slot.retry_at:
                        self._restart(slot)
        finally:
            self._stop_all()

    def _start_all(self) -> None:
        timeout_s = self._timeout_s()
        launched = [(slot, *self._launch(slot)) for slot in self.slots]  # all load at once
        for slot, process, port_file in launched:
            self._await(slot, process, port_file, timeout_s)

    def _lost(self, slot: WorkerSlot) -> None:
        code = slot.process.returncode if slot.process is not None else None
        log.warning("gateway worker %d (pid %s) exited with %s; starting it again", slot.index, slot.pid, code)
        slot.url = None
        slot.process = None
        slot.restarts += 1
        slot.retry_at = 0.0  # start again at once

    def _restart(self, slot: WorkerSlot) -> None:
        try:
            process, port_file = self._launch(slot)
            self._await(slot, process, port_file, self._timeout_s())
        except ServerStartError as exc:
            log.warning("gateway worker %d did not start again (%s); next try in %.0fs", slot.index, exc, RETRY_S)
            slot.process = None
            slot.retry_at = time.monotonic() + RETRY_S
            return
        log.info("gateway worker %d is back at %s", slot.index, slot.url)

    def _launch(self, slot: WorkerSlot) -> tuple[subprocess.Popen, Path]:
        port_file = self._folder / f"worker-{slot.index}.port"
        command = roost_command("gateway", 0, port_file, ["--config", str(self._config_file), *self._log_args])
        return launch_reporting(command, port_file, env=self._env, stdin=subprocess.DEVNULL), port_file

    def _await(self, slot: WorkerSlot, process: subprocess.Popen, port_file: Path, timeout_s: float) -> None:
        port = await_reporting(process, port_file, f"gateway worker {slot.index}", timeout_s)
        url = f"http://127.0.0.1:{port}"
        slot.process = process

        def publish() -> None:
            slot.url = url

        try:
            if self._bring_up is not None:
                self._bring_up(url, publish)
            else:
                publish()
        except BaseException:
            slot.process = None
            stop_process(process, timeout_s=5.0)
            raise

    def _timeout_s(self) -> float:
        return self.config.startup_timeout_s + 120.0  # the worker's own engine wait, plus loading roost

    def _stop_all(self) -> None:
        for slot in self.slots:  # all told at once, then each waited for
            slot.url = None
            if slot.process is not None and slot.process.poll() is None:
                slot.process.terminate()
        for slot in self.slots:
            stop_process(slot.process)
