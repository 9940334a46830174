"""What memoising OGBench's BFS oracle (`ttt.envs.gym.oracle_subgoal`) saves in data generation, and that it changes
no array.

    python benchmarks/speed/oracle_memo.py [--dataset pointmaze-large-navigate-v0] [--episodes 4] [--repeats 3]

Generates the same `--episodes` episodes (`ttt.data.generate.generate_episodes`, seed 0, split 0) with the memo and
with OGBench's oracle called at every step (the memo bypassed), alternating the two `--repeats` times in one process
so that both see the same machine load, after one untimed warm-up episode; prints the median seconds per episode of
each, their ratio, and whether the arrays are equal bit for bit. One process, one core's worth of Python: the figure
is a ratio, not an absolute speed.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from unittest import mock

import numpy as np

from ttt.data import generate as gen
from ttt.data.specs import get_spec
from ttt.envs import gym as gym_envs


def _unmemoised(env) -> np.ndarray:
    u = env.unwrapped
    return np.array(u.get_oracle_subgoal(u.get_xy(), u.cur_goal_xy)[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="pointmaze-large-navigate-v0")
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    spec = get_spec(args.dataset)
    eps = range(args.episodes)
    times: dict[str, list[float]] = {"memo": [], "every step": []}
    out = {}
    gen.generate_episodes(spec, 0, 0, range(1))  # warm-up (imports, MuJoCo model load): not charged to either arm
    for _ in range(args.repeats):
        for name in times:
            memo_off = name == "every step"
            with mock.patch.object(gym_envs, "oracle_subgoal", _unmemoised) if memo_off else contextlib.nullcontext():
                t = time.perf_counter()
                out[name] = gen.generate_episodes(spec, 0, 0, eps)
                times[name].append((time.perf_counter() - t) / args.episodes)
    equal = all(np.array_equal(out["memo"][k], out["every step"][k]) for k in out["memo"])
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.dataset}: {args.episodes} episodes x {args.repeats} alternating repeats, median s / episode")
    for k, v in med.items():
        print(f"  oracle {k:10s} {v:.3f}")
    print(f"  ratio (every step / memo): {med['every step'] / med['memo']:.2f}x; arrays equal bit for bit: {equal}")


if __name__ == "__main__":
    main()
