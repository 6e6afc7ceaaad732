"""Every SGLang launch roost builds (each shipped recipe's engine settings, through the launch
builder) is one SGLang's own argument parser (the installed `sglang`) accepts, on as many GPUs
as the recipe reserves, with the environment that makes its logprobs the model's own."""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path

import pytest

from roost.trainer.recipe import load_recipe
from roost.trainer.rl.services import engine_env, engine_launch, sglang_gpus

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
SGLANG_RECIPES = sorted(
    path.relative_to(RECIPES).as_posix()
    for path in RECIPES.rglob("*.yaml")
    if "sglang" in path.read_text() and load_recipe(path).engine.backend == "sglang"
)
KEY = "rek-test"


def sglang_parse(argv: list[str]) -> argparse.Namespace:
    """argv as `python -m sglang.launch_server` parses it (`prepare_server_args`' parser); its
    ServerArgs itself needs a GPU to build."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            return parser.parse_args(argv)
    except SystemExit:
        pytest.fail(f"SGLang refuses {argv}: {errors.getvalue().strip()}")


def test_the_shipped_gpu_recipes_run_sglang():
    assert {"alfworld/gpu.yaml", "hermes/gpu.yaml", "swe/gpu.yaml", "multi_agent/gpu.yaml"} <= set(SGLANG_RECIPES)


@pytest.mark.parametrize("name", SGLANG_RECIPES)
def test_each_recipes_sglang_launch_is_one_sglang_accepts_on_the_gpus_it_reserves(name, tmp_path):
    recipe = load_recipe(RECIPES / name)
    command, config = engine_launch(recipe, recipe.model.path, "127.0.0.1", 30000, KEY, tmp_path)
    assert config is None  # SGLang is told everything on its own command line
    assert command[1:3] == ["-m", "sglang.launch_server"]
    args = sglang_parse(command[3:])
    assert (args.model_path, args.port, args.api_key, args.dtype) == (
        recipe.model.path,
        30000,
        KEY,
        recipe.engine.dtype,
    )
    gpus = args.tensor_parallel_size * args.data_parallel_size * args.pipeline_parallel_size
    assert gpus == sglang_gpus(recipe.engine.args) == max(1, int(recipe.placement.engine_gpus))


@pytest.mark.parametrize("name", SGLANG_RECIPES)
def test_each_recipes_sglang_runs_with_the_models_own_logprobs(name):
    from sglang.srt.environ import Envs

    env = engine_env(load_recipe(RECIPES / name), KEY)
    assert env["RETURN_ORIGINAL_LOGPROB"] == "1" and hasattr(Envs, "RETURN_ORIGINAL_LOGPROB")
    assert env["ROOST_ENGINE_KEY"] == KEY


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--tp", "2"],
        ["--dp", "2", "--tp-size", "2"],
        ["--tensor-parallel-size", "4"],
        ["--pp-size", "2", "--data-parallel-size", "2"],
        ["--dtype", "bfloat16", "--tp", "2"],
    ],
)
def test_the_gpu_count_is_read_as_sglang_reads_its_flags(argv):
    args = sglang_parse(["--model-path", "m", *argv])
    assert sglang_gpus(argv) == args.tensor_parallel_size * args.data_parallel_size * args.pipeline_parallel_size


def test_an_engine_reservation_sglang_would_not_use_is_refused(tmp_path):
    recipe = load_recipe(RECIPES / "hermes/gpu.yaml", ["engine.args=[--mem-fraction-static, '0.6']"])
    assert recipe.placement.engine_gpus == 2
    with pytest.raises(
        ValueError, match=r"reserves 2 GPUs .* start it on 1 .* add --tp 2 \(or --dp 2\) to engine.args"
    ):
        engine_launch(recipe, "m", "127.0.0.1", 30000, KEY, tmp_path)
