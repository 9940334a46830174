"""One paper-profile GC-IQL episode with a critic on the full navigate dataset, measured end to end (issue 16).

Usage:
    python benchmarks/paper_episode.py [--dataset pointmaze-medium-navigate-v0] [--repeats 1]
        [--out benchmarks/results/speed/paper_episode.json]

The agent is OGBench's GC-IQL at the paper profile (512x3 MLPs, fine-tuning batch 1024) with random weights (no
paper-profile checkpoint exists on this CPU): it never reaches the goal, so the episode runs all 1000 steps, i.e.
10 rounds of selection (rule 'episodes') + N = 100 updates each, K = 100: the most an episode can cost. The
episode runs through `ttt.evaluate` (compiled driver, one episode); the first call compiles and runs, the next
`--repeats` calls reuse the program and are the figure. Pieces are timed on their own in the same process: the
value pass (`prepare`, once per episode) and one update (the N-step fine-tuning scan / N).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="pointmaze-medium-navigate-v0")
    ap.add_argument("--repeats", type=int, default=1, help="timed episodes after the compiling one")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/speed/paper_episode.json")
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp

    from ttt.data.files import load
    from ttt.data.specs import get_spec
    from ttt.episode import TTTConfig, make_round_fns
    from ttt.evaluate import EvalSetup, evaluate
    from ttt.finetune import FinetuneConfig, make_finetune
    from ttt.presets import get_agent, make_configs
    from ttt.pretrain import init_state
    from ttt.select import SelectConfig

    spec = get_spec(args.dataset)
    data = load(args.dataset)
    cfg, sampler = make_configs("gciql", spec, "paper", {})
    backbone = get_agent("gciql").backbone
    agent = init_state(jax.random.key(0), backbone, data.obs_dim, data.action_dim, cfg).agent
    agents = jax.tree.map(lambda x: x[None] if eqx_is_array(x) else x, agent)  # one seed
    N, K = 100, 100
    ttt = TTTConfig(K=K, select=SelectConfig(mode="critic", rule="episodes"), finetune=FinetuneConfig(steps=N))
    setup = EvalSetup(backbone, cfg, sampler, spec, ttt, 1000)  # OGBench pointmaze-medium evaluation length
    print(f"{args.dataset}: {data.n_rows} rows; GC-IQL paper profile, batch {sampler.batch_size}; N {N}, K {K}",
          flush=True)  # fmt: skip

    # The pieces, on their own.
    prepare, _, _ = make_round_fns(backbone, cfg, sampler, spec, ttt)
    f_prep = jax.jit(prepare)
    goal = data.observations[5000]
    jax.block_until_ready(f_prep(agent, data, goal))
    t0 = time.perf_counter()
    jax.block_until_ready(f_prep(agent, data, goal))
    value_s = time.perf_counter() - t0
    ft = jax.jit(make_finetune(backbone, cfg, sampler, FinetuneConfig(steps=N)))
    w = (jnp.arange(data.n_rows) % 100 < 3).astype(jnp.int32)
    jax.block_until_ready(ft(agent, None, jax.random.key(1), data, w, goal))
    t0 = time.perf_counter()
    jax.block_until_ready(ft(agent, None, jax.random.key(1), data, w, goal))
    update_ms = 1e3 * (time.perf_counter() - t0) / N
    print(f"value pass {value_s:.1f} s; update {update_ms:.1f} ms", flush=True)

    t0 = time.perf_counter()
    res = evaluate(setup, agents, data, episodes=1, tasks=(1,))
    first = time.perf_counter() - t0
    print(f"first episode (compile + run) {first:.1f} s, steps {int(res.steps.reshape(-1)[0])}", flush=True)
    walls = []
    for i in range(args.repeats):
        t0 = time.perf_counter()
        res = evaluate(setup, agents, data, episodes=1, tasks=(1,), seed=i + 1)
        walls.append(time.perf_counter() - t0)
        print(f"episode {i + 1}: {walls[-1]:.1f} s, steps {int(res.steps.reshape(-1)[0])}", flush=True)
    rounds = int(res.rounds["active"].sum()) if "active" in res.rounds else None
    doc = {
        "dataset": args.dataset, "rows": int(data.n_rows), "profile": "paper", "agent": "gciql (random weights)",
        "N": N, "K": K, "batch": sampler.batch_size, "rule": "episodes", "first_call_s": first,
        "episode_s": min(walls) if walls else None, "episode_walls_s": walls, "value_pass_s": value_s,
        "update_ms": update_ms, "rounds_run": rounds, "steps": int(res.steps.reshape(-1)[0]),
        "jax": jax.__version__, "machine": f"{platform.machine()}, {os.cpu_count()} cores", "date": time.strftime("%F"),
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(args.out)
    print(json.dumps(doc))
    return 0


def eqx_is_array(x) -> bool:
    import equinox as eqx

    return eqx.is_array(x)


if __name__ == "__main__":
    raise SystemExit(main())
