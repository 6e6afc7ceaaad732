"""A checkpoint's files download the SDK's own way: `save_weights_external` exports the LoRA
adapter in PEFT's layout, `get_external_weights_urls` signs a URL per file, and the SDK's
`tinker checkpoint download` fetches them with no key (urllib), for a saved state too (through a
temporary export it deletes after). A URL whose signature does not match gets a 403."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from .conftest import API_KEY
from .test_bad_input import _datum

tinker = pytest.importorskip("tinker")


@pytest.fixture(scope="module")
def trained(service):
    training = service.create_lora_training_client(base_model="tiny", rank=4).result()
    training.forward_backward([_datum([5, 6, 7, 8])], "cross_entropy").result()
    training.optim_step(tinker.types.AdamParams(learning_rate=1e-2)).result()
    return training


def _download(url: str, path: str, output) -> subprocess.CompletedProcess:
    env = {**os.environ, "TINKER_BASE_URL": url, "TINKER_API_KEY": API_KEY}
    command = [sys.executable, "-m", "tinker.cli", "checkpoint", "download", path, "--output", str(output)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def _adapter_of(folder) -> tuple[dict, set[str]]:
    from safetensors import safe_open

    config = json.loads((folder / "adapter_config.json").read_text())
    with safe_open(folder / "adapter_model.safetensors", "pt") as tensors:
        return config, set(tensors.keys())


def test_external_weights_download_as_a_peft_adapter(tinker_url, trained, tmp_path):
    path = trained.save_weights_external("export").result().path
    assert path == f"tinker://{trained.model_id}/external_weights/export"
    rest = tinker.RestClient(base_url=tinker_url, api_key=API_KEY)
    urls = rest.get_external_weights_urls(path).result().urls
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(urls)

    done = _download(tinker_url, path, tmp_path)
    assert done.returncode == 0, done.stderr
    config, keys = _adapter_of(tmp_path / path.replace("tinker://", "").replace("/", "_"))
    assert config["r"] == 4 and config["peft_type"] == "LORA"
    assert any("lora_A" in k for k in keys) and any("lora_B" in k for k in keys)

    forged = urls["adapter_config.json"].replace("/external_files/", "/external_files/0")
    refused = httpx.get(forged)
    assert refused.status_code == 403 and "signature does not match" in refused.json()["detail"]


def test_a_saved_state_downloads_through_a_temporary_export(tinker_url, trained, tmp_path):
    state = trained.save_state("to-download").result().path
    done = _download(tinker_url, state, tmp_path)
    assert done.returncode == 0, done.stderr
    config, _ = _adapter_of(tmp_path / state.replace("tinker://", "").replace("/", "_"))
    assert config["r"] == 4
    rest = tinker.RestClient(base_url=tinker_url, api_key=API_KEY)
    kinds = [c.checkpoint_type for c in rest.list_user_checkpoints().result().checkpoints]
    assert "training" in kinds and kinds.count("external") == 1  # the CLI's temporary export was deleted
