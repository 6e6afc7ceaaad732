"""`roost envs check`: the protocol's conformance suite passes on every registered env with its own
small config, passes on a toy env that keeps every rule, and names the one rule each broken variant breaks."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from roost.envs.conformance import CheckConfig, ConformanceError, Verdict, check_env, check_named
from roost.envs.conformance.rules import RULES
from roost.envs.protocol import TextAction
from roost.envs.registry import ENVS
from roost.tests.envs.broken_envs import BROKEN, KeptEnv, LeakyEnv

TOY = CheckConfig(probe=TextAction("peek"), finish=(TextAction("inc"),) * 3)
NEEDS = {"osworld": ("Xvfb", "mousepad"), "swe": ("bwrap", "git"), "hermes": ("bwrap",)}
HERMES_SKIPS = {"steps_return_a_step", "refusals_leave_the_episode_unchanged", "finished_episodes_refuse_steps"}


@pytest.mark.parametrize("name", sorted(ENVS))
async def test_every_registered_env_keeps_the_protocol(name):
    missing = [tool for tool in NEEDS.get(name, ()) if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"the {name} check needs {', '.join(missing)} (.ci/apt-packages.txt)")
    report = await check_named(name)
    report.raise_for_failures()
    skipped = {r.rule for r in report.results if r.verdict is Verdict.SKIPPED}
    # hermes' one action starts hermes-agent against a model: nothing to probe or finish with
    assert skipped == (HERMES_SKIPS if name == "hermes" else set()), report.results
    assert [r.rule for r in report.results] == [rule.__name__ for rule in RULES]


async def test_a_toy_env_that_keeps_every_rule_passes_them_all():
    report = await check_env(KeptEnv, TOY)
    assert report.env == "counter"
    assert {r.verdict for r in report.results} == {Verdict.PASSED}, report.results


@pytest.mark.parametrize("kind", sorted(BROKEN))
async def test_a_broken_env_fails_the_rule_it_breaks_and_only_that(kind):
    env, rule = BROKEN[kind]
    try:
        report = await check_env(env, TOY)
    finally:
        for helper in LeakyEnv.helpers:
            helper.kill()
            helper.wait()
    assert [r.rule for r in report.failures] == [rule], report.results
    with pytest.raises(ConformanceError) as raised:
        report.raise_for_failures()
    assert raised.value.rule == rule and str(raised.value).startswith(f"{rule}: ")


async def test_without_a_probe_the_comparing_rules_are_skipped_not_passed():
    report = await check_env(KeptEnv, CheckConfig())
    skipped = {r.rule for r in report.results if r.verdict is Verdict.SKIPPED}
    assert skipped == HERMES_SKIPS and not report.failures


def test_the_cli_names_the_broken_rule_and_exits_1():
    entry = "roost.tests.envs.broken_envs:make_factory"
    run = [sys.executable, "-m", "roost.cli.main", "envs", "check", entry, "--probe-text", "peek"]
    broken = subprocess.run([*run, "--env-arg", "kind=sloppy_refusals"], capture_output=True, text=True, timeout=120)
    assert broken.returncode == 1, broken.stderr
    assert "failed  refusals_leave_the_episode_unchanged" in broken.stdout
    assert "breaks 1 rule(s): refusals_leave_the_episode_unchanged" in broken.stderr
    kept = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "counter keeps the env protocol" in kept.stderr
