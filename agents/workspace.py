"""A host copy of an episode's working tree, and its diff: how a harness that edits files where it
runs (Claude Code, Codex, any `roost run --workspace` command) acts on an env's repository.

The env hands the tree out as a gzip'd tar (`GET /episodes/{id}/workspace`); it is unpacked into
a folder of the command's own, its state recorded as a git tree (in an index of roost's, so the
harness's own git use does not disturb it), and at the end the folder's change since then,
new files included, is the patch the env grades.
"""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

from roost.agents.protocol import AgentError

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "roost",
    "GIT_AUTHOR_EMAIL": "roost@localhost",
    "GIT_COMMITTER_NAME": "roost",
    "GIT_COMMITTER_EMAIL": "roost@localhost",
}


@dataclass(frozen=True)
class Checkout:
    folder: Path
    start_tree: str
    """The git tree of the folder as the env handed it out."""

    @property
    def index(self) -> Path:
        return self.folder.parent / f"{self.folder.name}.roost-index"


async def checkout(archive: bytes, folder: Path) -> Checkout:
    """`archive` (a gzip'd tar) unpacked into `folder`, its start state recorded."""
    folder.mkdir(parents=True)
    try:
        await asyncio.to_thread(_unpack, archive, folder)
    except (tarfile.TarError, OSError) as exc:
        raise AgentError(f"the env's workspace archive did not unpack: {exc}") from exc
    if not (folder / ".git").exists():
        await _git(folder, None, "init", "-q")
    partial = Checkout(folder, "")
    await _git(folder, partial.index, "add", "-A")
    tree = (await _git(folder, partial.index, "write-tree")).strip()
    return Checkout(folder, tree)


async def diff_since_start(checkout: Checkout) -> str:
    """The folder's change since `checkout` was made, as a binary-safe unified diff."""
    await _git(checkout.folder, checkout.index, "add", "-A")
    return await _git(
        checkout.folder,
        checkout.index,
        "diff",
        "--cached",
        "--binary",
        "--no-color",
        "--no-ext-diff",
        checkout.start_tree,
    )


def _unpack(archive: bytes, folder: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        tar.extractall(folder, filter="data")  # no paths out of the folder, no device files


async def _git(folder: Path, index: Path | None, *args: str) -> str:
    env = {**os.environ, **GIT_IDENTITY, **({"GIT_INDEX_FILE": str(index)} if index else {})}
    proc = await asyncio.create_subprocess_exec(
        "git",
        "-c",
        "core.autocrlf=false",
        *args,
        cwd=folder,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise AgentError(
            f"git {' '.join(args)} in the workspace {folder} failed: {err.decode(errors='replace')[-500:]}"
        )
    return out.decode("utf-8", errors="replace")
