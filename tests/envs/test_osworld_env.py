"""The OSWorld env served over HTTP with the local desktop backend: reset (desktop + config steps),
real pyautogui actions into mousepad, OSWorld's evaluator, and the bad input that must end bounded."""

from __future__ import annotations

import base64
import shutil
import struct

import pytest

from roost.envs.client import EnvClient
from roost.envs.episodes import ManagerConfig
from roost.envs.errors import BadRequestError, EnvFaultError, EpisodeFinishedError, InvalidActionError
from roost.envs.osworld.env import make_factory
from roost.envs.protocol import TextAction, ToolCall
from roost.envs.serve import ServerConfig, serving
from roost.tests.envs.osworld_checks import NOTES, wait_for, write_tasks
from roost.tests.envs.test_osworld_observations import load_osworld_linearize

INFEASIBLE = {
    "id": "infeasible-fax",
    "instruction": "Send this file by fax.",
    "config": [],
    "evaluator": {"func": "infeasible"},
}
DRIVE = {
    "id": "needs-drive",
    "instruction": "Open the sheet from Google Drive.",
    "config": [
        {"type": "googledrive", "parameters": {"settings_file": "settings.json", "operation": ["delete"], "args": [{}]}}
    ],
    "evaluator": {"func": "infeasible"},
}


MAX_STEPS = 16


@pytest.fixture(scope="module")
def tasks_dir(tmp_path_factory):
    if shutil.which("Xvfb") is None or shutil.which("mousepad") is None:
        pytest.skip("the local desktop needs Xvfb and mousepad (.ci/apt-packages.txt)")
    root = tmp_path_factory.mktemp("osworld") / "evaluation_examples"
    tasks = [("os", NOTES), ("os", INFEASIBLE), ("chrome", DRIVE)]
    return write_tasks(root, tasks, {"os": [NOTES["id"], INFEASIBLE["id"]]})


@pytest.fixture
async def client(tasks_dir):
    kwargs = {"tasks": str(tasks_dir), "step_timeout_s": 4, "max_steps": MAX_STEPS, "settle_s": 0.2, "wait_s": 0.3}
    config = ServerConfig("osworld", kwargs, port=0, manager=ManagerConfig(workers=1, max_episodes=2))
    async with serving(config) as url:
        async with EnvClient(url) as env_client:
            yield env_client


async def test_info_and_splits(client):
    info = await client.info()
    assert info.name == "osworld" and set(info.splits) >= {"all", "test"}
    assert {"mousepad", "xvfb", "openbox"} <= set(info.versions), info.versions  # the host's, for local desktops
    assert {t["function"]["name"] for t in info.tools} >= {"click", "type", "hotkey", "scroll", "drag", "done", "fail"}
    assert {t.id for t in await client.tasks("test")} == {NOTES["id"], INFEASIBLE["id"]}
    assert len(await client.tasks("all")) == 3


async def test_type_into_mousepad_save_and_score(client):
    episode, reset = await client.create(task_id=NOTES["id"])
    assert reset.observation.text.startswith(f"Task: {NOTES['instruction']}\n\nAccessibility tree:\ntag\tname")
    step = await wait_for(client, episode, "first line")
    xml = step.observation.accessibility_tree
    assert xml and step.observation.text.endswith(load_osworld_linearize()(xml, "ubuntu"))

    with pytest.raises(InvalidActionError, match="not valid Python: SyntaxError"):
        await client.step(episode, TextAction("pyautogui.hotkey('ctrl', 'end'"))
    step = await client.step(
        episode, TextAction("pyautogui.hotkey('ctrl', 'end')\npyautogui.typewrite('hello roost<3')")
    )
    assert step.info["returncode"] == 0 and not step.done, step.info
    step = await wait_for(client, episode, "hello roost<3")
    step = await client.step(episode, ToolCall("hotkey", {"keys": ["ctrl", "s"]}))
    step = await client.step(episode, ToolCall("done", "{}"))
    assert step.terminated and step.reward == 1.0 and step.info["exit_reason"] == "done"
    with pytest.raises(EpisodeFinishedError):
        await client.step(episode, TextAction("WAIT"))


