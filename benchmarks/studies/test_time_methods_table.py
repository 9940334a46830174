"""The test-time methods screen's tables (issue 41): each row's success (mean +- s.e. over seeds), p over seeds
against the base row of its checkpoint (paired where the digests agree, else Welch's; the test named), the wall time
per episode and TTGS's round metrics; then the verdicts: every pair of methods on the same checkpoint and episodes
(TTGS against base, GC-TTT against base and against TTGS, the combined variant against each of its parts), with
the project's rule.

    python benchmarks/studies/test_time_methods_table.py benchmarks/results/test-time-methods/results.json \
        [--write benchmarks/RESULTS.md]

Given several results.json files (the same rows run on other training seeds, e.g. `--set train_seed=3`), the rows
whose name is in every file are pooled first: one row over all their seeds (per-seed rates concatenated, mean and
s.e. over seeds; each file's episodes stay paired across its rows), and the verdicts pair the pooled rows.

The statistics are `ttt.stats`' (docs/algorithm.md, "Statistics and verdicts"): B - A over seeds, paired (a paired
t-test on the per-seed differences) where both rows carry the same checkpoint digests, else Welch's test and marked
"unpaired"; the stratified bootstrap's 95% interval (seeds within tasks, generator seed 0). The verdict between two
methods: "B better" / "A better" at p < 0.05, the same with "weak evidence" at p < 0.20, else "no difference". With
`--write`, both tables replace the block between `<!-- test-time-methods -->` and `<!-- /test-time-methods -->` in the
given file.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from ttt import stats
from ttt.pipeline.keys import record_ttgs_path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claims import replace_block  # noqa: E402

# (A, B) variant pairs compared on one checkpoint; GC-TTT and the combined variant are paired at equal ft_alpha; base
# and TTGS (no fine-tuning) against every GC-TTT row, the paper's loss and a raised alpha (docs/algorithm.md's
# recommendation for small-alpha checkpoints) alike.
PAIRS = (("base", "ttgs"), ("base", "ttt-mc"), ("base", "ttt"), ("base", "ttt+ttgs"), ("ttgs", "ttt-mc"),
         ("ttgs", "ttt"), ("ttgs", "ttt+ttgs"), ("ttt", "ttt+ttgs"))  # fmt: skip


def _p(p: float) -> str:
    """A p as printed: '-' where it is undefined (both rows without spread, e.g. every episode failed)."""
    return "-" if math.isnan(p) else f"{p:.3f}"


def _alpha(r: dict):
    return r["run"].get("ft_alpha")


def _shapes(r: dict) -> list:
    """The success arrays of a row: one, or one per pooled file."""
    return [np.asarray(x, float) for x in r.get("pooled", [r["success"]])]


def _shape(r: dict) -> str:
    return "+".join("x".join(str(k) for k in x.shape) for x in _shapes(r))


def pool(files: list[list[dict]]) -> list[dict]:
    """Rows of the same name from runs on different training seeds, as one row over all their seeds.

    Each file's rows share one checkpoint and its episodes; a pooled row keeps each file's success array and round
    metrics (`pooled`, `pooled_rounds`), so two pooled rows stay paired file by file. Mean and s.e. are over the
    concatenated per-seed rates. Refuses files that share a checkpoint (the same seeds counted twice) or rows whose
    settings differ beyond the training seeds; names missing from some file are left out, and said so."""
    by_name = [{r["run"]["name"]: r for r in recs} for recs in files]
    names = [n for n in by_name[0] if all(n in b for b in by_name)]
    dropped = sorted({n for b in by_name for n in b} - set(names))
    if dropped:
        print(f"pooled rows only: left out {', '.join(dropped)} (not in every file)", file=sys.stderr)
    out = []
    for name in names:
        parts = [b[name] for b in by_name]
        ckpts = [r["checkpoint"] for r in parts]
        if len(set(ckpts)) < len(ckpts):
            raise ValueError(f"{name}: two files share checkpoint {ckpts}; pooling would count its seeds twice")
        runs = [{k: v for k, v in r["run"].items() if k not in _POOL_FREE} for r in parts]
        if len({record_ttgs_path(r) for r in parts}) > 1:
            raise ValueError(f"{name}: the files ran graph search with different paths past max_hops (ttgs_path "
                             f"{[record_ttgs_path(r) for r in parts]}); pool records of one")  # fmt: skip
        if any(x != runs[0] for x in runs) or len({r["checkpoint_step"] for r in parts}) > 1:
            raise ValueError(f"{name}: the files ran it with different settings; only the training seeds may differ")
        per_seed = np.concatenate([np.asarray(r["per_seed"], float) for r in parts])
        out.append({**parts[0], "checkpoint": "+".join(ckpts), "pooled": [r["success"] for r in parts],
                    "pooled_sha": [r.get("checkpoint_sha256") for r in parts],
                    "pooled_rounds": [r.get("rounds") or {} for r in parts], "success": None, "rounds": None,
                    "per_seed": per_seed.tolist(), "mean": float(per_seed.mean()),
                    "se": float(per_seed.std(ddof=1) / math.sqrt(len(per_seed))),
                    "wall_s": sum(r["wall_s"] for r in parts)})  # fmt: skip
    return out


# Run keys that may differ between pooled files: the training seeds, how many episodes each seed ran, and how the
# episodes were batched into calls (chunk, bucket: speed only, in no evaluation key).
_POOL_FREE = ("seeds", "train_seed", "episodes", "eval_seed", "chunk", "bucket")


def _ttgs_last(r: dict, key: str) -> np.ndarray | None:
    """A TTGS round metric at each episode's last round, over every pooled file; None where the row has none."""
    parts = [x for x in r.get("pooled_rounds", [r.get("rounds") or {}]) if key in x]
    if not parts:
        return None
    return np.concatenate([np.asarray(x[key], dtype=float)[..., -1].reshape(-1) for x in parts])


