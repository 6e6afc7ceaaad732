"""A harness command (`roost run --command`) ends when the roost process running it is killed
(SIGKILL), instead of acting on with nobody to take its steps."""

from __future__ import annotations

import textwrap

from roost.tests.child_processes import assert_dies_with_parent

RUN_A_LONG_COMMAND = textwrap.dedent("""
    import asyncio
    from roost.agents.protocol import EpisodeContext
    from roost.agents.command import CommandAgent
    from roost.envs.protocol import Observation, Reset, Task

    async def no_step(action):
        raise AssertionError("the command takes no step")

    async def main():
        task = Task("t0", "test")
        ctx = EpisodeContext(task, Reset(task.id, Observation("wait"), [], {}), [], no_step)
        await CommandAgent(command="exec sleep 300", timeout_s=600).run(ctx)

    asyncio.run(main())
""")


def test_a_harness_command_dies_with_the_process_that_runs_it():
    assert_dies_with_parent(RUN_A_LONG_COMMAND, "sleep")
