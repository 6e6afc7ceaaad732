"""Checkpoints copied to a storage URI (`schedule.checkpoint_uri`, fsspec) and read back into a run
folder on another node: a `file://` URI in another temp folder and `memory://`. The checkpoint is a
real one: the tiny model's weights written by `write_checkpoint`, a trainer state saved by torch."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from pydantic import ValidationError

from roost.trainer.checkpoint import RunState, checkpoint_dir, prune_checkpoints

fsspec = pytest.importorskip("fsspec", reason="schedule.checkpoint_uri needs fsspec, which is not installed")

from roost.trainer.checkpoint_mirror import CheckpointMirror  # noqa: E402
from roost.trainer.recipe import ScheduleConfig  # noqa: E402


@pytest.fixture(params=["file", "memory"])
def uri(request, tmp_path_factory) -> str:
    if request.param == "file":
        return f"file://{tmp_path_factory.mktemp('bucket')}/runs/a"
    return f"memory://roost-test-{uuid.uuid4().hex[:8]}/runs/a"


def _save_checkpoint(run_dir: Path, label: str, tiny_model_path: Path, state: RunState) -> Path:
    """What the loop's `_save` leaves: hf/ weights, trainer/ state, state.json naming them."""
    import torch

    from roost.trainer.hf_checkpoint import read_weights, write_checkpoint

    folder = checkpoint_dir(run_dir, label)
    weights = {k: v * (1 + state.step) for k, v in read_weights(tiny_model_path).items()}
    write_checkpoint(weights, tiny_model_path, folder / "hf")
    (folder / "trainer").mkdir(parents=True)
    torch.save({"step": state.step, "exp_avg": torch.randn(8)}, folder / "trainer" / "rank-0.pt")
    state.checkpoint = str(folder)
    state.save(run_dir)
    prune_checkpoints(run_dir, 1, state.checkpoint, state.reference)  # keep_checkpoints: 1
    return folder


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_run_resumes_from_the_uri_in_a_folder_that_never_saw_it(uri, tmp_path, tiny_model_path):
    run_dir, elsewhere = tmp_path / "node-a" / "run", tmp_path / "node-b" / "run"
    (run_dir / "model").mkdir(parents=True)
    (run_dir / "model" / "config.json").write_text('{"built": true}')  # a small-vocab model the run built
    (run_dir / "evals.json").write_text('{"before": {"success_rate": 0.5}}')
    mirror = CheckpointMirror(uri)
    state = RunState(model=str(run_dir / "model"), consumed_groups=["g0"], weight_version=1)
    for step in (1, 2, 3):
        state.step, state.weight_version = step, step + 1
        sft = _save_checkpoint(run_dir, f"step-{step}", tiny_model_path, state)
        state.reference = state.reference or str(sft / "hf")  # the KL reference: kept, never pruned
        mirror.push(run_dir, state)

    pulled = CheckpointMirror(uri).pull(elsewhere)
    assert pulled is not None and (pulled.step, pulled.weight_version) == (3, 4)
    assert pulled.checkpoint == str(elsewhere / "checkpoints" / "step-3")
    assert pulled.model == str(elsewhere / "model") and pulled.consumed_groups == ["g0"]
    assert pulled.reference == str(elsewhere / "checkpoints" / "step-1" / "hf")
    assert RunState.load(elsewhere) == pulled  # written where the resume reads it
    for name in ("checkpoints/step-3", "checkpoints/step-1/hf", "model"):  # of step-1 the reference only
        assert _files(elsewhere / name) == _files(run_dir / name), name  # byte for byte
    assert (elsewhere / "evals.json").read_text() == (run_dir / "evals.json").read_text()
    # the URI keeps what output_dir keeps: step-2 was pruned there, so it is gone here too
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-1", "step-3"]
    assert not (elsewhere / "checkpoints" / "step-2").exists()


def test_a_local_state_as_far_on_is_kept_and_an_older_one_is_brought_forward(uri, tmp_path, tiny_model_path):
    run_dir = tmp_path / "run"
    state = RunState(step=2, weight_version=2)
    _save_checkpoint(run_dir, "step-2", tiny_model_path, state)
    mirror = CheckpointMirror(uri)
    mirror.push(run_dir, state)
    assert mirror.pull(run_dir) == RunState.load(run_dir)  # nothing newer at the URI
    behind = tmp_path / "behind"
    RunState(step=1, weight_version=1).save(behind)
    assert mirror.pull(behind).step == 2 and (behind / "checkpoints" / "step-2" / "hf" / "model.safetensors").is_file()
    assert CheckpointMirror(f"{uri}-empty").pull(tmp_path / "fresh") is None  # nothing anywhere: a new run


def test_a_recipe_with_a_uri_fsspec_cannot_open_is_refused_when_it_loads():
    with pytest.raises(ValidationError, match="cannot be opened.*s3fs"):
        ScheduleConfig(checkpoint_uri="nosuchproto://bucket/run")
    assert ScheduleConfig(checkpoint_uri="memory://bucket/run").checkpoint_uri == "memory://bucket/run"
