"""The generated catalog, the original-format loaders, splits and search."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from roost.envs.errors import BadRequestError, UnknownTaskError
from roost.envs.webshop.catalog import GENERATED_SPLITS, Catalog, load_products
from roost.envs.webshop.datagen import DatagenSpec, generate
from roost.envs.webshop.loaders import RawData, WebShopDataMissing, read_raw, write_raw
from roost.envs.webshop.search import SEARCH_RETURN_N, make_search


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.generated()


def test_generation_is_deterministic_per_seed():
    a, b, c = generate(DatagenSpec(seed=0)), generate(DatagenSpec(seed=0)), generate(DatagenSpec(seed=1))
    assert json.dumps(asdict(a)) == json.dumps(asdict(b))
    assert json.dumps(asdict(a)) != json.dumps(asdict(c))


def test_generated_catalog_has_a_few_hundred_products_across_categories(catalog: Catalog):
    assert len(catalog.products) == 300
    assert {p.category for p in catalog.products.values()} == {"fashion", "beauty", "electronics", "food", "furniture"}
    assert len(catalog.goals) == 600
    for goal in catalog.goals:
        product = catalog.products[goal.asin]
        assert set(goal.attributes) <= set(product.attributes)
        assert all(product.option_name_of(v) == name for name, v in goal.options.items())
        assert catalog.prices[goal.asin] <= goal.price_upper
        assert goal.instruction_text.endswith(f"price lower than {goal.price_upper:.2f} dollars")


def test_splits_are_fixed_slices_of_the_shuffled_goals(catalog: Catalog):
    sizes = {s: len(catalog.tasks(s)) for s in ("test", "eval", "train")}
    assert sizes == {"test": 100, "eval": 100, "train": 400}
    assert [t.id for t in catalog.tasks("test")][:3] == ["0", "1", "2"]
    assert catalog.goal("150") == (150, "eval")
    with pytest.raises(UnknownTaskError, match="task ids are goal indices"):
        catalog.goal("150", "test")
    with pytest.raises(UnknownTaskError):
        catalog.goal("nope")
    with pytest.raises(BadRequestError, match="WebShop has train, eval, test"):
        catalog.tasks("dev")


def test_the_original_file_layout_round_trips(tmp_path, catalog: Catalog):
    written = write_raw(generate(DatagenSpec(seed=0)), tmp_path)
    assert sorted(p.name for p in written) == [
        "items_human_ins.json",
        "items_ins_v2.json",
        "items_shuffle.json",
        "reviews.json",
        "roost.json",
    ]
    loaded = Catalog.from_dir(tmp_path, seed=0)
    assert loaded.products == catalog.products
    assert [g.instruction_text for g in loaded.goals] == [g.instruction_text for g in catalog.goals]
    assert [t.id for t in loaded.tasks("test")] == [t.id for t in catalog.tasks("test")]
    (tmp_path / "roost.json").unlink()  # without roost's note, a folder is split as the original data is
    assert len(Catalog.from_dir(tmp_path, seed=0).tasks("test")) == 500


def test_loader_applies_the_original_cleaning_rules():
    record = {
        "asin": "B0AAAAAAA1",
        "name": "Thing",
        "full_description": "d",
        "small_description": "one bullet",
        "pricing": "$5.00",
        "customization_options": {"Size": [{"value": "Large", "image": None}]},
        "category": "c",
        "query": " Things ",
        "product_category": "a › b",
        "images": [],
    }
    raw = RawData(
        products=[record, dict(record, name="dup"), dict(record, asin="nan"), dict(record, asin="TOO_LONG_ASIN")],
        attributes={},
        human_instructions={},
        reviews=[],
    )
    [product] = load_products(raw)
    assert (product.title, product.query, product.bullet_points) == ("Thing", "things", ("one bullet",))
    assert product.attributes == ("DUMMY_ATTR",) and product.options == {"size": ("large",)}


def test_human_goals_accept_option_lists_and_synthetic_goals_expand_option_combinations():
    raw = generate(DatagenSpec(seed=3, products_per_type=1, instructions_per_product=1))
    assert isinstance(raw.human_instructions[raw.products[0]["asin"]][0]["instruction_options"], list)
    human = Catalog.build(raw, source="t", split_sizes=GENERATED_SPLITS, goals="human")
    for goal in human.goals:  # option values come back named after the product's option groups
        assert set(goal.options) == set(human.products[goal.asin].options)
    synthetic = Catalog.build(raw, source="t", split_sizes=GENERATED_SPLITS, goals="synthetic")
    combos = sum(_combinations(p.options) for p in synthetic.products.values())
    assert len(synthetic.goals) == combos
    assert all(" with " in g.instruction_text for g in synthetic.goals)


def test_missing_files_say_where_to_get_them(tmp_path):
    with pytest.raises(WebShopDataMissing, match="items_shuffle.json, items_shuffle_1000.json"):
        read_raw(tmp_path)


def test_bm25_search_finds_the_product_an_instruction_describes(catalog: Catalog):
    goal = catalog.goals[0]
    hits = catalog.search.search(goal.instruction_text.split(", and price")[0])
    assert goal.asin in hits and len(hits) <= SEARCH_RETURN_N
    assert catalog.search.search("zzzz qqqq") == []
    assert catalog.search.search("the and of") == []


def test_lucene_backend_explains_what_it_needs(catalog: Catalog):
    with pytest.raises(ValueError, match="search_index"):
        make_search("lucene", [])
    try:
        import pyserini  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install pyserini"):
            make_search("lucene", [], index="/nonexistent")
    with pytest.raises(ValueError, match="expected 'bm25' or 'lucene'"):
        make_search("elastic", [])


def _combinations(options) -> int:
    n = 1
    for values in options.values():
        n *= len(values)
    return n
