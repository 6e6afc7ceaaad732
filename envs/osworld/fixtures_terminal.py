"""Terminal and files tasks: a shell in LXTerminal, checked with `vm_command_line` and `vm_file`."""

from __future__ import annotations

from roost.envs.osworld.fixture_kit import (
    HOME,
    FixtureTask,
    cloud_file,
    download,
    execute,
    launch,
    step,
    typed,
    vm_command,
    vm_file,
)

DOMAIN = "os"
TERMINAL_READY = {"role": "terminal", "focused": True}


def _shell(command: str) -> list[dict]:
    """Type a command, then wait for its done marker: the shell prints `roost-done-2` for
    `$((1+1))`, which the echoed command line itself does not contain."""
    return [
        step(typed(f"{command} && echo roost-done-$((1+1))\n"), TERMINAL_READY),
        step("DONE", {"text": "roost-done-2"}),
    ]


def _task(
    name: str, instruction: str, setup: list[dict], evaluator: dict, command: str, files: dict[str, bytes] | None = None
) -> FixtureTask:
    config = setup + [launch("lxterminal", f"--working-directory={HOME}")]
    return FixtureTask(DOMAIN, name, instruction, config, evaluator, _shell(command), ["os", "terminal"], files or {})


def _says_yes(check: str) -> dict:
    return {
        "func": "check_include_exclude",
        "result": vm_command(f"if {check}; then echo yes; else echo no; fi"),
        "expected": {"type": "rule", "rules": {"include": ["yes"], "exclude": ["no"]}},
    }


def _same_text(path: str, gold: str) -> dict:
    return {"func": "compare_text_file", "result": vm_file(path), "expected": cloud_file(gold)}


def _mkdir(i: int, folder: str) -> FixtureTask:
    return _task(
        f"mkdir-{i}",
        f"Create a folder named '{folder}' inside {HOME}/Documents.",
        [execute(f"mkdir -p {HOME}/Documents")],
        _says_yes(f"test -d {HOME}/Documents/{folder}"),
        f"mkdir {HOME}/Documents/{folder}",
    )


def _write(i: int, name: str, line: str) -> FixtureTask:
    gold = f"os-write-{i}-gold.txt"
    return _task(
        f"write-{i}",
        f"Create the text file {HOME}/Desktop/{name} holding the single line: {line}",
        [execute(f"mkdir -p {HOME}/Desktop")],
        _same_text(f"{HOME}/Desktop/{name}", gold),
        f"echo '{line}' > {HOME}/Desktop/{name}",
        {gold: f"{line}\n".encode()},
    )


def _copy(i: int, name: str, body: str) -> FixtureTask:
    src = f"os-copy-{i}-{name}"
    return _task(
        f"copy-{i}",
        f"Copy {HOME}/Documents/{name} into the folder {HOME}/backup.",
        [execute(f"mkdir -p {HOME}/backup {HOME}/Documents"), download((src, f"{HOME}/Documents/{name}"))],
        _same_text(f"{HOME}/backup/{name}", src),
        f"cp {HOME}/Documents/{name} {HOME}/backup/",
        {src: body.encode()},
    )


def _rename(i: int, old: str, new: str) -> FixtureTask:
    return _task(
        f"rename-{i}",
        f"Rename {HOME}/Desktop/{old} to {new} (same folder).",
        [execute(f"mkdir -p {HOME}/Desktop && echo draft > {HOME}/Desktop/{old}")],
        _says_yes(f"test -f {HOME}/Desktop/{new} && ! test -e {HOME}/Desktop/{old}"),
        f"mv {HOME}/Desktop/{old} {HOME}/Desktop/{new}",
    )


def _cleanup(i: int, keep: list[str], drop: list[str]) -> FixtureTask:
    folder = f"{HOME}/cleanup"
    files = " ".join(f"{folder}/{n}" for n in keep + drop)
    return _task(
        f"cleanup-{i}",
        f"Delete every file ending in .tmp from {folder}, and nothing else.",
        [execute(f"mkdir -p {folder} && touch {files}")],
        {
            "func": "check_include_exclude",
            "result": vm_command(f"ls {folder}"),
            "expected": {"type": "rule", "rules": {"include": keep, "exclude": drop}},
        },
        f"rm {folder}/*.tmp",
    )


def _count(i: int, lines: list[str]) -> FixtureTask:
    src, gold = f"os-count-{i}-data.csv", f"os-count-{i}-gold.txt"
    return _task(
        f"count-lines-{i}",
        f"Write the number of lines of {HOME}/data/data.csv (just the number) into {HOME}/data/count.txt.",
        [execute(f"mkdir -p {HOME}/data"), download((src, f"{HOME}/data/data.csv"))],
        _same_text(f"{HOME}/data/count.txt", gold),
        f"wc -l < {HOME}/data/data.csv > {HOME}/data/count.txt",
        {src: "".join(f"{x}\n" for x in lines).encode(), gold: f"{len(lines)}\n".encode()},
    )


def _chmod(i: int, script: str) -> FixtureTask:
    path = f"{HOME}/bin/{script}"
    return _task(
        f"chmod-{i}",
        f"Make the script {path} executable.",
        [execute(f"mkdir -p {HOME}/bin && printf '#!/bin/sh\\necho hi\\n' > {path}")],
        _says_yes(f"test -x {path}"),
        f"chmod +x {path}",
    )


def _sort(i: int, names: list[str]) -> FixtureTask:
    src, gold = f"os-sort-{i}-names.txt", f"os-sort-{i}-gold.txt"
    return _task(
        f"sort-{i}",
        f"Sort the lines of {HOME}/names.txt alphabetically into a new file {HOME}/sorted.txt.",
        [download((src, f"{HOME}/names.txt"))],
        _same_text(f"{HOME}/sorted.txt", gold),
        f"LC_ALL=C sort {HOME}/names.txt > {HOME}/sorted.txt",
        {src: "".join(f"{n}\n" for n in names).encode(), gold: "".join(f"{n}\n" for n in sorted(names)).encode()},
    )


def terminal_tasks() -> list[FixtureTask]:
    return [
        _mkdir(0, "reports"),
        _mkdir(1, "archive-2024"),
        _write(0, "hello.txt", "hello roost"),
        _write(1, "todo.txt", "buy milk and eggs"),
        _copy(0, "plan.txt", "step one\nstep two\n"),
        _copy(1, "notes.md", "# Notes\n- desktop envs\n"),
        _rename(0, "draft.txt", "final.txt"),
        _rename(1, "old_name.log", "new_name.log"),
        _cleanup(0, ["keep.txt", "report.pdf"], ["a.tmp", "b.tmp"]),
        _cleanup(1, ["main.py", "data.csv"], ["cache.tmp", "scratch.tmp", "x.tmp"]),
        _count(0, ["id,name", "1,ada", "2,bob"]),
        _count(1, ["x,y", "1,2", "3,4", "5,6", "7,8", "9,10"]),
        _chmod(0, "backup.sh"),
        _chmod(1, "deploy.sh"),
        _sort(0, ["pear", "apple", "fig"]),
        _sort(1, ["zed", "Mona", "carl", "Bea"]),
    ]
