"""LoRA adapters in PEFT's layout: the one format the trainer saves, the engines load and PEFT
and vLLM read.

    spec = LoraSpec(rank=8, alpha=16, targets=("q_proj", "v_proj"))
    save_adapter(folder, spec, weights, base_model="/models/tiny")   # weights: PEFT key -> tensor
    adapter = load_adapter(folder)                                   # the same spec and weights

A folder holds `adapter_config.json` (PEFT's `LoraConfig`, written by PEFT) and
`adapter_model.safetensors`, whose keys are PEFT's names for the Hugging Face model
(`base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`). The adapted weight is
`W + scaling * B @ A` with `scaling = alpha / rank`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

ATTENTION_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_TARGETS = ("gate_proj", "up_proj", "down_proj")
# The unembedding is adapted only when asked: PEFT names it after the Hugging Face module.
UNEMBEDDING_TARGET = "lm_head"
KNOWN_TARGETS = (*ATTENTION_TARGETS, *MLP_TARGETS, UNEMBEDDING_TARGET)
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"


class AdapterError(ValueError):
    """An adapter folder or spec that cannot be used (the message says which part and why)."""


@dataclass(frozen=True)
class LoraSpec:
    """What an adapter adapts and how strongly."""

    rank: int = 8
    """Inner dimension of each `B @ A` pair."""
    alpha: float = 16.0
    """Scale numerator: the update is `alpha / rank * B @ A`."""
    dropout: float = 0.0
    """Dropout on the adapter's input during training (none at inference)."""
    targets: tuple[str, ...] = (*ATTENTION_TARGETS, *MLP_TARGETS)
    """Hugging Face module names adapted in every layer (`lm_head` for the unembedding)."""

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise AdapterError(f"LoRA rank must be at least 1, got {self.rank}")
        if not 0.0 <= self.dropout < 1.0:
            raise AdapterError(f"LoRA dropout must be in [0, 1), got {self.dropout}")
        unknown = sorted(set(self.targets) - set(KNOWN_TARGETS))
        if unknown or not self.targets:
            raise AdapterError(f"LoRA targets {unknown or '(none)'} are not among {list(KNOWN_TARGETS)}")

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank


def peft_key(layer: int | None, module: str, half: str) -> str:
    """PEFT's state-dict key of one adapter matrix (`half` is "lora_A" or "lora_B")."""
    if module == UNEMBEDDING_TARGET:
        return f"base_model.model.lm_head.{half}.weight"
    block = "self_attn" if module in ATTENTION_TARGETS else "mlp"
    return f"base_model.model.model.layers.{layer}.{block}.{module}.{half}.weight"


@dataclass
class Adapter:
    """An adapter in memory: its spec and its matrices under PEFT's keys."""

    spec: LoraSpec
    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    base_model: str | None = None


def peft_config(spec: LoraSpec, base_model: str | None = None):
    """PEFT's own `LoraConfig` for `spec`."""
    from peft import LoraConfig

    return LoraConfig(
        r=spec.rank,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=sorted(spec.targets),
        base_model_name_or_path=base_model,
        task_type="CAUSAL_LM",
    )


def config_dict(spec: LoraSpec, base_model: str | None = None) -> dict:
    """`adapter_config.json` as PEFT writes it (its sets as lists), without writing it."""
    config = peft_config(spec, base_model).to_dict()
    return {key: sorted(value) if isinstance(value, set) else value for key, value in config.items()}


def save_adapter(
    folder: str | Path, spec: LoraSpec, weights: dict[str, torch.Tensor], base_model: str | None = None
) -> Path:
    """Write `folder/adapter_config.json` (through PEFT's own LoraConfig) and the safetensors."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    peft_config(spec, base_model).save_pretrained(str(folder))
    save_file({k: v.detach().contiguous().cpu() for k, v in weights.items()}, str(folder / WEIGHTS_FILE))
    return folder


def load_adapter(folder: str | Path) -> Adapter:
    """Read an adapter PEFT (or roost) saved; an error names what is missing or unsupported."""
    from safetensors.torch import load_file

    folder = Path(folder)
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (folder / name).is_file():
            raise AdapterError(f"{folder} holds no {name}: not a PEFT LoRA adapter folder")
    config = json.loads((folder / CONFIG_FILE).read_text())
    return adapter_from_config(config, load_file(str(folder / WEIGHTS_FILE)), str(folder))


def adapter_from_config(config: dict, weights: dict[str, torch.Tensor], where: str) -> Adapter:
    """An adapter from its `adapter_config.json` as a dict and its tensors under PEFT's keys
    (`where` names their source in errors: a folder, or an update sent over HTTP)."""
    if config.get("peft_type", "LORA") != "LORA":
        raise AdapterError(f"{where}: peft_type {config.get('peft_type')!r} is not LORA")
    if "r" not in config:
        raise AdapterError(f"{where}: the adapter config has no rank `r`")
    targets = config.get("target_modules") or ()
    if isinstance(targets, str):
        raise AdapterError(f"{where}: target_modules as a regex ({targets!r}) is not supported; list the modules")
    spec = LoraSpec(
        rank=int(config["r"]),
        alpha=float(config.get("lora_alpha", config["r"])),
        dropout=float(config.get("lora_dropout", 0.0)),
        targets=tuple(sorted(targets)),
    )
    if config.get("modules_to_save"):
        raise AdapterError(
            f"{where}: modules_to_save {config['modules_to_save']} trains whole modules; only LoRA pairs load"
        )
    # PEFT also saves a tied unembedding's base weight beside its pair; the base model has it already.
    pairs = {k: v for k, v in weights.items() if ".lora_A." in k or ".lora_B." in k}
    return Adapter(spec, pairs, config.get("base_model_name_or_path"))
