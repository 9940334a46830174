"""Test-time methods kind: base, GC-TTT and test-time graph search (TTGS) side by side on one checkpoint's episodes.

A table declares ``files``: lists of record references, one list per run of the same rows on other training seeds;
with more than one, the rows whose run name is in every list are pooled (per-seed rates concatenated; each list's
episodes stay paired across its rows). ``pairs``: [row A, row B] by run name, each pair on one checkpoint and the same
episodes. The rows table gives each row's success (mean +- s.e. over seeds), p against the base row it pairs with,
the wall time per episode and TTGS's round metrics; the verdicts table every declared pair: "B better" / "A better"
at p < 0.05, the same with "weak evidence" at p < 0.20, else "no difference" (p over seeds, paired where both rows carry
the same checkpoint digests, else Welch's and marked "unpaired"; the stratified bootstrap's 95% interval).
"""

from __future__ import annotations

import math

import numpy as np

from ttt import stats
from ttt.pipeline.keys import record_ttgs_path

from . import records

_POOL_FREE = ("seeds", "train_seed", "episodes", "eval_seed", "chunk", "bucket")


def _p(p: float) -> str:
    return "-" if math.isnan(p) else f"{p:.3f}"


def _shapes(r: dict) -> list:
    return [np.asarray(x, float) for x in r.get("pooled", [r["success"]])]


def _shape(r: dict) -> str:
    return "+".join("x".join(str(k) for k in x.shape) for x in _shapes(r))


def pool(files: list[list[dict]]) -> list[dict]:
    """Rows of the same name from runs on different training seeds, as one row over all their seeds. Refuses runs that
    share a checkpoint digest (the same seeds counted twice) or rows whose settings differ beyond the seeds."""
    by_name = [{r["run"]["name"]: r for r in recs} for recs in files]
    names = [n for n in by_name[0] if all(n in b for b in by_name)]
    out = []
    for name in names:
        parts = [b[name] for b in by_name]
        shas = [r.get("checkpoint_sha256") for r in parts]
        known = [x for x in shas if x]
        if len(set(known)) < len(known):
            raise ValueError(f"{name}: two runs share a checkpoint digest; pooling would count its seeds twice")
        runs = [{k: v for k, v in r["run"].items() if k not in _POOL_FREE} for r in parts]
        if len({record_ttgs_path(r) for r in parts}) > 1:
            raise ValueError(f"{name}: the runs ran graph search with different paths past max_hops")
        if any(x != runs[0] for x in runs) or len({r["checkpoint_step"] for r in parts}) > 1:
            raise ValueError(f"{name}: the runs differ in settings; only the training seeds may differ")
        per_seed = np.concatenate([np.asarray(r["per_seed"], float) for r in parts])
        out.append({**parts[0], "pooled": [r["success"] for r in parts], "pooled_sha": shas,
                    "pooled_rounds": [r.get("rounds") or {} for r in parts], "success": None, "rounds": None,
                    "per_seed": per_seed.tolist(), "mean": float(per_seed.mean()),
                    "se": float(per_seed.std(ddof=1) / math.sqrt(len(per_seed))),
                    "wall_s": sum(r["wall_s"] for r in parts)})  # fmt: skip
    return out


def rows(table: dict) -> list[dict]:
    files = [[records.raw(ref)[1] for ref in refs] for refs in table["files"]]
    return pool(files) if len(files) > 1 else files[0]


def _ttgs_last(r: dict, key: str) -> np.ndarray | None:
    parts = [x for x in r.get("pooled_rounds", [r.get("rounds") or {}]) if key in x]
    if not parts:
        return None
    return np.concatenate([np.asarray(x[key], dtype=float)[..., -1].reshape(-1) for x in parts])


def _paired(a: dict, b: dict) -> bool:
    sha_a, sha_b = a.get("pooled_sha", [a.get("checkpoint_sha256")]), b.get("pooled_sha", [b.get("checkpoint_sha256")])
    return all(sha_a) and sha_a == sha_b and _shape(a) == _shape(b)


