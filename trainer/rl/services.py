"""The servers a training run needs (engine, gateway, env server), each a supervised subprocess
inside a Ray actor placed where the recipe says.

    command, config = engine_launch(recipe, model, host, 0, key, log_dir)
    engine = ServiceActor.options(**placement).remote("engine", command, host, 0, log_dir,
                                                      {"ROOST_ENGINE_KEY": key}, config)
    url = ray.get(engine.start.remote())

Each roost server (engine, vLLM through roost's engine, gateway, env server) is handed its whole
typed config (`engine_config`, `gateway_config`, `env_config`), which its actor writes to
`run_dir/logs/<name>.json` for the server's `--config`: no flags are rebuilt here, and keys travel
in the environment, never in a file. roost's servers bind port 0 and report the port they got
(`--port-file`); SGLang, a third party's server started by its own command line
(`sglang_command`), cannot, and is started on a port chosen for it (`sglang_port`).

A server that dies is restarted on the port it had by a watchdog thread, and the run goes on:
episodes in flight when it died end `infra_error` (the runner's label) and are not trained
on. A restarted engine loads the newest weights the run has synced (in a LoRA run, the newest adapter
on its base weights), at the same version;
`wait_serving` blocks until it has (the loop waits there before a step's rollouts and
before a weight update, rather than spend steps on an engine that is still starting).
Each server's output goes to `run_dir/logs/<name>.log`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from roost.envs.episodes import ManagerConfig
from roost.envs.serve import ServerConfig
from roost.lifetime import die_with_parent, stop_process
from roost.rollout.engine.server_config import EngineServerConfig
from roost.rollout.engine_api.sglang_logprobs import ORIGINAL_LOGPROBS_ENV
from roost.rollout.gateway.config import GatewayConfig
from roost.rollout.keys import ENGINE_KEY
from roost.serving.config_file import write_config
from roost.serving.handle import ServerStartError, is_healthy
from roost.serving.listen import read_port
from roost.serving.process import wait_healthy

from ..recipe import Recipe


class ServiceError(RuntimeError):
    """A server could not be started (see its log)."""


def sglang_port(host: str) -> int:
    """A port for SGLang, free when asked. SGLang cannot bind port 0: its own warm-up request and
    the ports it derives for its scheduler and workers all come from --port. So, for SGLang only,
    a port is found free and then bound by the server; one taken in between fails its start."""
    import socket

    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def server_command(server: str) -> list[str]:
    """The command of a roost server ("engine", "gateway" or "env"), before its flags: each reads its
    whole config from `--config FILE`, which `SupervisedServer` adds (see `engine_config`)."""
    if server == "env":
        return [sys.executable, "-m", "roost.envs.serve"]
    return [sys.executable, "-m", "roost.cli.main", server]


def engine_config(recipe: Recipe, model: str, host: str, log_dir: Path) -> EngineServerConfig:
    """roost's engine (embedded, or the vLLM server it supervises) for the run, on the port it binds;
    vLLM's flags in `engine.args` pass to vLLM unchanged, and its output goes to `log_dir`/vllm.log.
    The embedded engine's `engine.args` are flags of `roost engine` itself (see `engine_launch`). A LoRA
    run's engine serves the run's adapter (vLLM only with --enable-lora; the embedded engine always can)."""
    engine = recipe.engine
    vllm = engine.backend == "vllm"
    lora = recipe.trainer.lora
    adapters = (
        {"enable_lora": vllm, "max_lora_rank": max(lora.rank, EngineServerConfig().max_lora_rank)} if lora else {}
    )
    return EngineServerConfig(
        model=model,
        backend="vllm" if vllm else "embedded",
        host=host,
        port=0,
        dtype=engine.dtype,
        max_running=engine.max_running,
        vllm_args=list(engine.args) if vllm else [],
        vllm_log=log_dir / "vllm.log",
        **adapters,
    )


def engine_launch(
    recipe: Recipe, model: str, host: str, port: int, api_key: str | None, log_dir: Path
) -> tuple[list[str], EngineServerConfig | None]:
    """The engine's command, and the config it reads (None for SGLang, told everything by its
    command line, `sglang_command`). roost's engine reads its key from ROOST_ENGINE_KEY in its
    environment (`engine_env`); the embedded engine's `engine.args` follow its command, over the config."""
    if recipe.engine.backend == "sglang":
        return sglang_command(recipe, model, host, port, api_key), None
    config = engine_config(recipe, model, host, log_dir)
    flags = [] if config.backend == "vllm" else list(recipe.engine.args)
    return [*server_command("engine"), *flags], config


