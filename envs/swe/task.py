"""One SWE task: SWE-bench's instance fields, plus where its repository and tests come from.

SWE-bench and SWE-Gym rows carry the same fields; SWE-bench 5 rows add `image`,
`eval_script`, `log_parser` and `eval_type`. roost adds `repo_dir` (a local git repository
at `base_commit`, for sandboxes that start from a folder), `source` (a PyPI sdist plus the
bug's diff, from which that repository is made), `split`, `test_cmd` and `setup_script`.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# Log parsers of swebench's PARSER_REGISTRY for repositories whose tests are not plain pytest.
REPO_PARSERS = {
    "django/django": "parse_log_django",
    "sympy/sympy": "parse_log_sympy",
    "astropy/astropy": "parse_log_astropy",
    "matplotlib/matplotlib": "parse_log_matplotlib",
    "mwaskom/seaborn": "parse_log_seaborn",
    "sphinx-doc/sphinx": "parse_log_sphinx",
    "pylint-dev/pylint": "parse_log_pylint",
    "psf/requests": "parse_log_requests",
    "pydata/xarray": "parse_log_xarray",
    "scikit-learn/scikit-learn": "parse_log_scikit",
}
DEFAULT_TEST_CMD = "pytest --no-header -rA --tb=no -p no:cacheprovider"


class SdistSource(BaseModel):
    """A repository made from a PyPI source distribution: unpacked, committed, then the bug committed."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    version: str = Field(min_length=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    """Of the sdist file; a download with another digest is refused."""
    bug_patch: str = Field(min_length=1)
    """The diff that turns the unpacked sdist into `base_commit` (the inverse of the task's `patch`)."""


class SWETask(BaseModel):
    """A repository, a problem, and the tests that decide whether a patch solves it."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str = Field(min_length=1)
    repo: str = Field(min_length=1)
    """'owner/name'."""
    base_commit: str = Field(min_length=1)
    problem_statement: str = Field(min_length=1)
    FAIL_TO_PASS: list[str] = Field(min_length=1)
    """Tests that fail before the fix and must pass after it (resolved needs all)."""
    PASS_TO_PASS: list[str] = []
    """Tests that pass before and must still pass after it."""
    test_patch: str = ""
    """Applied at grading only: the tests the agent never sees."""
    patch: str = ""
    """The reference fix (never shown to the agent)."""
    hints_text: str = ""
    version: str = ""
    environment_setup_commit: str = ""
    image: str | None = None
    """A container image with the repository at `base_commit` in `workdir` (docker backend)."""
    repo_dir: str | None = None
    """A local git repository at `base_commit`; copied copy-on-write into each sandbox."""
    source: SdistSource | None = None
    """Where `repo_dir` comes from when it is absent: prepared under $ROOST_HOME on first use."""
    split: str | None = None
    """The split this task belongs to; None: any split the env serves."""
    workdir: str = "/testbed"
    setup_script: str = ""
    """Environment setup: shell run in the sandbox before the agent starts (and before grading)."""
    test_cmd: str | None = None
    """How tests run; default: pytest on the files that `test_patch` touches."""
    eval_script: str | None = None
    """A whole evaluation script (SWE-bench 5); replaces test_patch + test_cmd when given."""
    log_parser: str | None = None
    """A name in swebench's PARSER_REGISTRY; default by repo, else parse_log_pytest."""
    eval_type: Literal["pass_and_fail", "fail_only"] = "pass_and_fail"

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _json_list(cls, value):
        # SWE-bench stores these lists as JSON text.
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"expected a list of test names or its JSON text ({exc.msg})") from None
        return value

    @model_validator(mode="after")
    def _has_a_repository(self) -> SWETask:
        if not self.image and not self.repo_dir and not self.source:
            raise ValueError(
                f"task {self.instance_id!r} names neither an `image` (with the repository in "
                f"{self.workdir}), a `repo_dir` nor a `source`; give one"
            )
        return self

    @property
    def parser_name(self) -> str:
        return self.log_parser or REPO_PARSERS.get(self.repo, "parse_log_pytest")

    def test_files(self) -> list[str]:
        """Files that `test_patch` creates or changes (reset before it is applied)."""
        files = []
        for line in self.test_patch.splitlines():
            if line.startswith("diff --git a/"):
                files.append(line.split(" b/", 1)[-1])
        return files

    def agent_view(self) -> dict:
        """What the agent may see of this task (no tests, no reference patch)."""
        return {
            "instance_id": self.instance_id,
            "repo": self.repo,
            "base_commit": self.base_commit,
            "problem_statement": self.problem_statement,
            "hints_text": self.hints_text,
        }
