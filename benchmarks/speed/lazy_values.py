"""The lazy value pass (`TTTConfig.value_cap`) against the full one, side by side: a TTT-with-critic
row (GC-BC cpu profile, cached 10k-step checkpoints, rule 'episodes', 3 seeds x 5 tasks x 1 episode through
`ttt.evaluate`, the full 1M-row datasets) on pointmaze-medium stitch and navigate.

Usage:
    python benchmarks/speed/lazy_values.py [--datasets stitch,navigate] [--cap 0.1] [--episodes 1]
        [--out benchmarks/results/speed/lazy_values.json]

Per dataset and pass: wall seconds of the `evaluate` call (compilation included, the same for both), the value
rows computed per episode (the full pass: every row once; the lazy pass: the `value_rows` round metric summed over
the episode's rounds, and the rows its packed passes held, `ceil(rows / cap) * cap` per round), and whether success,
steps, trajectories and every round metric (selections: spans kept, training rows, thresholds, losses) are identical.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DATASETS = {"stitch": "pointmaze-medium-stitch-v0", "navigate": "pointmaze-medium-navigate-v0"}


def _ckpt(dataset: str) -> str:
    base = Path(os.environ.get("TTT_CACHE", "~/.cache/ttt")).expanduser() / "ckpt" / dataset
    found = sorted(base.glob("gcbc-cpu-*/state-000010000.eqx"), key=lambda p: p.stat().st_mtime, reverse=True)
    if not found:
        raise SystemExit(f"no cached cpu-profile gcbc 10k-step checkpoint under {base}")
    return str(found[0].parent)


def row(dataset: str, cap: float, episodes: int) -> dict:
    import numpy as np

    from ttt.checkpoint import open_checkpoint
    from ttt.data.files import load
    from ttt.episode import value_pass_rows
    from ttt.evaluation import evaluate
    from ttt.setups import checkpoint_setup

    path = _ckpt(dataset)
    ck = open_checkpoint(path)
    states, data = ck.load(), load(ck.dataset)
    setup = checkpoint_setup(ck, "ttt", K=100, N=100, lr=3e-4, rule="episodes", bucket=1)
    ttt = dataclasses.replace(setup.ttt, value_cap=None)  # the full pass (the default 'auto' is the lazy one)
    out = {"dataset": dataset, "checkpoint": path, "rows": data.n_rows, "value_cap": cap,
           "pass_rows": value_pass_rows(dataclasses.replace(ttt, value_cap=cap), data.n_rows)}  # fmt: skip
    res = {}
    for name, t in (("full", ttt), ("lazy", dataclasses.replace(ttt, value_cap=cap))):
        setup = dataclasses.replace(setup, ttt=t)
        t0 = time.perf_counter()
        res[name] = evaluate(setup, states.agent, data, episodes=episodes, tasks=(1, 2, 3, 4, 5), batch_size=25)
        out[f"{name}_wall_s"] = time.perf_counter() - t0
        print(f"{dataset} {name}: {out[f'{name}_wall_s']:.1f} s", flush=True)
    full, lazy = res["full"], res["lazy"]
    rows = lazy.rounds["value_rows"]  # (seeds, tasks, episodes, rounds)
    cap_rows = out["pass_rows"]
    out["episodes"] = int(full.success.size)
    out["rounds_per_episode"] = float(full.rounds["active"].sum(-1).mean())
    out["full_rows_per_episode"] = data.n_rows
    out["lazy_rows_per_episode"] = float(rows.sum(-1).mean())
    out["lazy_rows_per_episode_max"] = int(rows.sum(-1).max())
    out["lazy_packed_rows_per_episode"] = float((np.ceil(rows / cap_rows) * cap_rows).sum(-1).mean())
    out["lazy_rows_per_round_max"] = int(rows.max())
    out["success_full"], out["success_lazy"] = float(full.success.mean()), float(lazy.success.mean())
    same = {
        "success": bool((full.success == lazy.success).all()),
        "steps": bool((full.steps == lazy.steps).all()),
        "observations": bool(np.array_equal(full.observations, lazy.observations)),
    }
    for k, v in full.rounds.items():
        if k != "value_rows":
            same[f"rounds.{k}"] = bool(np.array_equal(v, lazy.rounds[k], equal_nan=True))
    out["identical"] = same
    out["all_identical"] = all(same.values())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="stitch,navigate")
    ap.add_argument("--cap", type=float, default=0.1)
    ap.add_argument("--episodes", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/speed/lazy_values.json"))
    args = ap.parse_args()
    import jax

    results = [row(DATASETS[d], args.cap, args.episodes) for d in args.datasets.split(",")]
    doc = {
        "command": "python benchmarks/speed/lazy_values.py " + " ".join(sys.argv[1:]),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "jax": jax.__version__, "device": str(jax.devices()[0])},  # fmt: skip
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print("| dataset | pass | wall s | value rows / episode | packed rows / episode | success | identical |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        name = r["dataset"].split("-")[2]
        print(f"| {name} | full | {r['full_wall_s']:.0f} | {r['full_rows_per_episode']:,} | - | "
              f"{r['success_full']:.2f} | |")
        print(f"| {name} | lazy (cap {r['value_cap']}) | {r['lazy_wall_s']:.0f} | {r['lazy_rows_per_episode']:,.0f} "
              f"({r['lazy_rows_per_episode'] / r['rows']:.1%}) | {r['lazy_packed_rows_per_episode']:,.0f} | "
              f"{r['success_lazy']:.2f} | {r['all_identical']} |")  # fmt: skip


if __name__ == "__main__":
    main()
