"""A sandbox whose owner is killed before close() is freed by the next backend that starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from roost.sandboxes import SandboxConfig, SandboxSpec

OWNER = textwrap.dedent("""
    import asyncio, sys
    from roost.sandboxes import SandboxConfig, SandboxSpec, start_sandbox

    async def main():
        sandbox = await start_sandbox(SandboxConfig(backend=sys.argv[1]), SandboxSpec())
        print(sandbox.root, flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
""")


async def test_leftovers_of_a_killed_owner_are_swept(backend):
    if backend.name == "docker":
        pytest.skip("containers are the engine's to clean (label roost.sandbox)")
    owner = subprocess.Popen([sys.executable, "-c", OWNER, backend.name], stdout=subprocess.PIPE, text=True)
    try:
        root = Path(owner.stdout.readline().strip())
        cgroups = json.loads((root / "owner.json").read_text())["cgroups"]
    finally:
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
    assert root.is_dir()
    fresh = type(backend)(SandboxConfig(backend=backend.name))
    await fresh.available()
    async with await fresh.start(SandboxSpec()):
        pass
    assert not root.exists()
    if cgroups:
        assert not any(Path(d).exists() for d in cgroups["dirs"].values())
