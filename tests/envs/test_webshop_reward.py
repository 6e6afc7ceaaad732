"""The WebShop reward: each rule of the original's get_reward, on hand-made products and goals."""

from __future__ import annotations

from dataclasses import replace

import pytest

from roost.envs.webshop.products import Goal, Product, parse_options, parse_pricing
from roost.envs.webshop.reward import HeuristicNouns, fuzzy_ratio, get_reward, normalize_color

PATH = "Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running"


def shoe(**changes) -> Product:
    product = Product(
        asin="B000000001",
        title="Northwind Men's Lightweight Running Shoes, Breathable",
        description="A running shoe for every day.",
        bullet_points=("Rubber sole: grips.",),
        pricing=(45.0,),
        price_tag="$45.0",
        options={"color": ("black", "navy blue"), "size": ("9", "9.5", "10")},
        category="fashion",
        query="men's running shoes",
        product_category=PATH,
        attributes=("lightweight", "breathable", "rubber sole"),
    )
    return replace(product, **changes)


def goal(**changes) -> Goal:
    g = Goal(
        asin="B000000001",
        instruction_text="i need lightweight running shoes",
        attributes=("lightweight", "breathable"),
        options={"color": "navy blue", "size": "9.5"},
        price_upper=50.0,
        name="Northwind Men's Lightweight Running Shoes, Breathable",
        query="men's running shoes",
        category="fashion",
        product_category=PATH,
    )
    return replace(g, **changes)


def test_the_right_product_with_the_right_options_under_the_price_is_a_success():
    r = get_reward(shoe(), goal(), 45.0, {"color": "navy blue", "size": "9.5"})
    assert r.reward == 1.0
    assert (r.r_type, r.r_attribute, r.r_option, r.r_price) == (1.0, 1.0, 1.0, True)


def test_each_missed_part_costs_its_share_of_attributes_options_and_price():
    # 2 attributes + 2 options + price = 5 parts
    assert get_reward(shoe(), goal(), 45.0, {"color": "navy blue"}).reward == pytest.approx(4 / 5)
    assert get_reward(shoe(), goal(), 45.0, {}).reward == pytest.approx(3 / 5)
    assert get_reward(shoe(), goal(), 60.0, {"color": "navy blue", "size": "9.5"}).reward == pytest.approx(4 / 5)
    missing_attr = goal(attributes=("lightweight", "waterproof"))
    assert get_reward(shoe(), missing_attr, 45.0, {"color": "navy blue", "size": "9.5"}).reward == pytest.approx(4 / 5)


def test_size_matches_exactly_and_other_options_fuzzily_after_colour_normalisation():
    assert get_reward(shoe(), goal(), 45.0, {"size": "10"}).r_option == 0.0
    # the first colour of the original's list that occurs in the value wins, substrings included
    assert normalize_color("navy blue") == "blue"
    assert normalize_color("dark wash") == "ash"
    assert normalize_color("9.5") == "9.5"
    assert get_reward(shoe(), goal(options={"color": "blue"}), 45.0, {"color": "navy blue"}).r_option == 1.0


def test_an_attribute_found_in_the_title_features_or_description_counts():
    product = shoe(attributes=("DUMMY_ATTR",))
    assert get_reward(product, goal(attributes=("rubber sole",)), 45.0, {}).r_attribute == 1.0
    assert get_reward(product, goal(attributes=("every day",)), 45.0, {}).r_attribute == 1.0
    assert get_reward(product, goal(attributes=("waterproof",)), 45.0, {}).r_attribute == 0.0


def test_fuzzy_ratio_is_thefuzz_token_set_ratio():
    assert fuzzy_ratio("Long-Sleeve", "long sleeve shirt") == 100
    assert fuzzy_ratio("machine wash", "hand wash") < 85
    assert fuzzy_ratio("", "x") == 0


def test_type_reward_scales_the_total_by_title_query_and_category_matches():
    other_title = shoe(title="Kestrel Ceramic Coffee Mug", query="mugs", product_category="Home › Kitchen › Mugs")
    assert get_reward(other_title, goal(), 45.0, {"color": "navy blue", "size": "9.5"}).r_type == 0.0
    # same category path and query, a title sharing one noun in five: matched by query, so 1.0
    similar = shoe(title="Redwater Trail Shoes")
    r = get_reward(similar, goal(), 45.0, {"color": "navy blue", "size": "9.5"})
    assert r.query_match and r.r_type == 1.0
    # no query or category match, a title sharing one noun in five: 0.5
    loose = shoe(title="Redwater Trail Shoes", query="boots", product_category="Shoes › Boots")
    assert get_reward(loose, goal(), 45.0, {}).r_type == 0.5
    # under 10% of the goal's title nouns: 0.1
    long_name = goal(name="Northwind Alpha Beta Gamma Delta Epsilon Zeta Eta Theta Iota Kappa Running")
    tiny = shoe(title="Northwind Mug", query="mugs", product_category="Home › Kitchen › Mugs")
    assert get_reward(tiny, long_name, 45.0, {}).r_type == 0.1


def test_heuristic_nouns_keep_content_words():
    assert HeuristicNouns()("Men's Slim Fit T-Shirt, Pack of 3") == ["men's", "slim", "fit", "t-shirt"]


def test_raw_pricing_and_options_are_parsed_as_the_original_loader_does():
    assert parse_pricing("$12.99") == ((12.99,), "$12.99")
    assert parse_pricing("$10.99 - $15.99") == ((10.99, 15.99), "$10.99 to $15.99")
    assert parse_pricing("") == ((100.0,), "$100.0")
    options, images = parse_options({"Color": [{"value": "Navy/White ", "image": "u"}], "Size": None})
    assert options == {"color": ("navy | white",)} and images == {"navy | white": "u"}
