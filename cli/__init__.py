"""roost.cli: the `roost` command, composed from each package's own `cli.py`."""
