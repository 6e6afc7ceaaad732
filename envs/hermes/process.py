"""hermes-agent's process-wide setup: a private home, its offline configuration, the roost backend.

hermes-agent keeps its configuration, logs, caches and session database under HERMES_HOME and
takes its terminal backend from TERMINAL_ENV; both are read from the process environment, so
they are set once per process (an env worker hosts one Hermes factory), before hermes-agent is
first imported, by `prepare_process` (never at import time).

The configuration written to HERMES_HOME/config.yaml turns off what would make an episode
depend on earlier ones or reach past the model endpoint: persistent memory, the skills
curator, the online model catalog. `model.context_length` is what hermes-agent is told the
window is: it refuses windows under 64K, so smaller models are announced as 64K and the
gateway's own limit ends a conversation that outgrows the real one.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import yaml

HERMES_MIN_CONTEXT = 65_536
_lock = threading.Lock()
_prepared: dict[str, Any] = {}


def default_config(context_length: int) -> dict[str, Any]:
    return {
        "model": {"context_length": max(context_length, HERMES_MIN_CONTEXT)},
        "memory": {"memory_enabled": False, "user_profile_enabled": False},
        "curator": {"enabled": False},
        "model_catalog": {"enabled": False},
    }


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`extra` over `base`, section by section (nested dicts merge, everything else replaces)."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def prepare_process(config: dict[str, Any], home: Path | None = None) -> Path:
    """Set up hermes-agent for this process once and return its home; later calls must agree."""
    with _lock:
        if _prepared:
            if _prepared["config"] != config:
                raise RuntimeError(
                    "hermes-agent is already set up in this process with another configuration "
                    "(HERMES_HOME and TERMINAL_ENV are process-wide); serve differently "
                    "configured Hermes envs from separate processes"
                )
            return _prepared["home"]
        if home is None:
            home = Path(tempfile.mkdtemp(prefix="roost-hermes-home-"))
            atexit.register(shutil.rmtree, home, ignore_errors=True)
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=True))
        os.environ["HERMES_HOME"] = str(home)
        # An unknown backend: anything hermes-agent would start by itself (not through
        # `backend.attach`) fails instead of falling back to the host's own shell.
        os.environ["TERMINAL_ENV"] = "roost"
        # Sandboxes live as long as their episode; hermes-agent's idle reaper must not close them.
        os.environ["TERMINAL_LIFETIME_SECONDS"] = str(10 * 365 * 24 * 3600)
        from .backend import install_backend

        install_backend()
        _prepared.update(config=config, home=home)
        return home
