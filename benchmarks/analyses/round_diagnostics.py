"""Why a test-time method fails on a maze, from the round diagnostics its records already hold.

    python benchmarks/analyses/round_diagnostics.py "test-time-methods/evals/*-gcbc-ttt-*" [...] [--markdown]

For each evaluation record (globs under benchmarks/results/), the mean over the rounds that ran (`active`) of what
docs/algorithm.md's round metrics say about the selection and the graph search:

- `spearman`: rank correlation between the critic's and the oracle's steps to the round's target over the relevant
  rows (does the critic order the data towards the target at all);
- `oracle_end_sel` / `oracle_end_all`: the oracle's steps to the target at the ends of the kept spans and of every
  candidate span (a ratio well under 1: the selection keeps spans that end nearer than the average candidate);
- `reach_frac`: the kept spans that reach the target's region; `n_selected` / `max_span`: how many spans were kept
  and the longest (steps); `empty`: rounds that kept nothing;
- TTGS (where the row plans; these count over the episode so far, so each episode's last round that ran is read):
  `ttgs_goal_frac` (steps acting towards the final goal itself), `ttgs_hops` (vertices held of the path, at most
  `max_hops`), `ttgs_truncated` (plans longer than `max_hops`), `ttgs_unreachable` (plans without a path).

Nothing is rerun; the round's target is the episode's goal for GC-TTT and TTGS's waypoint for `ttt+ttgs` rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

RES = Path(__file__).resolve().parents[1] / "results"
SELECTION = ("spearman", "oracle_end_sel", "oracle_end_all", "reach_frac", "n_selected", "max_span", "empty")
COLUMNS = (*SELECTION, "ttgs_goal_frac", "ttgs_hops", "ttgs_truncated", "ttgs_unreachable")


def summarise(rec: dict) -> dict:
    """Success and the mean of each round metric over the rounds that ran (nan where the row has none)."""
    rounds = rec.get("rounds") or {}
    active = np.asarray(rounds.get("active", []), float) > 0
    out = dict(success=float(rec["mean"]), episodes=int(rec["n_episodes"]), seeds=int(rec["seeds"]))
    selects = rec.get("run", {}).get("variant") not in ("base", "ttgs")  # base and TTGS rows fine-tune nothing
    for k in COLUMNS:
        if k not in rounds or not active.any() or (k in SELECTION and not selects):
            out[k] = float("nan")
            continue
        a = np.asarray(rounds[k], float)  # (seeds, tasks, episodes, rounds): None -> nan
        if k.startswith("ttgs_"):  # cumulative over the episode: its last round that ran
            last = active.shape[-1] - 1 - np.argmax(active[..., ::-1], axis=-1)
            a = np.take_along_axis(a, last[..., None], axis=-1)[..., 0]
            vals = a[active.any(-1) & np.isfinite(a)]
        else:
            vals = a[active & np.isfinite(a)]
        out[k] = float(vals.mean()) if vals.size else float("nan")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("patterns", nargs="+", help="globs of evaluation records under benchmarks/results/")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args(argv)
    files = sorted({p for pat in args.patterns for p in RES.glob(pat)})
    if not files:
        print(f"no record matches {' '.join(args.patterns)} under {RES}", file=sys.stderr)
        return 2
    head = ("record", "success", "episodes", *COLUMNS)
    rows = []
    for f in files:
        s = summarise(json.loads(f.read_text()))
        name = f.stem.rsplit("-", 1)[0]
        rows.append((name, *(s[k] for k in head[1:])))
    fmt = lambda x: "-" if isinstance(x, float) and np.isnan(x) else f"{x:.2f}" if isinstance(x, float) else str(x)  # noqa: E731
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(fmt(x) for x in r) + " |")
    else:
        for r in rows:
            print("  ".join(f"{k}={fmt(x)}" for k, x in zip(head, r, strict=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
