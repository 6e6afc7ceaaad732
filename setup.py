"""Package discovery for the `roost` distribution (metadata lives in pyproject.toml).

The repository's top-level folders are `roost`'s subpackages; setuptools' own finder
cannot express that mapping, so the list is built here.
"""

from setuptools import find_packages, setup

TOP_LEVEL = ["cli", "rollout", "envs", "agents", "sandboxes", "serving", "trainer", "bench", "viewer", "tinker_server"]

packages = ["roost"] + [
    f"roost.{name}"
    for name in find_packages(include=[f"{top}" for top in TOP_LEVEL] + [f"{top}.*" for top in TOP_LEVEL])
]

setup(
    packages=packages,
    package_data={"roost": ["py.typed"], "": ["*.json", "*.yaml", "Dockerfile", "*.txt", "*.jsonl.gz"]},
)
