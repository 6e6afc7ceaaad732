"""The top-level parts of roost import each other without a cycle, lazy imports included: a
layer may use the ones below it (rollout's store and gateway, envs, agents, trainer, the command
line), never the other way round."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = {"tests", "recipes", "docs"}


def _part(path: Path) -> str:
    """The top-level part a file belongs to: its folder, or its own name for a top-level module."""
    relative = path.relative_to(ROOT)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def _imported(path: Path, node: ast.AST) -> list[str]:
    """Dotted names under `roost` that an import statement names (relative ones resolved)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level == 0:
        return [node.module or ""]
    package = ["roost", *path.relative_to(ROOT).parent.parts]
    base = package[: len(package) - (node.level - 1)]
    return [".".join([*base, node.module] if node.module else base)]


def import_graph() -> dict[str, dict[str, str]]:
    """part → {part it imports: the first file that does}."""
    parts = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file() and p.name not in SKIP}
    parts |= {p.stem for p in ROOT.glob("*.py") if p.stem not in ("setup", "__init__")}
    graph: dict[str, dict[str, str]] = defaultdict(dict)
    for path in ROOT.rglob("*.py"):
        relative = path.relative_to(ROOT)
        if relative.parts[0].startswith(".") or relative.parts[0] in SKIP or _part(path) not in parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for name in _imported(path, node):
                target = name.split(".")[1] if name.startswith("roost.") else None
                if target in parts and target != _part(path):
                    graph[_part(path)].setdefault(target, str(relative))
    return graph


def _cycle(graph: dict[str, dict[str, str]]) -> list[str] | None:
    """A cycle as the list of parts it passes (first == last), or None."""
    state: dict[str, str] = {}

    def visit(path: list[str]) -> list[str] | None:
        state[path[-1]] = "on path"
        for nxt in graph.get(path[-1], {}):
            if state.get(nxt) == "on path":
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(path + [nxt])):
                return found
        state[path[-1]] = "done"
        return None

    return next((found for start in list(graph) if start not in state and (found := visit([start]))), None)


def test_the_top_level_parts_import_each_other_without_a_cycle():
    graph = import_graph()
    cycle = _cycle(graph)
    edges = [f"{a} -> {b} (in {graph[a][b]})" for a, b in zip(cycle, cycle[1:])] if cycle else []
    assert cycle is None, "import cycle between roost's top-level parts:\n" + "\n".join(edges)
    assert "rollout" in graph["trainer"] and "envs" in graph["agents"]  # the walk sees imports at all


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b": "x"}, "b": {"c": "y"}, "c": {"a": "z"}}) is not None
    assert _cycle({"a": {"b": "x"}, "b": {"c": "y"}}) is None
