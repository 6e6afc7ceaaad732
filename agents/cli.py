"""`roost eval`: run an agent on an env's tasks and print the success rate and mean reward;
`roost run --command "..."`: the same with any command as the agent."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import typer

from roost.agents.registry import AGENTS

if TYPE_CHECKING:
    from roost.agents.evaluate import EvalConfig, Evaluation


def register(app: typer.Typer, bench: typer.Typer) -> None:
    app.command("eval")(eval_command)
    app.command("run")(run_command)


def eval_command(
    env: str = typer.Argument(..., help="Env name (e.g. alfworld) or module:function entry point."),
    agent: str = typer.Option("tool", help=f"Agent: {', '.join(AGENTS)}, or module:Class."),
    env_url: str | None = typer.Option(None, help="A running env server; without it the env runs here."),
    base_url: str | None = typer.Option(None, help="OpenAI-compatible endpoint; a roost gateway also records."),
    model: str | None = typer.Option(None, help="Model name (default: the endpoint's first model)."),
    api_key: str | None = typer.Option(None, envvar="OPENAI_API_KEY", help="API key for --base-url."),
    admin_key: str | None = typer.Option(
        None,
        envvar="ROOST_ADMIN_KEY",
        show_envvar=True,
        help="The gateway's admin key, when --base-url is a roost gateway.",
    ),
    episodes: int = typer.Option(10, help="Episodes to run (tasks of the split, cycled)."),
    split: str = typer.Option("train", help="Task split."),
    task_id: list[str] = typer.Option([], "--task-id", help="Play these tasks of the split (repeatable, cycled)."),
    concurrency: int = typer.Option(8, help="Episodes at once (with --follow-admission: the most at once)."),
    follow_admission: bool = typer.Option(
        False,
        "--follow-admission",
        help="Start episodes only while the roost gateway's program-aware admission "
        "(--admission-programs) has room for them: fewer than --concurrency run while the engines are full.",
    ),
    max_turns: int = typer.Option(50, help="Turns per episode before the agent stops."),
    timeout_s: float = typer.Option(
        600.0, min=0.001, help="Seconds an episode's harness may run before it is cut off (status timeout, not scored)."
    ),
    env_arg: list[str] = typer.Option([], "--env-arg", help="KEY=VALUE for the env, when it runs here."),
    agent_arg: list[str] = typer.Option([], "--agent-arg", help="KEY=VALUE for the agent's constructor."),
    workers: int = typer.Option(min(os.cpu_count() or 1, 4), help="Env worker processes, when the env runs here."),
    run_id: str | None = typer.Option(None, help="Run id; sessions are grouped as RUN_ID/TASK_ID."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary and per-episode results as JSON."),
    progress: bool = typer.Option(True, help="Show a progress bar on stderr."),
    trace: bool = typer.Option(
        False,
        "--trace",
        help="A trace per episode over OTLP/HTTP (also on with the OTEL_* variables; docs/tracing.md).",
    ),
) -> None:
    """Evaluate an agent: success rate and mean reward over N episodes (env faults are not scored)."""
    import json

    from roost.agents.evaluate import EvalConfig
    from roost.envs.serve import parse_env_args

    config = EvalConfig(
        env=env,
        agent=agent,
        env_url=env_url,
        base_url=base_url,
        model=model,
        api_key=api_key,
        admin_key=admin_key,
        episodes=episodes,
        split=split,
        concurrency=concurrency,
        follow_admission=follow_admission,
        max_turns=max_turns,
        timeout_s=timeout_s,
        env_kwargs=parse_env_args(env_arg),
        agent_kwargs=parse_env_args(agent_arg),
        workers=workers,
        run_id=run_id,
        progress=progress,
        task_ids=tuple(task_id),
        trace=trace,
    )
    report = _played(config).report()
    if as_json:
        typer.echo(json.dumps(report, indent=1))
        return
    s = report
    rate = "n/a" if s["success_rate"] is None else f"{s['success_rate']:.2f}"
    reward = "n/a" if s["mean_reward"] is None else f"{s['mean_reward']:.3f}"
    typer.echo(
        f"{env} / {s['agent']} on {split}: success rate {rate}, mean reward {reward} "
        f"({s['scored']} scored of {s['episodes']}; infra errors {s['infra_errors']}, "
        f"agent errors {s['agent_errors']})"
    )


def run_command(
    command: str = typer.Option(
        ...,
        "--command",
        help="Shell command; gets ROOST_BASE_URL, OPENAI_BASE_URL, "
        "OPENAI_API_KEY, ROOST_SESSION_ID, ROOST_TASK_JSON, ROOST_ENV_STEP_URL, ROOST_REWARD_FILE.",
    ),
    env: str = typer.Option("swe", help="Env name or module:function entry point."),
    env_url: str | None = typer.Option(None, help="A running env server; without it the env runs here."),
    base_url: str | None = typer.Option(None, help="A roost gateway (recorded) or any OpenAI endpoint."),
    model: str | None = typer.Option(None, help="Model name, passed as ROOST_MODEL."),
    api_key: str | None = typer.Option(None, help="API key when --base-url is not a gateway."),
    admin_key: str | None = typer.Option(
        None,
        envvar="ROOST_ADMIN_KEY",
        show_envvar=True,
        help="The gateway's admin key, when --base-url is a roost gateway.",
    ),
    task: list[str] = typer.Option([], "--task", help="Task id (repeatable; default: every task of the split)."),
    split: str = typer.Option("test", help="Task split."),
    episodes: int | None = typer.Option(None, help="Episodes to run, the tasks in turn (default: each task once)."),
    concurrency: int = typer.Option(1, help="Episodes at once."),
    timeout_s: float = typer.Option(3600.0, help="Per-episode limit on the command."),
    submit: bool = typer.Option(True, help="Submit for the command if it exits with the episode open."),
    workspace: bool = typer.Option(
        False,
        help="Run the command in a copy of the episode's working tree (SWE's repository; ROOST_WORKSPACE) "
        "and submit its diff as the patch.",
    ),
    env_arg: list[str] = typer.Option([], "--env-arg", help="KEY=VALUE for the env, when it runs here."),
    as_json: bool = typer.Option(False, "--json", help="Print per-episode results as JSON."),
) -> None:
    """Run a command as the agent: the reward is the env's verdict, else the command's reward file."""
    import json

    from roost.agents.command import command_eval
    from roost.envs.serve import parse_env_args

    config = command_eval(
        command,
        env,
        timeout_s=timeout_s,
        submit=submit,
        workspace=workspace,
        concurrency=concurrency,
        episodes=episodes,
        env_url=env_url,
        base_url=base_url,
        model=model,
        api_key=api_key,
        admin_key=admin_key,
        split=split,
        task_ids=tuple(task),
        env_kwargs=parse_env_args(env_arg),
    )
    results = _played(config).results
    if as_json:
        typer.echo(json.dumps([r.to_json() for r in results], indent=1))
        return
    for r in results:
        reward = "none" if r.reward is None else f"{r.reward:g} ({r.reward_source})"
        typer.echo(
            f"{r.task_id}: {r.status}, reward {reward}, exit code {r.exit_code}"
            + (f", error: {r.error}" if r.error else "")
        )


def _played(config: EvalConfig) -> Evaluation:
    """`play(config)`, its bad input (an unknown env, agent or task) a clear exit 2."""
    import asyncio

    from roost.agents.evaluate import play
    from roost.envs.errors import EnvError

    try:
        return asyncio.run(play(config))
    except (KeyError, ValueError, EnvError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
