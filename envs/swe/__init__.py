"""The SWE env: repository tasks in SWE-bench's instance format, graded by the `swebench` package.

task.py      the task record (SWE-bench / SWE-Gym / R2E-Gym fields, validated)
loaders.py   JSONL files and Hugging Face dataset folders → tasks
fixtures.py  roost's own offline task set (small repositories with real bugs)
grading.py   apply a patch in a fresh sandbox, run the tests, grade with swebench
tools.py     the agent's tools (bash, file tools, submit)
env.py       the Env: one sandbox per episode (its tree handed out as a workspace)
task_making/ tasks made from real projects' PyPI sdists (`roost envs swe make-tasks`; the shipped set)
"""
