"""The test-time methods screen's tables (issue 41): each row's success (mean +- s.e. over seeds), the Welch p
against the base row of its checkpoint, the wall time per episode and TTGS's round metrics; then the verdicts: every
pair of methods on the same checkpoint and episodes (TTGS against base, GC-TTT against base and against TTGS, the
combined variant against each of its parts), with the project's rule.

    python benchmarks/studies/test_time_methods_table.py benchmarks/results/test-time-methods/results.json \
        [--write benchmarks/RESULTS.md]

The rule (as `benchmarks/studies/claims.py`): B - A over the paired episodes, its standard error sqrt(se_A^2 +
se_B^2) from the per-seed standard errors, Welch's p over per-seed rates and over per-episode outcomes; a difference
under two standard errors is "no difference". With `--write`, both tables replace the block between
`<!-- test-time-methods -->` and `<!-- /test-time-methods -->` in the given file.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from ttt.pipeline.report import welch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claims import replace_block  # noqa: E402

# (A, B) variant pairs compared on one checkpoint; GC-TTT and the combined variant are paired at equal ft_alpha; base
# and TTGS (no fine-tuning) against every GC-TTT row, the paper's loss and a raised alpha (docs/algorithm.md's
# recommendation for small-alpha checkpoints) alike.
PAIRS = (("base", "ttgs"), ("base", "ttt-mc"), ("base", "ttt"), ("base", "ttt+ttgs"), ("ttgs", "ttt-mc"),
         ("ttgs", "ttt"), ("ttgs", "ttt+ttgs"), ("ttt", "ttt+ttgs"))  # fmt: skip


def _p(p: float) -> str:
    """A Welch p as printed: '-' where it is undefined (both rows without spread, e.g. every episode failed)."""
    return "-" if math.isnan(p) else f"{p:.3f}"


def _alpha(r: dict):
    return r["run"].get("ft_alpha")


def _shape(r: dict) -> str:
    return "x".join(str(k) for k in np.asarray(r["success"]).shape)


def rows_table(records: list[dict]) -> list[str]:
    bases = {r["checkpoint"]: r for r in records if r["run"]["variant"] == "base"}
    out = ["| row | agent | data | variant | seeds x tasks x episodes | success (mean +- s.e. over seeds) | vs base: "
           "Welch p | s / episode | TTGS: steps towards the final goal | path vertices | unreachable plans |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in records:
        run = r["run"]
        base = bases.get(r["checkpoint"])
        p = "-"
        if base is not None and base is not r:
            p = _p(welch(np.asarray(r['per_seed']), np.asarray(base['per_seed']))[1])
        rounds = r.get("rounds") or {}
        ttgs = ["-", "-", "-"]
        if "ttgs_goal_frac" in rounds:
            last = {k: np.asarray(rounds[k], dtype=float)[..., -1] for k in ("ttgs_goal_frac", "ttgs_hops",
                                                                              "ttgs_unreachable")}  # fmt: skip
            ttgs = [f"{np.nanmean(last['ttgs_goal_frac']):.2f}", f"{np.nanmean(last['ttgs_hops']):.1f}",
                    f"{int(np.nansum(last['ttgs_unreachable']))}"]  # fmt: skip
        n = np.asarray(r["success"]).size
        data = run["dataset"].removesuffix("-v0")
        out.append(f"| {run['name']} | {run['agent']} | {data} | {run['variant']} | {_shape(r)} | {r['mean']:.3f} "
                   f"+- {r['se']:.3f} | {p} | {r['wall_s'] / n:.1f} | " + " | ".join(ttgs) + " |")  # fmt: skip
    return out


def compare(a: dict, b: dict) -> dict:
    """B - A on the same episodes: difference, its s.e., Welch p over seeds and over episodes, the verdict."""
    sa, sb = np.asarray(a["success"], float), np.asarray(b["success"], float)
    if sa.shape != sb.shape:
        raise ValueError(f"{a['run']['name']} and {b['run']['name']} ran different episodes ({sa.shape} vs {sb.shape})")
    diff = float(sb.mean() - sa.mean())
    se = math.sqrt((a["se"] or 0.0) ** 2 + (b["se"] or 0.0) ** 2)
    p_seeds = welch(np.asarray(b["per_seed"]), np.asarray(a["per_seed"]))[1]
    p_eps = welch(sb.reshape(-1), sa.reshape(-1))[1]
    if not (abs(diff) > 2 * se and diff != 0):  # claims.py's rule
        verdict = "no difference"
    else:
        verdict = f"{b['run']['variant'] if diff > 0 else a['run']['variant']} better"
        if min(p_seeds, p_eps) > 0.05:
            verdict += " (over two s.e., but Welch p > 0.05 both ways)"
    return dict(diff=diff, se=se, p_seeds=p_seeds, p_eps=p_eps, verdict=verdict)


def verdict_table(records: list[dict]) -> list[str]:
    out = ["| agent, data, updates | row A | row B | A | B | B - A (s.e.) | Welch p seeds / episodes | verdict |",
           "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(r["checkpoint"], []).append(r)
    for group in groups.values():
        for va, vb in PAIRS:
            for a in (r for r in group if r["run"]["variant"] == va):
                for b in (r for r in group if r["run"]["variant"] == vb):
                    if va == "ttt" and _alpha(a) != _alpha(b):
                        continue
                    c = compare(a, b)
                    run = a["run"]
                    where = f"{run['agent']}, {run['dataset'].removesuffix('-v0')}, {a['checkpoint_step'] // 1000}k"
                    out.append(f"| {where} | {a['run']['name']} | {b['run']['name']} | {a['mean']:.2f} +- "
                               f"{a['se']:.2f} | {b['mean']:.2f} +- {b['se']:.2f} | {c['diff']:+.2f} ({c['se']:.2f}) "
                               f"| {_p(c['p_seeds'])} / {_p(c['p_eps'])} | {c['verdict']} |")  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="the pipeline's results.json")
    ap.add_argument("--write", default=None, help="a markdown file whose marked block receives the tables")
    a = ap.parse_args()
    records = json.loads(Path(a.results).read_text())["records"]
    text = "\n".join([*rows_table(records), "", "Verdicts (B against A on the same checkpoint and episodes):", "",
                      *verdict_table(records)])  # fmt: skip
    print(text)
    return replace_block(Path(a.write), "test-time-methods", text) if a.write else 0


if __name__ == "__main__":
    raise SystemExit(main())
