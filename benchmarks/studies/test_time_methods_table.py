"""The test-time methods screen's tables (issue 41): each row's success (mean +- s.e. over seeds), the Welch p
against the base row of its checkpoint, the wall time per episode and TTGS's round metrics; then the verdicts: every
pair of methods on the same checkpoint and episodes (TTGS against base, GC-TTT against base and against TTGS, the
combined variant against each of its parts), with the project's rule.

    python benchmarks/studies/test_time_methods_table.py benchmarks/results/test-time-methods/results.json \
        [--write benchmarks/RESULTS.md]

Given several results.json files (the same rows run on other training seeds, e.g. `--set train_seed=3`), the rows
whose name is in every file are pooled first: one row over all their seeds (per-seed rates concatenated, mean and
s.e. over seeds; each file's episodes stay paired across its rows), and the verdicts pair the pooled rows.

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
        if any(x != runs[0] for x in runs) or len({r["checkpoint_step"] for r in parts}) > 1:
            raise ValueError(f"{name}: the files ran it with different settings; only the training seeds may differ")
        per_seed = np.concatenate([np.asarray(r["per_seed"], float) for r in parts])
        out.append({**parts[0], "checkpoint": "+".join(ckpts), "pooled": [r["success"] for r in parts],
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
           "Welch p | s / episode | TTGS: steps towards the final goal | path vertices | unreachable plans |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in records:
        run = r["run"]
        base = bases.get(r["checkpoint"])
        p = "-"
        if base is not None and base is not r:
            p = _p(welch(np.asarray(r['per_seed']), np.asarray(base['per_seed']))[1])
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


def compare(a: dict, b: dict) -> dict:
    """B - A on the same episodes: difference, its s.e., Welch p over seeds and over episodes, the verdict."""
    if _shape(a) != _shape(b):
        raise ValueError(f"{a['run']['name']} and {b['run']['name']} ran different episodes ({_shape(a)} vs "
                         f"{_shape(b)})")
    sa, sb = (np.concatenate([x.reshape(-1) for x in _shapes(r)]) for r in (a, b))
    diff = float(np.mean(b["per_seed"]) - np.mean(a["per_seed"]))  # = sb.mean() - sa.mean() for one file
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
                               f"| {_p(c['p_seeds'])} / {_p(c['p_eps'])} | {c['verdict']} |")  # fmt: skip
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
