"""`trainer.lora` in recipes: validated with errors that name the key, passed to the trainer, and a
two-step LoRA run of the ALFWorld CPU recipe whose checkpoint holds a PEFT adapter that PEFT loads
and whose merged weights are PEFT's merge of it; each weight update sent the engine the adapter
alone, every recorded call names the run's adapter at the version it was sampled with; the run
then resumes a third step from the checkpoint."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import torch

from roost.rollout.lora import LoraSpec
from roost.tests.trainer.test_recipes_run import RECIPES, recipe_overrides, rl_metrics
from roost.tests.trainer.test_rl_loop import local_ray  # noqa: F401 (a fixture)
from roost.trainer.recipe import RecipeError, load_recipe, validate_recipe

MINIMAL = {"name": "t", "env": {"name": "alfworld"}}
LORA = "trainer.lora={rank: 4, alpha: 8, targets: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]}"


def test_the_lora_section_is_typed_and_reaches_the_trainer():
    from roost.trainer.rl.trainer import train_config

    assert validate_recipe(MINIMAL).trainer.lora is None
    recipe = validate_recipe({**MINIMAL, "trainer": {"lora": {"rank": 4, "targets": ["q_proj", "lm_head"]}}})
    config = train_config(recipe, "model", adapter="ckpt/adapter")
    assert config.lora == LoraSpec(rank=4, alpha=16.0, dropout=0.0, targets=("q_proj", "lm_head"))
    assert config.adapter == "ckpt/adapter"
    assert train_config(validate_recipe(MINIMAL), "model").lora is None


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            {"targets": ["q_proj", "qkv"]},
            r"trainer.lora: .*targets \['qkv'\] are not modules roost adapts; use some of q_proj",
        ),
        ({"targets": []}, r"trainer.lora: .*targets \(none\)"),
        ({"rank": 0}, r"trainer.lora.rank: Input should be greater than or equal to 1"),
        ({"dropout": 1.0}, r"trainer.lora.dropout: Input should be less than 1"),
        ({"ranks": 4}, r"trainer.lora.ranks: unknown key; allowed here: alpha, dropout, rank, targets"),
    ],
)
def test_a_bad_lora_section_names_the_key_and_what_is_allowed(section, message):
    with pytest.raises(RecipeError, match=message):
        validate_recipe({**MINIMAL, "trainer": {"lora": section}})


def test_lora_refuses_the_transformer_engine_spec():
    with pytest.raises(RecipeError, match="trainer.lora runs on the local layer specs: set trainer.attention"):
        validate_recipe({**MINIMAL, "trainer": {"attention": "te", "lora": {}}})


def test_a_run_on_sglang_refuses_an_adapted_lm_head_on_a_tied_model(tiny_model_path):
    from roost.trainer.rl.loop import check_lora_model

    backend = "sglang"
    lm_head = {"trainer": {"lora": {"targets": ["q_proj", "lm_head"]}}, "engine": {"backend": backend}}
    with pytest.raises(RecipeError, match=f"lm_head, but .* ties its embeddings and engine.backend {backend}"):
        check_lora_model(validate_recipe({**MINIMAL, **lm_head}), str(tiny_model_path))
    q_only = {"trainer": {"lora": {"targets": ["q_proj"]}}, "engine": {"backend": backend}}
    check_lora_model(validate_recipe({**MINIMAL, **q_only}), str(tiny_model_path))
    check_lora_model(validate_recipe(MINIMAL), str(tiny_model_path))


@pytest.mark.parametrize("backend", ["embedded", "vllm"])
def test_roost_engine_and_vllm_take_an_adapted_lm_head_on_a_tied_model(tiny_model_path, backend):
    from roost.trainer.rl.loop import check_lora_model

    lora = {"lora": {"targets": ["q_proj", "lm_head"]}}
    check_lora_model(
        validate_recipe({**MINIMAL, "trainer": lora, "engine": {"backend": backend}}), str(tiny_model_path)
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_lora_run_of_the_alfworld_recipe_checkpoints_a_peft_adapter(tmp_path, local_ray):  # noqa: F811
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from roost.trainer import hf_checkpoint
    from roost.trainer.rl.loop import train

    run_dir = tmp_path / "run"
    recipe = RECIPES / "alfworld" / "cpu.yaml"
    summary = train(load_recipe(recipe, [*recipe_overrides("alfworld", run_dir, 2, tmp_path), LORA]))
    assert summary.steps == 2
    rl = rl_metrics(run_dir)
    assert [m["step"] for m in rl] == [1, 2] and all(m["updated"] for m in rl), rl
    state = json.loads((run_dir / "state.json").read_text())
    checkpoint = Path(state["checkpoint"])
    assert checkpoint.name == "step-2"
    base = AutoModelForCausalLM.from_pretrained(state["model"], dtype=torch.float32)
    peft = PeftModel.from_pretrained(base, str(checkpoint / "adapter"))
    assert peft.peft_config["default"].r == 4
    merged = peft.merge_and_unload().state_dict()
    exported = hf_checkpoint.read_weights(checkpoint / "hf")
    for name, tensor in exported.items():
        torch.testing.assert_close(tensor, merged[name], rtol=0, atol=1e-6, msg=name)
    trained = hf_checkpoint.read_weights(checkpoint / "hf")
    started = hf_checkpoint.read_weights(state["model"])
    assert not torch.equal(
        trained["model.layers.0.self_attn.q_proj.weight"], started["model.layers.0.self_attn.q_proj.weight"]
    )
    assert torch.equal(trained["model.norm.weight"], started["model.norm.weight"])  # not a LoRA target: frozen

    # the engine got the adapter alone at each update, and sampled every call with it
    from roost.trainer.weight_sync import folder_bytes

    adapter_bytes = folder_bytes(checkpoint / "adapter")
    assert [m["weight_sync_bytes"] for m in rl] == [adapter_bytes] * 2
    assert adapter_bytes < folder_bytes(state["model"]) / 10
    assert rl[1]["weight_version"] == rl[0]["weight_version"] + 1  # (after SFT's, one per step)
    with sqlite3.connect(run_dir / "trajectories.sqlite") as db:
        calls = db.execute("SELECT adapter, weight_version FROM calls").fetchall()
    assert calls and {adapter for adapter, _ in calls} == {"alfworld-grpo-cpu-lora"}
    # the first step's rollouts ran at the version before its update (SFT's adapter)
    versions = {version for _, version in calls}
    assert str(rl[0]["weight_version"] - 1) in versions
    assert versions <= {str(v) for v in range(rl[1]["weight_version"] + 1)}

    resumed = train(load_recipe(recipe, [*recipe_overrides("alfworld", run_dir, 3, tmp_path), LORA]))
    assert resumed.steps == 3
    assert [m["step"] for m in rl_metrics(run_dir)] == [1, 2, 3]
    assert (run_dir / "checkpoints" / "step-3" / "adapter" / "adapter_model.safetensors").is_file()
