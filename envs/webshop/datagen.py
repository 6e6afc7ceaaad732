"""A small WebShop catalog and instruction set, generated from a seed.

    raw = generate(DatagenSpec(seed=0))   # 25 product types x 12 products, 2 instructions each

The output is WebShop's own raw data (`RawData`: items_shuffle records, items_ins_v2
attributes, items_human_ins instructions, reviews), so it goes through the same loader
as the original files and can be written out with `loaders.write_raw`. Products of one
type share a query, a category path and an attribute pool, so search results hold
near misses; every instruction names attributes and option values its product has.
The same seed gives the same data in every process and on every machine.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from roost.envs.webshop.loaders import RawData

GENERATOR_VERSION = 1


@dataclass(frozen=True)
class ProductType:
    category: str
    query: str
    path: str
    noun: str
    """How the title names it."""
    ask: str
    """How an instruction names it."""
    attributes: tuple[tuple[str, ...], ...]
    """Attribute groups; a product takes at most one attribute of each group."""
    options: dict[str, tuple[str, ...]]
    price: tuple[float, float]
    title_prefix: str = ""


FASHION, BEAUTY, ELECTRONICS, FOOD, FURNITURE = "fashion", "beauty", "electronics", "food", "furniture"
COLORS = ("Black", "White", "Navy Blue", "Heather Grey", "Olive Green", "Red", "Royal Blue", "Pink", "Beige")
APPAREL_SIZES = ("X-Small", "Small", "Medium", "Large", "X-Large", "XX-Large")

TYPES: tuple[ProductType, ...] = (
    ProductType(
        FASHION,
        "men's t-shirts",
        "Clothing, Shoes & Jewelry › Men › Clothing › Shirts › T-Shirts",
        "T-Shirt",
        "t-shirt for men",
        (
            ("short sleeve", "long sleeve"),
            ("machine wash",),
            ("cotton", "polyester blend"),
            ("slim fit", "relaxed fit"),
            ("crew neck", "v-neck"),
            ("moisture wicking",),
        ),
        {"color": COLORS[:7], "size": APPAREL_SIZES[1:]},
        (9, 35),
        "Men's",
    ),
    ProductType(
        FASHION,
        "women's dresses",
        "Clothing, Shoes & Jewelry › Women › Clothing › Dresses",
        "Dress",
        "dress for women",
        (
            ("floral print", "solid color"),
            ("v-neck", "round neck"),
            ("midi length", "mini length", "maxi length"),
            ("hand wash",),
            ("pockets",),
            ("sleeveless", "short sleeve"),
        ),
        {"color": ("Black", "Floral Blue", "Wine Red", "Green", "Pink", "Beige"), "size": APPAREL_SIZES[:5]},
        (18, 60),
        "Women's",
    ),
    ProductType(
        FASHION,
        "men's running shoes",
        "Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running",
        "Running Shoes",
        "running shoes for men",
        (("lightweight",), ("breathable",), ("non slip",), ("rubber sole",), ("memory foam",), ("lace up", "slip on")),
        {
            "color": ("Black", "Grey", "Blue", "White", "Black White"),
            "size": ("7", "8", "8.5", "9", "9.5", "10", "11", "12"),
        },
        (30, 90),
        "Men's",
    ),
    ProductType(
        FASHION,
        "women's leggings",
        "Clothing, Shoes & Jewelry › Women › Clothing › Active › Leggings",
        "Leggings",
        "leggings for women",
        (
            ("high waist",),
            ("tummy control",),
            ("moisture wicking",),
            ("four-way stretch",),
            ("squat proof",),
            ("pockets",),
        ),
        {"color": ("Black", "Charcoal", "Navy", "Burgundy", "Olive"), "size": APPAREL_SIZES[:5]},
        (12, 40),
        "Women's",
    ),
    ProductType(
        FASHION,
        "men's jeans",
        "Clothing, Shoes & Jewelry › Men › Clothing › Jeans",
        "Jeans",
        "jeans for men",
        (
            ("straight leg", "slim leg"),
            ("relaxed fit", "regular fit"),
            ("stretch",),
            ("button closure", "zipper fly"),
            ("machine wash",),
            ("cotton",),
        ),
        {
            "color": ("Dark Wash", "Light Wash", "Black", "Stonewash Blue"),
            "size": ("30W x 30L", "32W x 32L", "34W x 32L", "36W x 34L"),
        },
        (25, 70),
        "Men's",
    ),
    ProductType(
        BEAUTY,
        "shampoo",
        "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos",
        "Shampoo",
        "shampoo",
        (
            ("sulfate free",),
            ("paraben free",),
            ("natural ingredients",),
            ("dry hair", "oily hair"),
            ("hair growth",),
            ("cruelty free",),
            ("color safe",),
        ),
        {
            "size": ("8 Fl Oz (Pack of 1)", "12 Fl Oz (Pack of 1)", "16.9 Fl Oz (Pack of 2)", "33.8 Fl Oz (Pack of 1)"),
            "scent": ("Argan Oil", "Coconut", "Tea Tree", "Lavender", "Unscented"),
        },
        (8, 40),
    ),
    ProductType(
        BEAUTY,
        "face moisturizer",
        "Beauty & Personal Care › Skin Care › Face › Creams & Moisturizers › Face Moisturizers",
        "Face Moisturizer",
        "face moisturizer",
        (
            ("fragrance free",),
            ("sensitive skin", "oily skin"),
            ("hyaluronic acid",),
            ("oil free",),
            ("spf 30",),
            ("anti aging",),
            ("long lasting",),
        ),
        {"size": ("1.7 Oz", "2.5 Oz", "3.4 Oz")},
        (12, 55),
    ),
    ProductType(
        BEAUTY,
        "lipstick",
        "Beauty & Personal Care › Makeup › Lips › Lipstick",
        "Lipstick",
        "lipstick",
        (
            ("long lasting",),
            ("matte finish", "glossy finish"),
            ("cruelty free",),
            ("waterproof",),
            ("paraben free",),
            ("vegan",),
        ),
        {"color": ("Ruby Red", "Nude Pink", "Coral", "Berry", "Mauve", "Plum")},
        (6, 30),
    ),
    ProductType(
        BEAUTY,
        "hair dryer",
        "Beauty & Personal Care › Hair Care › Styling Tools & Appliances › Hair Dryers & Accessories › Hair Dryers",
        "Hair Dryer",
        "hair dryer",
        (("ionic",), ("lightweight",), ("fast drying",), ("low noise",), ("diffuser",), ("travel size",)),
        {"color": ("Black", "Pink", "White", "Rose Gold")},
        (20, 90),
    ),
    ProductType(
        BEAUTY,
        "toothpaste",
        "Beauty & Personal Care › Oral Care › Toothpaste",
        "Toothpaste",
        "toothpaste",
        (("fluoride free",), ("natural ingredients",), ("whitening",), ("sensitive teeth",), ("fresh breath",)),
        {
            "flavor name": ("Mint", "Spearmint", "Charcoal Mint", "Cinnamon"),
            "size": ("4 Oz (Pack of 1)", "4 Oz (Pack of 3)"),
        },
        (5, 25),
    ),
    ProductType(
        ELECTRONICS,
        "usb c cables",
        "Electronics › Computers & Accessories › Cables & Accessories › Cables & Interconnects › USB Cables",
        "USB C Cable",
        "usb c cable",
        (("fast charging",), ("braided nylon",), ("high speed",), ("durable",), ("data sync",), ("right angle",)),
        {"color": ("Black", "White", "Grey", "Red"), "size": ("3 ft", "6 ft", "10 ft")},
        (6, 25),
    ),
    ProductType(
        ELECTRONICS,
        "wireless earbuds",
        "Electronics › Headphones, Earbuds & Accessories › Headphones & Earbuds › Earbud Headphones",
        "Wireless Earbuds",
        "wireless earbuds",
        (
            ("noise cancelling",),
            ("bluetooth 5.3",),
            ("long battery life",),
            ("waterproof",),
            ("charging case",),
            ("built-in microphone",),
        ),
        {"color": ("Black", "White", "Navy", "Pink")},
        (20, 120),
    ),
    ProductType(
        ELECTRONICS,
        "phone cases",
        "Electronics › Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases",
        "Phone Case",
        "phone case",
        (
            ("shockproof",),
            ("slim fit",),
            ("wireless charging compatible",),
            ("clear", "matte"),
            ("kickstand",),
            ("military grade",),
        ),
        {
            "color": ("Black", "Clear", "Blue", "Purple", "Green"),
            "style": ("iPhone 14", "iPhone 15", "iPhone 15 Pro", "Galaxy S23"),
        },
        (8, 30),
    ),
    ProductType(
        ELECTRONICS,
        "power bank",
        "Electronics › Cell Phones & Accessories › Chargers & Power Adapters › Portable Power Banks",
        "Portable Power Bank",
        "portable power bank",
        (("fast charging",), ("usb c",), ("high capacity",), ("led display",), ("compact",), ("dual output",)),
        {"color": ("Black", "White", "Blue"), "size": ("10000mAh", "20000mAh", "26800mAh")},
        (18, 60),
    ),
    ProductType(
        ELECTRONICS,
        "wireless mouse",
        "Electronics › Computers & Accessories › Computer Accessories & Peripherals › Keyboards, Mice & Accessories › Mice",
        "Wireless Mouse",
        "wireless mouse",
        (("ergonomic",), ("silent click",), ("rechargeable",), ("bluetooth",), ("adjustable dpi",), ("usb receiver",)),
        {"color": ("Black", "White", "Grey", "Pink", "Blue")},
        (10, 45),
    ),
    ProductType(
        FOOD,
        "coffee beans",
        "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Coffee › Whole Coffee Beans",
        "Whole Bean Coffee",
        "whole bean coffee",
        (
            ("organic",),
            ("fair trade",),
            ("dark roast", "medium roast", "light roast"),
            ("low acid",),
            ("gluten free",),
            ("kosher",),
        ),
        {
            "flavor name": ("French Roast", "Colombian", "Espresso", "Hazelnut", "Vanilla"),
            "size": ("12 Ounce (Pack of 1)", "2 Pound (Pack of 1)", "12 Ounce (Pack of 2)"),
        },
        (10, 45),
    ),
    ProductType(
        FOOD,
        "protein bars",
        "Grocery & Gourmet Food › Snack Foods › Bars › Protein Bars",
        "Protein Bars",
        "protein bars",
        (("gluten free",), ("high protein",), ("low sugar",), ("keto friendly",), ("non gmo",), ("plant based",)),
        {
            "flavor name": ("Chocolate Peanut Butter", "Cookie Dough", "Birthday Cake", "Mint Chocolate"),
            "size": ("12 Count (Pack of 1)", "24 Count (Pack of 1)"),
        },
        (15, 45),
    ),
    ProductType(
        FOOD,
        "herbal tea",
        "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Tea › Herbal",
        "Herbal Tea Bags",
        "herbal tea",
        (("caffeine free",), ("organic",), ("individually wrapped",), ("non gmo",), ("kosher",), ("sugar free",)),
        {
            "flavor name": ("Chamomile", "Peppermint", "Ginger", "Lemon", "Hibiscus"),
            "size": ("20 Count (Pack of 1)", "20 Count (Pack of 6)"),
        },
        (5, 30),
    ),
    ProductType(
        FOOD,
        "snack nuts",
        "Grocery & Gourmet Food › Snack Foods › Nuts & Seeds",
        "Roasted Nuts",
        "snack nuts",
        (
            ("roasted", "raw"),
            ("salted", "unsalted"),
            ("resealable bag",),
            ("high protein",),
            ("vegan",),
            ("gluten free",),
        ),
        {
            "flavor name": ("Almonds", "Cashews", "Mixed Nuts", "Pistachios"),
            "size": ("1 Pound (Pack of 1)", "2.5 Pound (Pack of 1)"),
        },
        (8, 40),
    ),
    ProductType(
        FOOD,
        "olive oil",
        "Grocery & Gourmet Food › Pantry Staples › Cooking Oils, Vinegars & Sprays › Oils › Olive Oil",
        "Extra Virgin Olive Oil",
        "olive oil",
        (("cold pressed",), ("organic",), ("non gmo",), ("glass bottle",), ("single origin",), ("kosher",)),
        {"size": ("16.9 Fl Oz (Pack of 1)", "33.8 Fl Oz (Pack of 1)", "101 Fl Oz (Pack of 1)")},
        (10, 50),
    ),
    ProductType(
        FURNITURE,
        "office chairs",
        "Home & Kitchen › Furniture › Home Office Furniture › Home Office Chairs › Home Office Desk Chairs",
        "Office Chair",
        "office chair",
        (
            ("lumbar support",),
            ("adjustable height",),
            ("mesh back", "leather back"),
            ("swivel",),
            ("padded armrests",),
            ("easy assembly",),
        ),
        {"color": ("Black", "Grey", "White", "Blue")},
        (60, 250),
    ),
    ProductType(
        FURNITURE,
        "bookshelves",
        "Home & Kitchen › Furniture › Home Office Furniture › Bookcases",
        "Bookshelf",
        "bookshelf",
        (
            ("easy assembly",),
            ("solid wood", "engineered wood"),
            ("storage space",),
            ("industrial style", "farmhouse style"),
            ("anti-tip",),
            ("open shelves",),
        ),
        {"color": ("Walnut", "White", "Black", "Oak"), "size": ("3-Tier", "4-Tier", "5-Tier")},
        (40, 180),
    ),
    ProductType(
        FURNITURE,
        "coffee tables",
        "Home & Kitchen › Furniture › Living Room Furniture › Tables › Coffee Tables",
        "Coffee Table",
        "coffee table",
        (
            ("mid century",),
            ("storage space",),
            ("solid wood", "metal frame"),
            ("easy assembly",),
            ("tempered glass",),
            ("living room",),
        ),
        {"color": ("Brown", "White", "Black", "Natural")},
        (50, 220),
    ),
    ProductType(
        FURNITURE,
        "bed frames",
        "Home & Kitchen › Furniture › Bedroom Furniture › Beds, Frames & Bases › Bed Frames",
        "Platform Bed Frame",
        "platform bed frame",
        (
            ("metal frame", "wood frame"),
            ("no box spring needed",),
            ("easy assembly",),
            ("under bed storage",),
            ("noise free",),
            ("wood slats",),
        ),
        {"size": ("Twin", "Full", "Queen", "King")},
        (90, 300),
    ),
    ProductType(
        FURNITURE,
        "throw pillow covers",
        "Home & Kitchen › Bedding › Decorative Pillows, Inserts & Covers › Throw Pillow Covers",
        "Throw Pillow Covers",
        "throw pillow covers",
        (("machine washable",), ("hidden zipper",), ("velvet", "linen"), ("decorative",), ("double sided",), ("soft",)),
        {
            "color": ("Beige", "Grey", "Navy Blue", "Mustard Yellow", "Sage Green"),
            "size": ("18 x 18 Inch", "20 x 20 Inch", "12 x 20 Inch"),
        },
        (8, 30),
    ),
)

BRANDS = (
    "Northwind",
    "Alderbrook",
    "Brightline",
    "Cedarpeak",
    "Dunmore",
    "Everfield",
    "Foxglove",
    "Granite Bay",
    "Harbor & Finch",
    "Ironleaf",
    "Juniper Lane",
    "Kestrel",
    "Lumen",
    "Marlow",
    "Nimbus",
    "Oakhurst",
    "Pinecrest",
    "Quillon",
    "Redwater",
    "Silverline",
    "Tidewell",
    "Upland",
    "Verano",
    "Willowmere",
)
REVIEW_TITLES = (
    "Great value",
    "Exactly as described",
    "Good quality",
    "Not bad",
    "Would buy again",
    "Smaller than expected",
    "Love it",
    "Works well",
)
REVIEW_BODIES = (
    "Arrived quickly and works as advertised.",
    "Good for the price, though the packaging was damaged.",
    "I have bought this twice now and will keep buying it.",
    "Quality is fine but it runs a little small.",
    "My family loves it.",
    "Does the job, nothing special.",
)
TEMPLATES = (
    "i am looking for {a}{attrs} {ask}{opts}",
    "i need {a}{ask} that is {attrs}{opts}",
    "find me {a}{attrs} {ask}{opts}",
    "i want to buy {a}{ask} which is {attrs}{opts}",
    "show me {a}{attrs} {ask}{opts}",
)
PLURAL_ASKS = (
    "running shoes for men",
    "leggings for women",
    "jeans for men",
    "wireless earbuds",
    "protein bars",
    "herbal tea",
    "snack nuts",
    "olive oil",
    "throw pillow covers",
    "toothpaste",
    "shampoo",
    "lipstick",
    "whole bean coffee",
)


@dataclass(frozen=True)
class DatagenSpec:
    seed: int = 0
    products_per_type: int = 12
    instructions_per_product: int = 2
    test_size: int = 100
    """Goals in the test split (the first of the shuffled goals), then `eval_size` in eval."""
    eval_size: int = 100
    types: tuple[ProductType, ...] = field(default=TYPES)


def generate(spec: DatagenSpec = DatagenSpec()) -> RawData:
    rng = random.Random(spec.seed)
    raw = RawData(
        products=[],
        attributes={},
        human_instructions={},
        reviews=[],
        note={
            "generator": f"roost.envs.webshop.datagen v{GENERATOR_VERSION}",
            "seed": spec.seed,
            "split_sizes": {"test": spec.test_size, "eval": spec.eval_size},
        },
    )
    asins: set[str] = set()
    for ptype in spec.types:
        for _ in range(spec.products_per_type):
            asin = _asin(rng, asins)
            attributes = _attributes(ptype, rng)
            options = {
                name: sorted(rng.sample(values, min(len(values), rng.randint(2, 4))), key=values.index)
                for name, values in ptype.options.items()
            }
            raw.products.append(_product(ptype, asin, attributes, options, rng))
            goals = [_instruction(ptype, asin, attributes, options, rng) for _ in range(spec.instructions_per_product)]
            raw.human_instructions[asin] = goals
            raw.attributes[asin] = {
                "attributes": attributes,
                "instruction": _synthetic_text(ptype, goals[0]),
                "instruction_attributes": goals[0]["instruction_attributes"],
            }
            raw.reviews.append(_reviews(asin, rng))
    order = list(range(len(raw.products)))
    rng.shuffle(order)
    raw.products = [raw.products[i] for i in order]
    return raw


def _asin(rng: random.Random, taken: set[str]) -> str:
    while True:
        asin = "B0" + "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789") for _ in range(8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _attributes(ptype: ProductType, rng: random.Random) -> list[str]:
    groups = rng.sample(ptype.attributes, min(len(ptype.attributes), rng.randint(3, 4)))
    return [rng.choice(group) for group in groups]


def _product(
    ptype: ProductType, asin: str, attributes: list[str], options: dict[str, list[str]], rng: random.Random
) -> dict[str, Any]:
    brand = rng.choice(BRANDS)
    shown = attributes[:2]
    title = " ".join(filter(None, [brand, ptype.title_prefix, " ".join(a.title() for a in shown[:1]), ptype.noun]))
    title += f", {shown[1].title()}" if len(shown) > 1 else ""
    low = round(rng.uniform(*ptype.price), 2)
    pricing = f"${low:.2f}" if rng.random() < 0.7 else f"${low:.2f} - ${round(low * rng.uniform(1.1, 1.5), 2):.2f}"
    bullets = [f"{a.capitalize()}: {_feature_sentence(ptype, rng)}" for a in attributes]
    description = (
        f"The {brand} {ptype.noun.lower()} is made for everyday use. "
        f"It is {' and '.join(attributes[:3])}. {rng.choice(REVIEW_BODIES)}"
    )
    return {
        "asin": asin,
        "name": title,
        "full_description": description,
        "small_description": bullets,
        "pricing": pricing,
        "images": [],
        "category": ptype.category,
        "query": ptype.query,
        "product_category": ptype.path,
        "brand": brand,
        "customization_options": {
            name: [{"value": v, "image": None} for v in values] for name, values in options.items()
        },
    }


def _feature_sentence(ptype: ProductType, rng: random.Random) -> str:
    return rng.choice(
        (
            f"a {ptype.noun.lower()} you can rely on every day.",
            "designed and tested for daily use.",
            "customers mention it most in their reviews.",
            "backed by our 30-day satisfaction guarantee.",
        )
    )


def _instruction(
    ptype: ProductType, asin: str, attributes: list[str], options: dict[str, list[str]], rng: random.Random
) -> dict[str, Any]:
    wanted = rng.sample(attributes, rng.choice((1, 2, 2, 2, 3)))
    chosen = {name: rng.choice(values).lower() for name, values in options.items()}
    article = "" if ptype.ask in PLURAL_ASKS else "a "
    text = rng.choice(TEMPLATES).format(a=article, attrs=" and ".join(wanted), ask=ptype.ask, opts=_option_text(chosen))
    return {
        "asin": asin,
        "instruction": text,
        "instruction_attributes": wanted,
        "instruction_options": list(chosen.values()),
    }


def _option_text(chosen: dict[str, str]) -> str:
    parts = []
    for name, value in chosen.items():
        if name == "color":
            parts.append(f"in {value} color")
        elif name == "size":
            parts.append(f"in size {value}")
        else:
            parts.append(f"with {name.replace(' name', '')} {value}")
    return (", " + " and ".join(parts)) if parts else ""


def _synthetic_text(ptype: ProductType, goal: dict[str, Any]) -> str:
    return f"i want {' and '.join(goal['instruction_attributes'])} {ptype.ask}"


def _reviews(asin: str, rng: random.Random) -> dict[str, Any]:
    reviews = [
        {"title": rng.choice(REVIEW_TITLES), "score": rng.randint(2, 5), "review": rng.choice(REVIEW_BODIES)}
        for _ in range(rng.randint(0, 3))
    ]
    rating = round(sum(r["score"] for r in reviews) / len(reviews), 1) if reviews else "N.A."
    return {"asin": asin, "reviews": reviews, "average_rating": rating}
