"""tinker-cookbook's supervised loop (`tinker_cookbook.supervised.train.main`), unchanged, against a
real `roost tinker serve` on the tiny model: a few steps on a chat file the test writes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from .conftest import API_KEY, tinker_server
from .cookbook_runs import read_metrics

pytestmark = pytest.mark.slow

# One short chat repeated: a few steps at a high learning rate must lower its NLL.
CHAT = {
    "messages": [
        {"role": "user", "content": "What colour is the sky?"},
        {"role": "assistant", "content": "The sky is blue."},
    ]
}


def write_chats(path: Path, count: int) -> Path:
    path.write_text("".join(json.dumps(CHAT) + "\n" for _ in range(count)))
    return path


@pytest.fixture(scope="module")
def model_url(tmp_path_factory, tiny_model_path: Path):
    """The server with the tiny model's folder as its base model: the cookbook names the model by the
    same string it loads the tokenizer from, so the folder path serves as both."""
    with tinker_server(tmp_path_factory.mktemp("cookbook"), "--base-model", str(tiny_model_path)) as url:
        yield url


def test_the_cookbook_supervised_loop_runs_and_its_loss_falls(model_url, tiny_model_path, tmp_path, monkeypatch):
    from tinker_cookbook.supervised import train
    from tinker_cookbook.supervised.data import FromConversationFileBuilder
    from tinker_cookbook.supervised.types import ChatDatasetBuilderCommonConfig

    # The cookbook's ServiceClient reads its key from the environment, as it does against Tinker.
    monkeypatch.setenv("TINKER_API_KEY", API_KEY)
    log_path = tmp_path / "run"
    config = train.Config(
        log_path=str(log_path),
        model_name=str(tiny_model_path),
        recipe_name="roost_sft_test",
        renderer_name="qwen3",
        dataset_builder=FromConversationFileBuilder(
            file_path=str(write_chats(tmp_path / "chats.jsonl", 8)),
            common_config=ChatDatasetBuilderCommonConfig(
                model_name_for_tokenizer=str(tiny_model_path),
                renderer_name="qwen3",
                max_length=64,
                batch_size=2,
            ),
        ),
        learning_rate=1e-2,
        lr_schedule="constant",
        lora_rank=8,
        base_url=model_url,
        save_every=0,
        eval_every=0,
        infrequent_eval_every=0,
    )
    asyncio.run(train.main(config))

    rows = read_metrics(log_path)
    losses = [row["train_mean_nll"] for row in rows if "train_mean_nll" in row]
    assert len(losses) == 4
    assert losses[-1] < losses[0], losses
    checkpoints = [json.loads(line) for line in (log_path / "checkpoints.jsonl").read_text().splitlines()]
    assert checkpoints[-1]["name"] == "final"
