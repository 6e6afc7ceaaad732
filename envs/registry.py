"""Short env names → where their code lives.

An entry point is a `module:function` that takes the env's keyword arguments and
returns an `EnvFactory`; the factory does the expensive setup (indexing tasks) once
and makes a fresh env per episode. Anything not in `ENVS` may be given by its dotted
path directly, e.g. `roost serve mypkg.myenv:make_factory`.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roost.envs.protocol import Env, EnvFactory

if TYPE_CHECKING:
    from roost.envs.conformance import CheckConfig


@dataclass(frozen=True)
class ContainerNeeds:
    """What an env's server asks of its container (`roost serve ENV --docker`) beyond Docker's defaults."""

    nested_sandbox: bool = False
    """The server runs bubblewrap inside: user namespaces (seccomp and AppArmor unconfined) and a
    fresh /proc in each (/proc's masked paths unmasked, as `--security-opt systempaths=unconfined`)."""
    shm_size: str | None = None
    """Size of /dev/shm (Docker's default is 64 MB; Chromium wants more)."""
    init: bool = False
    """Docker's init as PID 1, reaping the processes the server's children leave behind."""
    env_args: tuple[str, ...] = ()
    """`--env-arg` values the server in the container always gets (the image's own CMD is
    replaced when roost starts it, so what the env needs there is said here)."""


@dataclass(frozen=True)
class EnvSpec:
    name: str
    entry_point: str
    description: str = ""
    routes: str | None = None
    """`module:function(manager) -> APIRouter` of extra pages the env server serves (web modes)."""
    call_timeout_s: float = 120.0
    """How long one reset or step may take before its worker is killed (grading can be slow)."""
    container: ContainerNeeds = ContainerNeeds()
    """What its server needs of its container (`roost serve ENV --docker`)."""
    default_data: str | None = None
    """`module:function() -> Path`: the data folder `roost serve ENV --docker` mounts when no
    `--data-dir` is given."""
    check: str | None = None
    """`module:function() -> CheckConfig`: the small config `roost envs check ENV` runs
    (`roost.envs.conformance`); None: the entry point's defaults, no probe action."""
    cli: str | None = None
    """`module:function(envs_app)`: adds the env's own commands under `roost envs`."""

    def load_default_data(self) -> Path | None:
        """The env's default data folder (see `default_data`), or None."""
        return None if self.default_data is None else _load(self.default_data)()

    def load_check(self) -> CheckConfig:
        """The env's conformance-check config (see `check`)."""
        from roost.envs.conformance import CheckConfig

        return CheckConfig() if self.check is None else _load(self.check)()

    def load_routes(self):
        """The env's extra router factory, or None."""
        return None if self.routes is None else _load(self.routes)

    @property
    def package_dir(self) -> Path | None:
        """The env's own subpackage (holding its Dockerfile), for envs that ship one."""
        module = self.entry_point.split(":", 1)[0]
        spec = importlib.util.find_spec(module.rsplit(".", 1)[0])
        if spec is None or not spec.submodule_search_locations:
            return None
        return Path(next(iter(spec.submodule_search_locations)))


ENVS: dict[str, EnvSpec] = {
    "alfworld": EnvSpec(
        "alfworld",
        "roost.envs.alfworld.env:make_factory",
        "ALFWorld household tasks as TextWorld PDDL games (text, admissible commands as a tool).",
        default_data="roost.envs.alfworld.catalog:default_data_dir",
        check="roost.envs.alfworld.prepare:check_config",
        cli="roost.envs.alfworld.cli:register",
    ),
    "webshop": EnvSpec(
        "webshop",
        "roost.envs.webshop.env:make_factory",
        "WebShop online shopping: search, click, buy; the paper's reward (text or web pages).",
        routes="roost.envs.webshop.web:web_router",
        check="roost.envs.webshop.prepare:check_config",
        cli="roost.envs.webshop.cli:register",
    ),
    "swe": EnvSpec(
        "swe",
        "roost.envs.swe.env:make_factory",
        "Repository tasks in SWE-bench's format: bash and file tools in a sandbox, graded by swebench.",
        call_timeout_s=1800.0,
        # In its container the episodes' sandboxes are local ones (envs/swe/Dockerfile says why).
        container=ContainerNeeds(env_args=('sandbox={"backend": "local"}', "host_python=false")),
        check="roost.envs.swe.prepare:check_config",
        cli="roost.envs.swe.cli:register",
    ),
    "hermes": EnvSpec(
        "hermes",
        "roost.envs.hermes.env:make_factory",
        "hermes-agent per episode: its terminal and file tools in a sandbox, rewarded by a verifier.",
        check="roost.envs.hermes.prepare:check_config",
        cli="roost.envs.hermes.cli:register",
    ),
    "osworld": EnvSpec(
        "osworld",
        "roost.envs.osworld.env:make_factory",
        "OSWorld desktop tasks: a real X desktop per episode, pyautogui/computer_13 actions, "
        "screenshots and accessibility trees, OSWorld's evaluators.",
        call_timeout_s=600.0,
        default_data="roost.envs.osworld.task_set:default_tasks_dir",
        check="roost.envs.osworld.prepare:check_config",
        cli="roost.envs.osworld.cli:register",
        # Each desktop in the container gets its own /home/user from bubblewrap.
        container=ContainerNeeds(nested_sandbox=True, shm_size="1g", init=True),
    ),
}


def _load(entry_point: str) -> Any:
    module, _, attr = entry_point.partition(":")
    return getattr(importlib.import_module(module), attr)


def resolve(name: str) -> EnvSpec:
    if name in ENVS:
        return ENVS[name]
    if ":" in name:
        return EnvSpec(name, name)
    raise KeyError(
        f"unknown env {name!r}; known envs: {', '.join(sorted(ENVS))} "
        "(or give an entry point as 'package.module:function')"
    )


def load_factory(name: str, **kwargs: Any) -> EnvFactory:
    return _load(resolve(name).entry_point)(**kwargs)


def make_env(name: str, **kwargs: Any) -> Env:
    """One env, in this process (Gymnasium's `make`)."""
    return load_factory(name, **kwargs)()
