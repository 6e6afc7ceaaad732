"""WebShopEnv through the Env protocol: pages, actions, bad input, the reward and the expert."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from roost.envs.errors import BadRequestError, EpisodeFinishedError, InvalidActionError, UnknownTaskError
from roost.envs.protocol import Env, TextAction, ToolCall
from roost.envs.registry import make_env
from roost.envs.webshop.env import WebShopEnv, make_factory


@pytest.fixture(scope="module")
def factory():
    return make_factory()


@pytest.fixture
def env(factory) -> WebShopEnv:
    return factory()


async def play_expert(env: WebShopEnv, task_id: str):
    reset = await env.reset(task_id=task_id, options={"expert_plan": True})
    info, actions = reset.info, []
    while True:
        actions.append(info["expert_plan"][0])
        step = await env.step(TextAction(actions[-1]))
        info = step.info
        if step.done:
            return step, actions


async def test_registered_and_follows_the_protocol():
    env = make_env("webshop")
    assert isinstance(env, Env)
    assert env.info.name == "webshop" and env.info.splits == ("train", "eval", "test")
    assert [t["function"]["name"] for t in env.info.tools] == ["search", "click"]


async def test_reset_shows_the_search_page_in_webshop_text_mode(env):
    reset = await env.reset(task_id="0")
    goal = env._shop.catalog.goals[0]
    assert reset.task_id == "0"
    assert reset.observation.text == f"WebShop [SEP] Instruction: [SEP] {goal.instruction_text} [SEP] Search"
    assert reset.info["available_actions"] == {"has_search_bar": True, "clickables": []}
    assert "html" not in reset.info


async def test_the_expert_buys_the_goal_on_every_test_task(env):
    rewards = []
    for task in await env.tasks("test"):
        step, actions = await play_expert(env, task.id)
        assert step.terminated and not step.truncated
        assert actions[0].startswith("search[") and actions[-1] == "click[buy now]"
        rewards.append(step.reward)
    assert sum(rewards) / len(rewards) >= 0.95


async def test_a_whole_purchase_by_tool_calls_reports_the_reward_breakdown(env):
    goal = env._shop.catalog.goals[5]
    await env.reset(task_id="5")
    step = await env.step(ToolCall("search", {"query": goal.instruction_text.split(", and price")[0]}))
    page = 1
    while goal.asin.lower() not in step.info["available_actions"]["clickables"]:
        step = await env.step(ToolCall("click", '{"target": "Next >"}'))
        page += 1
    assert f"Page {page} (Total results:" in step.observation.text
    step = await env.step(ToolCall("click", {"target": goal.asin}))
    assert step.info["page"] == "item" and "Buy Now" in step.observation.text
    for value in goal.options.values():
        step = await env.step(ToolCall("click", {"target": value}))
    step = await env.step(ToolCall("click", {"target": "Buy Now"}))
    assert (step.reward, step.terminated, step.info["success"]) == (1.0, True, True)
    assert step.info["purchased"] == {"asin": goal.asin, "options": goal.options}
    assert step.info["reward_info"]["r_option"] == 1.0
    assert step.observation.text.startswith("Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0)")


async def test_navigation_follows_the_original_pages(env):
    await env.reset(task_id="1")
    step = await env.step(TextAction("search[shirt]"))
    assert step.info["available_actions"]["clickables"][:2] == ["back to search", "next >"]
    step = await env.step(TextAction("click[next >]"))
    assert "< prev" in step.info["available_actions"]["clickables"]
    asin = step.info["available_actions"]["clickables"][3]
    step = await env.step(TextAction(f"click[{asin.upper()}]"))
    option = next(c for c in step.info["available_actions"]["clickables"][2:] if c not in ("description",))
    step = await env.step(TextAction(f"click[{option}]"))
    assert env._session.state.options
    for sub, expect in (("description", "The "), ("features", ":"), ("reviews", "")):
        step = await env.step(TextAction(f"click[{sub}]"))
        assert step.info["page"] == "sub" and expect in step.observation.text
        step = await env.step(TextAction("click[< prev]"))
        assert step.info["page"] == "item"
    step = await env.step(TextAction("click[< Prev]"))  # back to the same results page; options forgotten
    assert "Page 2 (Total results:" in step.observation.text and env._session.state.options == {}
    step = await env.step(TextAction("click[Back to Search]"))
    assert step.info["available_actions"]["has_search_bar"] and step.reward == 0.0


@pytest.mark.parametrize(
    "action, message",
    [
        (TextAction("click[Buy Now]"), "nothing called 'Buy Now' to click on the search page"),
        (TextAction("search[]"), "search needs keywords"),
        (TextAction("search[   ]"), "search needs keywords"),
        (TextAction("search[" + "x " * 300 + "]"), "keep it under 500"),
        (TextAction("search red shoes"), "not a WebShop action"),
        (TextAction("buy[B000000000]"), "not a WebShop action"),
        (ToolCall("purchase", {"target": "x"}), "unknown tool 'purchase'"),
        (ToolCall("search", {"q": "shoes"}), "exactly one string argument 'query'"),
        (ToolCall("click", "{not json"), "not valid JSON"),
    ],
)
async def test_bad_actions_are_refused_and_change_nothing(env, action, message):
    reset = await env.reset(task_id="2")
    with pytest.raises(InvalidActionError, match=re.escape(message)):
        await env.step(action)
    step = await env.step(TextAction("search[shoes]"))
    assert step.info["steps"] == 1 and step.info["page"] == "results"
    assert reset.observation.text.startswith("WebShop")


async def test_unknown_buttons_and_misplaced_searches_list_what_is_clickable(env):
    await env.reset(task_id="2")
    await env.step(TextAction("search[shoes]"))
    before = env._session.state
    with pytest.raises(InvalidActionError, match="no search bar on the results page; click\\[Back to Search\\]"):
        await env.step(TextAction("search[hats]"))
    with pytest.raises(InvalidActionError, match="Clickable here: back to search, next >, b0"):
        await env.step(TextAction("click[the blue one]"))
    assert env._session.state is before


async def test_actions_after_buying_are_refused_and_the_purchase_stands(env):
    step, _ = await play_expert(env, "3")
    for action in (TextAction("click[back to search]"), TextAction("search[more]")):
        with pytest.raises(EpisodeFinishedError, match="reset to start another"):
            await env.step(action)
    assert env._session.state.page == "done" and env._session.state.reward.reward == step.reward


async def test_max_steps_truncates_without_reward():
    env = make_factory(max_steps=3)()
    await env.reset(task_id="0")
    await env.step(TextAction("search[shirt]"))
    await env.step(TextAction("click[next >]"))
    step = await env.step(TextAction("click[< prev]"))
    assert (step.truncated, step.terminated, step.reward) == (True, False, 0.0)
    with pytest.raises(EpisodeFinishedError):
        await env.step(TextAction("click[back to search]"))


async def test_reset_by_seed_split_and_bad_reset_requests(env):
    a = await env.reset(seed=7, split="eval")
    b = await env.reset(seed=7, split="eval")
    assert a.task_id == b.task_id and 100 <= int(a.task_id) < 200
    with pytest.raises(UnknownTaskError):
        await env.reset(task_id="999999")
    with pytest.raises(BadRequestError, match="WebShop takes expert_plan, html"):
        await env.reset(task_id="0", options={"cheat": True})


async def test_web_mode_adds_html_whose_controls_are_the_clickables():
    env = make_factory(mode="web")()
    reset = await env.reset(task_id="4")
    assert 'id="search_input"' in reset.info["html"]
    step = await env.step(TextAction("search[gift]"))
    step = await env.step(TextAction(f"click[{step.info['available_actions']['clickables'][-1]}]"))
    controls = _controls(step.info["html"])
    assert set(controls) == set(step.info["available_actions"]["clickables"])


def _controls(html: str) -> list[str]:
    """Button values, product links and option radios of a page, lowercase (the original's clickables)."""

    class Controls(HTMLParser):
        def __init__(self):
            super().__init__()
            self.found, self._link = [], False

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if tag == "button" and a.get("name") == "click":
                self.found.append(a["value"].lower())
            if tag == "input" and a.get("type") == "radio":
                self.found.append(a["value"])
            self._link = tag == "a" and a.get("class") == "product-link"

        def handle_data(self, data):
            if self._link:
                self.found.append(data.strip().lower())
                self._link = False

    parser = Controls()
    parser.feed(html)
    return parser.found
