"""SGLang's weight-transfer routes, for a trainer that shares no disk with the engine.

    await init_weights_update_group(client, master_address="10.0.0.5", master_port=29600,
                                    rank_offset=1, world_size=2)         # NCCL group: trainer rank 0
    # ... the trainer broadcasts each tensor on that group, while:
    await update_weights_from_distributed(client, names, dtypes, shapes, weight_version="3")

or, on the engine's own host, `update_weights_from_tensor` with tensors SGLang's
`MultiprocessingSerializer` turned into CUDA IPC handles. The bodies mirror SGLang 0.5.3's
protocol classes (`InitWeightsUpdateGroupReqInput`, `UpdateWeightsFromDistributedReqInput`,
`UpdateWeightsFromTensorReqInput`, `DestroyWeightsUpdateGroupReqInput`; the contract tests build
them with those classes); the answers are `{"success", "message"}`, a 400 on failure.

What roost does not do here: join the trainer to the NCCL group and broadcast (that needs GPUs
on both sides), nor serialize tensors into IPC handles. Roost's embedded engine does not serve
these routes; it takes tensors over HTTP instead (`weight_upload`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from roost.rollout.engine_api.sglang_client import EngineProtocolError, SGLangClient, request_body

GROUP = "weight_update_group"


class InitWeightsUpdateGroupRequest(BaseModel):
    """SGLang's `InitWeightsUpdateGroupReqInput`: the engine's ranks join a process group with the trainer."""

    model_config = ConfigDict(extra="forbid")

    master_address: str
    master_port: int
    rank_offset: int
    """The engine's first rank in the group (the trainer holds the ranks before it)."""
    world_size: int
    group_name: str = GROUP
    backend: str = "nccl"


class UpdateWeightsFromDistributedRequest(BaseModel):
    """SGLang's `UpdateWeightsFromDistributedReqInput`: receive these tensors by broadcast on the group."""

    model_config = ConfigDict(extra="forbid")

    names: list[str]
    dtypes: list[str]
    """torch dtype names without the `torch.` prefix (`bfloat16`)."""
    shapes: list[list[int]]
    group_name: str = GROUP
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: str | None = None


class UpdateWeightsFromTensorRequest(BaseModel):
    """SGLang's `UpdateWeightsFromTensorReqInput`: tensors serialized by SGLang's
    `MultiprocessingSerializer` (one entry per tensor-parallel rank, base64 text over HTTP)."""

    model_config = ConfigDict(extra="forbid")

    serialized_named_tensors: list[str]
    load_format: str | None = None
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: str | None = None


class DestroyWeightsUpdateGroupRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group_name: str = GROUP


class TransferAnswer(BaseModel):
    """What each of these routes answers."""

    model_config = ConfigDict(extra="ignore")

    success: bool
    message: str


async def _call(client: SGLangClient, path: str, request: BaseModel) -> TransferAnswer:
    answer = await client.post(path, request_body(request))
    try:
        return TransferAnswer.model_validate(answer)
    except ValidationError as exc:
        raise EngineProtocolError(f"not an SGLang {path} answer: {str(answer)[:200]}") from exc


async def init_weights_update_group(client: SGLangClient, **fields: Any) -> TransferAnswer:
    """`fields`: those of `InitWeightsUpdateGroupRequest`."""
    return await _call(client, "/init_weights_update_group", InitWeightsUpdateGroupRequest(**fields))


async def update_weights_from_distributed(
    client: SGLangClient, names: list[str], dtypes: list[str], shapes: list[list[int]], **fields: Any
) -> TransferAnswer:
    request = UpdateWeightsFromDistributedRequest(names=names, dtypes=dtypes, shapes=shapes, **fields)
    return await _call(client, "/update_weights_from_distributed", request)


async def update_weights_from_tensor(
    client: SGLangClient, serialized_named_tensors: list[str], **fields: Any
) -> TransferAnswer:
    request = UpdateWeightsFromTensorRequest(serialized_named_tensors=serialized_named_tensors, **fields)
    return await _call(client, "/update_weights_from_tensor", request)


async def destroy_weights_update_group(client: SGLangClient, group_name: str = GROUP) -> TransferAnswer:
    return await _call(client, "/destroy_weights_update_group", DestroyWeightsUpdateGroupRequest(group_name=group_name))
