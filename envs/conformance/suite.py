"""Run the rules against one env and report each: passed, failed (and why) or skipped."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass

from roost.envs.conformance.processes import descendants
from roost.envs.conformance.rules import RULES, Rule
from roost.envs.conformance.trial import CheckConfig, RuleFailed, RuleSkipped, Trial
from roost.envs.protocol import EnvFactory


class Verdict(enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class RuleResult:
    rule: str
    verdict: Verdict
    detail: str
    seconds: float


class ConformanceError(Exception):
    """An env breaks a rule of the protocol; `rule` names the first it breaks."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule = rule


@dataclass(frozen=True)
class CheckReport:
    env: str
    results: tuple[RuleResult, ...]

    @property
    def failures(self) -> list[RuleResult]:
        return [r for r in self.results if r.verdict is Verdict.FAILED]

    def raise_for_failures(self) -> None:
        """Raise `ConformanceError` naming the first broken rule (and how many others broke)."""
        if failures := self.failures:
            more = f" (and {len(failures) - 1} more: {', '.join(r.rule for r in failures[1:])})" if failures[1:] else ""
            raise ConformanceError(failures[0].rule, failures[0].detail + more)


async def check_env(factory: EnvFactory, config: CheckConfig = CheckConfig()) -> CheckReport:
    """Every rule against one env made by `factory`, in order; the env is closed at the end."""
    before = descendants()
    env = factory()
    trial = Trial(factory, env, config, processes_before=before)
    results = []
    try:
        for rule in RULES:
            results.append(await _run(rule, trial))
    finally:
        await env.close()
    name = env.info.name if results[0].verdict is Verdict.PASSED else type(env).__name__
    return CheckReport(name, tuple(results))


async def check_named(env: str, config: CheckConfig | None = None) -> CheckReport:
    """`check_env` on a registered env (with its own check config unless `config` is given) or on
    any `module:function` entry point, as `roost envs check` does."""
    from roost.envs.registry import load_factory, resolve

    config = config or resolve(env).load_check()
    factory = await asyncio.to_thread(load_factory, env, **config.env_args)
    return await check_env(factory, config)


async def _run(rule: Rule, trial: Trial) -> RuleResult:
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        detail, verdict = await asyncio.wait_for(rule(trial), trial.config.rule_timeout_s), Verdict.PASSED
    except RuleSkipped as exc:
        detail, verdict = str(exc), Verdict.SKIPPED
    except RuleFailed as exc:
        detail, verdict = str(exc), Verdict.FAILED
    except TimeoutError:
        detail, verdict = f"the env took longer than {trial.config.rule_timeout_s:.0f}s", Verdict.FAILED
    except Exception as exc:  # noqa: BLE001 - whatever the env raised is the finding
        detail, verdict = f"the env raised {type(exc).__name__}: {exc}", Verdict.FAILED
    return RuleResult(rule.__name__, verdict, detail, round(loop.time() - started, 3))
