"""SGLang's and vLLM's weight-transfer calls, contract-tested: every body roost sends is one
SGLang's own protocol classes (sglang 0.5.3) and vLLM's own init/update info classes (vLLM 0.32,
in its virtualenv) accept, sent to the route those servers serve; their answers are read, a
refusal is an error with SGLang's message. Neither transfer runs here: both move CUDA memory."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest
import torch
from aiohttp import web
from aiohttp.test_utils import TestServer

from roost.rollout.engine_api import sglang_weights, vllm_weights
from roost.rollout.engine_api.sglang_client import EngineRejected, SGLangClient
from roost.rollout.engine_api.vllm_client import VLLMClient

io_struct = pytest.importorskip("sglang.srt.managers.io_struct")
TENSORS = {"model.embed_tokens.weight": torch.zeros(8, 4, dtype=torch.bfloat16), "model.norm.weight": torch.ones(4)}


class StandIn:
    """Keeps each body by path; answers `answer` (SGLang's `{"success", "message"}`) or a 400."""

    def __init__(self, refuse: str | None = None) -> None:
        self.bodies: dict[str, dict | None] = {}
        self.refuse = refuse

    async def handle(self, request: web.Request) -> web.Response:
        self.bodies[request.path] = await request.json() if request.can_read_body else None
        if request.path == self.refuse:
            return web.json_response({"success": False, "message": "NCCL group not initialized"}, status=400)
        return web.json_response({"success": True, "message": "ok"})

    async def __aenter__(self) -> str:
        app = web.Application()
        app.router.add_post("/{path}", self.handle)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()
        return f"http://127.0.0.1:{self.server.port}"

    async def __aexit__(self, *exc: object) -> None:
        await self.server.close()


def sglang_accepts(cls, body: dict) -> None:
    assert set(body) <= {f.name for f in dataclasses.fields(cls)}, set(body) - {f.name for f in dataclasses.fields(cls)}
    cls(**body)


async def test_sglang_transfer_bodies_are_sglangs_own():
    stand_in = StandIn()
    meta = vllm_weights.nccl_update_info(TENSORS)
    async with stand_in as url, SGLangClient(url) as client:
        init = await sglang_weights.init_weights_update_group(
            client, master_address="10.0.0.5", master_port=29600, rank_offset=1, world_size=2
        )
        await sglang_weights.update_weights_from_distributed(
            client, meta["names"], meta["dtype_names"], meta["shapes"], weight_version="3"
        )
        await sglang_weights.update_weights_from_tensor(client, ["c2VyaWFsaXplZA=="], weight_version="4")
        await sglang_weights.destroy_weights_update_group(client)
    assert init.success and init.message == "ok"
    bodies = stand_in.bodies
    assert bodies["/init_weights_update_group"] == {
        "master_address": "10.0.0.5",
        "master_port": 29600,
        "rank_offset": 1,
        "world_size": 2,
    }
    assert bodies["/update_weights_from_distributed"]["dtypes"] == ["bfloat16", "float32"]
    assert bodies["/update_weights_from_distributed"]["shapes"] == [[8, 4], [4]]
    sglang_accepts(io_struct.InitWeightsUpdateGroupReqInput, bodies["/init_weights_update_group"])
    sglang_accepts(io_struct.UpdateWeightsFromDistributedReqInput, bodies["/update_weights_from_distributed"])
    sglang_accepts(io_struct.UpdateWeightsFromTensorReqInput, bodies["/update_weights_from_tensor"])
    sglang_accepts(io_struct.DestroyWeightsUpdateGroupReqInput, bodies["/destroy_weights_update_group"])


async def test_a_refused_sglang_transfer_raises_with_sglangs_message():
    async with StandIn(refuse="/update_weights_from_distributed") as url, SGLangClient(url) as client:
        with pytest.raises(EngineRejected, match="400: NCCL group not initialized"):
            await sglang_weights.update_weights_from_distributed(client, ["w"], ["float32"], [[1]])


CHECK_VLLM = """
import json, sys
from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferInitInfo, NCCLWeightTransferUpdateInfo
from vllm.entrypoints.rl.online.api_router import router
bodies = json.loads(sys.argv[1])
NCCLWeightTransferInitInfo(**bodies["/init_weight_transfer_engine"]["init_info"])
NCCLWeightTransferUpdateInfo(**bodies["/update_weights"]["update_info"])
print(json.dumps(sorted(route.path for route in router.routes)))
"""


async def test_vllm_transfer_calls_match_vllms_routes_and_classes(vllm_py):
    stand_in = StandIn()
    async with stand_in as url, VLLMClient(url) as client:
        init = vllm_weights.nccl_init_info(master_address="10.0.0.5", master_port=29600, rank_offset=1, world_size=2)
        await vllm_weights.init_weight_transfer_engine(client, init)
        await vllm_weights.start_weight_update(client)
        await vllm_weights.update_weights(client, vllm_weights.nccl_update_info(TENSORS))
        await vllm_weights.finish_weight_update(client, "3")
        await vllm_weights.shutdown_weight_transfer_engine(client)
    bodies = stand_in.bodies
    assert bodies["/finish_weight_update"] == {"weight_version": "3"}
    assert bodies["/update_weights"]["update_info"]["dtype_names"] == ["bfloat16", "float32"]
    done = subprocess.run(
        [str(vllm_py), "-c", CHECK_VLLM, json.dumps(bodies)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    routes = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert set(bodies) <= routes, set(bodies) - routes
