"""The WebShop paper's reward for a purchase.

    reward = r_type * (attributes matched + options matched + price ok) / (|attributes| + |options| + 1)

- attributes: a goal attribute matches when a product attribute is a fuzzy token-set
  match above 85, or the attribute text occurs in the title, the features or the description;
- options: each *chosen* option matches when it is one of the goal's option values
  (exactly for `size`, fuzzy above 85 otherwise) or occurs in the title, features or
  description; colours are normalised first (`navy blue` → `blue`);
- price: the product's price is at most the goal's upper bound;
- r_type scales it all: 1 when the query, the category path (two shared levels) or the
  title nouns (over 20%) match; 0.5 when none does; 0.1 under 10% title nouns; 0 at none.

Success is a reward of exactly 1. The one departure from the original: it finds title
nouns with spaCy's `en_core_web_lg`; roost's default `HeuristicNouns` keeps the content
words of the title instead (spaCy is a heavy, separately downloaded model). Pass
`SpacyNouns()` to reproduce the original where spaCy and the model are installed.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Protocol

from rapidfuzz import fuzz

from roost.envs.webshop.products import Goal, Product

EXACT_MATCH_OPTIONS = ("size",)
FUZZY_THRESHOLD = 85

COLOR_SET = (
    "alabaster",
    "apricot",
    "aqua",
    "ash",
    "asphalt",
    "azure",
    "banana",
    "beige",
    "black",
    "blue",
    "blush",
    "bordeaux",
    "bronze",
    "brown",
    "burgundy",
    "camel",
    "camo",
    "caramel",
    "champagne",
    "charcoal",
    "cheetah",
    "chestnut",
    "chocolate",
    "christmas",
    "coffee",
    "cognac",
    "copper",
    "coral",
    "cranberry",
    "cream",
    "crystal",
    "dark",
    "denim",
    "eggplant",
    "elephant",
    "espresso",
    "fuchsia",
    "gold",
    "granite",
    "grape",
    "graphite",
    "grass",
    "gray",
    "green",
    "grey",
    "heather",
    "indigo",
    "ivory",
    "ivy",
    "khaki",
    "lavender",
    "lemon",
    "leopard",
    "light",
    "lilac",
    "lime",
    "magenta",
    "maroon",
    "mauve",
    "merlot",
    "midnight",
    "mint",
    "mocha",
    "multicolor",
    "mushroom",
    "mustard",
    "natural",
    "navy",
    "nude",
    "olive",
    "orange",
    "peach",
    "pewter",
    "pink",
    "plum",
    "purple",
    "rainbow",
    "red",
    "rose",
    "royal",
    "rust",
    "sand",
    "sapphire",
    "seashell",
    "silver",
    "skull",
    "slate",
    "steel",
    "stone",
    "stonewash",
    "sunflower",
    "tan",
    "taupe",
    "teal",
    "tiger",
    "turquoise",
    "violet",
    "walnut",
    "wheat",
    "white",
    "wine",
    "yellow",
)
"""The original's colour list, in its order: the first colour that occurs in a value wins."""

STOPWORDS = frozenset(
    """
a an and are as at be by for from has have in is it its of on or the to with without this that these
those you your our we i my me pack count set size color inch inches oz ounce ounces fl lb lbs pcs pc
piece pieces x s
""".split()
)


def normalize_color(value: str) -> str:
    return next((color for color in COLOR_SET if color in value), value)


def fuzzy_ratio(a: str, b: str) -> int:
    """thefuzz's `token_set_ratio` (full processing, ASCII only), on rapidfuzz."""
    a, b = _full_process(a), _full_process(b)
    if not a or not b:
        return 0
    return int(round(fuzz.token_set_ratio(a, b)))


def _full_process(text: str) -> str:
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return " ".join(re.sub(r"[^0-9a-zA-Z]", " ", text).lower().split())


class NounParser(Protocol):
    def __call__(self, text: str) -> list[str]:
        """The lowercase nouns of a product title."""


class HeuristicNouns:
    """Content words of a title: lowercase alphabetic tokens of 2+ letters, minus stopwords."""

    def __call__(self, text: str) -> list[str]:
        return [t for t in re.findall(r"[a-z][a-z'-]*[a-z]", text.lower()) if t not in STOPWORDS]


class SpacyNouns:
    """The original's parser: tokens spaCy tags NOUN or PROPN (needs spaCy and the model)."""

    def __init__(self, model: str = "en_core_web_lg") -> None:
        try:
            import spacy
        except ImportError:
            raise ImportError(
                "SpacyNouns needs spaCy: `pip install spacy` and "
                f"`python -m spacy download {model}`; or use HeuristicNouns"
            ) from None
        try:
            self._nlp = spacy.load(model)
        except OSError:
            raise ImportError(
                f"spaCy model {model!r} is not installed: `python -m spacy download {model}`; or use HeuristicNouns"
            ) from None

    def __call__(self, text: str) -> list[str]:
        return [t.text.lower() for t in self._nlp(text) if t.pos_ in ("PNOUN", "NOUN", "PROPN")]


@dataclass(frozen=True)
class RewardBreakdown:
    reward: float
    r_type: float
    r_attribute: float
    r_option: float | None
    r_price: bool | None
    query_match: bool
    category_match: bool
    title_score: float

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


def type_reward(product: Product, goal: Goal, nouns: NounParser) -> tuple[float, bool, bool, float]:
    query_match = product.query == goal.query
    bought = {x.strip() for x in product.product_category.split("›")}
    wanted = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(bought & wanted) >= 2
    desired = nouns(goal.name)
    title_score = len(set(nouns(product.title)) & set(desired)) / len(desired) if desired else 0.2
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, query_match, category_match, title_score


def attribute_matches(product: Product, goal: Goal) -> int:
    text = _product_text(product)
    matched = 0
    for wanted in goal.attributes:
        if any(fuzzy_ratio(have, wanted) > FUZZY_THRESHOLD for have in product.attributes):
            matched += 1
        elif any(wanted in part for part in text):
            matched += 1
    return matched


def option_matches(product: Product, goal_values: list[str], chosen: dict[str, str]) -> int:
    goal_values = [normalize_color(v) for v in goal_values]
    text = _product_text(product)
    matched = 0
    for name, value in chosen.items():
        value = normalize_color(value)
        if name.lower() in EXACT_MATCH_OPTIONS:
            hit = value in goal_values
        else:
            hit = any(fuzzy_ratio(g, value) > FUZZY_THRESHOLD for g in goal_values)
        if hit or any(value in part for part in text):
            matched += 1
    return matched


def get_reward(
    product: Product, goal: Goal, price: float, chosen: dict[str, str], nouns: NounParser | None = None
) -> RewardBreakdown:
    r_type, query_match, category_match, title_score = type_reward(product, goal, nouns or HeuristicNouns())
    r_price = price <= goal.price_upper if goal.price_upper > 0 else None
    n_attr = attribute_matches(product, goal)
    goal_values = list(goal.options.values())
    n_opt = option_matches(product, goal_values, chosen)
    total = (n_attr + n_opt + (r_price or 0)) / (len(goal.attributes) + len(goal_values) + 1)
    return RewardBreakdown(
        reward=total * r_type,
        r_type=r_type,
        r_attribute=n_attr / len(goal.attributes) if goal.attributes else 0.0,
        r_option=n_opt / len(goal_values) if goal_values else None,
        r_price=r_price,
        query_match=query_match,
        category_match=category_match,
        title_score=title_score,
    )


def _product_text(product: Product) -> tuple[str, str, str]:
    return product.title.lower(), " ".join(product.bullet_points).lower(), product.description.lower()
