"""A pickle reader for agent checkpoints written by other code (OGBench's `save_agent`, the GC-TTT authors').

A pickle is a program: it can name any importable callable and run it while it loads. This module never runs it.
It decodes the opcodes (`pickletools.genops`) and interprets a small, fixed subset itself (docs/security.md):

- plain values and containers: None, booleans, ints, floats, str, bytes, list, tuple, dict (str or int keys), the
  memo (shared references) and marks;
- a few names, each a placeholder the interpreter recognises, never a callable handed to the file:
  NumPy's `_reconstruct` / `ndarray` / `dtype` / `scalar` / `_frombuffer` (both `numpy.core` and `numpy._core`
  spellings), JAX's `_reconstruct_array`, Flax's `FrozenDict` and `collections.OrderedDict` (both read as a dict),
  `_codecs.encode` with the latin-1 codec only and `bytes()` (how protocol 2 writes bytes).

Arrays are built by the interpreter from what the file declares: a dtype from a fixed table of plain numbers (bool,
int8-64, uint8-64, float16-64; no fields, subarrays, metadata, objects, strings or complex), a shape of non-negative
ints, and raw bytes exactly shape x itemsize long (`np.frombuffer`, C or Fortran order). No pickled dtype state and
no constructor call ever reaches NumPy. Any other name or opcode (INST, OBJ, NEWOBJ, PERSID, EXT, sets, ...) is
refused before anything is imported.

The work is bounded: a regular file of at most `MAX_BYTES` (checked before reading), at most `MAX_OPS` opcodes,
then one iterative walk with a visited set that refuses cycles, nesting deeper than `MAX_DEPTH` and trees that
unfold (through shared references) to more than `MAX_NODES` nodes. Every failure is one `TttError` line; names
from the file are escaped and cut (`ttt.safe_files.show`).
"""

from __future__ import annotations

import io
import os
import pickletools
from pathlib import Path
from typing import Any

import numpy as np

from ttt.errors import TttError
from ttt.safe_files import read_bytes, show

MAX_BYTES = 1 << 30
"""Largest pickle read: 1 GiB (OGBench's largest agents are tens of MB)."""
MAX_OPS = 2_000_000
"""Most opcodes interpreted (the reference SAW agent of tests/fixtures/parity has 7,631)."""
MAX_NODES = 1_000_000
"""Most nodes of the tree the pickle unfolds to, shared references counted each time they are reached."""
MAX_DEPTH = 100
"""Deepest nesting of containers (a state dict is ~8 deep)."""
MAX_NDIM = 32

# ------------------------------------------------------------------------------------------------- the names

_NUMPY_MODULES = ("numpy.core.multiarray", "numpy._core.multiarray")
ALLOWED: dict[tuple[str, str], str] = {
    **{(m, "_reconstruct"): "reconstruct" for m in _NUMPY_MODULES},
    **{(m, "scalar"): "scalar" for m in _NUMPY_MODULES},
    ("numpy.core.numeric", "_frombuffer"): "frombuffer",
    ("numpy._core.numeric", "_frombuffer"): "frombuffer",
    ("numpy", "ndarray"): "ndarray",
    ("numpy", "dtype"): "dtype",
    ("jax._src.array", "_reconstruct_array"): "jax_array",
    ("flax.core.frozen_dict", "FrozenDict"): "frozen_dict",
    ("collections", "OrderedDict"): "ordered_dict",
    ("_codecs", "encode"): "encode",
    ("builtins", "bytes"): "bytes",
    ("__builtin__", "bytes"): "bytes",
}
"""Every global a pickle may name, and the placeholder it becomes (the interpreter knows what each may do)."""

DTYPES: dict[str, str] = {
    **{c: "b1" for c in ("b1", "?", "bool")},
    **{f"i{n}": f"i{n}" for n in (1, 2, 4, 8)},
    **{f"u{n}": f"u{n}" for n in (1, 2, 4, 8)},
    **{f"f{n}": f"f{n}" for n in (2, 4, 8)},
}
"""The dtype codes a pickle may declare (as NumPy writes them), and the plain dtype each becomes."""


