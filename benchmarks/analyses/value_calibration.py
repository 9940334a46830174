"""How far apart a checkpoint's value function thinks two maze states are, against the maze oracle.

    python benchmarks/analyses/value_calibration.py CKPT_DIR [CKPT_DIR ...] [--pairs 100000] [--threshold 48]
        [--out benchmarks/results/pointmaze-beyond/value_calibration.json] [--markdown]

TTGS turns values into steps (`ttt.graph.value_steps`: `log(1 + (1 - gamma) V) / log(gamma)`) and hands the policy
the final goal once that estimate is within `threshold` steps (48 published). For each checkpoint (every training
seed; the local dataset must be the one it trained on, by content hash) this draws `--pairs` random (state, goal)
pairs of dataset rows (generator seed 0, the same pairs for every checkpoint of a dataset), bins them by the
oracle's steps between them (`MazeOracle.steps`: full-speed steps along the maze's shortest path at cell resolution)
and reports per bin the median and 10th / 90th percentiles of the
value's steps over all seeds and pairs, and the share the value puts within `threshold`: where a pair far apart
reads as near, TTGS acts towards the goal itself. Also the Spearman rank correlation of value steps with oracle
steps per seed (does the value at least order the pairs). Nothing is trained; one value pass per seed.
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
from ttt.graph import value_steps

sys.path.insert(0, str(Path(__file__).parent))
from _maze import maze_tasks, write_doc  # noqa: E402

BINS = (0, 25, 50, 100, 200, 400, 800, np.inf)  # oracle steps; [lo, hi)


def pair_rows(n_rows: int, valid: np.ndarray, pairs: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`pairs` (state row, goal row) index pairs drawn uniformly from the valid rows."""
    rows = np.flatnonzero(valid)
    rng = np.random.default_rng(seed)
    return rows[rng.integers(0, len(rows), pairs)], rows[rng.integers(0, len(rows), pairs)]


def calibration(value_steps_: np.ndarray, oracle_steps: np.ndarray, threshold: float) -> list[dict]:
    """Per oracle-step bin: pairs, median / p10 / p90 of the value's steps (all seeds pooled), share within
    `threshold`. `value_steps_` is (seeds, pairs), `oracle_steps` (pairs,)."""
    out = []
    for lo, hi in zip(BINS[:-1], BINS[1:], strict=True):
        m = (oracle_steps >= lo) & (oracle_steps < hi)
        if not m.any():
            continue
        v = value_steps_[:, m].ravel()
        out.append(
            dict(
                oracle_lo=float(lo),
                oracle_hi=None if np.isinf(hi) else float(hi),
                pairs=int(m.sum()),
                median=float(np.median(v)),
                p10=float(np.percentile(v, 10)),
                p90=float(np.percentile(v, 90)),
                within_threshold=float(np.mean(v <= threshold)),
            )
        )
    return out


def analyse(ckpt_dir: str, pairs: int, threshold: float) -> dict:
    ck = open_checkpoint(ckpt_dir)
    _, data, oracle, _ = maze_tasks(ck.dataset)
    digest = dataset_hash(data)
    ck.check_compatible(ck.dataset, ck.meta["obs_dim"], ck.meta["action_dim"], ckpt_dir, data_hash=digest)
    i, j = pair_rows(data.n_rows, np.asarray(data.valid), pairs)
    obs, goals = data.observations[i], data.observations[j]
    o_steps = np.asarray(jax.vmap(lambda x, g: oracle.steps(x[None], g)[0])(data.goals[i], data.goals[j]))
    gamma = float(getattr(ck.cfg, "discount", 0.99))
    agents = ck.load().agent
    per_seed = eqx.filter_jit(eqx.filter_vmap(lambda a: value_steps(ck.backbone.value(a, obs, goals), gamma)))
    v_steps = np.asarray(per_seed(agents))
    far = o_steps > threshold
    return dict(
        checkpoint=f"{ck.dataset}/{ck.path.name}", checkpoint_sha256=ck.digest, dataset_hash=digest,
        step=int(ck.meta["step"]),
        profile=ck.meta.get("profile"), seeds=ck.seeds, gamma=gamma, threshold=threshold, pairs=pairs,
        spearman=[float(spearmanr(v, o_steps).statistic) for v in v_steps],
        far_read_near=float(np.mean(v_steps[:, far] <= threshold)) if far.any() else None,
        bins=calibration(v_steps, o_steps, threshold),
    )  # fmt: skip


def markdown(docs: list[dict]) -> str:
    lines = [
        "| checkpoint | oracle steps | pairs | value steps: median (p10-p90) | within threshold |",
        "|---|---|---|---|---|",
    ]
    for d in docs:
        for b in d["bins"]:
            hi = "" if b["oracle_hi"] is None else f"{b['oracle_hi']:.0f}"
            lines.append(
                f"| {d['checkpoint']} ({d['step']} updates) | {b['oracle_lo']:.0f}-{hi} | {b['pairs']} | "
                f"{b['median']:.0f} ({b['p10']:.0f}-{b['p90']:.0f}) | {b['within_threshold']:.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoints", nargs="+")
    ap.add_argument("--pairs", type=int, default=100_000)
    ap.add_argument("--threshold", type=float, default=48.0)
    ap.add_argument("--out", default="benchmarks/results/pointmaze-beyond/value_calibration.json")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    docs = [analyse(c, a.pairs, a.threshold) for c in a.checkpoints]
    bins = [None if np.isinf(b) else float(b) for b in BINS]
    write_doc(a.out, dict(script="benchmarks/analyses/value_calibration.py", bins=bins, rows=docs))
    for d in docs:
        rho = ", ".join(f"{r:.2f}" for r in d["spearman"])
        print(f"{d['checkpoint']}: Spearman per seed {rho}; pairs over {d['threshold']:.0f} oracle steps read within "
              f"it: {d['far_read_near']:.2f}")  # fmt: skip
    if a.markdown:
        print(markdown(docs))


if __name__ == "__main__":
    main()
