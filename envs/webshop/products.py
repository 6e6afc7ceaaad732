"""Product and goal records, and the conversion from WebShop's raw JSON records.

Raw products are the records of the original `items_shuffle*.json` (keys `asin`, `name`,
`full_description`, `small_description`, `pricing`, `customization_options`, `category`,
`query`, `product_category`, `images`); attributes come from `items_ins_v2*.json` and
reviews from `reviews.json`. `Product.from_raw` applies the original loader's rules:
prices parsed from the `$` string (a range keeps its first two bounds), option values
lowercased with `/` written ` | `, a product without attributes gets `DUMMY_ATTR`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

DEFAULT_PRICE = 100.0


@dataclass(frozen=True)
class Review:
    title: str
    score: int
    body: str


@dataclass(frozen=True)
class Product:
    asin: str
    title: str
    description: str
    bullet_points: tuple[str, ...]
    pricing: tuple[float, ...]
    """One price, or a range's lower and upper bound."""
    price_tag: str
    options: dict[str, tuple[str, ...]]
    """Option name (lowercase, e.g. `color`) → its values, in the shop's order."""
    category: str
    query: str
    product_category: str
    attributes: tuple[str, ...]
    reviews: tuple[Review, ...] = ()
    rating: str = "N.A."
    image: str | None = None
    option_images: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def from_raw(
        cls, raw: dict[str, Any], attributes: list[str] | None = None, reviews: dict[str, Any] | None = None
    ) -> Product:
        pricing, price_tag = parse_pricing(raw.get("pricing"))
        options, option_images = parse_options(raw.get("customization_options"))
        bullets = raw.get("small_description") or []
        review_list = (reviews or {}).get("reviews") or []
        return cls(
            asin=raw["asin"],
            title=raw.get("name") or "",
            description=raw.get("full_description") or "",
            bullet_points=tuple(bullets if isinstance(bullets, list) else [bullets]),
            pricing=pricing,
            price_tag=price_tag,
            options=options,
            category=raw.get("category") or "",
            query=(raw.get("query") or "").lower().strip(),
            product_category=raw.get("product_category") or "",
            attributes=tuple(attributes) if attributes else ("DUMMY_ATTR",),
            reviews=tuple(_review(r) for r in review_list),
            rating=str((reviews or {}).get("average_rating", "N.A.")),
            image=(raw.get("images") or [None])[0],
            option_images=option_images,
        )

    def option_name_of(self, value: str) -> str | None:
        """The option group that offers `value`, if any (first one wins)."""
        return next((name for name, values in self.options.items() if value in values), None)

    def search_text(self) -> str:
        """What the search index holds for this product (the original's document contents)."""
        option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in self.options.items())
        first_bullet = self.bullet_points[0] if self.bullet_points else ""
        return " ".join([self.title, self.description, first_bullet, option_text]).lower()


@dataclass(frozen=True)
class Goal:
    """What one instruction asks for: a product like `asin`, with these attributes and options."""

    asin: str
    instruction_text: str
    attributes: tuple[str, ...]
    options: dict[str, str]
    """Option name → wanted value. Human goals name only values; their names are looked up
    in the target product (or `option N` when it offers no such value)."""
    price_upper: float
    name: str
    query: str
    category: str
    product_category: str
    weight: float = 1.0


def parse_pricing(pricing: Any) -> tuple[tuple[float, ...], str]:
    """`"$12.99"` → ((12.99,), "$12.99"); `"$10.99 - $15.99"` → ((10.99, 15.99), "$10.99 to $15.99")."""
    if isinstance(pricing, (list, tuple)) and pricing:
        values = [float(p) for p in pricing][:2]
    elif isinstance(pricing, str) and "$" in pricing:
        values = []
        for part in pricing.split("$")[1:]:
            try:
                values.append(float(Decimal(re.sub(r"[^\d.]", "", part))))
            except InvalidOperation:
                continue
        values = values[:2]
    else:
        values = []
    if not values:
        return (DEFAULT_PRICE,), f"${DEFAULT_PRICE}"
    if len(values) == 1:
        return (values[0],), f"${values[0]}"
    return (values[0], values[1]), f"${values[0]} to ${values[1]}"


def parse_options(raw: Any) -> tuple[dict[str, tuple[str, ...]], dict[str, str | None]]:
    options: dict[str, tuple[str, ...]] = {}
    images: dict[str, str | None] = {}
    for name, contents in (raw or {}).items():
        if not contents:
            continue
        values = []
        for content in contents:
            value = str(content["value"]).strip().replace("/", " | ").lower()
            values.append(value)
            images[value] = content.get("image")
        options[name.lower()] = tuple(values)
    return options, images


def _review(raw: dict[str, Any]) -> Review:
    score = raw.get("score", raw.get("stars", 0))
    try:
        score = int(float(score))
    except (TypeError, ValueError):
        score = 0
    return Review(str(raw.get("title", "")), score, str(raw.get("review", raw.get("body", ""))))
