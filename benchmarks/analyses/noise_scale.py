"""How large the appendix's value noise is against the spread of the returns it perturbs (critic-free, navigate).

    python benchmarks/analyses/noise_scale.py [--dataset pointmaze-medium-navigate-v0] [--keys 20]

The value-noise ablation adds N(0, (alpha * mean|G|)^2) to every relevant row's return G before the top-q cut
(the paper's appendix: sigma = alpha x the batch's mean |V|). For each evaluation task, at the task's start (goal = its
goal cell), with the ablations' critic-free setting (Monte-Carlo returns, rule paper, q 0.05, eps_rel = the goal
threshold), on the full dataset, this prints the relevant rows' mean |G|, the spread of G among them, the gap between
the top-q cut and the median, sigma for each alpha, and what the noisy top q is made of: the share of the noise-free
selection it keeps, the share of selected spans that reach the goal, and the maze oracle's true steps to the goal at
the selected spans' ends (the optimality the noise costs). The same with the maze ORACLE critic (mode critic, rule
paper, h_min 10: G = the span's rewards + gamma^H V_oracle at its end), whose returns are graded rather than mostly
"never arrives". Selection only: no policy is trained. Writes benchmarks/results/ablations-cpu/noise_scale.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ttt.select import SelectConfig, precompute, relevance, select

sys.path.insert(0, str(Path(__file__).parent))
from _maze import maze_tasks, write_doc  # noqa: E402

ALPHAS = (0.0, 0.1, 0.3, 1.0)


def _ratio(x: float | None) -> str:
    return "- (all G equal)" if x is None else f"{x:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="pointmaze-medium-navigate-v0")
    ap.add_argument("--keys", type=int, default=20, help="noise draws per task and alpha")
    ap.add_argument("--q", type=float, default=0.05)
    ap.add_argument("--out", default="benchmarks/results/ablations-cpu/noise_scale.json")
    a = ap.parse_args()
    spec, data, oracle, tasks = maze_tasks(a.dataset)
    doc = dict(dataset=a.dataset, q=a.q, keys=a.keys, eps_rel=spec.goal_eps, tasks=[])
    for task, start, goal in tasks:
        true_all = np.asarray(oracle.steps(data.goals, goal))
        entry = dict(task=task)
        for source, mode, values in (("mc", "mc", None), ("oracle", "critic", oracle.values(data.goals, goal))):
            base = SelectConfig(q=a.q, mode=mode, rule="paper")
            t = precompute(data, goal, values, base, spec.goal_eps)
            rel = np.asarray(relevance(t, data, start, base, spec.goal_eps))
            g = np.asarray(t.returns)[rel]
            reach = np.asarray(t.reaches)[rel]
            end_steps = true_all[np.asarray(t.ends)[rel]]
            clean = np.asarray(select(jax.random.key(0), t, jnp.asarray(rel), base).mask)[rel]
            row = dict(
                n_rel=int(rel.sum()), n_keep=int(clean.sum()), mean_abs_G=float(np.mean(np.abs(g))),
                std_G=float(np.std(g)), median_G=float(np.median(g)), cut_G=float(g[clean].min()),
                never_reach=float(np.mean(~reach)), end_steps_relevant=float(np.mean(end_steps)), alphas={},
            )  # fmt: skip
            for alpha in ALPHAS:
                cfg = SelectConfig(q=a.q, mode=mode, rule="paper", noise_alpha=alpha)
                kept, reached, ends = [], [], []
                for k in range(a.keys):
                    m = np.asarray(select(jax.random.key(1000 + k), t, jnp.asarray(rel), cfg).mask)[rel]
                    kept.append(np.sum(m & clean) / clean.sum())
                    reached.append(np.mean(reach[m]))
                    ends.append(np.mean(end_steps[m]))
                sigma = alpha * row["mean_abs_G"]
                flat = row["std_G"] <= 1e-6 * max(row["mean_abs_G"], 1.0)  # every relevant G alike: nothing to rank
                row["alphas"][str(alpha)] = dict(
                    sigma=sigma, sigma_over_std=None if flat else sigma / row["std_G"],
                    kept_of_clean=float(np.mean(kept)), reach_selected=float(np.mean(reached)),
                    end_steps_selected=float(np.mean(ends)),
                )  # fmt: skip
            entry[source] = row
            print(
                f"task {task} {source}: {row['n_rel']} relevant, keep {row['n_keep']}; mean|G| "
                f"{row['mean_abs_G']:.1f}, std {row['std_G']:.1f}, cut {row['cut_G']:.1f}, median "
                f"{row['median_G']:.1f}, never reach {row['never_reach']:.2f}, true steps at span ends: relevant "
                f"{row['end_steps_relevant']:.0f}, selected "
                + " / ".join(
                    f"a{k} {v['end_steps_selected']:.0f} (reach {v['reach_selected']:.2f}, kept "
                    f"{v['kept_of_clean']:.2f}, sigma/std {_ratio(v['sigma_over_std'])})"
                    for k, v in row["alphas"].items()
                )
            )
        doc["tasks"].append(entry)
    write_doc(a.out, doc)


if __name__ == "__main__":
    main()
