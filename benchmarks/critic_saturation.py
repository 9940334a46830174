"""Why the paper's rule fails with a short-trained critic: what its top 5% is made of, learned critic vs oracle.

    python benchmarks/critic_saturation.py CHECKPOINT_DIR [--dataset pointmaze-medium-navigate-v0] [--seed-index 0]

For each evaluation task (start = the task's start cell, goal = its goal cell, no noise), on the full dataset:
rule 'paper' with a critic (q = 0.05, h_min = 10) selects from the rows relevant to the start, once with the learned
value V(s_j | g) and once with the maze oracle's; printed: spans kept, their mean length H, the oracle's true steps to
the goal at their ends, the learned critic's predicted steps there, and the fraction reaching the goal; then the
learned critic's median predicted steps per band of true steps (its range). Writes
benchmarks/results/selection-study/critic_saturation.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ttt.agents import get_backbone
from ttt.episode import dataset_values
from ttt.pretrain import load_checkpoint, read_meta
from ttt.select import SelectConfig, precompute, predicted_steps, relevance, select

sys.path.insert(0, str(Path(__file__).parent))
from _maze import maze_tasks, write_doc  # noqa: E402

BANDS = ((0, 20), (20, 60), (60, 120), (120, 400))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--dataset", default="pointmaze-medium-navigate-v0")
    ap.add_argument("--seed-index", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/selection-study/critic_saturation.json")
    a = ap.parse_args()
    meta = read_meta(a.checkpoint)
    states, meta = load_checkpoint(a.checkpoint, meta)
    spec, data, oracle, tasks = maze_tasks(a.dataset)
    backbone = get_backbone(meta["backbone"])
    agent = jax.tree.map(lambda x: x[a.seed_index] if eqx.is_array(x) else x, states.agent)
    cfg = SelectConfig(q=0.05, h_min=10)
    values_fn = jax.jit(lambda ag, obs, g: dataset_values(backbone.value, ag, obs, g, 4096))
    doc = dict(checkpoint=str(a.checkpoint), step=meta["step"], dataset=a.dataset, seed_index=a.seed_index, tasks=[])
    for task, start, goal in tasks:
        goal_obs = jnp.zeros(spec.ob_dim, jnp.float32).at[:2].set(goal)
        learned = values_fn(agent, data.observations, goal_obs)
        true = np.asarray(oracle.steps(data.goals, goal))
        pred = np.asarray(predicted_steps(learned, cfg.gamma))
        row = dict(task=task)
        for name, vals in (("learned", learned), ("oracle", oracle.values(data.goals, goal))):
            t = precompute(data, goal, vals, cfg, spec.goal_eps)
            rel = relevance(t, data, start, cfg, spec.goal_eps)
            kept = np.flatnonzero(np.asarray(select(jax.random.key(0), t, rel, cfg).mask))
            ends = np.asarray(t.ends)[kept]
            row[name] = dict(
                kept=len(kept),
                mean_H=float(np.mean(ends - kept)),
                true_steps_at_end=float(np.mean(true[ends])),
                predicted_steps_at_end=float(np.mean(pred[ends])),
                reach=float(np.mean(np.asarray(t.reaches)[kept])),
            )
        row["predicted_by_true_band"] = {
            f"{lo}-{hi}": float(np.median(pred[(true >= lo) & (true < hi)])) for lo, hi in BANDS
        }
        doc["tasks"].append(row)
        ln, on = row["learned"], row["oracle"]
        print(f"task {task}: learned critic: H {ln['mean_H']:.0f}, true steps at end {ln['true_steps_at_end']:.0f}"
              f", reach {ln['reach']:.2f} | oracle: H {on['mean_H']:.0f}, true steps at end "
              f"{on['true_steps_at_end']:.0f}, reach {on['reach']:.2f} | learned median predicted steps by true band: "
              + ", ".join(f"{k}: {v:.0f}" for k, v in row["predicted_by_true_band"].items()))  # fmt: skip
    write_doc(a.out, doc)


if __name__ == "__main__":
    main()
