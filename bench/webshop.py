"""WebShop benchmark: the env hub's server benchmark plus search latency over the catalog.

    python -m roost.bench.webshop --json                # both, one JSON object per concurrency
    python -m roost.bench.webshop --search-only --json  # search latency alone (no server)

`roost bench env webshop --json` gives the server figures alone (`concurrency`,
`resets_per_s`, `steps_per_s`, `rss_mb_per_episode`); its steps follow
`info["admissible_commands"][0]`, which for WebShop alternates a search with the
instruction's words and Back to Search. Search latency is measured in this process:
every goal's instruction (without its price clause) is searched once, best of the
`repeats`, and the p50 and p90 over the queries are reported in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from dataclasses import asdict

from roost.envs.webshop.catalog import Catalog
from roost.envs.webshop.expert import PRICE_CLAUSE


def search_latency(catalog: Catalog, repeats: int = 3) -> dict[str, float | int | str]:
    queries = [g.instruction_text.split(PRICE_CLAUSE)[0] for g in catalog.goals]
    timings = []
    for query in queries:
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            catalog.search.search(query)
            best = min(best, time.perf_counter() - started)
        timings.append(best * 1000)
    deciles = statistics.quantiles(timings, n=10)
    return {
        "search_backend": catalog.search.name,
        "search_products": len(catalog.products),
        "search_queries": len(queries),
        "search_p50_ms": round(statistics.median(timings), 3),
        "search_p90_ms": round(deciles[8], 3),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m roost.bench.webshop", description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, action="append", help="Concurrent episodes (repeatable; 1 8 32)")
    parser.add_argument("--seconds", type=float, default=5.0, help="Measuring time per quantity and level.")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--search-only", action="store_true", help="Measure search latency only.")
    parser.add_argument("--json", action="store_true", help="Print JSON.")
    args = parser.parse_args(argv)

    from roost.envs.serve import parse_env_args

    kwargs = parse_env_args(args.env_arg)
    catalog_kwargs = {k: kwargs[k] for k in ("seed", "goals", "search", "search_index") if k in kwargs}
    catalog = (
        Catalog.from_dir(kwargs["data_dir"], **catalog_kwargs)
        if kwargs.get("data_dir")
        else Catalog.generated(**catalog_kwargs)
    )
    search = search_latency(catalog)
    results: list[dict] = [search]
    if not args.search_only:
        from roost.bench.env import BenchConfig, run_bench

        config = BenchConfig(
            "webshop", tuple(args.env_arg), tuple(args.concurrency or (1, 8, 32)), args.seconds, args.workers
        )
        results = [{**asdict(r), **search} for r in asyncio.run(run_bench(config))]
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for r in results:
        server = (
            f"c={r['concurrency']:>3}: {r['resets_per_s']:8.2f} resets/s {r['steps_per_s']:8.2f} steps/s "
            f"{r['rss_mb_per_episode']:6.2f} MB/episode; "
            if "concurrency" in r
            else ""
        )
        print(
            f"webshop {server}search p50 {r['search_p50_ms']:.2f} ms, p90 {r['search_p90_ms']:.2f} ms "
            f"({r['search_backend']}, {r['search_products']} products)"
        )


if __name__ == "__main__":
    main()
