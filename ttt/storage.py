"""Files the package writes: atomic writes, strictly valid JSON, writable-directory checks and content checksums.

The one writer of the package: every module that saves a file (datasets, checkpoints, experts, results, reports)
calls the functions here; this module imports nothing of `ttt` but `TttError`.

Every result, cache entry and checkpoint goes through `atomic_write_text` / `atomic_write_bytes` (a temporary file
in the same directory, fsynced, then `os.replace`), so a path either holds a whole file or none, whatever moment a
process is killed at. JSON is strict (`allow_nan=False`): non-finite floats are written as null.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
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
        if disk_full(e):
            raise TttError(no_space_message(path, None)) from None
        raise TttError(f"cannot write {path}: {e.strerror or e}") from None
    written = 0
    try:
        with os.fdopen(fd, mode) as f:
            try:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            finally:
                written = os.fstat(f.fileno()).st_size
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, IsADirectoryError | PermissionError):
            raise TttError(f"cannot write {path}: {e.strerror}") from None
        if disk_full(e):  # (also when a writer wraps the OSError, as equinox's serialisation does)
            raise TttError(no_space_message(path, _size_of(write, mode, written))) from None
        raise


class _Counter:
    """A write-only sink that counts the bytes written to it (what a file would need)."""

    def __init__(self, text: bool):
        self.n, self.text = 0, text

    def write(self, b) -> int:
        n = len(b.encode()) if self.text else len(b)
        self.n += n
        return n

    def tell(self) -> int:
        return self.n

    def read(self, *_):  # (NumPy's savez takes an object with `read` for a file)
        raise OSError("write-only")

    def flush(self) -> None:
        pass


def _size_of(write: Callable[[Any], None], mode: str, written: int) -> tuple[int, bool]:
    """(bytes, exact): the size the file would have had, by writing it again into a counter; else at least the
    `written` bytes that reached the disk before it was full."""
    sink = _Counter("b" not in mode)
    try:
        write(sink)
    except Exception:  # noqa: BLE001  (a writer that needs a seekable file: report what is known)
        return written, False
    return max(sink.n, written), True


def disk_full(e: BaseException) -> bool:
    """Whether `e` (or an exception it wraps) is 'no space left on device' or 'disk quota exceeded' (or NumPy's
    errno-less short write, 'N requested and M written')."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(e, OSError) and e.errno is None and " requested and " in str(e):  # numpy's short write
            return True
        e = e.__cause__ or e.__context__
    return False


def free_bytes(path: str | os.PathLike) -> int | None:
    """Free bytes on the file system of `path` (its nearest existing parent); None if unknown."""
    p = Path(path).expanduser().absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def human_size(n: float | None) -> str:
    if n is None:
        return "an unknown amount"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def no_space_message(path: Path, size: tuple[int, bool] | None) -> str:
    """One line: the file that did not fit, the space it needs and the space free there."""
    need = "" if size is None else f"it needs {'' if size[1] else 'more than '}{human_size(size[0])}, "
    return (f"cannot write {path}: no space left on device ({need}{human_size(free_bytes(path.parent))} free in "
            f"{path.parent}); free some space or write elsewhere")


def check_free_space(directory: str | os.PathLike, nbytes: int, what: str) -> None:
    """Refuse, before any work, `nbytes` of files in `directory` that do not fit in its free space."""
    free = free_bytes(directory)
    if free is not None and nbytes > free:
        raise TttError(f"{what} needs about {human_size(nbytes)} in {directory}, which has {human_size(free)} free; "
                       "free some space or write elsewhere")  # fmt: skip


def available_memory() -> int | None:
    """Bytes of memory this process can still use: MemAvailable (Linux), else the physical memory; None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(nbytes: int, what: str, hint: str) -> None:
    """Refuse, before allocating, `nbytes` of arrays that the machine's available memory cannot hold; `hint` says
    what to change."""
    avail = available_memory()
    if avail is not None and nbytes > avail:
        raise TttError(f"{what} would need about {human_size(nbytes)} of memory, and this machine has "
                       f"{human_size(avail)} available; {hint}")  # fmt: skip


@contextlib.contextmanager
def locked(path: str | os.PathLike, what: str) -> Iterator[None]:
    """Hold an exclusive lock on the file `path` (created when missing; kept afterwards) while the block runs, so
    that two processes never write `what` at once: the second waits for the first (one line on stderr says so) and
    then finds its work done. The operating system releases the lock when a process ends, however it ends."""
    import fcntl

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "a+")
    except OSError as e:
        if disk_full(e):
            raise TttError(no_space_message(path, None)) from None
        raise TttError(f"cannot write {path}: {e.strerror or e}") from None
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "?"
            print(f"waiting: another ttt process (pid {holder}) is writing {what}", file=sys.stderr, flush=True)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:  # unbuffered: a failed write (a full disk) leaves nothing to flush at close
            os.ftruncate(f.fileno(), 0)
            os.pwrite(f.fileno(), str(os.getpid()).encode(), 0)
        except OSError:
            pass  # the pid is a courtesy for the waiting message; the lock holds without it
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


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


MAX_NAME_BYTES = 200  # a name's bytes, leaving room for the suffixes added to it (file systems allow 255)


def file_name(name: Any, what: str) -> str:
    """`name` (a run's or a pipeline's) as it may become a file or folder name: the one door through which a name
    enters a path, so that no name writes outside its folder. Refused with one line naming `what` (e.g. 'run
    name'): a non-string, an empty name, '.' or '..', a path separator (/ or \\) or an absolute path, a control
    character, more than 200 bytes."""
    valid = "a plain file name (no / or \\, not '.' or '..', no control characters, at most 200 bytes)"
    if not isinstance(name, str):
        raise TttError(f"{what} must be a string ({valid}), got {name!r}")
    if not name.strip():
        raise TttError(f"{what} is empty; give {valid}")
    bad = next((c for c in name if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise TttError(f"{what} {name!r} holds the control character {bad!r}; give {valid}")
    if "/" in name or "\\" in name or os.path.isabs(name):
        raise TttError(f"{what} {name!r} holds a path separator, so its files would land outside their folder; give "
                       f"{valid}")  # fmt: skip
    if name in (".", ".."):
        raise TttError(f"{what} {name!r} names a folder, not a file; give {valid}")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise TttError(f"{what} {name[:40]!r}... is {len(name.encode('utf-8', 'surrogatepass'))} bytes long; give "
                       f"{valid}")  # fmt: skip
    return name


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
        if disk_full(e):
            raise TttError(f"{what} {path}: no space left on device ({human_size(free_bytes(path))} free); free some "
                           "space or give another directory") from None  # fmt: skip
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
    from ttt.errors import TttError
    from ttt.safe_files import read_json as safe_read_json

    try:
        return safe_read_json(path)  # a regular file, capped, nesting bounded (docs/security.md)
    except TttError:
        return None
