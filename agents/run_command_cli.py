"""`roost run --command "..."`: run any command as the harness of an env's episodes."""

from __future__ import annotations

import json
from typing import Optional

import typer


def run(
    command: str = typer.Option(..., "--command", help="Shell command; gets ROOST_BASE_URL, OPENAI_BASE_URL, "
                                "OPENAI_API_KEY, ROOST_SESSION_ID, ROOST_TASK_JSON, ROOST_ENV_STEP_URL, ROOST_REWARD_FILE."),
    env: str = typer.Option("swe", help="Env name or module:function entry point."),
    env_url: Optional[str] = typer.Option(None, help="A running env server; without it the env runs here."),
    base_url: Optional[str] = typer.Option(None, help="A roost gateway (recorded) or any OpenAI endpoint."),
    model: Optional[str] = typer.Option(None, help="Model name, passed as ROOST_MODEL."),
    api_key: Optional[str] = typer.Option(None, help="API key when --base-url is not a gateway."),
    admin_key: Optional[str] = typer.Option(None, envvar="ROOST_ADMIN_KEY", show_envvar=True,
                                            help="The gateway's admin key, when --base-url is a roost gateway."),
    task: list[str] = typer.Option([], "--task", help="Task id (repeatable; default: every task of the split)."),
    split: str = typer.Option("test", help="Task split."),
    episodes: Optional[int] = typer.Option(None, help="At most this many episodes."),
    concurrency: int = typer.Option(1, help="Episodes at once."),
    timeout_s: float = typer.Option(3600.0, help="Per-episode limit on the command."),
    submit: bool = typer.Option(True, help="Submit for the command if it exits with the episode open."),
    env_arg: list[str] = typer.Option([], "--env-arg", help="KEY=VALUE for the env, when it runs here."),
    as_json: bool = typer.Option(False, "--json", help="Print per-episode results as JSON."),
) -> None:
    """Run a command as the agent: the reward is the env's verdict, else the command's reward file."""
    import asyncio

    from roost.agents.command_run import CommandRunConfig, results_json, run_command
    from roost.envs.serve import parse_env_args

    config = CommandRunConfig(command=command, env=env, env_url=env_url, base_url=base_url, model=model,
                              api_key=api_key, admin_key=admin_key, split=split, task_ids=task, episodes=episodes,
                              concurrency=concurrency, timeout_s=timeout_s, submit=submit, env_kwargs=parse_env_args(env_arg))
    try:
        results = asyncio.run(run_command(config))
    except (KeyError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(results_json(results), indent=1))
        return
    for r in results:
        reward = "none" if r.reward is None else f"{r.reward:g} ({r.reward_source})"
        typer.echo(f"{r.task_id}: {r.status}, reward {reward}, exit code {r.exit_code}"
                   + (f", error: {r.error}" if r.error else ""))


def register(app: typer.Typer, bench: typer.Typer) -> None:
    app.command("run")(run)
