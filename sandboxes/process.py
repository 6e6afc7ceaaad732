"""Running one host process with a timeout, an output cap and a kill that reaches its children.

Shared by the local and bubblewrap backends. The process starts in its own session, so a
kill of its process group takes its children along; `kill_extra` lets a backend add a
stronger kill (its cgroup) for children that left the group. It is killed too when the
process that started it dies (its own children are not: a cgroup, or bubblewrap's
`--die-with-parent`, takes those; `stale.sweep` frees what is left on the next start).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from roost.lifetime import die_with_parent

CHUNK = 1 << 16
# After a kill, output still buffered in the pipe is read for at most this long: a
# grandchild that escaped every kill must not keep the call open.
DRAIN_S = 2.0


@dataclass(frozen=True)
class RawResult:
    output: bytes
    returncode: int | None
    timed_out: bool
    overflowed: bool
    duration_s: float


async def run_process(
    argv: Sequence[str],
    *,
    timeout_s: float,
    output_limit: int,
    env: dict[str, str],
    cwd: str | None = None,
    stdin: bytes | None = None,
    kill_extra: Callable[[], None] | None = None,
) -> RawResult:
    """Run `argv`; kill it on timeout or once it has printed more than `output_limit` bytes."""
    start = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        start_new_session=True,
        preexec_fn=die_with_parent(signal.SIGKILL),
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    buffer = bytearray()
    overflowed = asyncio.Event()

    async def feed() -> None:
        try:
            proc.stdin.write(stdin)
            await proc.stdin.drain()
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the command stopped reading: its exit status tells the story

    async def read() -> None:
        # Reads to EOF even past the cap (discarding), so a killed command's pipe closes.
        while chunk := await proc.stdout.read(CHUNK):
            room = output_limit - len(buffer)
            if room > 0:
                buffer.extend(chunk[:room])
            if len(chunk) > room:
                overflowed.set()

    feeder = asyncio.create_task(feed()) if stdin is not None else None
    reader = asyncio.create_task(read())
    waiter = asyncio.create_task(_wait_all(proc, reader))
    overflow = asyncio.create_task(overflowed.wait())
    done, _ = await asyncio.wait({waiter, overflow}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    timed_out = not done
    if waiter not in done:
        _kill(proc, kill_extra)
        await _drain(proc, reader)
    overflow.cancel()
    waiter.cancel()
    if feeder is not None:
        feeder.cancel()
    killed = timed_out or overflowed.is_set()
    return RawResult(
        bytes(buffer), None if killed else proc.returncode, timed_out, overflowed.is_set(), time.monotonic() - start
    )


async def _wait_all(proc: asyncio.subprocess.Process, reader: asyncio.Task) -> None:
    await reader
    await proc.wait()


def _kill(proc: asyncio.subprocess.Process, kill_extra: Callable[[], None] | None) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if kill_extra is not None:
        kill_extra()


async def _drain(proc: asyncio.subprocess.Process, reader: asyncio.Task) -> None:
    try:
        await asyncio.wait_for(asyncio.shield(reader), DRAIN_S)
    except TimeoutError:
        # Something that escaped every kill still holds the pipe: stop listening to it.
        reader.cancel()
        proc._transport.close()  # type: ignore[attr-defined]
