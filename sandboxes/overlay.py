"""A fresh copy-on-write view of a repository per episode, without root.

Each command of a bubblewrap sandbox runs inside `unshare --mount` (plus `--user
--map-root-user` when not root), which mounts overlayfs — the repository as the read-only
lower layer, the episode's own folder as the upper layer — and then execs bwrap on the
merged view. The mount lives only in that command's mount namespace; the upper folder keeps
the episode's writes between commands (commands of one sandbox run one at a time).
bubblewrap 0.9 has `--overlay` built in; this works with the 0.8 that Debian 12 ships.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

MOUNT_THEN_EXEC = 'mount -t overlay overlay -o "$1" "$2" && shift 2 && exec "$@"'


@dataclass(frozen=True)
class Overlay:
    lower: Path
    upper: Path
    work: Path
    merged: Path

    @classmethod
    def under(cls, lower: Path, root: Path) -> Overlay:
        overlay = cls(lower, root / "upper", root / "ovl-work", root / "merged")
        for folder in (overlay.upper, overlay.work, overlay.merged):
            folder.mkdir()
        return overlay

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run with the overlay mounted at `merged`."""
        options = f"lowerdir={self.lower},upperdir={self.upper},workdir={self.work}"
        return [*unshare_argv(), "/bin/sh", "-c", MOUNT_THEN_EXEC, "sh", options, str(self.merged), *argv]


def unshare_argv() -> list[str]:
    argv = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        argv[1:1] = ["--user", "--map-root-user"]
    return argv


def mountable(path: Path) -> bool:
    # overlayfs options are comma- and colon-separated; such paths fall back to a copy.
    return not any(c in str(path) for c in ",:")


async def overlay_works() -> str | None:
    """None when an unprivileged overlay mount works here, else why not."""
    root = Path(tempfile.mkdtemp(prefix="roost-ovl-probe-"))
    try:
        (root / "lower").mkdir()
        (root / "lower" / "f").write_text("x")
        overlay = Overlay.under(root / "lower", root)
        argv = overlay.wrap(["/bin/sh", "-c", 'echo y > "$0/g" && cat "$0/f"', str(overlay.merged)])
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
            )
            out, _ = await asyncio.wait_for(proc.communicate(), 10)
        except (TimeoutError, OSError) as exc:
            return f"unshare failed: {exc}"
        if proc.returncode != 0 or out.strip() != b"x" or not (overlay.upper / "g").exists():
            return f"overlay mount failed: {out.decode(errors='replace').strip()[-300:]}"
        return None
    finally:
        await asyncio.to_thread(remove_tree, root)


def remove_tree(path: Path) -> None:
    """rm -rf, including overlayfs work folders that the kernel leaves without permissions."""

    def unlock(func, target, _exc) -> None:
        os.chmod(os.path.dirname(target), stat.S_IRWXU)
        if os.path.isdir(target) and not os.path.islink(target):
            os.chmod(target, stat.S_IRWXU)
        func(target)

    hook = "onexc" if sys.version_info >= (3, 12) else "onerror"
    shutil.rmtree(path, **{hook: unlock})
