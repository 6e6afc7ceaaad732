"""Errors of the OSWorld env beyond the env layer's own (`roost.envs.errors`)."""

from __future__ import annotations

from roost.envs.errors import BadRequestError, EnvFaultError


class TaskFormatError(ValueError):
    """A task file is not OSWorld's task JSON; the message names the file and the field."""


class UnsupportedTask(BadRequestError):
    """The task cannot run here (it needs the internet, an account, a file missing from the cache,
    a Python package not installed). Such a task is reported, never scored 0.
    """

    def __init__(self, task_id: str, reason: str) -> None:
        super().__init__(f"OSWorld task {task_id} is unsupported here: {reason}")
        self.task_id = task_id
        self.reason = reason


class EvaluationError(EnvFaultError):
    """A getter or metric failed for a reason other than the agent's work (a bug, a lost desktop):
    the episode is an `infra_error`, not a reward of 0.
    """


class SetupError(EnvFaultError):
    """A config step failed (the task's setup is broken for this desktop): an `infra_error`."""
