"""The selection study's table: success and ranking diagnostics per row of `ttt run selection-study`.

    python benchmarks/selection_study.py benchmarks/results/selection-study

Reads every finished row (`OUT/evals/*.json`, so rows of several `--only` invocations come together) and prints one
markdown table per (agent, dataset) block: success (mean +- s.e. over the 3 training seeds), Welch's p against the
block's base row on per-seed rates (the project's report test) and on per-episode outcomes (same starts, goals and
seeds in every row), and the per-round diagnostics averaged over the rounds that adapted: relevant rows, spans kept,
training rows, fraction of kept spans reaching the goal, critic-vs-oracle Spearman over relevant rows, and the
oracle's steps to the goal at the ends of the kept spans against all candidate spans; runtime per row.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats


def welch_p(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or len(b) < 2 or (a.std() == 0 and b.std() == 0):
        return float("nan")
    return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def mean_over_rounds(rec: dict, key: str) -> float:
    v = rec["rounds"].get(key)
    if v is None:
        return float("nan")
    a = np.array(v, dtype=float)  # (seeds, tasks, episodes, rounds); None -> nan
    active = np.array(rec["rounds"]["active"], dtype=float) > 0
    empty = np.array(rec["rounds"]["empty"], dtype=float) > 0
    a = np.where(active & ~empty, a, np.nan)
    return float(np.nanmean(a)) if np.isfinite(a).any() else float("nan")


def fmt(x: float, nd: int = 2) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{x:.{nd}f}"


def main(out: str) -> None:
    recs = [json.loads(p.read_text()) for p in sorted(Path(out, "evals").glob("*.json"))]
    order = [r["name"] for r in json.loads(Path(out, "pipeline.json").read_text())["runs"]]
    recs.sort(key=lambda r: order.index(r["run"]["name"]) if r["run"]["name"] in order else 1e9)
    blocks: dict[tuple, list] = {}
    for r in recs:
        blocks.setdefault((r["run"]["agent"], r["run"]["dataset"]), []).append(r)
    for (agent, dataset), rows in blocks.items():
        base = next((r for r in rows if r["run"]["variant"] == "base"), None)
        print(f"\n{agent} on {dataset} ({rows[0]['profile']} profile, step {rows[0]['checkpoint_step']})\n")
        print("| row | rule | critic | success | episodes | p vs base (seeds) | p vs base (episodes) | relevant rows "
              "| spans kept | training rows | reach | Spearman | oracle steps at kept ends / all ends | s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            run = r["run"]
            succ = np.array(r["success"], float)
            se = r["se"] if r["se"] is not None else float("nan")
            is_base = run["variant"] == "base"
            p_seed = welch_p(r["per_seed"], base["per_seed"]) if base and not is_base else float("nan")
            p_ep = welch_p(succ.ravel(), np.array(base["success"], float).ravel()) if base and not is_base else np.nan
            rule = "-" if is_base else run.get("rule", "paper") + (" (once)" if run.get("once") else "")
            extra = [k for k in ("reuse_adam", "reset_after_horizon") if run.get(k)]
            if run.get("selection") not in (None, "both"):
                extra.append(run["selection"])
            rule += "".join(f", {e}" for e in extra)
            critic = "-" if run["variant"] != "ttt" else run.get("critic", "learned")
            print(
                f"| {run['name']} | {rule} | {critic} | {r['mean']:.2f} +- {fmt(se)} | {r['n_episodes']} "
                f"| {fmt(p_seed, 3)} | {fmt(p_ep, 3)} | {fmt(mean_over_rounds(r, 'n_rel'), 0)} "
                f"| {fmt(mean_over_rounds(r, 'n_selected'), 1)} | {fmt(mean_over_rounds(r, 'n_train_rows'), 0)} "
                f"| {fmt(mean_over_rounds(r, 'reach_frac'))} | {fmt(mean_over_rounds(r, 'spearman'))} "
                f"| {fmt(mean_over_rounds(r, 'oracle_end_sel'), 0)} / {fmt(mean_over_rounds(r, 'oracle_end_all'), 0)} "
                f"| {r['wall_s']:.0f} |"
            )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/selection-study")
