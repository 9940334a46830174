"""The selection study's table: success and ranking diagnostics per row of `ttt run selection-study`.

    python benchmarks/studies/selection_study.py benchmarks/results/selection-study
    python benchmarks/studies/selection_study.py benchmarks/results/learning-curves --per-task

Reads every finished row (`OUT/evals/*.json`, so rows of several `--only` invocations come together; per row name the
record with the most episodes, as `ttt report --from-evals` keeps) and prints one markdown table per (agent, dataset,
pre-training step) block: success (mean +- s.e. over the 3 training seeds), p against the block's base row over seeds
(`ttt.stats.compare_records`: a paired t-test where both records carry the same checkpoint digest, else Welch's,
marked "unpaired"), and the per-round diagnostics averaged over the rounds that adapted: relevant rows, spans kept,
training rows, fraction of kept spans reaching the goal, critic-vs-oracle Spearman over relevant rows, and the
oracle's steps to the goal at the ends of the kept spans against all candidate spans; runtime per row. With
`--per-task`, a second table per block: the same diagnostics per evaluation task.
"""

from __future__ import annotations

import argparse

import numpy as np

from ttt.pipeline.report import records_from_evals
from ttt.stats import compare_records


def mean_over_rounds(rec: dict, key: str, task: int | None = None) -> float:
    """`key` averaged over the rounds that adapted (all tasks, or the task at index `task`)."""
    v = rec.get("rounds", {}).get(key)
    if v is None:
        return float("nan")
    a = np.array(v, dtype=float)  # (seeds, tasks, episodes, rounds); None -> nan
    active = np.array(rec["rounds"]["active"], dtype=float) > 0
    empty = np.array(rec["rounds"]["empty"], dtype=float) > 0
    a = np.where(active & ~empty, a, np.nan)
    if task is not None:
        a = a[:, task]
    return float(np.nanmean(a)) if np.isfinite(a).any() else float("nan")


def fmt(x: float, nd: int = 2) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{x:.{nd}f}"


def main(out: str, per_task: bool = False) -> None:
    recs = records_from_evals(out, echo=lambda _: None)  # pipeline order; per name most episodes, then newest
    blocks: dict[tuple, list] = {}
    for r in recs:
        blocks.setdefault((r["run"]["agent"], r["run"]["dataset"], r["checkpoint_step"]), []).append(r)
    for (agent, dataset, step), rows in blocks.items():
        base = next((r for r in rows if r["run"]["variant"] == "base"), None)
        print(f"\n{agent} on {dataset} ({rows[0]['profile']} profile, step {step})\n")
        print("| row | rule | critic | success | episodes | p vs base (over seeds) | relevant rows "
              "| spans kept | training rows | reach | Spearman | oracle steps at kept ends / all ends | s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            run = r["run"]
            se = r["se"] if r["se"] is not None else float("nan")
            is_base = run["variant"] == "base"
            vs = compare_records(base, r) if base and not is_base else None
            p_txt = "-" if vs is None else fmt(vs.p, 3) + ("" if vs.test == "paired" else " (unpaired)")
            rule = "-" if is_base else r.get("rule_used") or run.get("rule") or "paper"
            rule += " (once)" if run.get("once") and not is_base else ""
            extra = [k for k in ("reuse_adam", "reset_after_horizon") if run.get(k)]
            if run.get("selection") not in (None, "both"):
                extra.append(run["selection"])
            rule += "".join(f", {e}" for e in extra)
            critic = "-" if run["variant"] != "ttt" else run.get("critic", "learned")
            print(
                f"| {run['name']} | {rule} | {critic} | {r['mean']:.2f} +- {fmt(se)} | {r['n_episodes']} "
                f"| {p_txt} | {fmt(mean_over_rounds(r, 'n_rel'), 0)} "
                f"| {fmt(mean_over_rounds(r, 'n_selected'), 1)} | {fmt(mean_over_rounds(r, 'n_train_rows'), 0)} "
                f"| {fmt(mean_over_rounds(r, 'reach_frac'))} | {fmt(mean_over_rounds(r, 'spearman'))} "
                f"| {fmt(mean_over_rounds(r, 'oracle_end_sel'), 0)} / {fmt(mean_over_rounds(r, 'oracle_end_all'), 0)} "
                f"| {r['wall_s']:.0f} |"
            )
        if per_task:
            print_per_task(rows)


def print_per_task(rows: list[dict]) -> None:
    """Per evaluation task: success (over seeds and episodes) and the round diagnostics of each row."""
    print("\n| row | task | success | spans kept | training rows | reach | oracle steps at kept ends / all ends |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        tasks = r["run"]["tasks"]
        for i, t in enumerate(tasks):
            m = {k: mean_over_rounds(r, k, i) for k in ("n_selected", "n_train_rows", "reach_frac", "oracle_end_sel",
                                                        "oracle_end_all")}  # fmt: skip
            print(f"| {r['run']['name']} | {t} | {r['per_task'][i]:.2f} | {fmt(m['n_selected'], 1)} "
                  f"| {fmt(m['n_train_rows'], 0)} | {fmt(m['reach_frac'])} "
                  f"| {fmt(m['oracle_end_sel'], 0)} / {fmt(m['oracle_end_all'], 0)} |")  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default="benchmarks/results/selection-study", help="a `ttt run` output folder")
    ap.add_argument("--per-task", action="store_true", help="also a table of the diagnostics per evaluation task")
    args = ap.parse_args()
    main(args.out, args.per_task)