def sglang_command(recipe: Recipe, model: str, host: str, port: int, api_key: str | None) -> list[str]:
    """SGLang's own command line (its interface; `port` from `sglang_port`); its key only from here."""
    engine = recipe.engine
    _check_sglang_gpus(recipe)
    key = ["--api-key", api_key] if api_key else []
    return [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        model,
        "--host",
        host,
        "--port",
        str(port),
        "--dtype",
        engine.dtype,
        *key,
        *engine.args,
    ]


def engine_env(recipe: Recipe, api_key: str | None) -> dict[str, str]:
    """The engine's environment on top of the run's: its key, and for SGLang the setting that
    makes its logprobs the model's own distribution, as the trainer's are."""
    env = {ENGINE_KEY.env: api_key} if api_key else {}
    if recipe.engine.backend == "sglang":
        env.update(ORIGINAL_LOGPROBS_ENV)
    return env


def sglang_gpus(args: list[str]) -> int:
    """GPUs an SGLang server started with `args` uses: its tensor x data x pipeline parallel sizes
    (SGLang's flag names; its parser also takes any unambiguous prefix, such as --tp and --dp)."""
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    parser.add_argument("--tensor-parallel-size", "--tp-size", type=int, default=1)
    parser.add_argument("--data-parallel-size", "--dp-size", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", "--pp-size", type=int, default=1)
    known, _ = parser.parse_known_args(args)
    return known.tensor_parallel_size * known.data_parallel_size * known.pipeline_parallel_size


def _check_sglang_gpus(recipe: Recipe) -> None:
    reserved = recipe.placement.roles().engine.gpus
    if reserved <= 0:  # no GPUs reserved through Ray: nothing to match
        return
    key = "placement.layout.engine.gpus" if recipe.placement.layout else "placement.engine_gpus"
    expected = max(1, int(reserved))  # a fraction of a GPU is one shared GPU
    used = sglang_gpus(recipe.engine.args)
    if used != expected:
        raise ValueError(
            f"{key} reserves {reserved:g} GPUs for SGLang, but engine.args start it on {used} "
            f"(--tp x --dp x --pp); add --tp {expected} (or --dp {expected}) to engine.args, or set "
            f"{key} to {used}"
        )


def gateway_config(recipe: Recipe, engine_urls: list[str], model: str, store: Path, host: str) -> GatewayConfig:
    """The run's gateway in front of its engines, on the port it binds; its keys come from the
    environment, not the config (they are left out of the file it reads)."""
    # embedded and sglang engines speak one API; vLLM its own
    return GatewayConfig(
        backend=recipe.engine.backend,
        engine_url=engine_urls[0],
        engine_urls=engine_urls,
        model=model,
        store_path=store,
        host=host,
        port=0,
        reasoning_policy=recipe.gateway.reasoning_policy,
        workers=recipe.gateway.workers,
        admission_programs=recipe.gateway.admission_programs,
        sglang_sessions=recipe.gateway.sglang_sessions,
        record_routing=recipe.gateway.record_routing,
    )


def env_config(recipe: Recipe, kwargs: dict[str, Any], host: str) -> ServerConfig:
    """The run's env server, on the port it binds, with the env's kwargs after its `prepare` hook."""
    server = recipe.env.server
    manager = ManagerConfig(workers=server.workers, max_episodes=server.max_episodes)
    return ServerConfig(recipe.env.name, kwargs, host, 0, manager)


class SupervisedServer:
    """A server subprocess, restarted by a watchdog thread when it dies; a `ServerHandle`.

    `config`: a roost server's whole typed config, written to `log_dir/<name>.json` and handed to
    `command` as `--config FILE` (flags in `command` override it). `port` 0: a roost server that
    binds the port its config names (0: any free one) and reports it in `log_dir/<name>.port`.
    Otherwise the server was told `port` in `command` (SGLang)."""

    def __init__(
        self,
        name: str,
        command: list[str],
        host: str,
        port: int = 0,
        *,
        log_dir: Path,
        startup_timeout_s: float = 300.0,
        env: dict[str, str] | None = None,
        config: Any = None,
        url_host: str | None = None,
    ) -> None:
        """`url_host`: the address others reach it at, when `host` is not one (0.0.0.0)."""
        self.name, self.command, self.host, self.port = name, command, host, port
        self.url_host = url_host or host
        self.config = config
        self.config_file = log_dir / f"{name}.json" if config is not None else None
        self.port_file = log_dir / f"{name}.port" if port == 0 else None
        self.log_path = log_dir / f"{name}.log"
        self.startup_timeout_s = startup_timeout_s
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen | None = None
        self.restarts = 0
        self.after_restart: Callable[[], None] | None = None
        """Called (with no arguments) after each restart, e.g. to reload the newest weights."""
        self._stop = threading.Event()
        self._serving = threading.Event()
        """Set while the server is up and (after a restart) `after_restart` is done."""
        self._watchdog: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.url_host}:{self.port}"

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _command(self) -> list[str]:
        command = [*self.command, "--config", str(self.config_file)] if self.config_file else self.command
        if self.port_file is None:
            return command
        # A restart comes back on the port the first launch got (the gateway and the runner hold
        # its URL); a flag given overrides the config's port, and a repeated option's last value wins.
        again = ["--port", str(self.port)] if self.port else []
        return [*command, "--port-file", str(self.port_file), *again]

    def start(self) -> str:
        # Every launch happens on the watchdog thread: a child asks to die with the thread that
        # started it (PR_SET_PDEATHSIG), and this thread lives exactly as long as the supervision.
        if self.config_file is not None:
            write_config(self.config, self.config_file)
        started = threading.Event()
        failure: list[BaseException] = []
        self._watchdog = threading.Thread(
            target=self._watch, args=(started, failure), name=f"{self.name}-watchdog", daemon=True
        )
        self._watchdog.start()
        started.wait()
        if failure:
            self._stop.set()
            raise failure[0]
        return self.url

    def _launch(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        command = self._command()
        if self.port_file is not None:
            self.port_file.unlink(missing_ok=True)
        # Ray kills an actor without running its cleanup: the server must die with it.
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=self.env, preexec_fn=die_with_parent()
        )
        log.close()
        see = f"; see {self.log_path} (command: {' '.join(command)})"
        try:
            if self.port_file is not None:
                self.port = read_port(self.process, self.port_file, self.name, self.startup_timeout_s, see=see)
            wait_healthy(self.process, self.url, self.name, self.startup_timeout_s, see=see)
        except ServerStartError as exc:
            stop_process(self.process, timeout_s=5.0)
            raise ServiceError(str(exc)) from None

    def healthy(self) -> bool:
        return is_healthy(self.url)

    def wait_serving(self, timeout_s: float | None = None) -> bool:
        """Block until the server is up and answering /health (after a restart: relaunched and
        `after_restart` done); False when `timeout_s` (default: the startup timeout) passes first."""
        deadline = time.monotonic() + (self.startup_timeout_s if timeout_s is None else timeout_s)
        while not self._stop.is_set():
            # a process that exited counts as down before the watchdog's next look clears the flag
            alive = self.process is not None and self.process.poll() is None
            if self._serving.is_set() and alive and self.healthy():
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        return False

    def _watch(self, started: threading.Event, failure: list[BaseException]) -> None:
        try:
            self._launch()
        except BaseException as exc:  # noqa: BLE001 - handed to start(), which raises it
            failure.append(exc)
            return
        finally:
            started.set()
        self._serving.set()
        while not self._stop.wait(0.5):
            if self.process is not None and self.process.poll() is not None and not self._stop.is_set():
                self._serving.clear()
                self.restarts += 1
                try:
                    self._launch()
                except Exception as exc:  # noqa: BLE001 - keep watching; the next check retries
                    self._note(f"restart {self.restarts} of {self.name} failed: {exc}")
                    continue
                try:
                    if self.after_restart is not None:
                        self.after_restart()
                except Exception as exc:  # noqa: BLE001 - it serves; what it serves is labelled
                    self._note(f"{self.name} restarted, but its after-restart step failed: {exc}")
                self._serving.set()

    def _note(self, line: str) -> None:
        with self.log_path.open("a") as log:
            log.write(f"\n[roost] {line}\n")

    def kill(self) -> None:
        """Kill the server as a crash would (fault-injection tests); the watchdog restarts it."""
        if self.process is not None:
            self.process.kill()

    def stop(self) -> None:
        self._stop.set()
        if self._watchdog is not None:
            self._watchdog.join(timeout=5)
        stop_process(self.process)


