"""Errors of the env layer. Each carries a stable `code`, the `type` of the HTTP error body.

The server maps codes to statuses (`roost.envs.http_app.STATUS`) and the client maps
them back to these classes, so a caller catches the same exception whether the env
runs in-process or behind HTTP.
"""

from __future__ import annotations


class EnvError(Exception):
    """Base class; `code` names the error on the wire."""

    code = "env_error"


class BadRequestError(EnvError):
    """The request itself is malformed (fields, types, sizes)."""

    code = "bad_request"


class UnknownTaskError(EnvError):
    """No task with that id in that split; list them with `GET /tasks?split=`."""

    code = "unknown_task"


class InvalidActionError(EnvError):
    """The action is not allowed now (not admissible, unknown tool, malformed arguments).

    The episode is unchanged; the agent may try again.
    """

    code = "invalid_action"


class EpisodeNotFoundError(EnvError):
    """No such episode: never created, deleted, or reaped after its lease ran out."""

    code = "episode_not_found"


class EpisodeFinishedError(EnvError):
    """The episode already terminated, was truncated or failed; start a new one."""

    code = "episode_finished"


class NoWorkspaceError(EnvError):
    """The env's episodes have no working tree to hand out (`GET /episodes/{id}/workspace`):
    only envs that act on files (SWE) have one."""

    code = "no_workspace"


class CapacityError(EnvError):
    """The server already runs `max_episodes` episodes; retry after `retry_after` seconds."""

    code = "capacity"

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class EnvFaultError(EnvError):
    """The environment itself failed (a crash, a bug, a lost worker). Not the agent's fault:

    runners label such episodes `infra_error` and never score them.
    """

    code = "env_error"


ERRORS_BY_CODE: dict[str, type[EnvError]] = {
    cls.code: cls
    for cls in (
        BadRequestError,
        UnknownTaskError,
        InvalidActionError,
        EpisodeNotFoundError,
        NoWorkspaceError,
        EpisodeFinishedError,
        CapacityError,
        EnvFaultError,
    )
}
