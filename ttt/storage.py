"""Files the package writes: atomic writes, strictly valid JSON, writable-directory checks and content checksums.

The one writer of the package: every module that saves a file (datasets, checkpoints, experts, results, reports)
calls the functions here; this module imports nothing of `ttt` but `TttError`.

Every result, cache entry and checkpoint goes through `atomic_write_text` / `atomic_write_bytes` (a temporary file
in the same directory, fsynced, then `os.replace`), so a path either holds a whole file or none, whatever moment a
process is killed at. JSON is strict (`allow_nan=False`): non-finite floats are written as null.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ttt.errors import TttError


def json_safe(obj: Any) -> Any:
    """`obj` with NaN / inf floats replaced by None and NumPy scalars / arrays as Python values (strict JSON)."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, np.generic):
        return json_safe(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def dumps(obj: Any, **kw) -> str:
    """Strictly valid JSON (no bare NaN / Infinity: they become null)."""
    return json.dumps(json_safe(obj), allow_nan=False, **kw)


def _atomic(path: Path, write: Callable[[Any], None], mode: str) -> None:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise TttError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, IsADirectoryError | PermissionError):
            raise TttError(f"cannot write {path}: {e.strerror}") from None
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    _atomic(Path(path), lambda f: f.write(text), "w")


def atomic_write_bytes(path: str | os.PathLike, write: Callable[[Any], None]) -> None:
    """`write(f)` into a binary temporary file that then replaces `path`."""
    _atomic(Path(path), write, "wb")


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = 1) -> None:
    atomic_write_text(path, dumps(obj, indent=indent))


def atomic_save_npz(path: str | os.PathLike, arrays: dict[str, np.ndarray], compress: bool = True) -> None:
    """Write `arrays` as an .npz (zip-compressed when `compress`) so that `path` holds the whole file or none."""
    atomic_write_bytes(path, lambda f: (np.savez_compressed if compress else np.savez)(f, **arrays))


def atomic_write_pickle(path: str | os.PathLike, obj: Any) -> None:
    """`obj` pickled (highest protocol) so that `path` holds the whole file or none."""
    import pickle

    atomic_write_bytes(path, lambda f: pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL))


def writable_dir(path: str | os.PathLike, what: str) -> Path:
    """Create `path` (and parents) if missing and check that files can be written in it; else a one-line error
    naming `what` (e.g. '--out')."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise TttError(f"{what} {path} is a file, not a directory; give a directory (it is created when missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".ttt-write-probe-"):
            pass
    except OSError as e:
        raise TttError(f"{what} {path} is not writable: {e.strerror or e}; give a writable directory") from None
    return path


def writable_file(path: str | os.PathLike, what: str) -> Path:
    """Check, before any work, that `path` can be written: its directory is created when missing and writable,
    and `path` itself is not a directory."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise TttError(f"{what} {path} is a directory; give a file path")
    writable_dir(path.parent, f"{what}'s directory")
    if path.exists() and not os.access(path, os.W_OK):
        raise TttError(f"{what} {path} is not writable; give a writable file path")
    return path


def array_digest(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over the arrays' names, dtypes, shapes and bytes (file bytes vary with zip timestamps)."""
    h = hashlib.sha256()
    for k in sorted(arrays):
        a = np.ascontiguousarray(arrays[k])
        h.update(f"{k}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def digest(obj: Any) -> str:
    """A short content key: the first 12 hex digits of the sha256 of `obj` as sorted JSON (non-JSON values as str)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_json(path: str | os.PathLike) -> Any | None:
    """The JSON document at `path`, or None when it is missing, truncated or not JSON (a cache entry to rebuild)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
