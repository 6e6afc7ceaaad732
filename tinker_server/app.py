"""The Tinker server's FastAPI app and `serve`, started by `roost tinker serve`."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from roost.rollout.keys import KeyKind, presented_key, same_key
from roost.rollout.store.trajectory_store import TrajectoryStore

from .external_weights import FILES_PREFIX, Signer
from .futures import FutureQueue
from .recording import SampleRecorder
from .routes import build_router
from .routes_common import ServerState
from .sampling import Samplers
from .sessions import Registry, tenant_of
from .wire import LoraConfig

TINKER_KEY = KeyKind("Tinker API key", "tml-", "--api-key", "ROOST_TINKER_KEY", "every /api/v1 route")
OPEN_PATHS = {"/health", "/api/v1/healthz"}


def backend_maker(full_weight: bool):
    """This server's `make_backend(folder, lora_config)`: LoRA adapters as the config asks (fresh
    from its seed), or every weight when the server runs `--full-weight` (the config only recorded)."""

    def make_backend(folder: Path, lora: LoraConfig | None):
        from .backend import MegatronBackend, lora_spec

        if full_weight or lora is None:
            return MegatronBackend(folder)
        return MegatronBackend(folder, lora_spec(lora), seed=lora.seed or 0)

    return make_backend


def _context_length(folder: Path) -> int:
    from roost.rollout.engine.model_spec import ModelSpec

    return min(ModelSpec.from_folder(folder).max_position_embeddings, 4096)  # the engine's default cap


def _validation_message(exc: RequestValidationError) -> str:
    problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in exc.errors())
    return f"the request body does not match the Tinker API: {problems}"


def _tenant(presented: str | None, tenants: dict[str, str]) -> str | None:
    """The tenant whose key was presented (every key compared, in constant time), or None."""
    found = None
    for key, tenant in tenants.items():
        if same_key(presented, key):
            found = tenant
    return found


def build_app(
    base_models: dict[str, Path],
    api_keys: list[str],
    *,
    compress_fwdbwd: bool = False,
    full_weight: bool = False,
    max_lora_rank: int = 128,
    store: Path,
    max_loaded_adapters: int = 8,
) -> FastAPI:
    """The app; `store`: the trajectory store every sample is recorded in."""
    # Torch and Megatron's state belong to one thread: all training runs there, one request at a time
    # in the order of the fair queue (futures.training).
    training = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tinker-train")
    futures = FutureQueue()

    async def run_training(fn, *args):
        return await asyncio.get_running_loop().run_in_executor(training, fn, *args)

    weights_root = Path(tempfile.mkdtemp(prefix="roost-tinker-weights-"))
    samplers = Samplers(max_loaded_adapters=max_loaded_adapters, max_lora_rank=max_lora_rank)
    trajectories = TrajectoryStore(store)
    state = ServerState(
        base_models=base_models,
        registry=Registry(),
        futures=futures,
        run_training=run_training,
        make_backend=backend_maker(full_weight),
        compress_fwdbwd=compress_fwdbwd,
        full_weight=full_weight,
        max_lora_rank=max_lora_rank,
        context_lengths={name: _context_length(folder) for name, folder in base_models.items()},
        samplers=samplers,
        weights_root=weights_root,
        recorder=SampleRecorder(trajectories),
        signer=Signer(secrets.token_bytes(32)),
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await asyncio.to_thread(trajectories.open)
        yield
        futures.cancel_all()
        samplers.stop()
        trajectories.close()
        training.shutdown(wait=False, cancel_futures=True)
        shutil.rmtree(weights_root, ignore_errors=True)

    app = FastAPI(title="roost tinker", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.include_router(build_router(state))

    tenants = {key: tenant_of(key) for key in api_keys}

    @app.middleware("http")
    async def check_key(request: Request, call_next):
        request.state.tenant = _tenant(presented_key(request.headers), tenants)
        signed = request.url.path.startswith(FILES_PREFIX)  # its URL's signature is checked instead
        if request.url.path not in OPEN_PATHS and not signed and request.state.tenant is None:
            return JSONResponse(
                {
                    "detail": f"missing or wrong API key; send {TINKER_KEY.name} as X-Api-Key (ServiceClient(api_key=...))"
                },
                status_code=401,
            )
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _validation_message(exc)}, status_code=400)

    return app


def serve(
    base_models: dict[str, Path],
    api_keys: list[str],
    *,
    host: str,
    port: int,
    port_file: Path | None,
    compress_fwdbwd: bool,
    full_weight: bool = False,
    max_lora_rank: int = 128,
    store: Path,
    max_loaded_adapters: int = 8,
) -> None:
    import uvicorn

    from roost.serving.listen import bind_listener, report_port

    sock = bind_listener(host, port)
    report_port(sock, port_file)
    app = build_app(
        base_models,
        api_keys,
        compress_fwdbwd=compress_fwdbwd,
        full_weight=full_weight,
        max_lora_rank=max_lora_rank,
        store=store,
        max_loaded_adapters=max_loaded_adapters,
    )
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
