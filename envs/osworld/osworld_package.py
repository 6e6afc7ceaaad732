"""OSWorld's own getters and metric functions from its PyPI package `desktop-env`, module by module.

`desktop_env/evaluators/metrics/__init__.py` imports every metric module, and with them every
heavy dependency (OCR, audio, video); `getters/__init__.py` imports Google Drive's client. So
the two packages are registered bare (their folder, without running their `__init__`), and only
the module that defines the requested function is imported. Which module that is comes from
the `from .<module> import <names>` lines of the package's own `__init__.py`, read as text.

Two third-party modules that cannot work offline are replaced, when not installed, by stand-ins
that raise when used: `easyocr` (downloads model weights at run time; only `compare_image_text`
calls it) and `pydrive` (Google Drive with an account; only the Drive getters call it). A
function whose module needs any other missing package is `UnavailableFunction`.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

Kind = Literal["metrics", "getters"]

STAND_INS = {
    "easyocr": "OCR downloads its model weights at run time, which needs the internet",
    "pydrive": "Google Drive needs an account and the internet",
    "pydrive.auth": "Google Drive needs an account and the internet",
    "pydrive.drive": "Google Drive needs an account and the internet",
}
INSTALL_HINT = "install it with `pip install --no-deps desktop-env==1.0.2` (`make install` does)"


class UnavailableFunction(LookupError):
    """OSWorld has no such getter/metric, or its module cannot be imported here (the message says why)."""


class _Unavailable:
    """What a stand-in module hands out for any name: fails when called, with the reason."""

    def __init__(self, module: str, name: str, reason: str) -> None:
        self._what = f"{module}.{name}"
        self._reason = reason

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise UnavailableFunction(f"{self._what} is not available here: {self._reason}")


class _StandIn(types.ModuleType):
    def __init__(self, name: str, reason: str) -> None:
        super().__init__(name, f"Stand-in for {name}: {reason}.")
        self._reason = reason

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(self.__name__, attr, self._reason)


def package_dir() -> Path:
    """Where `desktop_env` is installed."""
    spec = importlib.util.find_spec("desktop_env")
    if spec is None or not spec.submodule_search_locations:
        raise UnavailableFunction(f"OSWorld's package desktop_env is not installed; {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations)))


def exports(kind: Kind) -> dict[str, str]:
    """Function name → module name, as `desktop_env/evaluators/<kind>/__init__.py` imports them."""
    init = package_dir() / "evaluators" / kind / "__init__.py"
    names: dict[str, str] = {}
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = node.module
    return names


def load_function(kind: Kind, name: str) -> Callable[..., Any]:
    """OSWorld's getter or metric function `name` (a getter by its full name, `get_<type>`)."""
    module = exports(kind).get(name)
    if module is None:
        raise UnavailableFunction(
            f"OSWorld's {kind} have no function {name!r} (see desktop_env/evaluators/{kind}/__init__.py)"
        )
    return getattr(import_module(f"desktop_env.evaluators.{kind}.{module}"), name)


def import_module(dotted: str) -> types.ModuleType:
    """A module of desktop_env, without running the heavy package `__init__`s above it."""
    package_dir()
    for kind in ("metrics", "getters"):
        _register_bare(f"desktop_env.evaluators.{kind}")
    _register_stand_ins()
    try:
        # what imports print goes to stderr: PyMuPDF's `fitz` prints a deprecation warning on
        # stdout, which would break `roost eval osworld --json`
        with contextlib.redirect_stdout(sys.stderr):
            return importlib.import_module(dotted)
    except ModuleNotFoundError as exc:
        raise UnavailableFunction(
            f"OSWorld's {dotted} needs the Python package {exc.name!r}, which is not installed here"
        ) from exc


def _register_bare(package: str) -> None:
    if package in sys.modules:
        return
    importlib.import_module(package.rsplit(".", 1)[0])
    module = types.ModuleType(package, f"{package} without its __init__ (see roost.envs.osworld.osworld_package)")
    module.__path__ = [str(package_dir().joinpath(*package.split(".")[1:]))]
    module.__package__ = package
    sys.modules[package] = module


def _register_stand_ins() -> None:
    for name, reason in STAND_INS.items():
        parent = name.split(".")[0]
        if name in sys.modules or _installed(parent):
            continue
        sys.modules[name] = _StandIn(name, reason)
        if "." in name:
            setattr(sys.modules[parent], name.rsplit(".", 1)[1], sys.modules[name])


def _installed(name: str) -> bool:
    if isinstance(sys.modules.get(name), _StandIn):
        return False
    return name in sys.modules or importlib.util.find_spec(name) is not None
