"""Read (and write) WebShop's original data files.

A WebShop data folder holds, under these names (the `_1000` variants are the small set):

    items_shuffle.json | items_shuffle_1000.json   product records (a JSON list)
    items_ins_v2.json  | items_ins_v2_1000.json    asin → {"attributes", "instruction", "instruction_attributes"}
    items_human_ins.json                           asin → [{"instruction", "instruction_attributes",
                                                            "instruction_options"}, ...]
    reviews.json                                   [{"asin", "reviews": [...], "average_rating"}] (optional)
    roost.json                                     roost's own note on a generated set (optional):
                                                   {"generator", "seed", "split_sizes": {"test", "eval"}}

Download them as WebShop's `setup.sh` does; roost reads them unchanged. `write_raw`
writes the same layout (roost's generated set, for users who want it as files).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRODUCT_FILES = ("items_shuffle.json", "items_shuffle_1000.json")
ATTRIBUTE_FILES = ("items_ins_v2.json", "items_ins_v2_1000.json")
HUMAN_FILE = "items_human_ins.json"
REVIEW_FILE = "reviews.json"
NOTE_FILE = "roost.json"


class WebShopDataMissing(FileNotFoundError):
    """A data folder lacks a file the catalog needs."""


@dataclass
class RawData:
    products: list[dict[str, Any]]
    attributes: dict[str, dict[str, Any]]
    human_instructions: dict[str, list[dict[str, Any]]]
    reviews: list[dict[str, Any]]
    note: dict[str, Any] = field(default_factory=dict)
    """roost.json: how roost generated this data (empty for the original files)."""


def read_raw(data_dir: Path, *, products_file: str | None = None, attributes_file: str | None = None) -> RawData:
    """The files of `data_dir`; the full-size product and attribute files win over the `_1000` ones."""
    data_dir = Path(data_dir).expanduser()
    products = _first(data_dir, (products_file,) if products_file else PRODUCT_FILES)
    attributes = _first(data_dir, (attributes_file,) if attributes_file else ATTRIBUTE_FILES)
    human = data_dir / HUMAN_FILE
    reviews = data_dir / REVIEW_FILE
    note = data_dir / NOTE_FILE
    return RawData(
        products=_load(products),
        attributes=_load(attributes),
        human_instructions=_load(human) if human.is_file() else {},
        reviews=_load(reviews) if reviews.is_file() else [],
        note=_load(note) if note.is_file() else {},
    )


def write_raw(raw: RawData, out: Path) -> list[Path]:
    out = Path(out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, value in (
        (PRODUCT_FILES[0], raw.products),
        (ATTRIBUTE_FILES[0], raw.attributes),
        (HUMAN_FILE, raw.human_instructions),
        (REVIEW_FILE, raw.reviews),
        (NOTE_FILE, raw.note),
    ):
        if name == NOTE_FILE and not value:
            continue
        path = out / name
        path.write_text(json.dumps(value, indent=1))
        written.append(path)
    return written


def _first(data_dir: Path, names: tuple[str, ...]) -> Path:
    for name in names:
        if (data_dir / name).is_file():
            return data_dir / name
    raise WebShopDataMissing(
        f"none of {', '.join(names)} in {data_dir}. Download WebShop's data files there (see its setup.sh), "
        "or leave data_dir unset to use roost's generated catalog."
    )


def _load(path: Path) -> Any:
    try:
        with path.open() as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}); re-download it") from None
