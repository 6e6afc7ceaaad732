"""Unified diffs turned around: the fix of a bug-introducing diff is the same diff reversed.

SWE-smith publishes the patch that *introduces* each bug; its gold fix is that patch's
inverse, which is what `git apply -R` would apply.
"""

from __future__ import annotations

import re

_HUNK = re.compile(r"^@@ -(\d+(?:,\d+)?) \+(\d+(?:,\d+)?) @@(.*)$")
_GIT_HEADER = re.compile(r"^diff --git a/(.*) b/(.*)$")
_INDEX = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)(.*)$")


def reverse_patch(patch: str) -> str:
    """The diff that undoes `patch` (file headers, hunk ranges and +/- lines swapped)."""
    out: list[str] = []
    lines = patch.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if (m := _GIT_HEADER.match(line)) is not None:
            out.append(f"diff --git a/{m.group(2)} b/{m.group(1)}")
        elif (m := _INDEX.match(line)) is not None:
            out.append(f"index {m.group(2)}..{m.group(1)}{m.group(3)}")
        elif line.startswith("new file mode "):
            out.append("deleted file mode " + line.removeprefix("new file mode "))
        elif line.startswith("deleted file mode "):
            out.append("new file mode " + line.removeprefix("deleted file mode "))
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = line[4:], lines[i + 1][4:]
            out += [f"--- {_side(new, 'a/')}", f"+++ {_side(old, 'b/')}"]
            i += 1
        elif (m := _HUNK.match(line)) is not None:
            out.append(f"@@ -{m.group(2)} +{m.group(1)} @@{m.group(3)}")
        elif line.startswith("+"):
            out.append("-" + line[1:])
        elif line.startswith("-"):
            out.append("+" + line[1:])
        else:
            out.append(line)
        i += 1
    return "\n".join(out) + "\n"


def _side(path: str, prefix: str) -> str:
    if path == "/dev/null":
        return path
    return prefix + path[2:] if path[:2] in ("a/", "b/") else path
