"""`roost` subcommands of roost.rollout: the engine's and the gateway's."""

from __future__ import annotations

import importlib
import importlib.util

import typer

PARTS = ("roost.rollout.engine.cli", "roost.rollout.gateway.cli")


def register(app: typer.Typer, bench: typer.Typer) -> None:
    for name in PARTS:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name).register(app, bench)
