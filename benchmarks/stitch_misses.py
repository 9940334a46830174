"""Why some antmaze stitch episodes miss their goal: re-run stitch episodes the way the generator does (start in
a random free cell, goal 4 BFS cells away, the expert on the BFS oracle direction + N(0, 0.2^2), 200 steps) and,
for each miss, say whether the ant turned over and how close it came to the goal.

    python benchmarks/stitch_misses.py --expert benchmarks/results/expert/ant-1m.pkl [--episodes 200]
        [--seed 10000] [--out benchmarks/results/expert/stitch_misses.json]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from ttt.data import generate as gen
from ttt.data.expert import NumpyExpert, load_actor
from ttt.data.specs import get_spec


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--expert", required=True)
    p.add_argument("--dataset", default="antmaze-medium-stitch-v0")
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--seed", type=int, default=10_000, help="Episode i uses seed SEED + i.")
    p.add_argument("--noise", type=float, default=0.2)
    p.add_argument("--out", default="benchmarks/results/expert/stitch_misses.json")
    args = p.parse_args()

    spec = get_spec(args.dataset)
    env = gen._make_env(spec)
    u = env.unwrapped
    policy = NumpyExpert(load_actor(args.expert)[0])
    free, _ = gen.maze_cells(u.maze_map)
    episodes = []
    for i in range(args.episodes):
        s = args.seed + i
        gen.seed_env(env, s)
        init_ij = free[np.random.randint(len(free))]
        cells = gen.cells_at_bfs_distance(u.maze_map, init_ij, 4)
        goal_ij = cells[np.random.randint(len(cells))] if cells else init_ij
        ob, _ = env.reset(seed=s, options=dict(task_info=dict(init_ij=init_ij, goal_ij=goal_ij)))
        first, closest, flipped, done = None, np.inf, False, False
        t = 0
        while not done:
            a = policy(np.concatenate([ob[2:], gen.oracle_direction(env)]))
            a = np.clip(a + np.random.normal(0.0, args.noise, a.shape), -1.0, 1.0)
            ob, _, terminated, truncated, info = env.step(a)
            t += 1
            done = terminated or truncated
            closest = min(closest, float(np.linalg.norm(u.get_xy() - u.cur_goal_xy)))
            first = t if info["success"] and first is None else first
            flipped |= bool(gen.upside_down(u.data.qpos))
        final = float(np.linalg.norm(u.get_xy() - u.cur_goal_xy))
        episodes.append(dict(seed=s, first_arrival=first, closest=closest, final=final, flipped=flipped))
    env.close()
    missed = [e for e in episodes if e["first_arrival"] is None]
    upright = [e for e in missed if not e["flipped"]]
    summary = dict(
        expert=args.expert,
        dataset=args.dataset,
        episodes=len(episodes),
        reached=len(episodes) - len(missed),
        first_arrival_median=float(np.median([e["first_arrival"] for e in episodes if e["first_arrival"]])),
        missed=len(missed),
        missed_turned_over=len(missed) - len(upright),
        missed_upright_closest=[min((e["closest"] for e in upright), default=None),
                                max((e["closest"] for e in upright), default=None)],
        missed_upright_final=[min((e["final"] for e in upright), default=None),
                              max((e["final"] for e in upright), default=None)],
    )  # fmt: skip
    print(json.dumps(summary, indent=1))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(dict(summary=summary, episodes=episodes), indent=1))
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
