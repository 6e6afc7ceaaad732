"""A server's whole config as one JSON file (`--config FILE`), the one its launcher writes.

    write_config(config, log_dir / "gateway.json")         # the trainer's side
    config = read_config(GatewayConfig, path, given)       # the server's CLI: flags given win

Each roost server has one typed config (a pydantic model, or a dataclass pydantic reads) that its
CLI builds from flags; a launcher that holds such a config writes it here instead of rebuilding the
flags. Secrets stay out of the file (the gateway's keys are `exclude`d fields and travel in the
environment); flags given on the command line (a supervisor's `--port`, a recipe's pass-through
flags) override the file's fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import TypeAdapter, ValidationError

if TYPE_CHECKING:
    import typer

T = TypeVar("T")


class ConfigFileError(ValueError):
    """A `--config` file that cannot be read as the server's config; the message says why."""


def write_config(config: Any, path: Path) -> Path:
    """Write `config` (a pydantic model or a dataclass) as JSON to `path`; returns `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(TypeAdapter(type(config)).dump_json(config, indent=2))
    return path


def read_config(kind: type[T], path: Path | None, given: Mapping[str, Any]) -> T:
    """The config in `path` (none: the class's defaults) with the `given` fields over it."""
    data = _read_json(path) if path is not None else {}
    try:
        return TypeAdapter(kind).validate_python({**data, **given})
    except ValidationError as exc:
        where = f"--config {path}" if path is not None else "the flags"
        raise ConfigFileError(
            f"{where} is not a valid {kind.__name__}: {_errors(exc)}; expected a JSON object of its fields "
            "(as the server's launcher writes it), or leave the field out to take its default"
        ) from None


def given_flags(ctx: typer.Context, flags: Mapping[str, tuple[str, Any]]) -> dict[str, Any]:
    """Of `flags` (config field → (CLI parameter, value)), those set on the command line or
    through their environment variable, not left at their defaults."""
    # by name: typer carries its own copy of click, whose ParameterSource is not click's
    given = {"COMMANDLINE", "ENVIRONMENT"}
    return {
        field: value
        for field, (param, value) in flags.items()
        if getattr(ctx.get_parameter_source(param), "name", None) in given
    }


def _read_json(path: Path) -> dict[str, Any]:
    import json

    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigFileError(
            f"--config {path}: cannot read it ({exc.strerror}); pass the file the launcher wrote"
        ) from None
    except json.JSONDecodeError as exc:
        raise ConfigFileError(f"--config {path}: not JSON ({exc}); the file holds one JSON object") from None
    if not isinstance(data, dict):
        raise ConfigFileError(f"--config {path}: a JSON {type(data).__name__}, expected one JSON object of fields")
    return data


def _errors(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in exc.errors())
