"""Bugs by AST mutation (SWE-smith's procedural modifiers, written for roost), one per candidate.

Each candidate replaces one node's source span with a mutated version, so the rest of the file
keeps its formatting and the diff is a few lines. Kinds:

    compare_op        == / !=, < / <=, > / >=, is / is not, in / not in
    binary_op         + / -, * / //, ...
    bool_op           and / or
    drop_condition    an `if` guard without `else` removed (its body never runs)
    off_by_one        an integer constant in an index, slice, comparison or arithmetic ± 1
    changed_return    `return X` → `return None`, or a boolean return negated
    swapped_statements two adjacent assignments in the same block swapped

Candidates are listed in source order and shuffled by a seed, so the same seed gives the same
bugs on every machine.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

KINDS = (
    "compare_op",
    "binary_op",
    "bool_op",
    "drop_condition",
    "off_by_one",
    "changed_return",
    "swapped_statements",
)
COMPARE_SWAPS = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
BINARY_SWAPS = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
    ast.Div: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
}


@dataclass(frozen=True)
class Mutation:
    """One bug: in `path`, the text at (line, col)-(end_line, end_col) becomes `new`."""

    kind: str
    path: str
    line: int
    col: int
    end_line: int
    end_col: int
    new: str

    def apply(self, text: str) -> str:
        lines = text.splitlines(keepends=True)
        start = _offset(lines, self.line, self.col)
        end = _offset(lines, self.end_line, self.end_col)
        return text[:start] + self.new + text[end:]

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def source_files(root: Path, sources: tuple[str, ...]) -> list[str]:
    """The Python files under `sources` (relative to `root`), tests and setup scripts left out."""
    found: set[str] = set()
    for entry in sources:
        path = root / entry
        files = [path] if path.is_file() else sorted(path.rglob("*.py"))
        for file in files:
            rel = file.relative_to(root)
            if not any(part.startswith("test") or part == "conftest.py" for part in rel.parts):
                found.add(rel.as_posix())
    return sorted(found)


def candidates(root: Path, files: list[str], seed: int | str, limit: int | None = None) -> list[Mutation]:
    """The first `limit` (None: all) valid mutations of `files`, shuffled by `seed`, interleaved by kind.

    Validity (the mutated file parses, to another tree) is checked only as far as `limit`: each
    check parses the whole file, and a large project has thousands of sites (pyparsing's core.py
    alone, 6,000 lines); checking all of them took minutes a project."""
    by_kind: dict[str, list[Mutation]] = {kind: [] for kind in KINDS}
    originals: dict[str, tuple[str, str]] = {}
    for path in files:
        text = (root / path).read_text(encoding="utf-8")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        originals[path] = (text, ast.dump(tree))
        for mutation in _mutations(tree, text, path):
            by_kind[mutation.kind].append(mutation)
    rng = random.Random(seed)
    for kind in KINDS:
        rng.shuffle(by_kind[kind])
    # Round-robin over kinds so a few kinds with many sites do not crowd out the rest.
    valid: list[Mutation] = []
    for i in range(max((len(v) for v in by_kind.values()), default=0)):
        for mutation in (by_kind[kind][i] for kind in KINDS if i < len(by_kind[kind])):
            if _still_parses(mutation, *originals[mutation.path]):
                valid.append(mutation)
                if limit is not None and len(valid) >= limit:
                    return valid
    return valid


def _mutations(tree: ast.Module, text: str, path: str) -> Iterator[Mutation]:
    skip = _skipped_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        yield from _expression_mutations(node, path)
        yield from _statement_mutations(node, text, path)


def _expression_mutations(node: ast.AST, path: str) -> Iterator[Mutation]:
    if isinstance(node, ast.Compare) and type(node.ops[0]) in COMPARE_SWAPS:
        ops = [COMPARE_SWAPS[type(node.ops[0])](), *node.ops[1:]]
        yield _replace("compare_op", path, node, ast.Compare(node.left, ops, node.comparators))
    elif isinstance(node, ast.BinOp) and type(node.op) in BINARY_SWAPS and not _is_text(node):
        yield _replace("binary_op", path, node, ast.BinOp(node.left, BINARY_SWAPS[type(node.op)](), node.right))
    elif isinstance(node, ast.BoolOp):
        op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield _replace("bool_op", path, node, ast.BoolOp(op, node.values))
    elif isinstance(node, ast.Return) and node.value is not None:
        if _is_boolean(node.value):
            yield _replace("changed_return", path, node, ast.Return(ast.UnaryOp(ast.Not(), node.value)))
        elif not (isinstance(node.value, ast.Constant) and node.value.value is None):
            yield _replace("changed_return", path, node, ast.Return(ast.Constant(None)))
    for child in _integer_operands(node):
        delta = 1 if child.value in (0, 1) or (child.lineno + child.col_offset) % 2 else -1
        yield _replace("off_by_one", path, child, ast.Constant(child.value + delta))


def _statement_mutations(node: ast.AST, text: str, path: str) -> Iterator[Mutation]:
    for body in (getattr(node, field, None) for field in ("body", "orelse", "finalbody")):
        if not isinstance(body, list):
            continue
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.If) and not stmt.orelse and not _is_type_checking(stmt.test):
                # The guard and its body go; `pass` keeps a block that held only it valid.
                yield _span("drop_condition", path, stmt, stmt, "pass")
            if i + 1 < len(body) and _swappable(stmt, body[i + 1]):
                first = ast.get_source_segment(text, stmt)
                second = ast.get_source_segment(text, body[i + 1])
                indent = " " * stmt.col_offset
                if first and second and first != second:
                    yield _span("swapped_statements", path, stmt, body[i + 1], f"{second}\n{indent}{first}")


def _integer_operands(node: ast.AST) -> list[ast.Constant]:
    if isinstance(node, ast.Slice):
        operands = [node.lower, node.upper]
    elif isinstance(node, ast.Subscript):
        operands = [node.slice]
    elif isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
    elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        operands = [node.left, node.right]
    else:
        return []
    return [o for o in operands if isinstance(o, ast.Constant) and type(o.value) is int and hasattr(o, "lineno")]


def _swappable(first: ast.stmt, second: ast.stmt) -> bool:
    def simple(stmt: ast.stmt) -> bool:
        return isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and stmt.lineno == stmt.end_lineno

    return simple(first) and simple(second)


def _skipped_nodes(tree: ast.Module) -> set[int]:
    """Docstrings, `if __name__ == '__main__'` blocks and test functions: no bugs there."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                skipped.update(id(n) for n in ast.walk(body[0]))
        is_main = isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)
        is_test = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")
        if is_main or is_test:
            skipped.update(id(n) for n in ast.walk(node))
    return skipped


