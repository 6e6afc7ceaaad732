"""The local folder that stands in for the internet: a task's input and gold files, by URL or name.

OSWorld downloads a task's files (`download` steps, `cloud_file` getters) from URLs. Here they
come from a cache folder, looked up in this order (the first that exists wins):

1. `<root>/<task id>/<uuid5(url)>_<name>`: where OSWorld's own `SetupController` caches a
   download, so a user's OSWorld cache folder works as it is;
2. `<root>/<task id>/<name>`, then `<root>/<task id>/<file name in the URL>`;
3. `<root>/<name>`, then `<root>/<file name in the URL>`;
4. the URL itself when it is a `file://` URL or an absolute local path.

`name` is the file's name on the desktop (`download`) or the getter's `dest` (`cloud_file`).
A file found nowhere is a `MissingCacheFile`, which names the URL and every place looked at.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from roost.envs.osworld.errors import UnsupportedTask


class MissingCacheFile(UnsupportedTask):
    """A file the task needs is not in the cache folder (this machine cannot download it)."""

    def __init__(self, task_id: str, url: str, looked_at: list[Path]) -> None:
        places = ", ".join(str(p) for p in looked_at)
        super().__init__(
            task_id, f"the file {url} is not in the cache folder (looked at {places}); put it at one of those paths"
        )
        self.url = url
        self.looked_at = looked_at


@dataclass(frozen=True)
class FileCache:
    """A cache folder of task files (see the module docstring for the lookup order)."""

    root: Path

    def candidates(self, task_id: str, url: str, name: str) -> list[Path]:
        """Where a file may be, in the order looked at."""
        url_name = Path(unquote(urlparse(url).path)).name
        task_dir = self.root / task_id
        paths = [task_dir / f"{uuid.uuid5(uuid.NAMESPACE_URL, url)}_{name}"]
        paths += [task_dir / n for n in (name, url_name) if n]
        paths += [self.root / n for n in (name, url_name) if n]
        local = _local_path(url)
        if local is not None:
            paths.append(local)
        return list(dict.fromkeys(paths))

    def find(self, task_id: str, url: str, name: str) -> Path:
        """The cached file for `url`; MissingCacheFile when it is nowhere."""
        looked_at = self.candidates(task_id, url, name)
        for path in looked_at:
            if path.is_file():
                return path
        raise MissingCacheFile(task_id, url, looked_at)

    def relative(self, task_id: str, rel_path: str) -> Path:
        """A file named by a path relative to the task's folder or the root (`cache_file`, `upload_file`)."""
        given = Path(rel_path)
        looked_at = [given] if given.is_absolute() else [self.root / task_id / given, self.root / given]
        for path in looked_at:
            if path.is_file():
                return path
        raise MissingCacheFile(task_id, rel_path, looked_at)


def _local_path(url: str) -> Path | None:
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if not parsed.scheme and url.startswith("/"):
        return Path(url)
    return None
