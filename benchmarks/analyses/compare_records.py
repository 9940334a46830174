"""Are two evaluation records (a `ttt run` row's `OUT/evals/ROW-KEY.json`, or `ttt eval`'s record) the same result,
bit for bit? Compares `success`, `steps`, `per_seed`, `mean` and `rounds` field by field (floats exactly, as JSON
holds them) and exits 0 when all are identical, else prints the first difference and exits 1.

    python benchmarks/analyses/compare_records.py A.json B.json [--fields success,steps,per_seed,mean,rounds]

What a refactor that must keep a row's result unchanged runs on the row's record before and after (settings, wall
times, dates and paths may differ and are not compared).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

FIELDS = ("success", "steps", "per_seed", "mean", "rounds")


def first_difference(a, b, where: str = "") -> str | None:
    """The path of the first place where `a` and `b` differ, with both values; None when they are identical."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{where}.{k}: only in {'B' if k not in a else 'A'}"
            d = first_difference(a[k], b[k], f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = first_difference(x, y, f"{where}[{i}]")
            if d:
                return d
        return None
    if type(a) is not type(b) and not (isinstance(a, int | float) and isinstance(b, int | float)):
        return f"{where}: {a!r} ({type(a).__name__}) vs {b!r} ({type(b).__name__})"
    return None if a == b or (a != a and b != b) else f"{where}: {a!r} vs {b!r}"  # NaN equals NaN here


def compare(a: dict, b: dict, fields=FIELDS) -> str | None:
    """The first difference between records `a` and `b` in `fields` (a field missing from both is equal)."""
    for f in fields:
        if (f in a) != (f in b):
            return f"{f}: only in {'A' if f in a else 'B'}"
        d = first_difference(a.get(f), b.get(f), f)
        if d:
            return d
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--fields", default=",".join(FIELDS))
    args = ap.parse_args()
    a, b = (json.loads(Path(p).read_text()) for p in (args.a, args.b))
    d = compare(a, b, args.fields.split(","))
    if d:
        print(f"differ: {d}")
        sys.exit(1)
    print(f"identical: {', '.join(args.fields.split(','))}")


if __name__ == "__main__":
    main()
