"""One safe way to read every file a user may hand `ttt` (docs/security.md): bounded, code-free, one-line errors.

Each reader checks that the path is a regular file (a FIFO, a device or a directory is refused before anything is
read, so nothing blocks) and no larger than a cap, reads at most that many bytes, and turns every failure into one
`TttError` line whose names from the file are escaped and cut to a sane length (`show`):

- `read_bytes(path, max_bytes, what)`: the raw bytes (under `ttt.safe_pickle.load`);
- `read_json(path, what)`: a JSON document; nesting deeper than `MAX_DEPTH` is refused (no RecursionError);
- `read_toml(path, what)`: a TOML document (pipeline files), same bounds;
- `safe_load_npz(path, ...)`: an .npz of plain numeric arrays (bool, int, uint, float) or Unicode text, after the
  zip's members were checked: names, count, declared sizes (no zip bomb), `.npy` headers (read with
  `np.lib.format`, never a pickle), dtype, and data exactly shape x itemsize.

Nothing here imports a name from a file or calls anything a file names.
"""

from __future__ import annotations

import json
import os
import stat
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ttt.errors import TttError

MAX_JSON_BYTES = 64 << 20
"""Cap of a JSON file (checkpoint metadata, records, dataset sidecars, `--flags`): 64 MiB."""
MAX_TOML_BYTES = 4 << 20
"""Cap of a pipeline file: 4 MiB."""
MAX_NPZ_BYTES = 64 << 30
"""Cap of an .npz dataset, on disk and in its members' declared sizes: 64 GiB (OGBench's largest is ~2 GiB)."""
MAX_DEPTH = 64
"""Deepest nesting of a JSON or TOML document (ttt's own files are < 8 deep)."""
MAX_NPZ_MEMBERS = 256
"""Most arrays in one .npz (an OGBench dataset has < 10)."""
NAME_LIMIT = 80
"""Characters of a name from a file shown in an error (the rest is cut, its length said)."""

PLAIN_KINDS = "biuf"
"""NumPy dtype kinds of plain numbers: bool, signed and unsigned integers, floats (no object, complex, structured,
void, datetime)."""
NPZ_KINDS = PLAIN_KINDS + "U"
"""What an .npz may hold: plain numbers and fixed-width Unicode text (ttt's own parts keep a JSON string in one)."""


class TooDeep(TttError):
    """A JSON or TOML text nested deeper than `MAX_DEPTH` (the parsers recurse; refused before parsing)."""


def show(x: Any, limit: int = NAME_LIMIT) -> str:
    """`x` (a name from a file) fit for one line: non-printable characters escaped (`\\x1b`, `\\n`), cut to `limit`."""
    s = x if isinstance(x, str) else repr(x)
    n = len(s)
    s = s[: 4 * limit]
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)
    if len(out) > limit or n > len(s):
        out = f"{out[:limit]}...({n} characters)"
    return out


def one_line(message: str, limit: int = 2000) -> str:
    """A message fit for one terminal line: control characters escaped, cut to `limit` characters."""
    return show(message, limit)


def _where(what: str, path: Path) -> str:
    return f"{what} {show(str(path), 300)}".strip()


