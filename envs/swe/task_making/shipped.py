"""The task set roost ships, made from the pinned projects (`tasks=pypi` for the SWE env).

Made by `roost envs swe make-tasks --seed 0 --per-project 20 --out DIR` (projects whose run
needed a fix of their pin made again alone with `--projects NAME`: a project's tasks depend only
on the seed and the project), the rows joined in `PROJECTS` order and written with
`gzip -9n` to pypi_tasks.jsonl.gz, the summaries' per-project reports to pypi_summary.json
(docs/swe.md has the counts)."""

from __future__ import annotations

from pathlib import Path

NAME = "pypi"
"""What `tasks=` names the shipped set by."""
TASKS = Path(__file__).with_name("pypi_tasks.jsonl.gz")
SUMMARY = Path(__file__).with_name("pypi_summary.json")