class _Name:
    """A global the pickle named: only a token; the interpreter decides what a REDUCE on it does."""

    __slots__ = ("kind", "full")

    def __init__(self, kind: str, full: str):
        self.kind, self.full = kind, full


class _Pending:
    """An array or dtype between its REDUCE and its BUILD (NumPy's pickles set the data with BUILD)."""

    __slots__ = ("kind", "code", "memo_keys")

    def __init__(self, kind: str, code: str = ""):
        self.kind, self.code, self.memo_keys = kind, code, []


class _Refuse(Exception):
    def __init__(self, what: str, named: bool = False):
        super().__init__(what if named else f"the pickle holds {what}")


# ------------------------------------------------------------------------------------------- building values


def _int(x: Any, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise _Refuse(f"{what} is not an integer")
    return x


def _dtype(code: Any, byteorder: str = "=") -> np.dtype:
    if not isinstance(code, str):
        raise _Refuse("a dtype whose code is not a string")
    plain = DTYPES.get(code.lstrip("<>|="))
    if plain is None:
        first = code.lstrip("<>|=")[:1]
        kind = {"c": "complex numbers", "O": "an array of Python objects"}.get(first, f"dtype {show(code, 40)}")
        raise _Refuse(f"{kind} (only plain numbers are read: bool, int, uint, float)")
    if byteorder not in ("<", ">", "|", "="):
        raise _Refuse(f"a dtype with byte order {show(byteorder, 10)}")
    return np.dtype(plain).newbyteorder(byteorder if byteorder in "<>" else "=")


def _dtype_state(p: _Pending, state: Any) -> np.dtype:
    """NumPy's dtype state `(3, byteorder, None, None, None, -1, -1, 0)` (a 9th entry: metadata, None): anything
    else (fields, subarray, sizes, flags, metadata) is refused."""
    if not isinstance(state, tuple) or len(state) not in (8, 9) or state[0] not in (3, 4):
        raise _Refuse("a dtype state that NumPy does not write for a plain number")
    _, order, sub, names, fields, elsize, align, flags, *meta = state
    if sub is not None or names is not None or fields is not None or any(m is not None for m in meta):
        raise _Refuse("a dtype with fields, a subarray or metadata (only plain numbers are read)")
    if elsize != -1 or align != -1 or flags != 0 or isinstance(flags, bool):
        raise _Refuse("a dtype state with sizes or flags of its own (only plain numbers are read)")
    if not isinstance(order, str):
        raise _Refuse("a dtype byte order that is not a string")
    return _dtype(p.code, order)


def _array(shape: Any, dtype: Any, fortran: Any, raw: Any) -> np.ndarray:
    """The array `raw` holds: `shape` of `dtype`, raw bytes exactly shape x itemsize long."""
    if not isinstance(dtype, np.dtype):
        raise _Refuse("an array whose dtype is not a plain number")
    if not isinstance(shape, tuple | list) or len(shape) > MAX_NDIM:
        raise _Refuse("an array whose shape is not a tuple of at most 32 sizes")
    n = 1
    for s in shape:
        if not 0 <= _int(s, "an array size") <= 2**40:
            raise _Refuse("an array size that is negative or larger than 2**40")
        n *= s
    if not isinstance(fortran, bool):
        raise _Refuse("an array whose order flag is not a boolean")
    if isinstance(raw, bytearray):
        raw = bytes(raw)
    if not isinstance(raw, bytes):
        raise _Refuse("an array whose data is not bytes (arrays of Python objects are not read)")
    if n * dtype.itemsize != len(raw):
        raise _Refuse(f"an array of shape {tuple(shape)[:8]} and dtype {dtype} with {len(raw)} bytes of data "
                      f"(it needs {n * dtype.itemsize})")  # fmt: skip
    return np.frombuffer(raw, dtype=dtype).reshape(tuple(shape), order="F" if fortran else "C")


def _array_state(state: Any) -> np.ndarray:
    """NumPy's array state `(1, shape, dtype, is_fortran, raw)` (or without the version)."""
    if isinstance(state, tuple) and len(state) == 5 and state[0] == 1 and not isinstance(state[0], bool):
        state = state[1:]
    if not isinstance(state, tuple) or len(state) != 4:
        raise _Refuse("an array state that NumPy does not write")
    return _array(*state)


def _reduce(f: Any, args: Any) -> Any:
    if not isinstance(f, _Name):
        raise _Refuse("a call of something that is not a name")
    if not isinstance(args, tuple):
        raise _Refuse(f"{f.full} with arguments that are not a tuple")
    k = f.kind
    if k == "reconstruct":
        if len(args) != 3 or not isinstance(args[0], _Name) or args[0].kind != "ndarray":
            raise _Refuse(f"{f.full} of something other than numpy.ndarray")
        return _Pending("array")
    if k == "dtype":
        if not 1 <= len(args) <= 3 or not all(isinstance(a, bool) for a in args[1:]):
            raise _Refuse("numpy.dtype with arguments NumPy does not write")
        _dtype(args[0])  # the code must be a plain number
        return _Pending("dtype", args[0])
    if k == "scalar":
        if len(args) != 2 or not isinstance(args[0], np.dtype):
            raise _Refuse("a NumPy scalar whose dtype is not a plain number")
        return _array((), args[0], False, args[1])[()]
    if k == "frombuffer":
        if len(args) != 4 or args[3] not in ("C", "F"):
            raise _Refuse("numpy _frombuffer with arguments NumPy does not write")
        buf, dtype, shape, order = args
        return _array(shape, dtype, order == "F", buf)
    if k == "jax_array":
        if len(args) != 4 or not isinstance(args[0], _Name) or args[0].kind != "reconstruct":
            raise _Refuse("a JAX array whose payload is not a NumPy array")
        inner = _reduce(args[0], args[1])
        if not isinstance(args[3], dict | type(None)):
            raise _Refuse("a JAX array with an unexpected abstract value")
        del inner
        return _array_state(args[2])
    if k in ("frozen_dict", "ordered_dict"):
        if args == ():
            return {}
        if len(args) == 1 and isinstance(args[0], dict):
            return dict(args[0])
        raise _Refuse(f"{f.full} with arguments other than a dict")
    if k == "encode":
        if len(args) not in (1, 2) or not isinstance(args[0], str):
            raise _Refuse("_codecs.encode of something other than a string")
        if len(args) == 2 and (not isinstance(args[1], str) or args[1].lower().replace("_", "-") not in
                               ("latin1", "latin-1", "iso-8859-1", "iso8859-1")):  # fmt: skip
            raise _Refuse(f"_codecs.encode with codec {show(args[1], 40)} (only latin1, as NumPy's pickles use)")
        try:
            return args[0].encode("latin1")
        except UnicodeEncodeError:
            raise _Refuse("_codecs.encode of a string that is not latin-1") from None
    if k == "bytes":
        if args != ():
            raise _Refuse("bytes() with arguments")
        return b""
    raise _Refuse(f"a call of {f.full}")  # numpy.ndarray and anything else that is only a placeholder


def _build(obj: Any, state: Any) -> Any:
    if isinstance(obj, _Pending) and obj.kind == "array":
        return _array_state(state)
    if isinstance(obj, _Pending) and obj.kind == "dtype":
        return _dtype_state(obj, state)
    what = obj.full if isinstance(obj, _Name) else type(obj).__name__
    raise _Refuse(f"a BUILD (setting the state) of {show(what)}, which only NumPy arrays and dtypes take")


# ------------------------------------------------------------------------------------------- the interpreter

_CONSTANTS = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}
_VALUES = {"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT", "BINUNICODE",
           "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8"}
