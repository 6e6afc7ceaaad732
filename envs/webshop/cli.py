"""`roost envs webshop ...`: WebShop's data commands (a typer group the envs CLI can mount).

    python -m roost.envs.webshop.cli make-data --out ~/webshop-data --seed 0
    python -m roost.envs.webshop.cli check-data ~/webshop/data

`make-data` writes roost's generated catalog in WebShop's own file layout, so tools
written for the original files can read it; `check-data` loads a data folder the way
the env will and prints what it holds.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

webshop_app = typer.Typer(
    help="WebShop: write the generated catalog as files, or check a data folder.", no_args_is_help=True
)


@webshop_app.command("make-data")
def make_data(
    out: Path = typer.Option(
        ..., help="Folder to write items_shuffle.json, items_ins_v2.json, items_human_ins.json and reviews.json into."
    ),
    seed: int = typer.Option(0, help="Seed of the generator."),
    products_per_type: int = typer.Option(12, help="Products of each of the 25 product types."),
    instructions_per_product: int = typer.Option(2, help="Human-style instructions per product."),
) -> None:
    """Write roost's generated WebShop catalog in the original file layout."""
    from roost.envs.webshop.datagen import DatagenSpec, generate
    from roost.envs.webshop.loaders import write_raw

    raw = generate(DatagenSpec(seed, products_per_type, instructions_per_product))
    for path in write_raw(raw, out):
        typer.echo(str(path))


@webshop_app.command("check-data")
def check_data(
    data_dir: Path = typer.Argument(..., help="A folder of WebShop data files."),
    goals: str = typer.Option("human", help="Goal kind: human or synthetic."),
) -> None:
    """Load a WebShop data folder as the env would, and print its size per split."""
    from roost.envs.webshop.catalog import Catalog
    from roost.envs.webshop.loaders import WebShopDataMissing

    try:
        catalog = Catalog.from_dir(data_dir, goals=goals)
    except (WebShopDataMissing, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    splits = {s: len(catalog.split_range(s)) for s in ("train", "eval", "test")}
    typer.echo(json.dumps({"products": len(catalog.products), "goals": len(catalog.goals), "splits": splits}))


def register(envs_app: typer.Typer) -> None:
    """Adds `webshop` under the `roost envs` group."""
    envs_app.add_typer(webshop_app, name="webshop")


if __name__ == "__main__":
    webshop_app()
