"""WebShop behind roost's Env protocol.

    factory = make_factory()                          # roost's generated catalog (offline)
    factory = make_factory(data_dir="~/webshop/data")  # the original files
    env = factory(); r = await env.reset(task_id="0"); s = await env.step(TextAction("search[red shoes]"))

Actions are WebShop's text actions (`search[...]`, `click[...]`) or the `search` and
`click` tools. The observation is WebShop's text mode; `info["available_actions"]`
lists the search bar and the clickables as the original's `get_available_actions`
does, and `info["admissible_commands"]` the same as actions (`click[...]`; on the search
page one search with the instruction's own words), as ALFWorld's info does. Buying ends the
episode (`terminated`) with the paper's reward, 1.0 meaning success; `max_steps` moves without buying truncate it with reward 0. A move the page
does not offer raises `InvalidActionError` and leaves the episode as it was.

Modes: `text` (default) and `web`, where `info["html"]` also carries the page as HTML
(the `web` routes serve it to browsers). Reset options: `expert_plan` (bool) puts the
oracle's next action in `info["expert_plan"]`; `html` (bool) adds the HTML in text mode.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from roost.envs.errors import BadRequestError, EpisodeFinishedError
from roost.envs.protocol import Action, EnvInfo, Observation, Reset, Step, Task
from roost.envs.webshop import actions
from roost.envs.webshop.catalog import SPLITS, Catalog, GoalKind
from roost.envs.webshop.expert import PRICE_CLAUSE, ExpertPlanner
from roost.envs.webshop.pages import PageRenderer, page_text
from roost.envs.webshop.reward import HeuristicNouns, NounParser, SpacyNouns
from roost.envs.webshop.session import ShopSession

VERSION = "roost-webshop-1"
RESET_OPTIONS = ("expert_plan", "html")
Mode = Literal["text", "web"]


@dataclass(frozen=True)
class ShopConfig:
    max_steps: int = 15
    """Moves before the episode is truncated (ReAct's WebShop runs allow 15)."""
    mode: Mode = "text"
    show_attributes: bool = False
    """Offer the item page's Attributes button (the original hides it)."""


@dataclass(frozen=True)
class Shop:
    """What all envs of one factory share."""

    catalog: Catalog
    renderer: PageRenderer
    nouns: NounParser
    config: ShopConfig


def make_factory(
    data_dir: str | None = None,
    seed: int = 0,
    goals: GoalKind = "human",
    search: str = "bm25",
    search_index: str | None = None,
    max_steps: int = 15,
    mode: Mode = "text",
    show_attributes: bool = False,
    type_nouns: str = "heuristic",
):
    """Build the catalog and search index once; the factory makes one env per episode.

    data_dir: WebShop's own data files (else roost's generated catalog, from `seed`).
    seed: the generator's seed and the seed of product prices and price bounds.
    goals: `human` (items_human_ins.json) or `synthetic` (items_ins_v2.json) instructions.
    search, search_index: `bm25`, or `lucene` with the folder of WebShop's Lucene index.
    max_steps, mode, show_attributes: see `ShopConfig`; mode `web` adds `info["html"]`.
    type_nouns: `heuristic` or `spacy` title nouns for the type reward (see `reward`).
    """
    if mode not in ("text", "web"):
        raise ValueError(f"unknown mode {mode!r}; WebShop runs in 'text' or 'web' mode")
    if type_nouns not in ("heuristic", "spacy"):
        raise ValueError(f"unknown type_nouns {type_nouns!r}; expected 'heuristic' or 'spacy'")
    options = dict(goals=goals, search=search, search_index=search_index)
    catalog = (
        Catalog.from_dir(Path(data_dir).expanduser(), seed=seed, **options)
        if data_dir
        else Catalog.generated(seed=seed, **options)
    )
    nouns = SpacyNouns() if type_nouns == "spacy" else HeuristicNouns()
    shop = Shop(catalog, PageRenderer(), nouns, ShopConfig(max_steps, mode, show_attributes))
    return lambda: WebShopEnv(shop)


def admissible_commands(session: ShopSession) -> list[str]:
    """Every click the page offers as `click[...]`; on the search page, one search: the instruction's words."""
    if session.has_search_bar:
        return [f"search[{session.goal.instruction_text.split(PRICE_CLAUSE)[0]}]"]
    return [f"click[{c}]" for c in session.clickables()]


class WebShopEnv:
    info_keys = frozenset(
        {
            "task_id",
            "page",
            "steps",
            "max_steps",
            "available_actions",
            "admissible_commands",
            "reward_info",
            "success",
            "purchased",
            "html",
            "expert_plan",
        }
    )

    def __init__(self, shop: Shop) -> None:
        self._shop = shop
        self._session: ShopSession | None = None
        self._task_id = ""
        self._steps = 0
        self._done = False
        self._expert: ExpertPlanner | None = None
        self._html = False

    @property
    def info(self) -> EnvInfo:
        return EnvInfo(
            "webshop",
            VERSION,
            actions.tools(),
            SPLITS,
            f"WebShop online shopping ({self._shop.config.mode} mode) over {self._shop.catalog.source}.",
        )

    async def tasks(self, split: str) -> list[Task]:
        return self._shop.catalog.tasks(split)

    async def reset(
        self,
        *,
        task_id: str | None = None,
        seed: int | None = None,
        split: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> Reset:
        options = dict(options or {})
        unknown = set(options) - set(RESET_OPTIONS)
        if unknown:
            raise BadRequestError(
                f"unknown reset option(s) {sorted(unknown)}; WebShop takes {', '.join(RESET_OPTIONS)}"
            )
        catalog = self._shop.catalog
        if task_id is None:
            indices = catalog.split_range(split or "train")
            if not indices:
                raise BadRequestError(f"split {split or 'train'!r} of {catalog.source} holds no goals")
            index = random.Random(seed).choice(indices)
        else:
            index, _ = catalog.goal(task_id, split)
        self._task_id, self._steps, self._done = str(index), 0, False
        self._session = ShopSession(
            catalog, catalog.goals[index], show_attributes=self._shop.config.show_attributes, nouns=self._shop.nouns
        )
        self._expert = ExpertPlanner() if options.get("expert_plan") else None
        self._html = bool(options.get("html")) or self._shop.config.mode == "web"
        observation, info = self._observe(self._session)
        return Reset(self._task_id, observation, actions.tools(), info)

    async def step(self, action: Action) -> Step:
        session = self._session
        if session is None:
            raise EpisodeFinishedError("no episode is running; call reset first")
        if self._done:
            raise EpisodeFinishedError("this episode has ended (bought or out of steps); reset to start another")
        move = actions.parse(action)
        if move.kind == "search":
            session.search(move.argument)
        else:
            session.click(move.argument)
        self._steps += 1
        state = session.state
        terminated = state.page == "done"
        truncated = not terminated and self._steps >= self._shop.config.max_steps
        self._done = terminated or truncated
        reward = state.reward.reward if terminated and state.reward else 0.0
        observation, info = self._observe(session)
        return Step(observation, reward, terminated, truncated, info)

    async def close(self) -> None:
        self._session = None

    def _observe(self, session: ShopSession) -> tuple[Observation, dict[str, Any]]:
        html = self._shop.renderer.html(session)
        state = session.state
        info: dict[str, Any] = {
            "task_id": self._task_id,
            "page": state.page,
            "steps": self._steps,
            "max_steps": self._shop.config.max_steps,
            "available_actions": {"has_search_bar": session.has_search_bar, "clickables": session.clickables()},
            "admissible_commands": admissible_commands(session),
        }
        if state.reward is not None:
            info.update(
                reward_info=state.reward.as_dict(),
                success=state.reward.reward == 1.0,
                purchased={"asin": state.asin, "options": dict(state.options)},
            )
        if self._html:
            info["html"] = html
        if self._expert is not None and state.page != "done":
            info["expert_plan"] = [self._expert.next_action(session)]
        return Observation(page_text(html)), info
