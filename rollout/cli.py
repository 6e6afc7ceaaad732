"""`roost` subcommands of roost.rollout: the engine's and the gateway's."""

from __future__ import annotations

import importlib

import typer

from roost.modules import has_module

PARTS = ("roost.rollout.engine.cli", "roost.rollout.gateway.cli")


def register(app: typer.Typer, bench: typer.Typer) -> None:
    for name in PARTS:
        if has_module(name):
            importlib.import_module(name).register(app, bench)