async def test_done_without_the_work_scores_zero(client):
    episode, reset = await client.create(task_id=NOTES["id"])
    assert reset.info["versions"] == (await client.info()).versions  # what its desktop reported
    step = await client.step(episode, TextAction("DONE"))
    assert step.terminated and step.reward == 0.0 and step.info["versions"] == reset.info["versions"]


async def test_an_endless_loop_stops_at_the_step_timeout_and_the_episode_goes_on(client):
    episode, _ = await client.create(task_id=INFEASIBLE["id"])
    step = await client.step(episode, TextAction("while True:\n    pass"))
    assert step.info["timed_out"] and "ran past 4s and was stopped" in step.observation.text and not step.done
    step = await client.step(episode, TextAction("print('still here')"))
    assert "still here" in step.observation.text


async def test_infeasible_scores_fail_only(client):
    episode, _ = await client.create(task_id=INFEASIBLE["id"])
    step = await client.step(episode, ToolCall("fail", {}))
    assert step.terminated and step.reward == 1.0
    episode, _ = await client.create(task_id=INFEASIBLE["id"])
    step = await client.step(episode, TextAction("DONE"))
    assert step.reward == 0.0


async def test_a_task_that_needs_the_internet_is_reported_not_scored(client):
    with pytest.raises(BadRequestError, match="unsupported here.*googledrive"):
        await client.create(task_id=DRIVE["id"])


async def test_out_of_steps_is_truncated_and_evaluated(client):
    episode, _ = await client.create(task_id=INFEASIBLE["id"])
    for _ in range(MAX_STEPS - 1):
        assert not (await client.step(episode, TextAction("WAIT"))).done
    step = await client.step(episode, TextAction("WAIT"))
    assert step.truncated and not step.terminated and step.reward == 0.0 and step.info["exit_reason"] == "step_limit"


KILL_OWN_X_SERVER = """
import os, signal
def parent(pid):
    return int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])
def argv(pid):
    return open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')
server = os.getpid()
while b'roost.envs.osworld.desktop.server' not in argv(server):
    server = parent(server)
pids = [int(p) for p in os.listdir('/proc') if p.isdigit()]
xvfb = [p for p in pids if parent(p) == server and os.path.basename(argv(p)[0]) == b'Xvfb']
print(xvfb)
os.kill(xvfb[0], signal.SIGKILL)
"""


async def test_a_dead_x_server_is_an_env_fault(client):
    episode, _ = await client.create(task_id=INFEASIBLE["id"])
    with pytest.raises(EnvFaultError, match="desktop"):  # the desktop's own X server, found from the action
        await client.step(episode, TextAction(KILL_OWN_X_SERVER))
        await client.step(episode, TextAction("WAIT"))
    _, reset = await client.create(task_id=INFEASIBLE["id"])  # a fresh desktop
    assert reset.observation.text.startswith("Task: Send this file by fax.")


async def test_screenshots_and_computer13_in_process(tasks_dir):
    env = make_factory(
        tasks=str(tasks_dir), observation_type="screenshot_a11y_tree", width=800, height=600, action_space="computer_13"
    )()
    try:
        reset = await env.reset(task_id=INFEASIBLE["id"])
        png = base64.b64decode(reset.observation.image)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (800, 600)
        assert "Accessibility tree:" in reset.observation.text
        step = await env.step(TextAction('{"action_type": "MOVE_TO", "x": 400, "y": 300}'))
        assert step.info["returncode"] == 0 and step.observation.image
        with pytest.raises(InvalidActionError, match="not JSON"):  # code is no computer_13 action
            await env.step(TextAction("pyautogui.moveTo(1, 1)"))
        step = await env.step(ToolCall("pyautogui", {"code": "print(tuple(pyautogui.position()))"}))
        assert "(400, 300)" in step.observation.text
    finally:
        await env.close()
