"""vLLM's ways to new weights: the checkpoint folder its in-place reload needs, and (at the
end) the calls of its weight-transfer API.

vLLM 0.32 reloads weights layer by layer, and a model whose output head is tied to its input
embeddings (`tie_word_embeddings`, as the small Qwen3 models and roost's tiny models) loses
the tie on reload: the embeddings take the new weights and the head keeps the old ones, so
every logprob after the update is wrong (seen here: off by 2.5 nats on the tiny model, and
a trained policy served as if untrained). With `lm_head.weight` in the checkpoint the head is
loaded too and vLLM's logprobs equal the checkpoint's own (to 1e-6). Hugging Face checkpoints
of tied models leave that tensor out, so this module stages a folder beside the checkpoint
that links its files and adds the head as a copy of the embeddings.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

INDEX = "model.safetensors.index.json"
HEAD = "lm_head.weight"
HEAD_FILE = "lm_head.safetensors"


def _weight_files(folder: Path) -> dict[str, str]:
    """Each tensor name → the safetensors file holding it."""
    from safetensors import safe_open

    index = folder / INDEX
    if index.is_file():
        return dict(json.loads(index.read_text())["weight_map"])
    names: dict[str, str] = {}
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(file, "pt") as tensors:
            names.update({name: file.name for name in tensors.keys()})
    return names


def needs_head(folder: Path) -> bool:
    """Whether `folder` is a local checkpoint of a tied model that lacks `lm_head.weight`."""
    config = folder / "config.json"
    if not config.is_file() or not json.loads(config.read_text()).get("tie_word_embeddings"):
        return False
    return HEAD not in _weight_files(folder)


def stage_with_head(folder: Path) -> Path:
    """A new folder beside `folder`: links to its files, plus `lm_head.weight` (a copy of the
    embeddings) in its own file, listed in the index if there is one. Remove it after the reload."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    files = _weight_files(folder)
    embed = next((name for name in files if name.endswith("embed_tokens.weight")), None)
    if embed is None:
        raise ValueError(f"{folder} ties its output head to embeddings it does not contain (no *embed_tokens.weight)")
    stage = Path(tempfile.mkdtemp(prefix=f".{folder.name}-vllm-", dir=folder.parent))
    for item in folder.iterdir():
        if item.is_file() and item.name != INDEX:
            (stage / item.name).symlink_to(item.resolve())
    with safe_open(folder / files[embed], "pt") as tensors:
        save_file({HEAD: tensors.get_tensor(embed).clone()}, stage / HEAD_FILE, metadata={"format": "pt"})
    if (folder / INDEX).is_file():
        index = json.loads((folder / INDEX).read_text())
        index["weight_map"][HEAD] = HEAD_FILE
        (stage / INDEX).write_text(json.dumps(index))
    return stage


def staged_for_reload(folder: Path) -> Path | None:
    """The staged folder to reload `folder` from (remove it afterwards), or None when `folder`
    itself will do (untied, has its head, or not a folder on this machine)."""
    return stage_with_head(folder) if folder.is_dir() and needs_head(folder) else None


def remove_stage(stage: Path) -> None:
    shutil.rmtree(stage, ignore_errors=True)


# vLLM 0.32's weight-transfer API (`vllm/entrypoints/rl/online/api_router.py`), for a trainer that
# shares no disk with vLLM: start the server with `--weight-transfer-config '{"backend": "nccl"}'`
# (or "ipc", same host), then init once, and per update start, send (update_weights: the
# metadata; the tensors go over the backend's own channel), finish. Every backend vLLM 0.32
# registers moves CUDA memory (nccl and sparse_nccl: NCCL through PyNcclCommunicator; ipc: CUDA
# IPC handles; sharded_rdt, nccl_m2n: GPU buffers), so none runs on vLLM's CPU build, and roost's
# trainer does not yet join the NCCL group: these calls are built, contract-tested against vLLM's
# classes, and not run.
TRANSFER_CONFIG_FLAG = "--weight-transfer-config"


def nccl_init_info(*, master_address: str, master_port: int, rank_offset: int, world_size: int) -> dict:
    """`init_info` for the nccl backend (vLLM's `NCCLWeightTransferInitInfo`, TCP rendezvous):
    the trainer is rank 0 of the group, vLLM's workers start at `rank_offset`."""
    return {
        "master_address": master_address,
        "master_port": master_port,
        "rank_offset": rank_offset,
        "world_size": world_size,
    }


def nccl_update_info(tensors: dict) -> dict:
    """`update_info` for the nccl backend (vLLM's `NCCLWeightTransferUpdateInfo`): the name, dtype
    and shape of each tensor the trainer broadcasts next, in that order."""
    return {
        "names": list(tensors),
        "dtype_names": [str(t.dtype).removeprefix("torch.") for t in tensors.values()],
        "shapes": [list(t.shape) for t in tensors.values()],
    }


async def init_weight_transfer_engine(client, init_info: dict) -> dict:
    """`client`: a `VLLMClient` (any `EngineHTTP`)."""
    return await client.post("/init_weight_transfer_engine", {"init_info": init_info})


async def start_weight_update(client) -> dict:
    return await client.post("/start_weight_update")


async def update_weights(client, update_info: dict | list[dict]) -> dict:
    return await client.post("/update_weights", {"update_info": update_info})


async def finish_weight_update(client, weight_version: str | None = None) -> dict:
    return await client.post("/finish_weight_update", {"weight_version": weight_version})


async def shutdown_weight_transfer_engine(client) -> dict:
    return await client.post("/shutdown_weight_transfer_engine")
