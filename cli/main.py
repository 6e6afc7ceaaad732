"""The `roost` command.

Each package contributes its subcommands through a `register(app, bench)` function in
its own `cli.py`; `bench` is the shared `roost bench ...` group. Heavy imports happen
inside the commands, so `roost --help` stays fast.
"""

from __future__ import annotations

import importlib

import typer

from roost.lifetime import stop_on_sigterm
from roost.modules import has_module

PACKAGE_CLIS = (
    "roost.rollout.cli",
    "roost.envs.cli",
    "roost.agents.cli",
    "roost.trainer.cli",
    "roost.bench.cli",
    "roost.viewer.cli",
    "roost.tinker_server.cli",
    "roost.cli.demo",
)


def build_app() -> typer.Typer:
    app = typer.Typer(
        help="roost: agent-gym hub with a token-exact gateway and a Megatron-core trainer.",
        no_args_is_help=True,
        pretty_exceptions_show_locals=False,
    )
    bench = typer.Typer(help="Benchmarks; each prints JSON.", no_args_is_help=True)
    app.add_typer(bench, name="bench")
    for name in PACKAGE_CLIS:
        if has_module(name):
            importlib.import_module(name).register(app, bench)
    return app


def main() -> None:
    # SIGTERM must unwind like Ctrl-C, so a server's children (`roost gateway`'s engine, say)
    # are stopped before it exits.
    with stop_on_sigterm():
        build_app()()


if __name__ == "__main__":
    main()
