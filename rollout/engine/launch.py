"""Building an engine from a model name, serving it, and starting one for tests or tools."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from .engine import Engine, EngineConfig
from .scripted_sampler import Script, ScriptedSampler
from .tiny_model import resolve_model


def build_engine(
    model: str, *, context_length: int | None = None, max_running: int = 64, dtype: str = "float32",
    scripted: bool = False, script: Path | None = None,
) -> Engine:
    sampler = None
    if scripted:
        sampler = ScriptedSampler.from_file(script) if script else ScriptedSampler(Script())
    config = EngineConfig(resolve_model(model), context_length, max_running, dtype, sampler)
    return Engine(config)


def serve(engine: Engine, *, host: str, port: int, log_level: str = "warning") -> None:
    import uvicorn

    from .server import create_app

    engine.start()
    try:
        uvicorn.run(create_app(engine), host=host, port=port, log_level=log_level, access_log=False)
    finally:
        engine.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EngineProcess:
    """`roost engine` in a subprocess on a free 127.0.0.1 port; a context manager.

    >>> with EngineProcess(scripted=True) as url: ...
    """

    def __init__(self, model: str = "tiny", *, scripted: bool = False, script: Path | None = None,
                 extra_args: list[str] | None = None, startup_timeout_s: float = 120.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "-m", "roost.cli.main", "engine", "--model", model, "--port", str(self.port)]
        if scripted:
            self.args += ["--sampler", "scripted"]
        if script is not None:
            self.args += ["--script", str(script)]
        self.args += extra_args or []
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen | None = None

    def start(self) -> str:
        self.process = subprocess.Popen(self.args, env=dict(os.environ))
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"engine exited with {self.process.returncode} before answering /health")
            try:
                if httpx.get(f"{self.url}/health", timeout=1.0).status_code == 200:
                    return self.url
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"engine did not answer {self.url}/health within {self.startup_timeout_s}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