def _check_stat(st: os.stat_result, path: Path, max_bytes: int, what: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise TttError(f"{_where(what, path)}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise TttError(f"{_where(what, path)}: not a regular file (a FIFO, device or socket); give a file")
    if st.st_size > max_bytes:
        raise TttError(f"{_where(what, path)}: {st.st_size} bytes, more than the {max_bytes} this reader takes; "
                       "not read")  # fmt: skip


def open_regular(path: str | os.PathLike, max_bytes: int, what: str = "file") -> tuple[int, int]:
    """(file descriptor, size) of a regular file of at most `max_bytes`, opened for reading; else one line."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise TttError(f"{_where(what, path)}: no such file") from None
    except OSError as e:
        raise TttError(f"{_where(what, path)}: cannot read: {e.strerror}") from None
    _check_stat(st, path, max_bytes, what)
    try:  # O_NONBLOCK: a path swapped for a FIFO after the stat does not block the open
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise TttError(f"{_where(what, path)}: cannot read: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        _check_stat(st, path, max_bytes, what)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def read_bytes(path: str | os.PathLike, max_bytes: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most `max_bytes` (checked before reading; one that grows is refused)."""
    path = Path(path)
    fd, _ = open_regular(path, max_bytes, what)
    chunks, total = [], 0
    try:
        while total <= max_bytes:
            block = os.read(fd, min(1 << 24, max_bytes + 1 - total))
            if not block:
                break
            chunks.append(block)
            total += len(block)
    except OSError as e:
        raise TttError(f"{_where(what, path)}: cannot read: {e.strerror}") from None
    finally:
        os.close(fd)
    if total > max_bytes:
        raise TttError(f"{_where(what, path)}: grew past {max_bytes} bytes while read; not read")
    return b"".join(chunks)


def read_text(path: str | os.PathLike, max_bytes: int, what: str = "file") -> str:
    """A UTF-8 text file (a BOM is skipped) of at most `max_bytes`."""
    data = read_bytes(path, max_bytes, what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise TttError(f"{_where(what, Path(path))}: not a text file (not UTF-8)") from None


def _nesting(text: str) -> int:
    """An upper bound of a JSON/TOML text's bracket nesting, counted before parsing (both parsers recurse)."""
    deepest = d = 0
    for c in text:
        if c in "[{":
            d += 1
            if d > deepest:
                deepest = d
                if deepest > MAX_DEPTH:
                    break
        elif c in "]}":
            d = max(d - 1, 0)
    return deepest


def loads_json(text: str, where: str) -> Any:
    """`json.loads` with nesting bounded before parsing and one-line errors."""
    if _nesting(text) > MAX_DEPTH:
        raise TooDeep(f"{where}: not readable JSON (nested deeper than {MAX_DEPTH})")
    try:
        return json.loads(text)
    except RecursionError:
        raise TooDeep(f"{where}: not readable JSON (nested too deep)") from None
    except ValueError as e:
        raise TttError(f"{where}: not readable JSON ({show(str(e), 120)})") from None


def read_json(path: str | os.PathLike, what: str = "file", max_bytes: int | None = None) -> Any:
    """The JSON document in a regular file of at most `max_bytes` (default `MAX_JSON_BYTES`); every failure one
    line."""
    max_bytes = MAX_JSON_BYTES if max_bytes is None else max_bytes
    return loads_json(read_text(path, max_bytes, what), _where(what, Path(path)))


def loads_toml(text: str, where: str) -> dict:
    """`tomllib.loads` with nesting bounded before parsing and one-line errors."""
    import tomllib

    if _nesting(text) > MAX_DEPTH:
        raise TooDeep(f"{where}: not valid TOML (nested deeper than {MAX_DEPTH})")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TttError(f"{where}: not valid TOML: {show(str(e), 200)}") from None
    except RecursionError:
        raise TooDeep(f"{where}: not valid TOML (nested too deep)") from None


def read_toml(path: str | os.PathLike, what: str = "file", max_bytes: int | None = None) -> dict:
    """The TOML document in a regular file of at most `max_bytes` (default `MAX_TOML_BYTES`); every failure one
    line."""
    max_bytes = MAX_TOML_BYTES if max_bytes is None else max_bytes
    return loads_toml(read_text(path, max_bytes, what), _where(what, Path(path)))


def plain_dtype(dtype: np.dtype, kinds: str = PLAIN_KINDS) -> bool:
    """Whether `dtype` is a plain number (bool, int, uint or float; or another of `kinds`), with no fields,
    subarray or metadata."""
    return (dtype.kind in kinds and dtype.names is None and dtype.subdtype is None
            and dtype.metadata is None)  # fmt: skip


def safe_load_npz(
    path: str | os.PathLike,
    max_bytes: int | None = None,
    what: str = "",
    required: tuple[str, ...] = (),
    dtypes: dict[str, Any] | None = None,
) -> dict[str, np.ndarray]:
    """{name: array} of an .npz, each a plain numeric array or Unicode text (`NPZ_KINDS`); no pickle is ever read.

    Before anything is decompressed: a regular file of at most `max_bytes`, at most `MAX_NPZ_MEMBERS` members, each
    `NAME.npy` with a printable name, their declared uncompressed sizes summing to at most `max_bytes`; then each
    member's `.npy` header (`np.lib.format`, version 1 or 2): a plain dtype, shape x itemsize within the member, the
    data exactly that long. `required`: names that must be present; `dtypes`: {name: dtype} a named array must
    have; `max_bytes`: default `MAX_NPZ_BYTES`. Every failure is one line."""
    max_bytes = MAX_NPZ_BYTES if max_bytes is None else max_bytes
    path = Path(path)
    where = _where(what, path)
    fd, _ = open_regular(path, max_bytes, what)
    try:
        with os.fdopen(fd, "rb") as f:
            return _read_npz(f, where, max_bytes, required, dtypes or {})
    except TttError:
        raise
    except Exception as e:  # noqa: BLE001  (BadZipFile, zlib.error, EOFError, ValueError, ... from a corrupt file)
        detail = show(str(e).splitlines()[0] if str(e) else type(e).__name__, 120)
        raise TttError(f"{where}: unreadable .npz (truncated or corrupt): {detail}") from None


def _read_npz(f, where: str, max_bytes: int, required, dtypes) -> dict[str, np.ndarray]:
    with zipfile.ZipFile(f) as z:
        infos = z.infolist()
        if len(infos) > MAX_NPZ_MEMBERS:
            raise TttError(f"{where}: {len(infos)} members, more than the {MAX_NPZ_MEMBERS} an .npz dataset holds")
        total = sum(i.file_size for i in infos)
        if total > max_bytes:
            raise TttError(f"{where}: its arrays declare {total} bytes, more than the {max_bytes} this reader takes")
        members = {}
        for i in infos:
            n = i.filename
            if not n.endswith(".npy") or not n[:-4] or not n[:-4].isprintable() or "/" in n or n[:-4] in members:
                raise TttError(f"{where}: member {show(n)} is not an array (NAME.npy, once)")
            members[n[:-4]] = i
        missing = [k for k in required if k not in members]
        if missing:
            raise TttError(f"{where}: not an OGBench dataset: missing key(s) {', '.join(missing)} (found: "
                           f"{', '.join(show(k) for k in list(members)[:20]) or 'none'})")  # fmt: skip
        return {name: _read_member(z, info, name, where, dtypes.get(name)) for name, info in members.items()}


def _read_member(z: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, where: str, want) -> np.ndarray:
    with z.open(info) as m:
        version = np.lib.format.read_magic(m)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(m, max_header_size=10000)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(m, max_header_size=10000)
        else:
            raise TttError(f"{where}: {show(name)}: .npy version {version} is not read (1.0 and 2.0 are)")
        if not plain_dtype(dtype, NPZ_KINDS):
            raise TttError(f"{where}: {show(name)} has dtype {show(str(dtype), 60)}; only plain numbers (bool, int, "
                           "uint, float) and text are read")  # fmt: skip
        if want is not None and dtype != np.dtype(want):
            raise TttError(f"{where}: {show(name)} must have dtype {np.dtype(want).name}, got {dtype}")
        n = 1
        for s in shape:
            n *= int(s)
        nbytes = n * dtype.itemsize
        if nbytes > info.file_size:
            raise TttError(f"{where}: {show(name)} declares shape {shape} of {dtype}, more bytes than it holds "
                           "(truncated or altered)")  # fmt: skip
        buf = bytearray(nbytes)
        got = m.readinto(buf) if nbytes else 0
        if got != nbytes or m.read(1):
            raise TttError(f"{where}: {show(name)}: its data is not the {nbytes} bytes of shape {shape} of {dtype} "
                           "(truncated or altered)")  # fmt: skip
    return np.frombuffer(buf, dtype=dtype).reshape(shape, order="F" if fortran else "C")
