"""The sandbox contract, run against every backend (docker, bubblewrap, local).

A backend that declares it lacks an isolation (`Capabilities`: the local backend has no
filesystem or network isolation) or a sandbox whose limits are not enforced on this machine
skips exactly those checks, and says why.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from roost.sandboxes import Outcome, SandboxFileNotFound, SandboxSpec
from roost.sandboxes.errors import SandboxClosed


async def test_output_and_exit_codes(sandbox):
    result = await sandbox.exec("echo out; echo err >&2; printf 'caf\\xc3\\xa9\\n'; exit 3")
    assert result.outcome is Outcome.exited and result.exit_code == 3 and not result.ok
    assert result.output.splitlines() == ["out", "err", "café"]
    assert (await sandbox.exec("true")).ok
    assert (await sandbox.exec("kill -9 $$")).exit_code == 137
    assert (await sandbox.exec("pwd")).output.strip() == sandbox.workdir
    assert (await sandbox.exec("echo $FOO", env={"FOO": "bar"})).output == "bar\n"
    assert (await sandbox.exec("cat a.txt", cwd=".")).output == "hello\n"


async def test_timeout_kills_command_and_children(sandbox):
    start = time.monotonic()
    result = await sandbox.exec("(sleep 1.5; echo late > late.txt) & sleep 60", timeout_s=0.5)
    assert result.outcome is Outcome.timeout and result.exit_code is None
    assert time.monotonic() - start < 10
    await asyncio.sleep(2.5)
    assert (await sandbox.exec("ls late.txt")).exit_code != 0, "a child outlived the timeout"
    assert (await sandbox.exec("echo alive")).output == "alive\n"


async def test_output_cap_kills_a_flood(sandbox):
    result = await sandbox.exec("yes", output_limit=4096, timeout_s=20)
    assert result.outcome is Outcome.output_limit and result.truncated
    assert len(result.output) == 4096 and set(result.output) == {"y", "\n"}
    start = time.monotonic()
    flood = await sandbox.exec("head -c 4G /dev/zero; echo finished", output_limit=1 << 20, timeout_s=20)
    assert flood.outcome is Outcome.output_limit and "finished" not in flood.output
    assert time.monotonic() - start < 15
    assert (await sandbox.exec("echo alive")).ok


async def test_writes_do_not_leak(backend, repo, tmp_path):
    outside = tmp_path / "outside.txt"
    async with await backend.start(SandboxSpec(directory=repo)) as first:
        edits = (
            f"echo changed > a.txt && echo new > new.txt && rm pkg/mod.py && "
            f"echo x > ${{TMPDIR:-/tmp}}/marker && echo {first.backend} > .episode"
        )
        assert (await first.exec(edits)).ok
        if backend.capabilities.filesystem_isolated:
            await first.exec(f"echo leak > {outside}; echo leak > /etc/roost-leak")
    assert (repo / "a.txt").read_text() == "hello\n"
    assert not (repo / "new.txt").exists() and (repo / "pkg" / "mod.py").exists()
    if backend.capabilities.filesystem_isolated:
        assert not outside.exists()
        assert not os.path.exists("/etc/roost-leak")
    async with await backend.start(SandboxSpec(directory=repo)) as second:
        state = await second.exec(
            'for f in new.txt .episode ${TMPDIR:-/tmp}/marker; do [ -e "$f" ] && '
            'echo "leaked $f"; done; cat a.txt; [ -e pkg/mod.py ] && echo mod-present'
        )
        assert state.output == "hello\nmod-present\n"


async def test_no_network_by_default(backend, sandbox):
    if not backend.capabilities.network_isolated:
        pytest.skip(f"{backend.name} does not isolate the network (development only)")
    connections = []

    async def accept(reader, writer):
        connections.append(1)
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        probe = await sandbox.exec(
            f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo connected || echo refused", timeout_s=10
        )
        assert probe.output.strip() == "refused"
        interfaces = await sandbox.exec("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
        assert interfaces.output.split() == ["lo"]
    finally:
        server.close()
        await server.wait_closed()
    assert connections == []


async def test_memory_limit_holds_and_oom_is_reported(sandbox):
    if not sandbox.limits_enforced:
        pytest.skip(f"{sandbox.backend}: no cgroup limits on this machine ({getattr(sandbox, 'limits_reason', '')})")
    fits = await sandbox.exec("head -c 16M /dev/zero | tail | wc -c", timeout_s=60)
    assert fits.ok and fits.output.strip() == str(16 << 20)
    hog = await sandbox.exec("head -c 1G /dev/zero | tail > /dev/null", timeout_s=60)
    assert hog.outcome is Outcome.oom_killed, hog
    assert (await sandbox.exec("echo alive")).ok


async def test_fork_bomb_is_bounded(sandbox):
    if not sandbox.limits_enforced:
        pytest.skip(f"{sandbox.backend}: no pids limit on this machine ({getattr(sandbox, 'limits_reason', '')})")
    start = time.monotonic()
    result = await sandbox.exec("bomb() { bomb | bomb & }; bomb", timeout_s=3)
    assert result.outcome in (Outcome.timeout, Outcome.exited)
    assert time.monotonic() - start < 30
    after = await sandbox.exec("echo alive", timeout_s=30)
    assert after.ok and after.output == "alive\n"


async def test_diff_is_a_patch_that_applies_in_a_fresh_sandbox(backend, sandbox, repo):
    assert await sandbox.diff() == ""
    await sandbox.exec("echo more >> a.txt && mkdir -p b && echo new > b/new.txt && rm pkg/mod.py")
    patch = await sandbox.diff()
    assert "+more" in patch and "b/new.txt" in patch and "deleted file mode" in patch
    status = await sandbox.exec("git status --porcelain")
    assert sorted(status.output.splitlines()) == [" D pkg/mod.py", " M a.txt", "?? b/"]
    async with await backend.start(SandboxSpec(directory=repo)) as fresh:
        await fresh.write_file("roost-test.patch", patch)
        applied = await fresh.exec("git apply roost-test.patch && rm roost-test.patch")
        assert applied.ok, applied.output
        assert (await fresh.read_file("a.txt")) == b"hello\nmore\n"
        assert await fresh.diff() == patch


async def test_diff_outside_a_git_repository(backend, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "f.txt").write_text("one\n")
    async with await backend.start(SandboxSpec(directory=plain)) as sb:
        assert await sb.diff() == ""
        await sb.write_file("f.txt", "two\n")
        patch = await sb.diff()
        assert "-one" in patch and "+two" in patch
        assert (await sb.exec("ls -a")).output.split() == [".", "..", "f.txt"]


async def test_files_roundtrip(sandbox):
    blob = bytes(range(256)) * 10
    await sandbox.write_file("data/deep/bin.dat", blob)
    assert await sandbox.read_file("data/deep/bin.dat") == blob
    assert (await sandbox.exec("wc -c < data/deep/bin.dat")).output.strip() == "2560"
    await sandbox.write_file("data/deep/bin.dat", "replaced")
    assert await sandbox.read_file(f"{sandbox.workdir}/data/deep/bin.dat") == b"replaced"
    with pytest.raises(SandboxFileNotFound):
        await sandbox.read_file("no/such/file")
    with pytest.raises(SandboxFileNotFound):
        await sandbox.read_file("data")


async def test_empty_start_and_close_is_final(backend):
    sb = await backend.start(SandboxSpec())
    assert (await sb.exec("ls -A | wc -l")).output.strip() == "0"
    await sb.close()
    await sb.close()
    with pytest.raises(SandboxClosed):
        await sb.exec("true")


async def test_many_files_start_fresh(backend, tmp_path, git_repo):
    files = {f"src/m{i}.py": f"V = {i}\n" for i in range(200)}
    big = git_repo(tmp_path / "big", files)
    async with await backend.start(SandboxSpec(directory=big)) as sb:
        assert (await sb.exec("ls src | wc -l")).output.strip() == "200"
        assert await sb.diff() == ""
