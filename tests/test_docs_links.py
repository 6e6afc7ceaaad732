"""The docs stay true to the tree: every relative link resolves inside the repository, and the
layout table of docs/architecture.md names every package folder and only folders that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`[^`]*`")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def doc_pages() -> list[Path]:
    pages = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted(ROOT.glob("envs/*/README.md")),
        *sorted(ROOT.glob("recipes/**/README.md")),
    ]
    return [p for p in pages if p.is_file()]


def prose_lines(page: Path) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings: lowercased, punctuation dropped, spaces as
    hyphens, a repeated heading numbered."""
    seen: dict[str, int] = {}
    for line in prose_lines(page):
        match = HEADING.match(line)
        if match is None:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1)).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return set(seen)


def relative_links(page: Path) -> list[str]:
    return [
        target
        for line in prose_lines(page)
        for target in LINK.findall(CODE_SPAN.sub("", line))
        if not re.match(r"[a-z][a-z0-9+.-]*:", target)
    ]


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_repository(page: Path):
    broken = []
    for target in relative_links(page):
        path_part, _, anchor = target.partition("#")
        path = (page.parent / path_part).resolve() if path_part else page
        if not path.is_relative_to(ROOT):
            broken.append(f"{target}: points outside the repository")
        elif not path.exists():
            broken.append(f"{target}: no such file or folder")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: {path.relative_to(ROOT)} has no heading with anchor #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)} has broken links (fix the link or the heading):\n" + "\n".join(broken)


def layout_rows() -> list[tuple[str, str]]:
    """(folder, import) of each row of the Layout section's table in docs/architecture.md."""
    lines = ARCHITECTURE.read_text().splitlines()
    start = lines.index("## Layout")
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        folder = re.fullmatch(r"`([^`]+/)`", cells[0]) if cells else None
        if folder:
            rows.append((folder.group(1), cells[1].strip("`")))
    return rows


def package_folders() -> set[str]:
    """The top-level package folders and the subpackages under roost's own packages."""
    top = [d for d in ROOT.iterdir() if d.is_dir() and (d / "__init__.py").is_file()]
    subs = [s for d in top if d.name != "tests" for s in d.iterdir() if s.is_dir() and (s / "__init__.py").is_file()]
    return {f"{d.relative_to(ROOT).as_posix()}/" for d in top + subs}


def test_layout_table_names_only_folders_that_exist():
    rows = layout_rows()
    assert rows, "docs/architecture.md has no layout table under '## Layout'"
    missing = [folder for folder, _ in rows if not (ROOT / folder).is_dir()]
    assert not missing, f"docs/architecture.md's layout table names folders that do not exist: {missing}"


def test_layout_table_names_every_package_folder():
    named = {folder for folder, _ in layout_rows()}
    unnamed = sorted(package_folders() - named)
    assert not unnamed, f"add a row to docs/architecture.md's layout table for each of: {unnamed}"


def test_layout_table_imports_match_their_folders():
    wrong = [
        (folder, module)
        for folder, module in layout_rows()
        if module != "—" and module != "roost." + folder.rstrip("/").replace("/", ".")
    ]
    assert not wrong, f"docs/architecture.md's layout table gives the wrong import for: {wrong}"
