"""Selection kind: success and the selection's round diagnostics per row, one table per (agent, dataset, pre-training
step) block of the declared rows (``rows``: record references, in order).

Success is mean +- s.e. over the training seeds; p against the block's base row over seeds
(`ttt.stats.compare_records`: paired where both records carry one checkpoint digest, else Welch's, "unpaired"). The
diagnostics are averaged over the rounds that adapted: relevant rows, spans kept, training rows, the fraction of kept
spans reaching the goal, the critic-vs-oracle Spearman over relevant rows, and the oracle's steps to the goal at the
ends of the kept spans against all candidate spans; s = wall seconds per row. ``per_task``: the same per task.
"""

from __future__ import annotations

import numpy as np

from ttt.stats import compare_records

from . import records


def mean_over_rounds(rec: dict, key: str, task: int | None = None) -> float:
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


def _blocks(table: dict) -> dict:
    recs = [records.raw(ref)[1] for ref in table["rows"]]
    blocks: dict[tuple, list] = {}
    for r in recs:
        blocks.setdefault((r["run"]["agent"], r["run"]["dataset"], r["checkpoint_step"]), []).append(r)
    return blocks


def render(table: dict) -> str:
    out = []
    for (agent, dataset, step), rows in _blocks(table).items():
        base = next((r for r in rows if r["run"]["variant"] == "base"), None)
        out += [f"{agent} on {dataset} ({rows[0]['profile']} profile, step {step}):", "",
                "| row | rule | critic | success | episodes | p vs base (over seeds) | relevant rows "
                "| spans kept | training rows | reach | Spearman | oracle steps at kept ends / all ends | s |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
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
            out.append(
                f"| {run['name']} | {rule} | {critic} | {r['mean']:.2f} +- {fmt(se)} | {r['n_episodes']} "
                f"| {p_txt} | {fmt(mean_over_rounds(r, 'n_rel'), 0)} "
                f"| {fmt(mean_over_rounds(r, 'n_selected'), 1)} | {fmt(mean_over_rounds(r, 'n_train_rows'), 0)} "
                f"| {fmt(mean_over_rounds(r, 'reach_frac'))} | {fmt(mean_over_rounds(r, 'spearman'))} "
                f"| {fmt(mean_over_rounds(r, 'oracle_end_sel'), 0)} / {fmt(mean_over_rounds(r, 'oracle_end_all'), 0)} "
                f"| {r['wall_s']:.0f} |"
            )
        if table.get("per_task"):
            out += ["", *_per_task(rows)]
        out.append("")
    return "\n".join(out).rstrip()


def _per_task(rows: list[dict]) -> list[str]:
    out = ["| row | task | success | spans kept | training rows | reach | oracle steps at kept ends / all ends |",
           "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        for i, t in enumerate(r["run"]["tasks"]):
            m = {k: mean_over_rounds(r, k, i) for k in ("n_selected", "n_train_rows", "reach_frac", "oracle_end_sel",
                                                        "oracle_end_all")}  # fmt: skip
            out.append(f"| {r['run']['name']} | {t} | {r['per_task'][i]:.2f} | {fmt(m['n_selected'], 1)} "
                       f"| {fmt(m['n_train_rows'], 0)} | {fmt(m['reach_frac'])} "
                       f"| {fmt(m['oracle_end_sel'], 0)} / {fmt(m['oracle_end_all'], 0)} |")  # fmt: skip
    return out


def curves(table: dict) -> str:
    """Learning curves: per (agent, data, updates) point the base, critic-free and critic rows (mean +- s.e. over
    seeds, the episodes per row) and each GC-TTT row against base (p over seeds; the test named)."""
    from .cells import diff, pm

    out = ["| agent, data | updates | episodes | base | GC-TTT, critic-free | GC-TTT, critic | critic vs base: p "
           "(test) | critic-free vs base: p (test) |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for pt in table["points"]:
        base, free, critic = (records.maybe(pt.get(k)) for k in ("base", "free", "critic"))

        def p(x, base=base):
            if base is None or x is None:
                return "-"
            d = diff(base, x)
            return f"{fmt(d.p, 3)} ({'paired' if d.test == 'paired' else 'Welch, unpaired'})"

        n = "/".join(sorted({str(x["n"]) for x in (base, free, critic) if x is not None}))
        out.append(f"| {pt['label']} | {pt['updates']} | {n} | {pm(base)} | {pm(free)} | {pm(critic)} | {p(critic)} "
                   f"| {p(free)} |")  # fmt: skip
    return "\n".join(out)
