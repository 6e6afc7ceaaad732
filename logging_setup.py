"""Python logging for roost's commands: `--log-level` and `--log-json`.

Each server command (`roost gateway`, `roost engine`, `roost serve`, `roost view`) and
`roost train` calls `configure_logging` first thing. Nothing is configured on import: a program
that imports roost keeps its own logging set-up, and the servers hand uvicorn `log_config=None`
so its loggers go through the same handler.

    configure_logging("info")               # 2026-12-01 11:40:02 INFO roost.gateway: serving model tiny ...
    configure_logging("debug", json=True)   # {"time": ..., "level": "DEBUG", "logger": ..., "message": ..., extras}
"""

from __future__ import annotations

import json as jsonlib
import logging
import sys
from datetime import UTC, datetime
from enum import Enum
from typing import Any, TextIO

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Libraries that log a line per HTTP request at INFO: kept to warnings unless --log-level debug.
CHATTY = ("httpx", "httpcore", "urllib3", "filelock")
# What every LogRecord carries; anything else on a record came as `extra=` and goes in the JSON.
# uvicorn's color_message repeats the message with terminal colours.
_STANDARD = {*vars(logging.LogRecord("", 0, "", 0, "", (), None)), "message", "asctime", "taskName", "color_message"}


class LogLevel(str, Enum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


# typer is imported inside: env containers run `python -m roost.envs.serve` without it.
def level_option() -> Any:
    import typer

    return typer.Option(LogLevel.info, "--log-level", help="Least severe log records printed (to stderr).")


def json_option() -> Any:
    import typer

    return typer.Option(
        False,
        "--log-json",
        help="Log one JSON object per line (time, level, logger, message "
        "and the record's extra fields) instead of text.",
    )


class StderrHandler(logging.StreamHandler):
    """Writes to `sys.stderr` as it is when each record comes: a live progress display (rich)
    swaps it while it runs, so log lines print above the bars instead of through them."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> TextIO:  # type: ignore[override]
        return sys.stderr


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, the fields given
    as `extra=`, and the traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update({k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")})
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return jsonlib.dumps(out, default=str)


def configure_logging(
    level: str | LogLevel = LogLevel.info, *, json: bool = False, stream: TextIO | None = None
) -> None:
    """Send every logger's records at `level` and above to `stream` (stderr), as text or JSON lines.
    Replaces the root logger's handlers, so calling it again does not print records twice."""
    handler = logging.StreamHandler(stream) if stream is not None else StderrHandler()
    handler.setFormatter(JsonFormatter() if json else logging.Formatter(TEXT_FORMAT, "%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LogLevel(level).value.upper())
    for name in CHATTY:
        logging.getLogger(name).setLevel(max(root.level, logging.WARNING))
    # An earlier uvicorn.Config with uvicorn's own logging config (in this process) gave its
    # loggers handlers of their own: they must reach ours instead.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