def _reachable(host: str) -> str:
    """The address a server bound to `host` is reached at from other nodes."""
    if host not in ("0.0.0.0", "::", ""):
        return host
    import ray

    return ray.util.get_node_ip_address()


class ServiceActor:
    """A `SupervisedServer` in a Ray actor (placed on the node and GPUs the recipe asks for)."""

    def __init__(
        self,
        name: str,
        command: list[str],
        host: str,
        port: int,
        log_dir: str,
        env: dict[str, str] | None = None,
        config: Any = None,
    ) -> None:
        """`port` 0: a roost server that reports the port it binds; `config` its typed config (see
        `SupervisedServer`). A server bound to every interface is reached at its node's address."""
        self.server = SupervisedServer(
            name, command, host, port, log_dir=Path(log_dir), env=env, config=config, url_host=_reachable(host)
        )
        self.weights: tuple[str, str, str | None] | None = None
        """(folder, version, adapter name): the newest weights synced; the name is set when the
        folder is a LoRA adapter served on the base model the engine starts with."""
        self.gateway: tuple[str, str, str] | None = None
        """(url, admin key, version) of the gateway an engine on another node than the weights
        serves behind (`serves_behind`)."""

    def start(self) -> str:
        self.server.after_restart = self._reload
        return self.server.start()

    def loaded(self, folder: str, version: str, adapter: str | None = None) -> None:
        """Record the weights the engine now serves (`adapter`: the name it serves the adapter
        folder under); a restarted engine reloads them."""
        self.weights = (folder, version, adapter)

    def serves_behind(self, gateway_url: str, admin_key: str, version: str) -> None:
        """This engine is on another node than the newest weights (`version`), so a restart
        cannot reload them: the gateway is then asked to check every engine's version (the
        weight-sync barrier at `version`), which takes this one out of rotation until the loop
        sends it the weights (`EnginePool.ensure_serving`)."""
        self.gateway = (gateway_url, admin_key, version)

    @staticmethod
    def _leave_rotation(url: str, admin_key: str, version: str) -> None:
        from roost.rollout.gateway.control.client import GatewayClient

        async def barrier() -> None:
            async with GatewayClient(url, admin_key=admin_key) as gateway:
                await gateway.set_weight_version(version)

        asyncio.run(barrier())

    def _reload(self) -> None:
        if self.weights is None:
            if self.gateway is not None:
                self._leave_rotation(*self.gateway)
            return
        from roost.rollout.engine_api.client import detect_backend, engine_client

        folder, version, adapter = self.weights

        async def load() -> None:
            url, key = self.server.url, self.server.env.get(ENGINE_KEY.env)
            async with engine_client(await detect_backend(url), url, api_key=key) as client:
                if adapter is None:
                    await client.update_weights_from_disk(folder, weight_version=version)
                    return
                # a restarted engine serves its base weights and no adapter: load the newest one
                await client.load_lora_adapter(adapter, folder, replace=True)
                await client.update_weight_version(version)

        asyncio.run(load())

    def restarts(self) -> int:
        return self.server.restarts

    def kill(self) -> None:
        self.server.kill()

    def healthy(self) -> bool:
        return self.server.healthy()

    def wait_serving(self, timeout_s: float | None = None) -> bool:
        return self.server.wait_serving(timeout_s)

    def stop(self) -> None:
        self.server.stop()
