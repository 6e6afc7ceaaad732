"""Product search behind one small interface.

- `bm25` (default): BM25 over each product's search text (title, description, first
  feature, options; lowercase, as the original indexes it) with the `bm25s` package,
  English stopwords and the Snowball stemmer (Lucene's English analyzer stems too).
- `lucene`: WebShop's own Lucene index through pyserini, for users who built or
  downloaded it (`search_engine/indexes*`). pyserini (and Java) is imported only here.

Both return up to `k` asins, best first; a query that matches nothing returns none.
"""

from __future__ import annotations

import json
from typing import Protocol

from roost.envs.webshop.products import Product

SEARCH_RETURN_N = 50
"""Results per search, as in the original."""


class SearchEngine(Protocol):
    name: str

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """Asins of the best `k` matches for `query`, best first."""


class BM25Search:
    name = "bm25"

    def __init__(self, products: list[Product]) -> None:
        import bm25s
        import Stemmer

        self._bm25s = bm25s
        self._stemmer = Stemmer.Stemmer("english")
        self._asins = [p.asin for p in products]
        corpus = bm25s.tokenize(
            [p.search_text() for p in products], stopwords="en", stemmer=self._stemmer, show_progress=False
        )
        self._index = bm25s.BM25()
        self._index.index(corpus, show_progress=False)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        tokens = self._bm25s.tokenize(
            [query.lower()], stopwords="en", stemmer=self._stemmer, return_ids=False, show_progress=False
        )
        if not tokens[0] or not self._asins:
            return []
        docs, scores = self._index.retrieve(tokens, k=min(k, len(self._asins)), show_progress=False, n_threads=1)
        return [self._asins[d] for d, s in zip(docs[0], scores[0]) if s > 0]


class LuceneSearch:
    name = "lucene"

    def __init__(self, index_dir: str, known_asins: set[str]) -> None:
        try:
            from pyserini.search.lucene import LuceneSearcher
        except ImportError:
            raise ImportError(
                "the 'lucene' search backend needs pyserini and a Java 11+ runtime: `pip install pyserini` "
                "(and e.g. `apt-get install openjdk-21-jre-headless`); or use search='bm25'"
            ) from None
        self._searcher = LuceneSearcher(index_dir)
        self._known = known_asins

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        hits = self._searcher.search(query, k=k)
        asins = [json.loads(self._searcher.doc(hit.docid).raw())["id"] for hit in hits]
        return [a for a in asins if a in self._known]


def make_search(name: str, products: list[Product], *, index: str | None = None) -> SearchEngine:
    if name == "bm25":
        return BM25Search(products)
    if name == "lucene":
        if not index:
            raise ValueError(
                "search='lucene' needs search_index: the folder of WebShop's Lucene index "
                "(e.g. WebShop/search_engine/indexes)"
            )
        return LuceneSearch(index, {p.asin for p in products})
    raise ValueError(f"unknown search backend {name!r}; expected 'bm25' or 'lucene'")
