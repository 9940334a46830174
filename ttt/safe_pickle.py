"""A restricted unpickler for agent checkpoints written by other code (OGBench's `save_agent`, the GC-TTT authors').

A pickle can name any importable callable and run it while it loads; a checkpoint from elsewhere must not. `load`
admits plain containers (dict, list, tuple, str, bytes, numbers, None, booleans: pickle opcodes, no import) and the
few classes an agent's state dict needs, each rebuilt as a NumPy array:

- NumPy arrays and scalars (`numpy.core.multiarray._reconstruct`, `numpy.ndarray`, `numpy.dtype`, `scalar`; also
  `numpy._core` spellings of NumPy 2);
- JAX arrays (`jax._src.array._reconstruct_array`): rebuilt as the NumPy array they hold, never as a JAX array;
- Flax's `FrozenDict` (rebuilt as a dict), `collections.OrderedDict` (a dict), `_codecs.encode` (bytes of old
  protocols).

Any other global (`os.system`, `builtins.eval`, a class of the writer's code, ...) is refused before it is imported
or called, with one line naming it; arrays of Python objects are refused too. Nothing in the file runs.
"""

from __future__ import annotations

import collections
import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from ttt.errors import TttError


def _jax_array(fun, args, arr_state, aval_state=None):
    """JAX's `_reconstruct_array(fun, args, arr_state, aval_state)` without JAX: the NumPy array it wraps."""
    if fun not in _NUMPY_RECONSTRUCT:
        raise pickle.UnpicklingError("a JAX array whose payload is not a NumPy array")
    arr = fun(*args)
    arr.__setstate__(arr_state)
    return arr


def _frozen_dict(*args, **kwargs) -> dict:
    return dict(*args, **kwargs)


def _numpy_global(name: str):
    try:
        mod = np._core.multiarray  # NumPy 2
    except AttributeError:  # pragma: no cover  (NumPy 1)
        mod = np.core.multiarray
    return {"_reconstruct": mod._reconstruct, "scalar": mod.scalar}[name]


_NUMPY_RECONSTRUCT = (_numpy_global("_reconstruct"),)

ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _numpy_global("_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"): _numpy_global("_reconstruct"),
    ("numpy.core.multiarray", "scalar"): _numpy_global("scalar"),
    ("numpy._core.multiarray", "scalar"): _numpy_global("scalar"),
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("jax._src.array", "_reconstruct_array"): _jax_array,
    ("flax.core.frozen_dict", "FrozenDict"): _frozen_dict,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("_codecs", "encode"): __import__("codecs").encode,
}
"""Every global a pickle may name, and what is used in its place."""


class _Refused(Exception):
    def __init__(self, what: str):
        self.what = what


class _Restricted(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        try:
            return ALLOWED[(module, name)]
        except KeyError:
            raise _Refused(f"{module}.{name}") from None

    def persistent_load(self, pid):
        raise _Refused(f"a persistent id ({str(pid)[:40]!r})")


def loads(data: bytes, where: str = "pickle") -> Any:
    """Unpickle `data` admitting only `ALLOWED` (see the module docstring); every array comes back as NumPy's."""
    if data[:1] != b"\x80" or len(data) < 2 or data[1] < 2:
        raise TttError(f"{where}: not a pickle (it starts with {data[:8]!r}; an agent checkpoint is a pickle of "
                       "protocol 2 or newer, as save_agent writes)")  # fmt: skip
    try:
        obj = _Restricted(io.BytesIO(data)).load()
    except _Refused as e:
        raise TttError(
            f"{where}: refused: the pickle names {e.what}, which an agent checkpoint never holds (allowed: plain "
            "containers, NumPy and JAX arrays); nothing in it was run"
        ) from None
    except RecursionError:
        raise TttError(f"{where}: not a readable pickle (nested too deep)") from None
    except Exception as e:  # noqa: BLE001  (truncated files raise EOFError, UnpicklingError, ValueError, ...)
        kind = "truncated" if isinstance(e, EOFError) or "truncated" in str(e) else "not a readable pickle"
        raise TttError(f"{where}: {kind} ({type(e).__name__}: {str(e)[:80] or 'no detail'})") from None
    _check_arrays(obj, where)
    return obj


def load(path: str | Path) -> Any:
    """`loads` of a file's bytes; a missing or unreadable file is one line."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TttError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TttError(f"{path}: is a directory, not a pickle file") from None
    except OSError as e:
        raise TttError(f"{path}: cannot read: {e.strerror}") from None
    return loads(data, str(path))


def _check_arrays(obj: Any, where: str) -> None:
    stack = [obj]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, list | tuple):
            stack.extend(x)
        elif isinstance(x, np.ndarray) and x.dtype.hasobject:
            raise TttError(f"{where}: refused: an array of Python objects (agent checkpoints hold numbers only)")
