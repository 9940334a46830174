"""Pre-training throughput per backbone: compiled, seed-vmapped chunks on one dataset, side by side in one run.

Usage:
    python benchmarks/speed/pretrain_speed.py [--dataset pointmaze-medium-navigate-v0] [--profile cpu] [--seeds 3]
        [--chunk 200] [--repeats 3] [--agents gcbc,gciql,gciql-awr,saw,qrl] [--dir DIR] [--json OUT]

For each agent: compile time of one chunk, then `repeats` timed chunks; reports updates/s (one update trains
every seed) and seed-updates/s, median over repeats. Uses the real dataset when present (else a synthetic
dataset of the same observation size, said in the output).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ttt.checkpoint import init_state
from ttt.data.dataset import Dataset
from ttt.data.specs import get_spec
from ttt.errors import TttError
from ttt.presets import AGENTS, agent_backbone, get_profile, make_configs
from ttt.pretrain import make_chunk


def synthetic(spec, episodes=200):
    rng = np.random.default_rng(0)
    rows = episodes * spec.episode_rows
    obs = rng.normal(size=(rows, spec.ob_dim)).astype(np.float32)
    act = rng.uniform(-1, 1, size=(rows, spec.action_dim)).astype(np.float32)
    term = np.zeros(rows, bool)
    term[spec.episode_rows - 1 :: spec.episode_rows] = True
    return Dataset.from_arrays(obs, act, term, goal_fn=spec.goal_coords)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="pointmaze-medium-navigate-v0")
    p.add_argument("--profile", default="cpu")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--chunk", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--agents", default=",".join(AGENTS))
    p.add_argument("--dir", default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args()

    spec = get_spec(args.dataset)
    try:
        from ttt.data.files import load

        data, source = load(args.dataset, args.dir), "generated dataset"
    except TttError:
        data, source = synthetic(spec), "synthetic stand-in (dataset not generated)"
    prof = get_profile(args.profile)
    print(f"# pretrain speed: {args.dataset} ({data.n_rows} rows, {source}), profile {args.profile} "
          f"({prof.description}), {args.seeds} seeds, chunk {args.chunk}, device {jax.devices()[0].device_kind}, "
          f"{platform.processor() or platform.machine()}")
    print("| agent | compile s | updates/s | seed-updates/s | ms/update |")
    print("|---|---|---|---|---|")
    rows = []
    for agent in args.agents.split(","):
        backbone = agent_backbone(agent)
        cfg, sampler = make_configs(agent, spec, args.profile)
        keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(args.seeds))
        init = eqx.filter_vmap(lambda k, b=backbone, c=cfg: init_state(k, b, data.obs_dim, data.action_dim, c))
        states = init(keys)
        chunk = make_chunk(backbone, cfg, sampler, args.chunk)
        t0 = time.perf_counter()
        states, summary = chunk(states, keys, data)
        jax.block_until_ready(summary)
        compile_s = time.perf_counter() - t0
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            states, summary = chunk(states, keys, data)
            jax.block_until_ready(summary)
            times.append(time.perf_counter() - t0)
        dt = statistics.median(times)
        ups = args.chunk / dt
        row = dict(agent=agent, compile_s=compile_s, updates_per_s=ups, seed_updates_per_s=ups * args.seeds,
                   ms_per_update=1000 / ups, seeds=args.seeds, profile=args.profile, dataset=args.dataset)
        rows.append(row)
        print(f"| {agent} | {compile_s:.1f} | {ups:.1f} | {ups * args.seeds:.1f} | {1000 / ups:.1f} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
