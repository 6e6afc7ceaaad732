"""The shop's pages: HTML for web mode, and the text WebShop's text mode makes of that HTML.

Text mode keeps the visible text of the page, one piece per element, joined with
` [SEP] ` (WebShop's `text` observation mode), e.g.

    WebShop [SEP] Instruction: [SEP] i need a ... [SEP] Search
    Instruction: [SEP] i need a ... [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP]
        B09QKP7XQL [SEP] <title> [SEP] $12.99 [SEP] ...

Every control is a real form or link with a relative URL (`act`, `act?click=...`), so
the same pages work in a browser when served under `/web/{episode}/` (see `web`).
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from urllib.parse import quote

import jinja2

from roost.envs.webshop.products import Product
from roost.envs.webshop.session import PRODUCT_WINDOW, ShopSession

HIDDEN_TAGS = frozenset({"style", "script", "head", "title"})
"""Tags whose text is not shown (the original also lists `meta`, which holds no text)."""

BASE = """<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>WebShop</title>
<style>
body{font-family:sans-serif;margin:2em;max-width:60em}
.btn{margin:2px;padding:4px 10px;cursor:pointer}
.grid{display:flex;flex-wrap:wrap;gap:1em}.grid-item{border:1px solid #ccc;padding:.5em;width:16em}
.radio-toolbar label{border:1px solid #999;padding:2px 8px;margin:2px;display:inline-block;cursor:pointer}
.radio-toolbar input:checked+label{background:#cde}.error{color:#a00}
form{display:inline}
</style></head>
<body>
{% if error %}<p class="error" id="error">{{ error }}</p>{% endif %}
{% block body %}{% endblock %}
</body></html>"""

MACROS = """{% macro button(label, cls="btn") -%}
<form method="post" action="act"><button class="{{ cls }}" type="submit" name="click" value="{{ label }}">{{ label }}</button></form>
{%- endmacro %}"""

SEARCH = """{% extends "base" %}{% block body %}
<div id="logo"><h2>WebShop</h2></div>
<div id="instruction-text"><h4>Instruction: <br>{{ instruction }}</h4></div>
<form method="post" action="act">
<input id="search_input" type="text" name="search_query" placeholder="Search..." required>
<button class="btn" type="submit">Search</button>
</form>
{% endblock %}"""

HEADER = """{% from "macros" import button %}
<div id="instruction-text"><h4>Instruction: <br>{{ instruction }}</h4></div>
{{ button("Back to Search") }}"""

RESULTS = (
    """{% extends "base" %}{% block body %}"""
    + HEADER
    + """
<div><p>Page {{ state.page_num }} (Total results: {{ state.results|length }})</p>
{% if state.page_num > 1 %}{{ button("< Prev") }}{% endif %}
{% if state.page_num * window < state.results|length %}{{ button("Next >") }}{% endif %}
</div>
<div class="grid">
{% for p in products %}<div class="grid-item">
<h4 class="product-asin"><a class="product-link" href="act?click={{ p.asin|urlquote }}">{{ p.asin }}</a></h4>
<h4 class="product-title">{{ p.title }}</h4>
<h5 class="product-price">{{ p.price_tag }}</h5>
</div>{% endfor %}
</div>
{% endblock %}"""
)

ITEM = (
    """{% extends "base" %}{% block body %}"""
    + HEADER
    + """
{{ button("< Prev") }}
<div>
{% for name, values in product.options.items() %}<div class="option">
<h4>{{ name }}</h4>
<div class="radio-toolbar">
{% for value in values %}{% set id = "radio_" ~ name ~ loop.index0 %}
<input type="radio" id="{{ id }}" name="{{ name }}" value="{{ value }}" data-url="act?click={{ value|urlquote }}"
 onclick="location.href=this.dataset.url"{% if state.options.get(name) == value %} checked{% endif %}>
<label for="{{ id }}">{{ value }}</label>
{% endfor %}</div></div>{% endfor %}
</div>
<div>
<h2 id="product-title">{{ product.title }}</h2>
<h4>Price: {{ product.price_tag }}</h4>
<h4>Rating: {{ product.rating }}</h4>
{% for sub in sub_pages %}{{ button(sub) }}
{% endfor %}
</div>
{{ button("Buy Now", "btn purchase") }}
{% endblock %}"""
)

SUB = (
    """{% extends "base" %}{% block body %}"""
    + HEADER
    + """
{{ button("< Prev") }}
<div class="product-info">
{% if sub == "description" %}<p>{{ product.description or "No Description" }}</p>
{% elif sub == "features" %}
<ul>{% for b in product.bullet_points %}<li><p>{{ b }}</p></li>{% else %}<li>No Features</li>{% endfor %}</ul>
{% elif sub == "reviews" %}
{% for r in product.reviews %}<div class="review"><h4>"{{ r.title }}"</h4><p><span>{{ r.score }}</span></p><p>{{ r.body }}</p></div>
{% else %}<h4>No reviews found</h4>{% endfor %}
{% else %}{% for a in product.attributes %}<p>{{ a }}</p>{% endfor %}{% endif %}
</div>
{% endblock %}"""
)

DONE = """{% extends "base" %}{% block body %}
<div id="thankyou"><h1>Thank you for shopping with us!</h1></div>
<div id="stats">
<h3 id="reward">Your score (min 0.0, max 1.0)<pre id="reward-value">{{ reward }}</pre></h3>
<div id="purchased" data-asin="{{ state.asin }}" data-options="{{ options_json }}"></div>
</div>
{% endblock %}"""

TEMPLATES = {
    "base": BASE,
    "macros": MACROS,
    "search": SEARCH,
    "results": RESULTS,
    "item": ITEM,
    "sub": SUB,
    "done": DONE,
}
SUB_PAGE_LABELS = {
    "description": "Description",
    "features": "Features",
    "reviews": "Reviews",
    "attributes": "Attributes",
}


class PageRenderer:
    """Renders a session's current page; one per factory (the compiled templates are shared)."""

    def __init__(self) -> None:
        env = jinja2.Environment(loader=jinja2.DictLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined)
        env.filters["urlquote"] = lambda v: quote(str(v), safe="")
        self._templates = {name: env.get_template(name) for name in TEMPLATES if name not in ("base", "macros")}

    def html(self, session: ShopSession, error: str | None = None) -> str:
        s = session.state
        context = {"instruction": session.goal.instruction_text, "state": s, "error": error, "window": PRODUCT_WINDOW}
        product: Product | None = session.catalog.products.get(s.asin) if s.asin else None
        if s.page == "results":
            context["products"] = [session.catalog.products[a] for a in s.page_results]
        elif s.page in ("item", "sub"):
            context["product"] = product
            labels = [SUB_PAGE_LABELS[k] for k in SUB_PAGE_LABELS if k != "attributes" or session.show_attributes]
            context["sub_pages"] = labels
            context["sub"] = s.sub_page
        elif s.page == "done":
            context["reward"] = s.reward.reward if s.reward else 0.0
            context["options_json"] = json.dumps(s.options)
        return self._templates[s.page].render(context)


def page_text(html: str) -> str:
    """WebShop's `text` observation: visible text pieces joined with ` [SEP] `."""
    parser = _VisibleText()
    parser.feed(html)
    parser.close()
    return " [SEP] ".join(parser.pieces)


class _VisibleText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.pieces: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in HIDDEN_TAGS:
            self._hidden += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in HIDDEN_TAGS and self._hidden:
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        text = data.strip()
        if text and not self._hidden:
            self.pieces.append(text)