def _is_type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test) or "version_info" in ast.unparse(test)


def _is_boolean(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, ast.Not)
    return isinstance(node, ast.Compare)


def _is_text(node: ast.BinOp) -> bool:
    # `"a" + x` or `"%s" % x`: swapping the operator only raises TypeError, a shallow bug.
    return any(
        isinstance(side, (ast.Constant, ast.JoinedStr)) and isinstance(getattr(side, "value", ""), str)
        for side in (node.left, node.right)
    )


def _replace(kind: str, path: str, node: ast.AST, new: ast.AST) -> Mutation:
    return _span(kind, path, node, node, ast.unparse(new))


def _span(kind: str, path: str, first: ast.AST, last: ast.AST, new: str) -> Mutation:
    return Mutation(kind, path, first.lineno, first.col_offset, last.end_lineno, last.end_col_offset, new)  # type: ignore[attr-defined, arg-type]


def _still_parses(mutation: Mutation, text: str, original: str) -> bool:
    """The mutated text parses, to a tree other than `original` (the file's, dumped)."""
    try:
        changed = mutation.apply(text)
        return changed != text and ast.dump(ast.parse(changed)) != original
    except (SyntaxError, ValueError):
        return False


def _offset(lines: list[str], line: int, col: int) -> int:
    # ast columns are UTF-8 byte offsets within the line.
    prefix = lines[line - 1].encode("utf-8")[:col].decode("utf-8", errors="ignore")
    return sum(len(text) for text in lines[: line - 1]) + len(prefix)
