"""`roost eval`: run an agent on an env's tasks and print the success rate and mean reward."""

from __future__ import annotations

import os
from typing import Optional

import typer

from roost.agents.registry import AGENTS


def register(app: typer.Typer, bench: typer.Typer) -> None:
    from roost.agents.run_command_cli import register as register_run

    app.command("eval")(eval_command)
    register_run(app, bench)


def eval_command(
    env: str = typer.Argument(..., help="Env name (e.g. alfworld) or module:function entry point."),
    agent: str = typer.Option("tool", help=f"Agent: {', '.join(AGENTS)}, or module:Class."),
    env_url: Optional[str] = typer.Option(None, help="A running env server; without it the env runs here."),
    base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint; a roost gateway also records."),
    model: Optional[str] = typer.Option(None, help="Model name (default: the endpoint's first model)."),
    api_key: Optional[str] = typer.Option(None, envvar="OPENAI_API_KEY", help="API key for --base-url."),
    admin_key: Optional[str] = typer.Option(None, envvar="ROOST_ADMIN_KEY", show_envvar=True,
                                            help="The gateway's admin key, when --base-url is a roost gateway."),
    episodes: int = typer.Option(10, help="Episodes to run (tasks of the split, cycled)."),
    split: str = typer.Option("train", help="Task split."),
    task_id: list[str] = typer.Option([], "--task-id", help="Play these tasks of the split (repeatable, cycled)."),
    concurrency: int = typer.Option(8, help="Episodes at once."),
    max_turns: int = typer.Option(50, help="Turns per episode before the agent stops."),
    env_arg: list[str] = typer.Option([], "--env-arg", help="KEY=VALUE for the env, when it runs here."),
    agent_arg: list[str] = typer.Option([], "--agent-arg", help="KEY=VALUE for the agent's constructor."),
    workers: int = typer.Option(min(os.cpu_count() or 1, 4), help="Env worker processes, when the env runs here."),
    run_id: Optional[str] = typer.Option(None, help="Run id; sessions are grouped as RUN_ID/TASK_ID."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary and per-episode results as JSON."),
    progress: bool = typer.Option(True, help="Show a progress bar on stderr."),
) -> None:
    """Evaluate an agent: success rate and mean reward over N episodes (env faults are not scored)."""
    import asyncio
    import json

    from roost.agents.evaluate import EvalConfig, evaluate
    from roost.envs.serve import parse_env_args

    config = EvalConfig(env=env, agent=agent, env_url=env_url, base_url=base_url, model=model, api_key=api_key,
                        admin_key=admin_key,
                        episodes=episodes, split=split, concurrency=concurrency, max_turns=max_turns,
                        env_kwargs=parse_env_args(env_arg), agent_kwargs=parse_env_args(agent_arg),
                        workers=workers, run_id=run_id, progress=progress, task_ids=tuple(task_id))
    from roost.envs.errors import EnvError

    try:
        report = asyncio.run(evaluate(config))
    except (KeyError, ValueError, EnvError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(report, indent=1))
        return
    s = report
    rate = "n/a" if s["success_rate"] is None else f"{s['success_rate']:.2f}"
    reward = "n/a" if s["mean_reward"] is None else f"{s['mean_reward']:.3f}"
    typer.echo(f"{env} / {s['agent']} on {split}: success rate {rate}, mean reward {reward} "
               f"({s['scored']} scored of {s['episodes']}; infra errors {s['infra_errors']}, "
               f"agent errors {s['agent_errors']})")