def _per_seed_task(r: dict) -> np.ndarray:
    return np.concatenate([x.reshape(x.shape[0], x.shape[1], -1).mean(axis=2) for x in _shapes(r)])


def _diff(a: dict, b: dict) -> stats.Diff:
    pa, pb = np.asarray(a["per_seed"], float), np.asarray(b["per_seed"], float)
    return stats.paired(pa, pb) if _paired(a, b) else stats.unpaired(pa, pb)


def compare(a: dict, b: dict) -> dict:
    """B - A on the same episodes: difference, its s.e., p over seeds, the bootstrap's 95% interval, the verdict."""
    if _shape(a) != _shape(b):
        raise ValueError(f"{a['run']['name']} and {b['run']['name']} ran different episodes")
    d = _diff(a, b)
    ci = stats.bootstrap_ci(_per_seed_task(a), _per_seed_task(b), paired_rows=d.test == "paired")
    better = b["run"]["variant"] if d.diff > 0 else a["run"]["variant"]
    verdict = (f"{better} better" if d.p < stats.CLEAR_P else f"{better} better, weak evidence" if d.p < stats.WEAK_P
               else "no difference")  # fmt: skip
    if d.test != "paired":
        verdict += " (unpaired)"
    return dict(diff=d.diff, se=d.se, p=d.p, test=d.test, ci=ci, verdict=verdict)


def rows_table(table: dict) -> str:
    recs = rows(table)
    by = {r["run"]["name"]: r for r in recs}
    base_of = {b: a for a, b in table["pairs"] if by[a]["run"]["variant"] == "base"}
    out = ["| row | agent | data | variant | seeds x tasks x episodes | success (mean +- s.e. over seeds) | vs base: "
           "p over seeds (test) | s / episode | TTGS: steps towards the final goal | path vertices | "
           "unreachable plans |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in recs:
        run = r["run"]
        p = "-"
        if run["name"] in base_of:
            d = _diff(by[base_of[run["name"]]], r)
            p = f"{_p(d.p)} ({d.test})"
        ttgs = ["-", "-", "-"]
        last = {k: _ttgs_last(r, k) for k in ("ttgs_goal_frac", "ttgs_hops", "ttgs_unreachable")}
        if last["ttgs_goal_frac"] is not None:
            ttgs = [f"{np.nanmean(last['ttgs_goal_frac']):.2f}", f"{np.nanmean(last['ttgs_hops']):.1f}",
                    f"{int(np.nansum(last['ttgs_unreachable']))}"]  # fmt: skip
        n = sum(x.size for x in _shapes(r))
        data = run["dataset"].removesuffix("-v0")
        out.append(f"| {run['name']} | {run['agent']} | {data} | {run['variant']} | {_shape(r)} | {r['mean']:.3f} "
                   f"+- {r['se']:.3f} | {p} | {r['wall_s'] / n:.1f} | " + " | ".join(ttgs) + " |")  # fmt: skip
    return "\n".join(out)


def verdict_table(table: dict) -> str:
    by = {r["run"]["name"]: r for r in rows(table)}
    out = ["| agent, data, updates | row A | row B | A | B | B - A (s.e.) [95% CI] | p over seeds | verdict |",
           "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for na, nb in table["pairs"]:
        a, b = by[na], by[nb]
        c = compare(a, b)
        run = a["run"]
        where = f"{run['agent']}, {run['dataset'].removesuffix('-v0')}, {a['checkpoint_step'] // 1000}k"
        out.append(f"| {where} | {na} | {nb} | {a['mean']:.2f} +- {a['se']:.2f} | {b['mean']:.2f} +- {b['se']:.2f} | "
                   f"{c['diff']:+.2f} ({c['se']:.2f}) [{c['ci'][0]:+.2f}, {c['ci'][1]:+.2f}] | {_p(c['p'])} "
                   f"({c['test']}) | {c['verdict']} |")  # fmt: skip
    return "\n".join(out)