_NAMED = {"INST": "an INST opcode", "OBJ": "an OBJ opcode", "NEWOBJ": "a NEWOBJ opcode",
          "NEWOBJ_EX": "a NEWOBJ_EX opcode", "PERSID": "a persistent id", "BINPERSID": "a persistent id",
          "EXT1": "an extension code", "EXT2": "an extension code", "EXT4": "an extension code",
          "EMPTY_SET": "a set", "ADDITEMS": "a set", "FROZENSET": "a frozenset",
          "NEXT_BUFFER": "an out-of-band buffer", "READONLY_BUFFER": "an out-of-band buffer",
          "STRING": "a Python 2 string", "BINSTRING": "a Python 2 string",
          "SHORT_BINSTRING": "a Python 2 string"}  # fmt: skip


def _key(k: Any) -> str | int:
    """A dict key: a string or an integer."""
    if isinstance(k, str) or (isinstance(k, int) and not isinstance(k, bool)):
        return k
    raise _Refuse(f"a dict key of type {type(k).__name__} (state dicts have string keys)")


class _Machine:
    """The interpreter's state (the stack, the marks: each a stack a MARK set aside, the memo) and one method per
    kind of opcode, `op(name, arg)`; `_OPS` maps each opcode read to its method."""

    __slots__ = ("stack", "marks", "memo")

    def __init__(self) -> None:
        self.stack: list[Any] = []
        self.marks: list[list[Any]] = []
        self.memo: dict[int, Any] = {}

    def pop_mark(self) -> list[Any]:
        """The items pushed since the last MARK (the stack before it comes back)."""
        if not self.marks:
            raise _Refuse("a MARK opcode missing")
        items, self.stack = self.stack, self.marks.pop()
        return items

    def top(self, kind: type, what: str) -> Any:
        """The top of the stack, which must be a finished `kind`."""
        stack = self.stack
        if not stack or not isinstance(stack[-1], kind) or isinstance(stack[-1], _Pending):
            raise _Refuse(f"{what} on something that is not a {kind.__name__}")
        return stack[-1]

    def put(self, i: int) -> None:
        """Memo slot `i` := the top (an array or dtype still pending is updated there when it is built)."""
        x = self.stack[-1]
        if isinstance(x, _Pending):
            x.memo_keys.append(i)
        self.memo[i] = x

    def constant(self, name: str, arg: Any) -> None:
        self.stack.append(_CONSTANTS[name])

    def value(self, name: str, arg: Any) -> None:
        self.stack.append(bytes(arg) if isinstance(arg, bytearray) else arg)

    def empty(self, name: str, arg: Any) -> None:
        self.stack.append(_EMPTY[name]())

    def mark(self, name: str, arg: Any) -> None:
        self.marks.append(self.stack)
        self.stack = []

    def small_tuple(self, name: str, arg: Any) -> None:
        k, stack = int(name[-1]), self.stack
        if len(stack) < k:
            raise _Refuse("a tuple of more items than the stack holds")
        items = tuple(stack[-k:])
        del stack[-k:]
        stack.append(items)

    def sequence(self, name: str, arg: Any) -> None:
        items = self.pop_mark()  # (first: it rebinds `self.stack`)
        self.stack.append(tuple(items) if name == "TUPLE" else items)

    def make_dict(self, name: str, arg: Any) -> None:
        items = self.pop_mark()
        if len(items) % 2:
            raise _Refuse("a dict of an odd number of items")
        self.stack.append({_key(items[i]): items[i + 1] for i in range(0, len(items), 2)})

    def append(self, name: str, arg: Any) -> None:
        v = self.stack.pop()
        self.top(list, "APPEND").append(v)

    def appends(self, name: str, arg: Any) -> None:
        items = self.pop_mark()
        self.top(list, "APPENDS").extend(items)

    def setitem(self, name: str, arg: Any) -> None:
        v, k = self.stack.pop(), self.stack.pop()
        self.top(dict, "SETITEM")[_key(k)] = v

    def setitems(self, name: str, arg: Any) -> None:
        items = self.pop_mark()
        if len(items) % 2:
            raise _Refuse("SETITEMS of an odd number of items")
        d = self.top(dict, "SETITEMS")
        for i in range(0, len(items), 2):
            d[_key(items[i])] = items[i + 1]

    def memo_put(self, name: str, arg: Any) -> None:
        self.put(len(self.memo) if name == "MEMOIZE" else arg)

    def memo_get(self, name: str, arg: Any) -> None:
        if arg not in self.memo:
            raise _Refuse(f"a memo reference {arg} to nothing")
        self.stack.append(self.memo[arg])

    def pop(self, name: str, arg: Any) -> None:
        if name == "POP" and self.stack:
            self.stack.pop()
        else:
            self.pop_mark()

    def dup(self, name: str, arg: Any) -> None:
        self.stack.append(self.stack[-1])

    def global_(self, name: str, arg: Any) -> None:
        if name == "GLOBAL":
            module, _, attr = arg.partition(" ")
        else:
            attr, module = self.stack.pop(), self.stack.pop()
            if not isinstance(module, str) or not isinstance(attr, str):
                raise _Refuse("STACK_GLOBAL of something that is not a name")
        kind = ALLOWED.get((module, attr))
        if kind is None:
            raise _Refuse(f"the pickle names {show(module + '.' + attr)}, which an agent checkpoint never holds "
                          "(allowed: plain containers, NumPy and JAX arrays)", named=True)  # fmt: skip
        self.stack.append(_Name(kind, f"{module}.{attr}"))

    def reduce(self, name: str, arg: Any) -> None:
        args, f = self.stack.pop(), self.stack.pop()
        self.stack.append(_reduce(f, args))

    def build(self, name: str, arg: Any) -> None:
        state = self.stack.pop()
        if not self.stack:
            raise _Refuse("a BUILD with nothing to build")
        obj = self.stack[-1]
        built = _build(obj, state)
        self.stack[-1] = built
        for i in obj.memo_keys:
            if self.memo.get(i) is obj:
                self.memo[i] = built