def rows_table(records: list[dict]) -> list[str]:
    bases = {r["checkpoint"]: r for r in records if r["run"]["variant"] == "base"}
    out = ["| row | agent | data | variant | seeds x tasks x episodes | success (mean +- s.e. over seeds) | vs base: "
           "p over seeds (test) | s / episode | TTGS: steps towards the final goal | path vertices | "
           "unreachable plans |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in records:
        run = r["run"]
        base = bases.get(r["checkpoint"])
        p = "-"
        if base is not None and base is not r:
            d = _diff(base, r)
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
    return out


def _paired(a: dict, b: dict) -> bool:
    """Both rows carry checkpoint digests, equal file by file (pooled rows), and ran the same episodes."""
    sha_a, sha_b = a.get("pooled_sha", [a.get("checkpoint_sha256")]), b.get("pooled_sha", [b.get("checkpoint_sha256")])
    return all(sha_a) and sha_a == sha_b and _shape(a) == _shape(b)


def _per_seed_task(r: dict) -> np.ndarray:
    """(seeds, tasks) success rates over every pooled file."""
    return np.concatenate([x.reshape(x.shape[0], x.shape[1], -1).mean(axis=2) for x in _shapes(r)])


def _diff(a: dict, b: dict) -> stats.Diff:
    pa, pb = np.asarray(a["per_seed"], float), np.asarray(b["per_seed"], float)
    return stats.paired(pa, pb) if _paired(a, b) else stats.unpaired(pa, pb)


def compare(a: dict, b: dict) -> dict:
    """B - A on the same episodes (`ttt.stats`): difference, its s.e., p over seeds (paired where the digests allow,
    else Welch), the stratified bootstrap's 95% interval, the verdict."""
    if _shape(a) != _shape(b):
        raise ValueError(f"{a['run']['name']} and {b['run']['name']} ran different episodes ({_shape(a)} vs "
                         f"{_shape(b)})")
    d = _diff(a, b)
    ci = stats.bootstrap_ci(_per_seed_task(a), _per_seed_task(b), paired_rows=d.test == "paired")
    better = b["run"]["variant"] if d.diff > 0 else a["run"]["variant"]
    verdict = (f"{better} better" if d.p < stats.CLEAR_P else f"{better} better, weak evidence" if d.p < stats.WEAK_P
               else "no difference")  # fmt: skip
    if d.test != "paired":
        verdict += " (unpaired)"
    return dict(diff=d.diff, se=d.se, p=d.p, test=d.test, ci=ci, verdict=verdict)


def verdict_table(records: list[dict]) -> list[str]:
    out = ["| agent, data, updates | row A | row B | A | B | B - A (s.e.) [95% CI] | p over seeds | verdict |",
           "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    groups: dict[str, list[dict]] = {}
    for r in records:
        # one checkpoint: the same path AND, where the records hold it, the same state digest (the same configuration
        # pre-trained again on another machine can differ; its rows are not paired with the first machine's)
        groups.setdefault((r["checkpoint"], r.get("checkpoint_sha256")), []).append(r)
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
                               f"[{c['ci'][0]:+.2f}, {c['ci'][1]:+.2f}] | {_p(c['p'])} ({c['test']}) | "
                               f"{c['verdict']} |")  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="the pipeline's results.json (several: rows pooled over their seeds)")
    ap.add_argument("--write", default=None, help="a markdown file whose marked block receives the tables")
    a = ap.parse_args()
    missing = [f for f in a.results if not Path(f).is_file()]
    if missing:
        ap.error(f"no such results file: {', '.join(missing)}")
    files = [json.loads(Path(f).read_text())["records"] for f in a.results]
    try:
        records = pool(files) if len(files) > 1 else files[0]
    except ValueError as e:
        ap.error(str(e))
    if not records:
        ap.error(f"no row name is in every one of {', '.join(a.results)}")
    text = "\n".join([*rows_table(records), "", "Verdicts (B against A on the same checkpoint and episodes):", "",
                      *verdict_table(records)])  # fmt: skip
    print(text)
    return replace_block(Path(a.write), "test-time-methods", text) if a.write else 0


if __name__ == "__main__":
    raise SystemExit(main())
