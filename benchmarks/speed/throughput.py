"""Episode throughput: the compiled, vmapped evaluation against host drivers on the same checkpoint, settings and
episodes, in one run.

Usage:
    python benchmarks/speed/throughput.py [--ckpt runs/base/cpu/pointmaze-medium-navigate-v0/gcbc]
        [--variants base,ttt-mc,ttt]
        [--batches base:1,5,25,100,256;ttt-mc:1,5,25,100;ttt:1,5,25] [--host 25] [--paper base:5,ttt-mc:2,ttt:1]
        [--K 100] [--N 100] [--lr 3e-4] [--out benchmarks/results/speed/throughput.json]

Per variant:
- compiled: one program call on a batch of B (seed, task, episode) elements, for each B; called twice, so the
  first call's extra time is the compile time and the second call's time gives episodes/s and env steps/s.
- host (lockstep): the host driver (`evaluate.run_host`), OGBench's gymnasium envs stepped from Python in lockstep
  over the same first `--host` elements, with the same jitted batch round and action functions; run twice, the
  first run's extra time being compilation.
- paper-style loop (`_common.PaperLoop`): one episode at a time, a jitted action call per step, N separate jitted
  update calls per round from Python; its jitted pieces are warmed up first, so its rate excludes compilation.
Effective control frequency = environment steps per second (all episodes of the batch together), and per episode.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import CKPT, PaperLoop, episode_inputs, machine, open_run, seed0, variant_setup  # noqa: E402

from ttt.evaluation import Elements, Shared, make_compiled, make_host_fns, run_host  # noqa: E402


def compiled(setup, agents, data, env, eb, n_seeds):
    program = make_compiled(setup)
    args = (Shared(agents, None, env, data), Elements(jnp.asarray(eb.seed_idx), eb.reset_keys, eb.ttt_keys,
                                                      jnp.asarray(eb.task)))  # fmt: skip
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        out = jax.block_until_ready(program(*args))
        times.append(time.perf_counter() - t0)
    steps = int(np.asarray(out.steps).sum())
    B = len(eb)
    return dict(batch=B, compile_s=times[0] - times[1], run_s=times[1], episodes_per_s=B / times[1],
                env_steps_per_s=steps / times[1], env_steps_per_s_per_episode=steps / times[1] / B,
                success=float(np.asarray(out.success).mean()), env_steps=steps)  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", default=CKPT)
    ap.add_argument("--variants", default="base,ttt-mc,ttt")
    ap.add_argument("--batches", default="base:1,5,25,100,256;ttt-mc:1,5,25,100;ttt:1,5,25")
    ap.add_argument("--host", type=int, default=25)
    ap.add_argument("--paper", default="base:5,ttt-mc:2,ttt:1")
    ap.add_argument("--K", type=int, default=100)
    ap.add_argument("--N", type=int, default=100)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/speed/throughput.json"))
    args = ap.parse_args()
    from ttt.envs import make_env as make_jax_env

    ck, states, data = open_run(args.ckpt)
    n_seeds = ck.seeds
    batches = {k: [int(b) for b in v.split(",")] for k, v in (x.split(":") for x in args.batches.split(";"))}
    n_paper = {k: int(v) for k, v in (x.split(":") for x in args.paper.split(","))}
    rows = []
    for variant in args.variants.split(","):
        setup = variant_setup(ck, variant, K=args.K, N=args.N, lr=args.lr)
        env = make_jax_env(setup.spec.env_id)
        row = dict(variant=variant, compiled=[])
        for B in batches.get(variant, []):
            eb, _, _ = episode_inputs(setup, 0, n_seeds, B)
            r = compiled(setup, states.agent, data, env, eb, n_seeds)
            row["compiled"].append(r)
            print(variant, "compiled", json.dumps(r), flush=True)
        if args.host:
            eb, _, _ = episode_inputs(setup, 0, n_seeds, args.host)
            fns = make_host_fns(setup)
            times = []
            for _ in range(2):  # the first run compiles the jitted batch functions
                t0 = time.perf_counter()
                out = run_host(setup, states.agent, None, data, eb, seed=0, fns=fns)
                times.append(time.perf_counter() - t0)
            n, steps = len(eb), int(out["steps"].sum())
            row["host_lockstep"] = dict(batch=n, compile_s=times[0] - times[1], run_s=times[1],
                                        episodes_per_s=n / times[1], env_steps_per_s=steps / times[1],
                                        success=float(out["success"].mean()))  # fmt: skip
            print(variant, "host", json.dumps(row["host_lockstep"]), flush=True)
        if n_paper.get(variant):
            loop = PaperLoop(setup)
            eb, starts, goals = episode_inputs(setup, 0, n_seeds, n_paper[variant])
            t0 = time.perf_counter()
            warm = loop.episode(seed0(states.agent), data, (starts[0], goals[0]), eb.reset_keys[0], eb.ttt_keys[0])
            warm_s = time.perf_counter() - t0  # first episode: compiles the jitted pieces
            eps = []
            for i in range(n_paper[variant]):
                seed = int(eb.seed_idx[i])
                agent = jax.tree.map(lambda x, s=seed: x[s] if isinstance(x, jax.Array) else x, states.agent)
                eps.append(loop.episode(agent, data, (starts[i], goals[i]), eb.reset_keys[i], eb.ttt_keys[i]))
            wall = sum(e["wall_s"] for e in eps)
            steps = sum(e["steps"] for e in eps)
            row["paper_loop"] = dict(episodes=len(eps), wall_s=wall, episodes_per_s=len(eps) / wall,
                                     env_steps_per_s=steps / wall, first_episode_s=warm_s,
                                     warm_episode_s=warm["wall_s"], success=float(np.mean([e["success"] for e in eps])),
                                     per_episode=eps)  # fmt: skip
            print(variant, "paper", json.dumps({k: v for k, v in row["paper_loop"].items() if k != "per_episode"}),
                  flush=True)  # fmt: skip
        at = next((c for c in row["compiled"] if c["batch"] == args.host), None)
        if at:
            for k in ("host_lockstep", "paper_loop"):
                if k in row:
                    row[f"ratio_vs_{k}"] = at["episodes_per_s"] / row[k]["episodes_per_s"]
            print(variant, {k: round(v, 2) for k, v in row.items() if k.startswith("ratio")}, flush=True)
        rows.append(row)
    doc = dict(checkpoint=args.ckpt, agent=ck.agent_name, dataset=ck.dataset, profile=ck.meta.get("profile"),
               K=args.K, N=args.N, lr=args.lr, machine=machine(), command="python " + " ".join(sys.argv),
               rows=rows)  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