_EMPTY = {"EMPTY_DICT": dict, "EMPTY_LIST": list, "EMPTY_TUPLE": tuple}
_OPS: dict[str, Any] = {
    **dict.fromkeys(_CONSTANTS, _Machine.constant),
    **dict.fromkeys(_VALUES, _Machine.value),
    **dict.fromkeys(_EMPTY, _Machine.empty),
    "MARK": _Machine.mark,
    **dict.fromkeys(("TUPLE1", "TUPLE2", "TUPLE3"), _Machine.small_tuple),
    **dict.fromkeys(("TUPLE", "LIST"), _Machine.sequence),
    "DICT": _Machine.make_dict,
    "APPEND": _Machine.append,
    "APPENDS": _Machine.appends,
    "SETITEM": _Machine.setitem,
    "SETITEMS": _Machine.setitems,
    **dict.fromkeys(("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"), _Machine.memo_put),
    **dict.fromkeys(("GET", "BINGET", "LONG_BINGET"), _Machine.memo_get),
    **dict.fromkeys(("POP", "POP_MARK"), _Machine.pop),
    "DUP": _Machine.dup,
    **dict.fromkeys(("GLOBAL", "STACK_GLOBAL"), _Machine.global_),
    "REDUCE": _Machine.reduce,
    "BUILD": _Machine.build,
}
"""Every opcode interpreted (besides PROTO, FRAME and STOP), and its `_Machine` method; any other is refused."""


