"""A sandboxed command ends when the process that runs it is killed (SIGKILL), instead of
running on unsupervised, past its timeout, with nobody to read its output."""

from __future__ import annotations

import textwrap

from roost.tests.child_processes import assert_dies_with_parent

RUN_A_LONG_COMMAND = textwrap.dedent("""
    import asyncio
    from roost.sandboxes import SandboxConfig, SandboxSpec, start_sandbox

    async def main():
        sandbox = await start_sandbox(SandboxConfig(backend="local"), SandboxSpec())
        await sandbox.exec("sleep 300", timeout_s=600)

    asyncio.run(main())
""")


def test_a_command_dies_with_the_process_that_runs_it():
    assert_dies_with_parent(RUN_A_LONG_COMMAND, "sleep")
