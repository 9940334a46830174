"""The package's layout as docs/architecture.md draws it: every module listed, every import pointing down the list,
no import circles (function-local imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "ttt"


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in PKG.rglob("*.py")}


def _imports(name: str) -> set[str]:
    """The `ttt` modules `name` imports anywhere in its code (a name taken from a package counts as its module when
    it is one); the package face `ttt` itself is left out (it only re-exports, lazily)."""
    tree = ast.parse(MODULES[name].read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("ttt.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("ttt"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if sub in MODULES else node.module)
    return {m for m in out if m in MODULES and m not in ("ttt", name)}


GRAPH = {m: _imports(m) for m in MODULES}


def _tree_entries() -> list[str]:
    """The paths of docs/architecture.md's module tree, in order (`ttt/cli/app.py`, `ttt/select.py`, ...)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("## Where each module sits")[1].split("```")[1]
    entries, folder = [], None
    for line in block.strip().splitlines():
        token = line.split()[0]
        if not line.startswith(" "):
            folder = token if token.endswith("/") else None
            entries.append(token)
        else:
            entries.append(folder + token)
    return entries


def test_no_import_circles():
    index, low, stack, on, circles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_the_documented_tree_lists_every_module():
    entries = _tree_entries()
    files = {e for e in entries if e.endswith(".py")}
    folders = {e for e in entries if e.endswith("/")}
    for path in MODULES.values():
        rel = path.relative_to(ROOT).as_posix()
        if rel.endswith("__init__.py") and rel != "ttt/__init__.py":
            continue  # a package's face: its folder's line stands for it
        listed = rel in files or (
            rel.rsplit("/", 1)[0] + "/" in folders and not any(f.startswith(rel.rsplit("/", 1)[0] + "/") for f in files)
        )  # noqa: E501
        assert listed, f"{rel} is missing from docs/architecture.md's tree"
    for e in entries:
        assert (ROOT / e).exists(), f"docs/architecture.md lists {e}, which does not exist"


def test_imports_point_down_the_documented_tree():
    entries = _tree_entries()

    def place(module: str) -> tuple[int, str]:
        rel = MODULES[module].relative_to(ROOT).as_posix()
        if rel in entries:
            folder = rel.rsplit("/", 1)[0] + "/"
            return entries.index(rel), folder if folder in entries else rel
        folder = rel.rsplit("/", 1)[0] + "/"
        return entries.index(folder), folder

    upward = []
    for a, targets in GRAPH.items():
        for b in targets:
            (ia, fa), (ib, fb) = place(a), place(b)
            if fa != fb and ib < ia:  # within one folder any order; across, only down the list
                upward.append(f"{a} -> {b}")
    assert not upward, f"imports that point up docs/architecture.md's tree: {upward}"


MAX_FUNCTION_LINES, MAX_MODULE_LINES = 100, 800  # the house limits (docs/architecture.md, "Where each module sits")


def test_no_function_or_module_past_the_house_limits():
    """Every function of ttt/ fits in 100 lines (decorators excluded) and every module in 800: a longer one is split
    by role, not left to grow."""
    long_functions, long_modules = [], []
    for name, path in MODULES.items():
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            long_modules.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long_functions.append(f"{name}.{node.name}: {lines} lines")
    assert long_functions == [] and long_modules == []
