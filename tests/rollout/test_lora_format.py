"""roost's adapter folder is PEFT's: what PEFT saves loads here under the keys roost names, and
what roost saves PEFT loads onto the Hugging Face model."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig as PeftLoraConfig
from peft import PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

from roost.rollout.lora import AdapterError, LoraSpec, load_adapter, peft_key, save_adapter


def test_peft_saved_adapter_loads_under_roosts_keys(tiny_model_path, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    targets = ["q_proj", "down_proj", "lm_head"]
    peft = get_peft_model(model, PeftLoraConfig(r=4, lora_alpha=8, target_modules=targets, task_type="CAUSAL_LM"))
    peft.save_pretrained(tmp_path / "peft")
    adapter = load_adapter(tmp_path / "peft")
    assert adapter.spec == LoraSpec(rank=4, alpha=8.0, dropout=0.0, targets=tuple(sorted(targets)))
    layers = model.config.num_hidden_layers
    expected = {peft_key(None, "lm_head", h) for h in ("lora_A", "lora_B")} | {
        peft_key(i, m, h) for i in range(layers) for m in ("q_proj", "down_proj") for h in ("lora_A", "lora_B")
    }
    assert set(adapter.weights) == expected


def test_roost_saved_adapter_is_what_peft_computes_with(tiny_model_path, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    config = model.config
    spec = LoraSpec(rank=2, alpha=6.0, targets=("v_proj",))
    generator = torch.Generator().manual_seed(0)
    v_out = config.num_key_value_heads * config.head_dim
    weights = {}
    for i in range(config.num_hidden_layers):
        weights[peft_key(i, "v_proj", "lora_A")] = torch.randn(2, config.hidden_size, generator=generator)
        weights[peft_key(i, "v_proj", "lora_B")] = torch.randn(v_out, 2, generator=generator)
    save_adapter(tmp_path / "ours", spec, weights, base_model=str(tiny_model_path))
    peft = PeftModel.from_pretrained(model, tmp_path / "ours")
    layer = peft.base_model.model.model.layers[0].self_attn.v_proj
    assert layer.scaling["default"] == pytest.approx(spec.scaling)
    torch.testing.assert_close(layer.lora_B["default"].weight, weights[peft_key(0, "v_proj", "lora_B")])


def test_bad_specs_and_folders_are_named(tmp_path):
    with pytest.raises(AdapterError, match="rank"):
        LoraSpec(rank=0)
    with pytest.raises(AdapterError, match="wq"):
        LoraSpec(targets=("wq",))
    with pytest.raises(AdapterError, match="adapter_config.json"):
        load_adapter(tmp_path)
