"""Counts kind: `benchmarks/analyses/rederivation.py` records (one per commit measured, declared by file: ``before``,
``after``), how often one row of ``ttt run`` calls each resolver and opens each file, per (scenario, row)."""

from __future__ import annotations

import json

from .records import RES


def _runs(rel: str) -> dict[tuple[str, str], dict]:
    doc = json.loads((RES / rel).read_text())
    return {(r["scenario"], r["row"]): r for r in doc["runs"]}


def _table(decl: dict, part: str, count: str, label: str) -> str:
    before, after = _runs(decl["before"]), _runs(decl["after"])
    keys = [k for k in before if k in after]
    names = list(dict.fromkeys(n for k in keys for d in (before[k], after[k]) for n in d[part]))
    said = any(d[part][n].get("what") for k in keys for d in (before[k], after[k]) for n in d[part])
    head = [label, *(["what"] if said else []), *(f"{row} ({scenario}): before → after" for scenario, row in keys)]
    out = ["| " + " | ".join(head) + " |", "|---|" + ("---|" if said else "") + "---:|" * len(keys)]
    for n in names:
        what = next((d[part][n].get("what", "") for k in keys for d in (before[k], after[k]) if n in d[part]), "")
        cells = [f"{before[k][part].get(n, {}).get(count, 0)} → {after[k][part].get(n, {}).get(count, 0)}"
                 for k in keys]  # fmt: skip
        if all(c == "0 → 0" for c in cells):
            continue
        out.append(f"| `{n}` | " + (f"{what} | " if said else "") + " | ".join(cells) + " |")
    return "\n".join(out)


def resolvers(decl: dict) -> str:
    """Calls of each resolver in one row, before and after (planning and stages together)."""
    return _table(decl, "resolvers", "calls", "resolver")


def files(decl: dict) -> str:
    """Reads of each file in one row, before and after."""
    return _table(decl, "files", "read", "file")


def identical(decl: dict) -> str:
    """Whether each evaluated row's record equals the reference run's in every field, before and after."""
    out = []
    for which in ("before", "after"):
        for (scenario, row), r in _runs(decl[which]).items():
            same = r.get("same_as_reference")
            if same:
                word = "identical" if same.get("identical") else f"differs ({same.get('first_difference')})"
                out.append(f"- {which}, row `{row}` ({scenario}): its record is {word} to the reference run's.")
    return "\n".join(out)
