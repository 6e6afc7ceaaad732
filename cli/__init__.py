"""roost.cli: the `roost` command, composed from each package's own `cli.py`.

The commands and their docs: README.md; the packages behind them: docs/architecture.md.
"""
