"""WebShop: an online shop where an agent searches, inspects and buys the product an instruction asks for.

A WebShop-compatible environment written for roost: products and instructions in the
original data format, the original pages and actions (`search[...]`, `click[...]`),
and the original paper's reward. Modules:

- `products`: product and goal records, and the conversion from WebShop's raw JSON.
- `datagen`: a small catalog and instruction set generated from a seed (offline default).
- `loaders`: read (and write) the original files: items_shuffle, items_ins_v2, items_human_ins.
- `goals`: product prices and goals, as the original derives them.
- `catalog`: products + goals + splits + search, what every env of one factory shares.
- `search`: the search backends (BM25 with bm25s; Lucene through pyserini, optional).
- `reward`: the original reward (type, attribute, option and price matching).
- `session`: the shop's page state machine.
- `pages`: HTML pages (web mode) and their text rendering (text mode).
- `actions`: text actions and tool calls → shop actions; the tool schemas.
- `env`: the `Env` protocol implementation; `web`: the HTML routes of web mode.
"""