def _interpret(data: bytes) -> Any:
    """The value the pickle's opcodes declare, at most `MAX_OPS` of them, each through `_OPS`."""
    m = _Machine()
    for n, (op, arg, _) in enumerate(pickletools.genops(io.BytesIO(data))):
        if n >= MAX_OPS:
            raise _Refuse(f"more than {MAX_OPS} opcodes (an agent checkpoint has thousands)")
        name = op.name
        if n == 0:
            if name != "PROTO" or arg < 2:
                raise _Refuse("a pickle of protocol 0 or 1 (save_agent writes protocol 2 or newer)")
            continue
        if name in ("PROTO", "FRAME"):
            continue
        if name == "STOP":
            if len(m.stack) != 1 or m.marks:
                raise _Refuse("a STOP with a stack that is not one value")
            return m.stack[0]
        handler = _OPS.get(name)
        if handler is None:
            raise _Refuse(_NAMED.get(name, f"the {name} opcode"))
        handler(m, name, arg)
    raise _Refuse("no STOP opcode")  # pragma: no cover  (genops raises at the end of the data first)


def _check_tree(obj: Any) -> None:
    """One iterative walk with a visited set: no cycle, depth at most `MAX_DEPTH`, at most `MAX_NODES` nodes when
    shared references are unfolded (as any later walk of the tree would), no placeholder left over."""
    size: dict[int, int] = {}  # id -> unfolded node count of a finished container
    on_path: set[int] = set()
    stack: list[tuple[Any, int, bool]] = [(obj, 1, False)]
    keep = []  # the containers whose ids are in `size` stay alive (ids are not reused)
    while stack:
        x, depth, done = stack.pop()
        if isinstance(x, _Name | _Pending):
            what = x.full if isinstance(x, _Name) else f"a numpy {x.kind} without its data"
            raise _Refuse(f"{show(what)} as a value (a name or an unfinished array is not data)")
        if not isinstance(x, dict | list | tuple):
            continue
        i = id(x)
        if done:
            on_path.discard(i)
            children = x.values() if isinstance(x, dict) else x
            total = 1 + sum(size.get(id(c), 1) for c in children)
            if total > MAX_NODES:
                raise _Refuse(f"a tree of more than {MAX_NODES} nodes once its shared references are unfolded")
            size[i] = total
            keep.append(x)
            continue
        if i in size:
            continue
        if i in on_path:
            raise _Refuse("a container that holds itself (a cycle)")
        if depth > MAX_DEPTH:
            raise _Refuse(f"containers nested deeper than {MAX_DEPTH}")
        on_path.add(i)
        stack.append((x, depth, True))
        stack.extend((c, depth + 1, False) for c in (x.values() if isinstance(x, dict) else x))


