"""The oracle shopper: knows the goal's product and buys it with the goal's options.

It searches with the instruction's own words (without the price clause), pages through
up to `max_pages` result pages for the target, and if it is not there searches again
with the product's title. On the item page it clicks each wanted option the product
offers, then Buy Now. Used through `reset(options={"expert_plan": True})`, which puts
the next expert action in `info["expert_plan"]` after every step.
"""

from __future__ import annotations

from roost.envs.webshop.session import BACK_TO_SEARCH, BUY_NOW, NEXT_PAGE, PREV_PAGE, ShopSession

PRICE_CLAUSE = ", and price lower than"


class ExpertPlanner:
    def __init__(self, max_pages: int = 5) -> None:
        self.max_pages = max_pages
        self._title_search = False

    def next_action(self, session: ShopSession) -> str | None:
        s, goal = session.state, session.goal
        if s.page == "search":
            query = (
                session.catalog.products[goal.asin].title
                if self._title_search
                else goal.instruction_text.split(PRICE_CLAUSE)[0]
            )
            return f"search[{query}]"
        if s.page == "results":
            if goal.asin in s.page_results:
                return f"click[{goal.asin}]"
            if NEXT_PAGE in session.clickables() and s.page_num < self.max_pages:
                return f"click[{NEXT_PAGE}]"
            self._title_search = True
            return f"click[{BACK_TO_SEARCH}]"
        if s.page == "item":
            if s.asin != goal.asin:
                return f"click[{PREV_PAGE}]"
            product = session.catalog.products[s.asin]
            for value in goal.options.values():
                name = product.option_name_of(value)
                if name is not None and s.options.get(name) != value:
                    return f"click[{value}]"
            return f"click[{BUY_NOW}]"
        if s.page == "sub":
            return f"click[{PREV_PAGE}]"
        return None
