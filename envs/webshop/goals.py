"""Product prices and goals, derived as the original WebShop derives them.

A product's price is its single price, or a uniform draw inside its range. A goal's price
upper bound is the larger of two draws among the first four multiples of $10 above the
price (`", and price lower than X dollars"` ends the instruction); with fewer than two
such multiples there is no bound. Human goals come from `items_human_ins.json` (one per
instruction with attributes); synthetic goals from `items_ins_v2.json` (one per
combination of option values, weighted by attribute rarity). Goals are then shuffled
with seed 233, as the original does, so a split is a fixed slice of that order.

The original draws prices with Python's global, unseeded `random`; roost draws them from
a `random.Random(seed)`, so a catalog is the same in every process.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from dataclasses import replace
from typing import Any

from roost.envs.webshop.products import Goal, Product

PRICE_RANGE = [10.0 * i for i in range(1, 100)]
NO_PRICE_BOUND = 1_000_000.0
SHUFFLE_SEED = 233


def product_prices(products: list[Product], rng: random.Random) -> dict[str, float]:
    return {p.asin: p.pricing[0] if len(p.pricing) == 1 else rng.uniform(*p.pricing[:2]) for p in products}


def price_bound(price: float, rng: random.Random) -> tuple[float, str]:
    candidates = [p for p in PRICE_RANGE if p > price][:4]
    if len(candidates) < 2:
        return NO_PRICE_BOUND, ""
    upper = sorted(rng.sample(candidates, 2))[1]
    return upper, f", and price lower than {upper:.2f} dollars"


def human_goals(
    products: list[Product], instructions: dict[str, list[dict[str, Any]]], prices: dict[str, float], rng: random.Random
) -> list[Goal]:
    goals = []
    for product in products:
        for entry in instructions.get(product.asin, []):
            attributes = entry.get("instruction_attributes") or []
            if not attributes:
                continue
            upper, price_text = price_bound(prices[product.asin], rng)
            goals.append(
                _goal(
                    product,
                    entry["instruction"].strip(".") + price_text,
                    attributes,
                    _named_options(product, entry.get("instruction_options") or []),
                    upper,
                )
            )
    return goals


def synthetic_goals(
    products: list[Product], attributes: dict[str, dict[str, Any]], prices: dict[str, float], rng: random.Random
) -> list[Goal]:
    goals = []
    counts: Counter[str] = Counter()
    for product in products:
        entry = attributes.get(product.asin) or {}
        text, wanted = entry.get("instruction"), entry.get("instruction_attributes") or []
        if not text or not wanted:
            continue
        upper, price_text = price_bound(prices[product.asin], rng)
        names = sorted(product.options)
        for combination in itertools.product(*(product.options[n] for n in names)):
            options = dict(zip(names, combination))
            option_text = ", and ".join(f"{k}: {v}" for k, v in options.items())
            option_text = f" with {option_text}" if option_text else ""
            goals.append(_goal(product, f"{text}{option_text}{price_text}", wanted, options, upper))
            counts.update(wanted)
    return [_weighted(g, counts) for g in goals]


def shuffled(goals: list[Goal]) -> list[Goal]:
    goals = list(goals)
    random.Random(SHUFFLE_SEED).shuffle(goals)
    return goals


def _goal(product: Product, text: str, attributes: list[str], options: dict[str, str], upper: float) -> Goal:
    return Goal(
        asin=product.asin,
        instruction_text=text,
        attributes=tuple(attributes),
        options=options,
        price_upper=upper,
        name=product.title,
        query=product.query,
        category=product.category,
        product_category=product.product_category,
    )


def _named_options(product: Product, values: list[str] | dict[str, str]) -> dict[str, str]:
    if isinstance(values, dict):
        return {str(k).lower(): str(v) for k, v in values.items()}
    named: dict[str, str] = {}
    for i, value in enumerate(values):
        name = product.option_name_of(value) or f"option {i}"
        named[name if name not in named else f"{name} {i}"] = value
    return named


def _weighted(goal: Goal, counts: Counter[str]) -> Goal:
    weight = sum(1.0 / counts[a] for a in goal.attributes) / len(goal.attributes)
    return replace(goal, weight=weight)