def loads(data: bytes, where: str = "pickle") -> Any:
    """The value a pickle's bytes declare, read as described in the module docstring (nothing in it runs)."""
    where = show(where, 300)
    if data[:1] != b"\x80" or len(data) < 2 or data[1] < 2:
        raise TttError(f"{where}: not a pickle (it starts with {show(repr(data[:8]), 40)}; an agent checkpoint is a "
                       "pickle of protocol 2 or newer, as save_agent writes)")  # fmt: skip
    try:
        obj = _interpret(data)
        _check_tree(obj)
    except _Refuse as e:
        raise TttError(f"{where}: refused: {e}; nothing in it was run") from None
    except Exception as e:  # noqa: BLE001  (genops: ValueError at a bad or truncated opcode; IndexError, ...)
        msg = str(e)
        cut = isinstance(e, EOFError) or any(w in msg for w in ("remain", "truncated", "exhausted"))
        kind = "truncated" if cut else "not a readable pickle"
        raise TttError(f"{where}: {kind} ({type(e).__name__}: {show(msg, 100) or 'no detail'})") from None
    return obj


def load(path: str | os.PathLike, max_bytes: int | None = None) -> Any:
    """`loads` of a regular file of at most `max_bytes` (default `MAX_BYTES`; checked before reading)."""
    path = Path(path)
    return loads(read_bytes(path, MAX_BYTES if max_bytes is None else max_bytes, ""), str(path))
