"""The shop's page state machine: one shopper, one goal, the original's pages and buttons.

Pages: `search` (the start page, the only one with a search bar), `results` (ten
products a page), `item` (a product, its options and buttons), `sub` (the product's
Description, Features, Reviews or Attributes) and `done` (after Buy Now). Buttons are
named by their text, matched without case, as WebShop's text env does:

    search page   search[keywords]
    results       back to search | < prev | next > | <asin>
    item          back to search | < prev | <option value> | description | features | reviews
                  | attributes (when shown) | buy now
    sub page      back to search | < prev

`< prev` goes from a sub page to its item, from an item to its results page (which, as
in the original, forgets the chosen options), and from results to the previous page.
A move that the page does not offer raises `InvalidActionError` and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from roost.envs.errors import EpisodeFinishedError, InvalidActionError
from roost.envs.webshop.catalog import Catalog
from roost.envs.webshop.products import Goal
from roost.envs.webshop.reward import NounParser, RewardBreakdown, get_reward

PRODUCT_WINDOW = 10
BUY_NOW, BACK_TO_SEARCH, NEXT_PAGE, PREV_PAGE = "buy now", "back to search", "next >", "< prev"
SUB_PAGES = ("description", "features", "reviews", "attributes")
MAX_QUERY_CHARS = 500

PageKind = Literal["search", "results", "item", "sub", "done"]


@dataclass(frozen=True)
class ShopState:
    page: PageKind = "search"
    keywords: tuple[str, ...] = ()
    results: tuple[str, ...] = ()
    """All asins the last search found (the original keeps the top 50)."""
    page_num: int = 1
    asin: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    sub_page: str | None = None
    visited: frozenset[str] = frozenset()
    """Asins clicked since the last search page (the original's `asins`)."""
    reward: RewardBreakdown | None = None

    @property
    def query(self) -> str:
        return " ".join(self.keywords)

    @property
    def page_results(self) -> tuple[str, ...]:
        start = (self.page_num - 1) * PRODUCT_WINDOW
        return self.results[start : start + PRODUCT_WINDOW]


class ShopSession:
    """One episode's shop. Moves are pure: each returns the next state and the session keeps it."""

    def __init__(
        self, catalog: Catalog, goal: Goal, *, show_attributes: bool = False, nouns: NounParser | None = None
    ) -> None:
        self.catalog = catalog
        self.goal = goal
        self.show_attributes = show_attributes
        self.nouns = nouns
        self.state = ShopState()

    @property
    def has_search_bar(self) -> bool:
        return self.state.page == "search"

    def clickables(self) -> list[str]:
        """The buttons, links and options of the current page, lowercase, in page order."""
        s = self.state
        if s.page == "results":
            nav = [BACK_TO_SEARCH] + ([PREV_PAGE] if s.page_num > 1 else [])
            nav += [NEXT_PAGE] if s.page_num * PRODUCT_WINDOW < len(s.results) else []
            return nav + [a.lower() for a in s.page_results]
        if s.page == "item":
            product = self.catalog.products[s.asin]
            values = [v for vs in product.options.values() for v in vs]
            subs = list(SUB_PAGES if self.show_attributes else SUB_PAGES[:3])
            return [BACK_TO_SEARCH, PREV_PAGE] + list(dict.fromkeys(values)) + subs + [BUY_NOW]
        if s.page == "sub":
            return [BACK_TO_SEARCH, PREV_PAGE]
        return []

    def search(self, query: str) -> ShopState:
        self._check_open()
        keywords = query.lower().split()
        if not self.has_search_bar:
            raise InvalidActionError(
                f"there is no search bar on the {self.state.page} page; "
                f"click[Back to Search] first. Clickable here: {self._listing()}"
            )
        if not keywords:
            raise InvalidActionError("search needs keywords, e.g. search[red running shoes]")
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidActionError(f"search query is {len(query)} characters; keep it under {MAX_QUERY_CHARS}")
        return self._results(tuple(keywords), tuple(self.catalog.search.search(" ".join(keywords))), 1)

    def click(self, target: str) -> ShopState:
        self._check_open()
        name = " ".join(target.strip().lower().split())
        if name not in self.clickables():
            hint = "; use search[...] on this page" if self.has_search_bar else ""
            raise InvalidActionError(
                f"nothing called {target.strip()[:100]!r} to click on the {self.state.page} page"
                f"{hint}. Clickable here: {self._listing()}"
            )
        s = self.state
        if name == BUY_NOW:
            return self._buy()
        if name == BACK_TO_SEARCH:
            return self._set(ShopState())
        if name == NEXT_PAGE:
            return self._results(s.keywords, s.results, s.page_num + 1)
        if name == PREV_PAGE:
            if s.page == "results":
                return self._results(s.keywords, s.results, s.page_num - 1)
            if s.page == "item":
                return self._results(s.keywords, s.results, s.page_num)
            return self._set(replace(s, page="item", sub_page=None))
        if s.page == "results":
            asin = name.upper()
            return self._set(replace(s, page="item", asin=asin, options={}, visited=s.visited | {asin}))
        if name in SUB_PAGES:
            return self._set(replace(s, page="sub", sub_page=name))
        product = self.catalog.products[s.asin]
        option = product.option_name_of(name)
        return self._set(replace(s, options={**s.options, option: name}))

    def _results(self, keywords: tuple[str, ...], results: tuple[str, ...], page_num: int) -> ShopState:
        s = self.state
        return self._set(
            replace(
                s,
                page="results",
                keywords=keywords,
                results=results,
                page_num=page_num,
                asin=None,
                options={},
                sub_page=None,
            )
        )

    def _buy(self) -> ShopState:
        s = self.state
        product = self.catalog.products[s.asin]
        reward = get_reward(product, self.goal, self.catalog.prices[product.asin], s.options, self.nouns)
        return self._set(replace(s, page="done", reward=reward))

    def _set(self, state: ShopState) -> ShopState:
        self.state = state
        return state

    def _check_open(self) -> None:
        if self.state.page == "done":
            raise EpisodeFinishedError("the product is bought and the episode is over; reset to shop again")

    def _listing(self) -> str:
        return ", ".join(self.clickables()) or "(nothing)"
