"""`roost tinker serve` refuses, before it loads anything, to bind beyond loopback without a key,
to serve a base model that is not a checkpoint folder and to record into a file that is not a
trajectory store."""

from __future__ import annotations

import os
import subprocess
import sys


def _serve(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "ROOST_TINKER_KEY"}
    command = [sys.executable, "-m", "roost.cli.main", "tinker", "serve", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def test_beyond_loopback_it_needs_a_key():
    done = _serve("--host", "0.0.0.0", "--port", "0")
    assert done.returncode == 2
    assert "will not bind 0.0.0.0 (beyond loopback) without its Tinker API key" in done.stderr


def test_a_base_model_must_be_a_checkpoint_folder(tmp_path):
    done = _serve("--base-model", str(tmp_path / "nope"), "--port", "0", "--api-key", "tml-k")
    assert done.returncode == 2 and "neither 'tiny' nor a Hugging Face checkpoint folder" in done.stderr


def test_a_store_that_cannot_hold_trajectories_is_refused(tmp_path):
    not_sqlite = tmp_path / "notes.sqlite"
    not_sqlite.write_text("not a database")
    done = _serve("--store", str(not_sqlite), "--port", "0", "--api-key", "tml-k")
    assert done.returncode == 2
    assert f"--store {not_sqlite} cannot hold trajectories (file is not a database)" in done.stderr
    assert not_sqlite.read_text() == "not a database"
