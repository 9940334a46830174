"""Old module paths kept importable after the layout change: `alias(old, new)` makes `old` the module `new` (the
same object, so old pickles and `from old import name` keep working) and warns once that it moved."""

from __future__ import annotations

import importlib
import sys
import warnings


def alias(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}; import it from there ({old} will be removed)", DeprecationWarning, 3)
    sys.modules[old] = importlib.import_module(new)
