"""`provider="osworld"`: OSWorld's own `DesktopEnv` with its own VM providers, for those who have its image.

    roost serve osworld --env-arg provider=osworld --env-arg tasks=~/OSWorld/evaluation_examples \
        --env-arg 'official={"provider_name": "docker", "path_to_vm": "/data/Ubuntu.qcow2"}'

A thin path: OSWorld's DesktopEnv starts its VM (Docker/QEMU, VMware, VirtualBox, or a cloud
provider), runs the task's config and evaluates it exactly as OSWorld does; roost adds only
its action spaces, observations and the Env protocol. Roost never downloads the VM image
(OSWorld's Docker provider would fetch ~12 GB on its own): a local provider without
`path_to_vm`, or with a path that does not exist, is refused up front with where to get it.
DesktopEnv is synchronous, so its calls run in a worker thread.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from roost.envs.errors import BadRequestError, EnvFaultError
from roost.envs.protocol import Observation

from .observations import observation_from

if TYPE_CHECKING:
    from .actions import DesktopAction
    from .providers import ActionOutcome, Evaluation, SessionOptions
    from .tasks import OSWorldTask

LOCAL_PROVIDERS = ("docker", "vmware", "virtualbox")
IMAGES = {
    "docker": "Ubuntu.qcow2 (https://huggingface.co/datasets/xlangai/ubuntu_osworld)",
    "vmware": "the Ubuntu .vmx of OSWorld's VMware image (https://huggingface.co/datasets/xlangai/ubuntu_osworld)",
    "virtualbox": "the Ubuntu .vbox of OSWorld's VirtualBox image",
}


class OfficialOptions(BaseModel):
    """OSWorld's DesktopEnv arguments (see desktop_env/desktop_env.py)."""

    model_config = ConfigDict(extra="forbid")

    provider_name: Literal["docker", "vmware", "virtualbox", "aws", "azure", "gcp", "aliyun", "volcengine"] = "docker"
    path_to_vm: str | None = None
    """The VM image (docker: Ubuntu.qcow2; vmware: .vmx; virtualbox: .vbox); cloud providers: their VM id."""
    region: str | None = None
    snapshot_name: str = "init_state"
    headless: bool = True
    os_type: str = "Ubuntu"
    client_password: str = ""


def check_official(options: OfficialOptions) -> None:
    """Refuse, with what to do, a local provider whose VM image is absent, or a DesktopEnv that does not import."""
    name = options.provider_name
    if name in LOCAL_PROVIDERS:
        if not options.path_to_vm:
            raise BadRequestError(
                f"OSWorld's {name} provider needs its VM image: pass "
                f'official={{"path_to_vm": PATH}}, PATH being {IMAGES[name]}; roost does not '
                "download it (use provider=roost for roost's own desktops)"
            )
        path = Path(options.path_to_vm).expanduser()
        if not path.exists():
            raise BadRequestError(
                f"OSWorld's VM image {path} does not exist; download {IMAGES[name]} there, "
                "or use provider=roost for roost's own desktops"
            )
    try:
        from desktop_env.desktop_env import DesktopEnv  # noqa: F401
    except ImportError as exc:
        raise BadRequestError(
            f"OSWorld's DesktopEnv does not import here ({exc}); provider=osworld needs "
            "desktop-env with all its dependencies (pip install desktop-env, in its own "
            "environment: it pins torch)"
        ) from None


class OfficialSession:
    def __init__(self, options: SessionOptions, env: Any) -> None:
        self.options = options
        self.env = env

    @classmethod
    async def open(cls, options: SessionOptions, task: OSWorldTask) -> OfficialSession:
        check_official(options.official)
        env = await _call(_make_env, options, doing="start OSWorld's DesktopEnv")
        session = cls(options, env)
        try:
            await _call(env.reset, task_config=task.model_dump(mode="json"), doing="reset OSWorld's DesktopEnv")
        except BaseException:
            await session.close()
            raise
        return session

    async def observe(self, instruction: str, note: str = "") -> Observation:
        obs = await _call(self.env._get_obs, doing="observe OSWorld's DesktopEnv")
        png, xml = obs.get("screenshot"), obs.get("accessibility_tree")
        kind = self.options.observation.observation_type
        return observation_from(
            self.options.observation,
            instruction,
            png if kind != "a11y_tree" else None,
            xml if kind != "screenshot" else None,
            note,
        )

    async def run(self, action: DesktopAction) -> ActionOutcome:
        from .providers import ActionOutcome

        result = await _call(self.env.controller.execute_python_command, action.script, doing="run an action")
        if result is None:
            raise EnvFaultError("OSWorld's controller got no answer from the VM for the action")
        return ActionOutcome(
            result.get("returncode"),
            result.get("output") or "",
            result.get("error") or "",
            False,
            self.options.step_timeout_s,
        )

    async def evaluate(self, task: OSWorldTask, history: list[Any]) -> Evaluation:
        from .providers import Evaluation

        self.env.action_history = list(history)  # OSWorld's evaluate reads it: FAIL last scores infeasible tasks
        reward = await _call(self.env.evaluate, doing="evaluate with OSWorld's DesktopEnv")
        return Evaluation(float(reward), {"evaluator": "desktop_env.DesktopEnv.evaluate"})

    def describe(self) -> dict[str, Any]:
        return {
            "provider": "osworld",
            "osworld_provider": self.options.official.provider_name,
            "screen": [self.options.width, self.options.height],
        }

    async def close(self) -> None:
        await _call(self.env.close, doing="stop OSWorld's VM")


def _make_env(options: SessionOptions) -> Any:
    from desktop_env.desktop_env import DesktopEnv

    official = options.official
    return DesktopEnv(
        provider_name=official.provider_name,
        region=official.region,
        path_to_vm=str(Path(official.path_to_vm).expanduser()) if official.path_to_vm else None,
        snapshot_name=official.snapshot_name,
        action_space="pyautogui",
        cache_dir=str(options.cache_dir),
        screen_size=(options.width, options.height),
        headless=official.headless,
        require_a11y_tree=options.observation.observation_type != "screenshot",
        os_type=official.os_type,
        client_password=official.client_password,
    )


async def _call(function: Any, *args: Any, doing: str, **kwargs: Any) -> Any:
    try:
        return await asyncio.to_thread(function, *args, **kwargs)
    except (BadRequestError, EnvFaultError):
        raise
    except Exception as exc:
        raise EnvFaultError(f"could not {doing}: {type(exc).__name__}: {exc}") from exc
