"""`roost envs swe make-tasks`: SWE tasks made from real projects' PyPI sdists and their own tests.

projects.py   the pinned projects (name==version, sdist sha256, where tests and sources are)
sdist.py      download + verify + unpack an sdist into a git repository; a task's repo from `source`
mutations.py  bugs by AST mutation, deterministic from a seed
validate.py   the project's tests run before and after a bug: FAIL_TO_PASS / PASS_TO_PASS
statement.py  the problem statement, from the failing tests
make.py       orchestration: candidates per project, validation, splits, the drop log
shipped.py    where the set roost ships lies (`tasks=pypi`): pypi_tasks.jsonl.gz, pypi_summary.json
"""
