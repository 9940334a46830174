"""Does a checkpoint's policy move towards a goal only a few steps away (TTGS hands it such subgoals)?

    python benchmarks/analyses/near_goal_actions.py CKPT_DIR [CKPT_DIR ...] [--pairs 20000]
        [--offsets 1,3,6,12,24,48,96,192] [--out benchmarks/results/pointmaze-beyond/near_goal_actions.json]

TTGS conditions the frozen policy on the furthest point of its plan within `threshold` steps (12 on giant stitch, 24
on giant navigate, 48 / 96 on large), so the policy meets goals far nearer than most it was trained towards
(GC-IQL's actor goals: a later state of the same episode, drawn uniformly, `ttt.data.sampler`). For each
checkpoint (every training seed; the local dataset must be the one it trained on, by content hash) this draws
`--pairs` dataset rows (generator seed 0) and, for each offset k, pairs each row with the row k steps later in its
own episode (rows without one are left out), and reports per offset, averaged over seeds: the norm of the policy's
deterministic action towards that goal (actions lie in [-1, 1] per axis), the share of those actions under 0.1, the
cosine between the action and the direction the data moved over those k steps, and the norm and cosine of the
data's own action at the row (what a moving agent does; its cosine near 1 at k = 1 checks the pairing). Nothing is
trained; one policy pass per seed and offset.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from ttt.checkpoint import dataset_hash, open_checkpoint
from ttt.errors import TttError

sys.path.insert(0, str(Path(__file__).parent))
from _maze import maze_tasks, write_doc  # noqa: E402

STILL = 0.1  # an action of norm under this barely moves a point maze agent


def offset_pairs(valid: np.ndarray, ep_end: np.ndarray, k: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (row, row + k) pairs among `rows` whose row is valid and whose episode holds a row k steps later (at most
    its final observation row `ep_end`)."""
    keep = valid[rows] & (rows + k <= ep_end[rows])
    i = rows[keep]
    return i, i + k


def action_stats(actions: np.ndarray, moved: np.ndarray) -> dict:
    """Per seed (axis 0) of (seeds, pairs, act) actions: mean norm, share under `STILL`, and mean cosine with the
    (pairs, act) displacement `moved` (pairs where either is zero count as cosine 0)."""
    norm = np.linalg.norm(actions, axis=-1)
    mnorm = np.linalg.norm(moved, axis=-1)
    cos = (actions * moved).sum(-1) / np.maximum(norm * mnorm, 1e-12)
    return dict(norm=norm.mean(-1), still=(norm < STILL).mean(-1), cosine=cos.mean(-1))


def analyse(ckpt_dir: str, pairs: int, offsets: list[int]) -> dict:
    ck = open_checkpoint(ckpt_dir)
    _, data, _, _ = maze_tasks(ck.dataset)
    digest = dataset_hash(data)
    ck.check_compatible(ck.dataset, ck.meta["obs_dim"], ck.meta["action_dim"], ckpt_dir, data_hash=digest)
    valid, ep_end = np.asarray(data.valid), np.asarray(data.ep_end)
    rows = np.random.default_rng(0).choice(np.flatnonzero(valid), size=pairs, replace=True)
    obs, acts = np.asarray(data.observations), np.asarray(data.actions)
    agents = ck.load().agent
    act = eqx.filter_jit(
        eqx.filter_vmap(lambda a, o, g: ck.backbone.act(a, o, g, jax.random.key(0), 0.0), in_axes=(0, None, None))
    )
    out = []
    for k in offsets:
        i, j = offset_pairs(valid, ep_end, k, rows)
        a = np.clip(np.asarray(act(agents, obs[i], obs[j])), -1.0, 1.0)  # (seeds, pairs, act)
        moved = obs[j, :2] - obs[i, :2]  # a point maze's observation is its xy
        s = {key: float(v.mean()) for key, v in action_stats(a, moved).items()}
        data = action_stats(acts[i][None], moved)  # the data's own action: the probe's check (cosine near 1 at k 1)
        out.append(dict(offset=k, pairs=int(len(i)), data_norm=float(data["norm"][0]),
                        data_cosine=float(data["cosine"][0]), **s))  # fmt: skip
    return dict(
        checkpoint=f"{ck.dataset}/{ck.path.name}", checkpoint_sha256=ck.digest, dataset_hash=digest,
        step=int(ck.meta["step"]), profile=ck.meta.get("profile"), seeds=ck.seeds, offsets=out,
    )  # fmt: skip


def markdown(docs: list[dict]) -> str:
    lines = [
        f"| checkpoint | goal k steps ahead | pairs | policy action norm | share under {STILL} | cosine with the "
        "data's way | data's action: norm, cosine |",
        "|---|---|---|---|---|---|---|",
    ]
    for d in docs:
        for o in d["offsets"]:
            lines.append(
                f"| {d['checkpoint']} ({d['step']} updates) | {o['offset']} | {o['pairs']} | {o['norm']:.2f} | "
                f"{o['still']:.2f} | {o['cosine']:.2f} | {o['data_norm']:.2f}, {o['data_cosine']:.2f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoints", nargs="+")
    ap.add_argument("--pairs", type=int, default=20_000)
    ap.add_argument("--offsets", default="1,3,6,12,24,48,96,192")
    ap.add_argument("--out", default="benchmarks/results/pointmaze-beyond/near_goal_actions.json")
    a = ap.parse_args(argv)
    try:
        offsets = [int(x) for x in a.offsets.split(",") if x]
    except ValueError:
        offsets = []
    if a.pairs < 1 or not offsets or min(offsets) < 1:
        print("near_goal_actions: --pairs must be >= 1 and --offsets positive integers (e.g. 1,12,48)", file=sys.stderr)
        return 2
    try:
        docs = [analyse(c, a.pairs, offsets) for c in a.checkpoints]
    except (TttError, ValueError, OSError) as e:
        print(f"near_goal_actions: {e}", file=sys.stderr)
        return 2
    write_doc(a.out, dict(script="benchmarks/analyses/near_goal_actions.py", still=STILL, rows=docs))
    print(markdown(docs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
