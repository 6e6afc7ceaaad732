"""Text editor tasks: Mousepad edits a file by keyboard, checked with `compare_text_file`."""

from __future__ import annotations

from roost.envs.osworld.fixture_kit import (
    HOME,
    FixtureTask,
    chain,
    cloud_file,
    download,
    execute,
    keys,
    launch,
    step,
    typed,
    vm_file,
)

DOMAIN = "mousepad"
SAVED = {"absent": {"role": "frame", "name": "*"}}
"""Mousepad's title (`*/full/path - Mousepad`) starts with `*` while the buffer has unsaved changes."""


def _edit(i: int, kind: str, instruction: str, before: str, after: str, edit: str) -> FixtureTask:
    name = f"{kind}-{i}.txt"
    path = f"{HOME}/Documents/{name}"
    src, gold = f"editor-{kind}-{i}.txt", f"editor-{kind}-{i}-gold.txt"
    ready = {"role": "frame", "name": f"{name} - Mousepad"}
    return FixtureTask(
        DOMAIN,
        f"{kind}-{i}",
        instruction.format(path=path),
        [execute(f"mkdir -p {HOME}/Documents"), download((src, path)), launch("mousepad", path)],
        {"func": "compare_text_file", "result": vm_file(path), "expected": cloud_file(gold)},
        [step(edit, ready), step(keys("ctrl", "s"), {"role": "frame", "name": f"*{path}"}), step("DONE", SAVED)],
        ["mousepad"],
        {src: before.encode(), gold: after.encode()},
    )


def _append(i: int, lines: list[str], extra: str) -> FixtureTask:
    before = "".join(f"{x}\n" for x in lines)
    return _edit(
        i,
        "append",
        f"Add the line '{extra}' at the end of {{path}}, open in the text editor, and save it.",
        before,
        before + f"{extra}\n",
        chain(keys("ctrl", "End"), typed(f"{extra}\n")),
    )


def _prepend(i: int, lines: list[str], header: str) -> FixtureTask:
    before = "".join(f"{x}\n" for x in lines)
    return _edit(
        i,
        "prepend",
        f"Insert the line '{header}' at the top of {{path}}, open in the text editor, and save it.",
        before,
        f"{header}\n" + before,
        chain(keys("ctrl", "Home"), typed(f"{header}\n")),
    )


def _drop_first(i: int, lines: list[str]) -> FixtureTask:
    return _edit(
        i,
        "drop-first",
        "Delete the first line of {path}, open in the text editor, and save it.",
        "".join(f"{x}\n" for x in lines),
        "".join(f"{x}\n" for x in lines[1:]),
        chain(keys("ctrl", "Home"), keys("shift", "down"), keys("delete")),
    )


def _rewrite(i: int, old: str, new: str) -> FixtureTask:
    return _edit(
        i,
        "rewrite",
        f"Replace the whole content of {{path}}, open in the text editor, with the single line '{new}', and save it.",
        f"{old}\n",
        f"{new}\n",
        chain(keys("ctrl", "a"), typed(f"{new}\n")),
    )


def _save_as(i: int, name: str, line: str) -> FixtureTask:
    path = f"{HOME}/Desktop/{name}"
    gold = f"editor-save-as-{i}-gold.txt"
    return FixtureTask(
        DOMAIN,
        f"save-as-{i}",
        f"In the empty text editor, write the line '{line}' and save it as {path}.",
        [execute(f"mkdir -p {HOME}/Desktop"), launch("mousepad")],
        {"func": "compare_text_file", "result": vm_file(path), "expected": cloud_file(gold)},
        [
            step(typed(f"{line}\n"), {"role": "frame", "name": "Mousepad"}),
            step(keys("ctrl", "s"), {"role": "frame", "name": "*"}),
            step(chain(keys("ctrl", "a"), typed(path)), {"role": "file chooser", "name": "Save As"}),
            # Enter in a separate action, once the name field shows the path: pressed while the
            # field still completes the typed path, it only closes the completion.
            step(keys("enter"), {"role": "text", "text": path}),
            step("DONE", {"role": "frame", "name": f"{name} - Mousepad"}),
        ],
        ["mousepad"],
        {gold: f"{line}\n".encode()},
    )


def editor_tasks() -> list[FixtureTask]:
    return [
        _append(0, ["alpha", "beta"], "gamma"),
        _append(1, ["milk", "bread", "eggs"], "butter"),
        _prepend(0, ["body text", "more text"], "TITLE"),
        _prepend(1, ["x = 1", "y = 2"], "# config"),
        _drop_first(0, ["DRAFT - delete me", "the real first line", "the end"]),
        _drop_first(1, ["obsolete header", "keep this"]),
        _rewrite(0, "lorem ipsum", "the quick brown fox"),
        _rewrite(1, "to be replaced", "all done here"),
        _save_as(0, "greeting.txt", "hello from the editor"),
        _save_as(1, "shopping.txt", "apples and pears"),
    ]
