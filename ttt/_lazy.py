"""Package faces whose names are imported on first use: `import ttt`, the command line and data generation's worker
processes then start without JAX, and each name is still listed once, where the package is."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from types import ModuleType


def exports(package: str, table: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """`(__getattr__, __dir__)` for `package`: `table` maps each public name to the module that defines it
    (`"module:attr"` where the name differs). A name, once looked up, becomes an ordinary attribute."""

    def __getattr__(name: str):
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attr = table[name].partition(":")
        value = getattr(importlib.import_module(module), attr or name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:  # the public names, dunders and submodules; not the helpers the package imports
        names = vars(sys.modules[package])
        keep = {n for n, v in names.items() if n.startswith("__") or (isinstance(v, ModuleType) and n[0] != "_")}
        return sorted(keep | set(table))

    return __getattr__, __dir__
