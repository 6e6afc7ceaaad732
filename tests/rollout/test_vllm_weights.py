"""The folder vLLM reloads a tied model from: the checkpoint's files linked, plus the output
head as a copy of the embeddings (single file and sharded with an index); untied folders and
folders that already hold the head are used as they are."""

from __future__ import annotations

import json

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from roost.rollout.engine_api.vllm_weights import remove_stage, staged_for_reload


def checkpoint(folder, tied: bool, index: bool = False, head: bool = False):
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"tie_word_embeddings": tied}))
    embed, layer = torch.arange(6.0).reshape(3, 2), torch.ones(2, 2)
    if index:
        save_file({"model.embed_tokens.weight": embed}, folder / "a.safetensors")
        save_file({"model.norm.weight": layer}, folder / "b.safetensors")
        weight_map = {"model.embed_tokens.weight": "a.safetensors", "model.norm.weight": "b.safetensors"}
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    else:
        extra = {"lm_head.weight": embed.clone()} if head else {}
        save_file(
            {"model.embed_tokens.weight": embed, "model.norm.weight": layer, **extra}, folder / "model.safetensors"
        )
    return folder


def head_of(stage):
    with safe_open(stage / "lm_head.safetensors", "pt") as tensors:
        return tensors.get_tensor("lm_head.weight")


def test_a_tied_checkpoint_is_staged_with_its_head(tmp_path):
    folder = checkpoint(tmp_path / "step-1", tied=True)
    stage = staged_for_reload(folder)
    assert stage is not None and stage.parent == tmp_path
    assert (stage / "model.safetensors").resolve() == (folder / "model.safetensors").resolve()
    assert torch.equal(head_of(stage), torch.arange(6.0).reshape(3, 2))
    remove_stage(stage)
    assert not stage.exists() and (folder / "model.safetensors").is_file()


def test_a_sharded_tied_checkpoint_lists_the_head_in_its_index(tmp_path):
    stage = staged_for_reload(checkpoint(tmp_path / "step-2", tied=True, index=True))
    index = json.loads((stage / "model.safetensors.index.json").read_text())
    assert index["weight_map"]["lm_head.weight"] == "lm_head.safetensors"
    assert torch.equal(head_of(stage), torch.arange(6.0).reshape(3, 2))


def test_folders_that_need_nothing_are_used_as_they_are(tmp_path):
    assert staged_for_reload(checkpoint(tmp_path / "untied", tied=False)) is None
    assert staged_for_reload(checkpoint(tmp_path / "with-head", tied=True, head=True)) is None
    assert staged_for_reload(tmp_path / "not-here") is None
