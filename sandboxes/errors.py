"""Sandbox errors; each message says what happened, what was expected and what to do."""

from __future__ import annotations


class SandboxError(RuntimeError):
    """A sandbox could not do what was asked (an infrastructure fault, not the command's)."""


class SandboxUnavailable(SandboxError):
    """The chosen backend cannot run on this machine (no engine, no bwrap, no image)."""


class SandboxFileNotFound(SandboxError, FileNotFoundError):
    """`read_file` of a path that does not exist in the sandbox."""


class SandboxClosed(SandboxError):
    """A call on a sandbox after `close()`."""
