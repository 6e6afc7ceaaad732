"""PyPI sdists as git repositories: download (digest checked), unpack, commit; a task's buggy repo.

    $ROOST_HOME/swe-pypi/sdists/<file>           the downloaded sdist, verified by its sha256
    $ROOST_HOME/swe-pypi/repos/<name>-<version>/  the sdist unpacked and committed (the clean tree)
    $ROOST_HOME/swe-pypi/tasks/<instance_id>/     that repository with the task's bug committed

Commits use fixture.py's fixed names and dates, so every machine gets the same base commits.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from roost.rollout.engine.tiny_model import roost_home

from ..fixtures import GITIGNORE, git
from ..task import SdistSource, SWETask

PYPI = "https://pypi.org/pypi"
BUG_MESSAGE = "Inject the task's bug"


class SdistError(RuntimeError):
    """An sdist that cannot be fetched or verified, or a bug diff that does not apply."""


def cache_dir() -> Path:
    return roost_home().expanduser() / "swe-pypi"


def fetch_sdist(name: str, version: str, sha256: str, cache: Path) -> Path:
    """The sdist file, downloaded from PyPI once and checked against `sha256`."""
    folder = cache / "sdists"
    for path in folder.glob(f"{name}-{version}-{sha256[:12]}.*"):
        return path
    api = f"{PYPI}/{name}/json"
    try:
        with urllib.request.urlopen(api, timeout=60) as response:
            listing = json.load(response)
    except OSError as exc:
        raise SdistError(f"cannot read {api} ({exc}); PyPI must be reachable the first time") from exc
    # Some PyPI mirrors serve only the project's page, not the per-version one: read both shapes.
    files = listing.get("releases", {}).get(version) or listing.get("urls", [])
    entry = next((f for f in files if f["packagetype"] == "sdist" and f["digests"]["sha256"] == sha256), None)
    if entry is None:
        raise SdistError(f"PyPI lists no sdist of {name}=={version} with sha256 {sha256}")
    with urllib.request.urlopen(urllib.parse.urljoin(api, entry["url"]), timeout=120) as response:
        data = response.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise SdistError(f"the sdist of {name}=={version} does not have sha256 {sha256}")
    suffix = ".zip" if entry["filename"].endswith(".zip") else ".tar.gz"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-{sha256[:12]}{suffix}"
    staged = path.with_suffix(".part")
    staged.write_bytes(data)
    staged.rename(path)
    return path


def clean_repo(name: str, version: str, sha256: str, cache: Path) -> Path:
    """The sdist unpacked (its top folder stripped) and committed: the project before any bug."""
    final = cache / "repos" / f"{name}-{version}"
    if (final / ".git").is_dir():
        return final
    archive = fetch_sdist(name, version, sha256, cache)
    with _staging(final) as staging:
        _unpack(archive, staging)
        if not (staging / ".gitignore").exists():
            (staging / ".gitignore").write_text(GITIGNORE)
        git(staging, "init", "-q", "-b", "main")
        git(staging, "add", "-A", "-f")
        git(staging, "commit", "-q", "-m", f"{name} {version} from its PyPI sdist")
    return final


def commit_bug(repo: Path, bug_patch: str) -> str:
    """Apply and commit `bug_patch` in `repo`; the new commit's sha."""
    patch = repo / ".git" / "roost-bug.patch"
    patch.write_text(bug_patch)
    try:
        git(repo, "apply", str(patch))
    except RuntimeError as exc:
        raise SdistError(f"the bug diff does not apply in {repo}: {exc}") from None
    git(repo, "commit", "-q", "-a", "-m", BUG_MESSAGE)
    return git(repo, "rev-parse", "HEAD").strip()


def task_repo(task: SWETask, cache: Path | None = None) -> Path:
    """The git repository of a `source` task at its base commit, made under the cache on first use."""
    source = task.source
    if source is None:
        raise SdistError(f"task {task.instance_id} has no `source` to prepare its repository from")
    cache = cache or cache_dir()
    final = cache / "tasks" / task.instance_id
    if (final / ".git").is_dir() and git(final, "rev-parse", "HEAD").strip() == task.base_commit:
        return final
    made = make_task_repo(source, cache, final)
    if made != task.base_commit:
        raise SdistError(
            f"task {task.instance_id}: the bug committed on {source.name} {source.version} gives "
            f"commit {made}, not the task's base_commit {task.base_commit}; the row does not match its source"
        )
    return final


def make_task_repo(source: SdistSource, cache: Path, final: Path) -> str:
    """Clone the clean repository to `final` and commit the bug there; the commit's sha."""
    clean = clean_repo(source.name, source.version, source.sha256, cache)
    if final.exists():
        shutil.rmtree(final)
    with _staging(final) as staging:
        git(staging.parent, "clone", "-q", "--local", str(clean), staging.name)
        sha = commit_bug(staging, source.bug_patch)
    return sha


def _unpack(archive: Path, dest: Path) -> None:
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        if archive.suffix == ".zip":
            with zipfile.ZipFile(archive) as z:
                z.extractall(tmp)
        else:
            with tarfile.open(fileobj=io.BytesIO(archive.read_bytes())) as t:
                t.extractall(tmp, filter="data")
        (top,) = Path(tmp).iterdir()
        for item in sorted(top.iterdir()):
            item.rename(dest / item.name)


class _staging:
    """A fresh folder beside `final`, renamed to it on success (a concurrent maker's result wins)."""

    def __init__(self, final: Path) -> None:
        self.final = final

    def __enter__(self) -> Path:
        self.final.parent.mkdir(parents=True, exist_ok=True)
        self.path = Path(tempfile.mkdtemp(prefix=f".{self.final.name}-", dir=self.final.parent))
        return self.path

    def __exit__(self, kind, value, tb) -> None:
        if kind is None and not self.final.exists():
            try:
                self.path.rename(self.final)
                return
            except OSError:
                pass  # another process made it first
        shutil.rmtree(self.path, ignore_errors=True)
