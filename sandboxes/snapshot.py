"""`diff()` for every backend: git scripts that run inside the sandbox through `exec`.

At start the working directory's state is recorded: in a git repository whose top is the
working directory, as a commit object made from the working tree (`git stash create`, or
HEAD when clean), so the repository's own branches, index and history stay as they were;
elsewhere in a separate git folder outside the working directory. The diff stages the
current tree into a throw-away index and diffs it against that record, so it covers
untracked files, honours .gitignore and leaves the agent's own git state alone.
"""

from __future__ import annotations

import shlex

from .errors import SandboxError
from .protocol import ExecResult

GIT = "git -c safe.directory='*' -c core.quotepath=off -c user.name=roost -c user.email=roost@localhost"


def start_script(snapshot_dir: str) -> str:
    """Prints 'repo <commit>' or 'snap <commit>'; run in the working directory."""
    snap = shlex.quote(snapshot_dir)
    return f"""set -e
command -v git >/dev/null || {{ echo 'roost: git is not installed in this sandbox' >&2; exit 127; }}
top=$({GIT} rev-parse --show-toplevel 2>/dev/null || true)
if [ "$top" = "$(pwd -P)" ] && {GIT} rev-parse -q --verify HEAD >/dev/null; then
  ref=$({GIT} stash create 2>/dev/null || true)
  [ -n "$ref" ] || ref=$({GIT} rev-parse HEAD)
  echo "repo $ref"
else
  rm -rf {snap}
  export GIT_DIR={snap} GIT_WORK_TREE=.
  {GIT} init -q
  {GIT} add -A
  {GIT} commit -q --allow-empty --no-verify -m start
  echo "snap $({GIT} rev-parse HEAD)"
fi
"""


def diff_script(record: str, snapshot_dir: str) -> str:
    """Prints the working directory's change since `record` (what start_script printed)."""
    mode, ref = record.split()
    ref = shlex.quote(ref)
    if mode == "snap":
        return f"""set -e
err=$(mktemp)
trap 'rm -f "$err"' EXIT
export GIT_DIR={shlex.quote(snapshot_dir)} GIT_WORK_TREE=.
{_quiet(f"{GIT} add -A")}
{_quiet(f"{GIT} diff --cached --binary --no-color --no-ext-diff {ref}")}
"""
    return f"""set -e
idx=$(mktemp) err=$(mktemp)
trap 'rm -f "$idx" "$err"' EXIT
cp "$({GIT} rev-parse --git-path index)" "$idx" 2>/dev/null || rm -f "$idx"
export GIT_INDEX_FILE="$idx"
{_quiet(f"{GIT} add -A")}
{_quiet(f"{GIT} diff --cached --binary --no-color --no-ext-diff {ref}")}
"""


def _quiet(command: str) -> str:
    # stdout and stderr arrive merged: git's warnings must not end up inside the patch.
    return f'{command} 2>"$err" || {{ cat "$err"; exit 1; }}'


def parse_start(result: ExecResult) -> str:
    """The start record, or a SandboxError that says why the snapshot failed."""
    words = result.output.strip().split()
    if not result.ok or len(words) < 2 or words[-2] not in ("repo", "snap"):
        raise SandboxError(
            f"could not record the working directory's start state (exit {result.exit_code}, "
            f"{result.outcome.value}): {result.output.strip()[-500:]!r}; diff() needs git in the sandbox"
        )
    return f"{words[-2]} {words[-1]}"


def check_diff(result: ExecResult) -> str:
    if not result.ok:
        raise SandboxError(
            f"git diff in the sandbox failed (exit {result.exit_code}, {result.outcome.value}): "
            f"{result.output.strip()[-500:]!r}; expected a patch. Raise output_limit_bytes if the "
            "patch is larger than the output cap."
        )
    return result.output
