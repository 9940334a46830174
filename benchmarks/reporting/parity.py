"""Parity kind: `ttt`'s update against the reference code's on the same initial agent and batches, from the parity
record (``file``: ``OUT/NAME.json`` under benchmarks/results/; ``cases``: [case, label] in the order shown)."""

from __future__ import annotations

import json
import re

from .records import RES


def _e(x: float) -> str:
    """1.4e-8, not 1.4e-08."""
    return re.sub(r"e([+-])0*(\d)", lambda m: f"e{'-' if m[1] == '-' else ''}{m[2]}", f"{x:.1e}")


def table(decl: dict) -> str:
    doc = json.loads((RES / decl["file"]).read_text())
    rows = {r["case"]: r for r in doc["rows"]}
    out = ["| case (reference) | obs | terms | forward | loss terms, 100 updates | final params | `ttt` vs nudged "
           "`ttt`: loss / params |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for case, label in decl["cases"]:
        r = rows[case]
        ref, self_ = r["vs_reference"], r["vs_nudged_self"]
        first = ref.get("first_update_above_2e_5")
        loss = _e(ref["loss"]) + (f" (first above 2e-5 at update {first})" if first else "")
        out.append(f"| {label} | {r['obs_dim']} | {len(r['terms'])} | {_e(ref['forward'])} | {loss} | "
                   f"{_e(ref['params'])} | {_e(self_['loss'])} / {_e(self_['params'])} |")  # fmt: skip
    return "\n".join(out)
