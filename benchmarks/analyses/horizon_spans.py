"""What a fixed return horizon H selects on play data: how much of each kept span lies past its point nearest the goal.

    python benchmarks/analyses/horizon_spans.py [--dataset pointmaze-medium-stitch-v0]

Rule paper with the maze ORACLE critic (the ablation `stitch-oracle-horizon` of pipelines/ablations-cpu.toml), q 0.05,
at each evaluation task's start: the dynamic horizon (critic mode: a span ends at the row of its episode's suffix with
the highest value, from h_min = 10 rows on) against fixed H. For the kept spans: their mean length, the oracle's steps
to the goal at the span's best row and at its end, and the share of the span's rows that come after its best row
(rows fine-tuning trains towards g* although they lead away from it). Selection only: no policy is trained. Writes
benchmarks/results/ablations-cpu/horizon_spans.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import numpy as np

from ttt.select import SelectConfig, precompute, relevance, select

sys.path.insert(0, str(Path(__file__).parent))
from _maze import maze_tasks, write_doc  # noqa: E402

HORIZONS = (None, 10, 25, 50, 100, 200)  # None: dynamic (critic mode)


def span_stats(steps: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> dict:
    """Per kept span [j, e]: length, oracle steps at its best row and at its end, share of rows after the best."""
    lengths, best, last, after = [], [], [], []
    for j, e in zip(starts, ends, strict=True):
        s = steps[j : e + 1]
        b = int(np.argmin(s))
        lengths.append(e - j + 1)
        best.append(s[b])
        last.append(s[-1])
        after.append((len(s) - 1 - b) / len(s))
    return dict(
        spans=len(starts), mean_length=float(np.mean(lengths)), steps_at_best=float(np.mean(best)),
        steps_at_end=float(np.mean(last)), share_after_best=float(np.mean(after)),
    )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="pointmaze-medium-stitch-v0")
    ap.add_argument("--q", type=float, default=0.05)
    ap.add_argument("--out", default="benchmarks/results/ablations-cpu/horizon_spans.json")
    a = ap.parse_args()
    spec, data, oracle, tasks = maze_tasks(a.dataset)
    doc = dict(dataset=a.dataset, q=a.q, tasks=[])
    for task, start, goal in tasks:
        values = oracle.values(data.goals, goal)
        steps = np.asarray(oracle.steps(data.goals, goal))
        entry = dict(task=task)
        for h in HORIZONS:
            cfg = SelectConfig(q=a.q, mode="critic" if h is None else "fixed", H=h, rule="paper")
            t = precompute(data, goal, values, cfg, spec.goal_eps)
            rel = relevance(t, data, start, cfg, spec.goal_eps)
            kept = np.flatnonzero(np.asarray(select(jax.random.key(0), t, rel, cfg).mask))
            entry["dynamic" if h is None else f"H{h}"] = span_stats(steps, kept, np.asarray(t.ends)[kept])
        doc["tasks"].append(entry)
        print(f"task {task}: " + " | ".join(
            f"{k} len {v['mean_length']:.0f}, steps best {v['steps_at_best']:.0f} end {v['steps_at_end']:.0f}, "
            f"after best {v['share_after_best']:.2f}" for k, v in entry.items() if k != "task"))  # fmt: skip
    write_doc(a.out, doc)


if __name__ == "__main__":
    main()
