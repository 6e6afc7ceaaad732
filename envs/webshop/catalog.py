"""Products, goals, splits and search: what every env of one factory shares (read-only).

Splits are fixed slices of the shuffled goal list, as in WebShop's own training code:
`test` is the first `test_size` goals, `eval` the next `eval_size`, `train` the rest
(500 / 1000 / rest for the original data; 100 / 100 / rest for the generated set, whose
`roost.json` says so when it is written out as files). A
task id is the goal's index in that list, so task `"42"` is WebShop's session 42.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from roost.envs.errors import BadRequestError, UnknownTaskError
from roost.envs.protocol import Task
from roost.envs.webshop.goals import human_goals, product_prices, shuffled, synthetic_goals
from roost.envs.webshop.loaders import RawData, read_raw
from roost.envs.webshop.products import Goal, Product
from roost.envs.webshop.search import SearchEngine, make_search

SPLITS = ("train", "eval", "test")
GoalKind = Literal["human", "synthetic"]


@dataclass(frozen=True)
class SplitSizes:
    test: int
    eval: int


ORIGINAL_SPLITS = SplitSizes(test=500, eval=1000)
GENERATED_SPLITS = SplitSizes(test=100, eval=100)


def split_sizes_of(raw: RawData) -> SplitSizes:
    """What roost.json says for a generated set; the original's sizes otherwise."""
    sizes = raw.note.get("split_sizes")
    return SplitSizes(int(sizes["test"]), int(sizes["eval"])) if sizes else ORIGINAL_SPLITS


@dataclass(frozen=True)
class Catalog:
    products: dict[str, Product]
    prices: dict[str, float]
    goals: list[Goal]
    split_sizes: SplitSizes
    search: SearchEngine
    source: str
    """Where the data came from, for `EnvInfo.description` and error messages."""

    @classmethod
    def build(
        cls,
        raw: RawData,
        *,
        source: str,
        split_sizes: SplitSizes,
        goals: GoalKind = "human",
        search: str = "bm25",
        search_index: str | None = None,
        seed: int = 0,
    ) -> Catalog:
        products = load_products(raw)
        rng = random.Random(seed)
        prices = product_prices(products, rng)
        if goals == "human":
            goal_list = human_goals(products, raw.human_instructions, prices, rng)
        elif goals == "synthetic":
            goal_list = synthetic_goals(products, raw.attributes, prices, rng)
        else:
            raise ValueError(f"unknown goal kind {goals!r}; expected 'human' or 'synthetic'")
        if not goal_list:
            raise ValueError(
                f"{source} yields no {goals} goals; human goals need items_human_ins.json, "
                "synthetic goals need instructions in items_ins_v2.json"
            )
        by_asin = {p.asin: p for p in products}
        return cls(
            by_asin,
            prices,
            shuffled(goal_list),
            split_sizes,
            make_search(search, list(by_asin.values()), index=search_index),
            source,
        )

    @classmethod
    def generated(cls, seed: int = 0, **kwargs) -> Catalog:
        from roost.envs.webshop.datagen import DatagenSpec, generate

        raw = generate(DatagenSpec(seed=seed))
        return cls.build(
            raw, source=f"roost's generated catalog (seed {seed})", split_sizes=split_sizes_of(raw), seed=seed, **kwargs
        )

    @classmethod
    def from_dir(cls, data_dir: Path, **kwargs) -> Catalog:
        """The original files; a folder roost generated keeps its own split sizes (from roost.json)."""
        raw = read_raw(data_dir)
        return cls.build(raw, source=str(data_dir), split_sizes=split_sizes_of(raw), **kwargs)

    def split_range(self, split: str) -> range:
        n, sizes = len(self.goals), self.split_sizes
        ranges = {
            "test": range(0, min(sizes.test, n)),
            "eval": range(min(sizes.test, n), min(sizes.test + sizes.eval, n)),
            "train": range(min(sizes.test + sizes.eval, n), n),
        }
        if split not in ranges:
            raise BadRequestError(f"unknown split {split!r}; WebShop has {', '.join(SPLITS)}")
        return ranges[split]

    def tasks(self, split: str) -> list[Task]:
        return [Task(str(i), split, {"category": self.goals[i].category}) for i in self.split_range(split)]

    def goal(self, task_id: str, split: str | None = None) -> tuple[int, str]:
        """The goal index of `task_id` and its split; the split is checked when given."""
        index = int(task_id) if task_id.isdigit() else -1
        found = next((s for s in SPLITS if index in self.split_range(s)), None)
        if found is None or (split is not None and split != found):
            where = f"split {split!r}" if split else "any split"
            raise UnknownTaskError(
                f"no task {task_id!r} in {where} of {self.source}; task ids are goal indices "
                f"0..{len(self.goals) - 1}; list them with GET /tasks?split={split or 'test'}"
            )
        return index, found


def load_products(raw: RawData) -> list[Product]:
    """The original loader's rules: skip `nan` and over-long asins, keep the first of duplicates."""
    attributes = raw.attributes
    reviews = {r["asin"]: r for r in raw.reviews if "asin" in r}
    products, seen = [], set()
    for record in raw.products:
        asin = str(record.get("asin", "nan"))
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        products.append(Product.from_raw(record, (attributes.get(asin) or {}).get("attributes"), reviews.get(asin)))
    return products
