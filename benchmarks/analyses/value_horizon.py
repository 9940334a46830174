"""A checkpoint's value horizon H and the TTGS settings the second pointmaze recipe's rule gives it.

    python benchmarks/analyses/value_horizon.py CKPT_DIR --out benchmarks/results/pointmaze-beyond-2/horizon/NAME.json
        [--row ROW]

The rule is `ttt.graph`'s (`measure_value_horizon`, `horizon_tau_threshold`; stated on
benchmarks/studies/pointmaze-beyond-2.md before any of its rows ran): H = the median over the checkpoint's training
seeds of each seed's 0.95 quantile of the value's steps (`ttt.graph.value_steps`, as TTGS reads them) on 100,000
(state, goal) pairs of its training data (generator seed 0); threshold = round(H / 2) within [2, 48], tau = threshold
/ 2. The local dataset must be the one the checkpoint trained on (by content hash).

Beside H, the maze oracle on the same pairs (nothing here enters the rule): the 0.95 quantile of the pairs' true
steps (`MazeOracle.steps`), each seed's Spearman correlation of value steps with oracle steps, and the share of the
pairs more than the rule's threshold apart (oracle) that the value reads within it (TTGS then acts towards the goal
itself too early). `--row ROW` also prints the row's `ttgs` table for pipelines/pointmaze-beyond-2.toml.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
from scipy.stats import spearmanr

from ttt.checkpoint import dataset_hash, open_checkpoint
from ttt.errors import TttError
from ttt.graph import HORIZON_QUANTILE, horizon_pairs, measure_value_horizon, value_steps

sys.path.insert(0, str(Path(__file__).parent))
from _maze import maze_tasks, write_doc  # noqa: E402

TTGS = 'n_vertices = 1000, max_hops = 128, path = "slide"'  # the recipe's TTGS settings besides tau / threshold


def analyse(ckpt_dir: str, pairs: int) -> dict:
    ck = open_checkpoint(ckpt_dir)
    _, data, oracle, _ = maze_tasks(ck.dataset)
    digest = dataset_hash(data)
    ck.check_compatible(ck.dataset, ck.meta["obs_dim"], ck.meta["action_dim"], ckpt_dir, data_hash=digest)
    gamma = float(getattr(ck.cfg, "discount", 0.99))
    agents = ck.load().agent
    h = measure_value_horizon(ck.backbone, agents, data.observations, data.valid, gamma, pairs=pairs)
    i, j = horizon_pairs(data.valid, pairs)
    o_steps = np.asarray(jax.vmap(lambda x, g: oracle.steps(x[None], g)[0])(data.goals[i], data.goals[j]))
    obs, goals = data.observations[i], data.observations[j]
    per_seed = eqx.filter_jit(eqx.filter_vmap(lambda a: value_steps(ck.backbone.value(a, obs, goals), gamma)))
    v_steps = np.asarray(per_seed(agents))
    far = o_steps > h["threshold"]
    return dict(
        checkpoint=f"{ck.dataset}/{ck.path.name}", checkpoint_sha256=ck.digest, dataset=ck.dataset,
        dataset_hash=digest, step=int(ck.meta["step"]), profile=ck.meta.get("profile"), seeds=ck.seeds,
        train_seed=ck.meta.get("seed"), **h,
        oracle_quantile=float(np.quantile(o_steps, HORIZON_QUANTILE)),
        spearman=[float(spearmanr(v, o_steps).statistic) for v in v_steps],
        far_read_near=float(np.mean(v_steps[:, far] <= h["threshold"])) if far.any() else None,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--pairs", type=int, default=100_000)
    ap.add_argument("--out", required=True, help="the JSON to write (benchmarks/results/pointmaze-beyond-2/horizon/)")
    ap.add_argument("--row", default=None, help="a pipeline row name: print its ttgs table")
    a = ap.parse_args(argv)
    if a.pairs < 1:
        print("value_horizon: --pairs must be >= 1", file=sys.stderr)
        return 2
    try:
        doc = analyse(a.checkpoint, a.pairs)
    except (TttError, ValueError, OSError) as e:
        print(f"value_horizon: {e}", file=sys.stderr)
        return 2
    write_doc(a.out, dict(script="benchmarks/analyses/value_horizon.py", **doc))
    rho = ", ".join(f"{r:.2f}" for r in doc["spearman"])
    print(f"{doc['checkpoint']} ({doc['step']} updates, {doc['seeds']} seeds): H = {doc['horizon']:.1f} steps (per "
          f"seed {', '.join(f'{x:.1f}' for x in doc['per_seed'])}); the rule: tau {doc['tau']:g}, threshold "
          f"{doc['threshold']:g}. Oracle 0.95 quantile {doc['oracle_quantile']:.0f}; Spearman {rho}; pairs over the "
          f"threshold read within it: {doc['far_read_near']}")  # fmt: skip
    if a.row:
        print(f"# {a.row}: checkpoint {doc['checkpoint_sha256'][:12]}, H {doc['horizon']:.2f}")
        print(f"ttgs = {{ {TTGS}, tau = {doc['tau']:.1f}, threshold = {doc['threshold']:.1f} }}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
