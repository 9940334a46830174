"""One paper-profile GC-IQL episode with a critic on the full navigate dataset, measured end to end.

Usage:
    python benchmarks/speed/paper_episode.py [--dataset pointmaze-medium-navigate-v0] [--repeats 1]
        [--out benchmarks/results/speed/paper_episode.json] [--batch B] [--dir DIR] [--N 100] [--K 100]
        [--max-steps 1000] [--bucket 1]

The agent is OGBench's GC-IQL at the paper profile (512x3 MLPs, fine-tuning batch 1024) with random weights (no
paper-profile checkpoint exists on this CPU): it never reaches the goal, so the episode runs all 1000 steps, i.e.
10 rounds of selection (rule 'episodes') + N = 100 updates each, K = 100: the most an episode can cost. The
episode runs through `ttt.evaluate` (compiled driver, one episode); the first call compiles and runs, the next
`--repeats` calls reuse the program and are the figure. Pieces are timed on their own in the same process: the
value pass (`prepare`, once per episode) and one update (the N-step fine-tuning scan / N).

`--batch B` (a multiple of 5; `benchmarks/gpu_queue.sh` runs it on a GPU): each call runs B episodes (tasks 1-5 x
B / 5 episodes) as ONE program (one compiled batch), and the figure is the call's wall time amortised over its B
episodes. `--bucket G` sets how many of a
batch's live episodes adapt together each round (default 1, `ttt`'s default: one at a time; 0: all at once, which
on a GPU fills the device with B episodes' updates where one paper-profile update alone uses about 6% of it).
`--N`, `--K`, `--max-steps` and `--dir` shrink it for a dry run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="pointmaze-medium-navigate-v0")
    ap.add_argument("--repeats", type=int, default=1, help="timed episodes after the compiling one")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/speed/paper_episode.json")
    ap.add_argument("--batch", type=int, default=1, help="episodes per program call (1, or a multiple of 5)")
    ap.add_argument("--dir", default=None, help="dataset directory (default: OGBench's)")
    ap.add_argument("--N", type=int, default=100)
    ap.add_argument("--K", type=int, default=100)
    ap.add_argument("--max-steps", type=int, default=1000)
    ap.add_argument("--profile", default="paper", help="paper (the figure), or cpu (a dry run's small networks)")
    ap.add_argument("--bucket", type=int, default=1,
                    help="episodes adapted together each round (TTTConfig.bucket; 0: the whole batch at once)")
    args = ap.parse_args()
    if args.batch != 1 and args.batch % 5:
        ap.error(f"--batch must be 1 or a multiple of 5 (tasks 1-5 x episodes), got {args.batch}")
    if args.bucket < 0:
        ap.error(f"--bucket must be >= 1, or 0 for the whole batch, got {args.bucket}")

    import jax
    import jax.numpy as jnp

    from ttt.checkpoint import init_state
    from ttt.data.files import load
    from ttt.data.specs import get_spec
    from ttt.episode import make_round_fns
    from ttt.evaluation import evaluate
    from ttt.finetune import FinetuneConfig, make_finetune
    from ttt.presets import agent_backbone, make_configs
    from ttt.setups import make_setup

    spec = get_spec(args.dataset)
    data = load(args.dataset, args.dir)
    cfg, sampler = make_configs("gciql", spec, args.profile, {})
    backbone = agent_backbone("gciql")
    agent = init_state(jax.random.key(0), backbone, data.obs_dim, data.action_dim, cfg).agent
    agents = jax.tree.map(lambda x: x[None] if eqx_is_array(x) else x, agent)  # one seed
    N, K = args.N, args.K
    bucket = args.bucket or None  # 0 -> None: every live episode of the batch adapts in one vmapped call
    # max_steps 1000: OGBench pointmaze-medium's length
    setup = make_setup("ttt", backbone, cfg, sampler, spec, args.max_steps, K=K, N=N, rule="episodes", bucket=bucket)
    ttt = setup.ttt
    B = args.batch
    kw = dict(episodes=1, tasks=(1,)) if B == 1 else dict(episodes=B // 5, tasks=(1, 2, 3, 4, 5), batch_size=B)
    print(f"{args.dataset}: {data.n_rows} rows; GC-IQL {args.profile} profile, batch {sampler.batch_size}; "
          f"N {N}, K {K}", flush=True)  # fmt: skip

    # The pieces, on their own.
    prepare, _, _ = make_round_fns(backbone, cfg, sampler, spec, dataclasses.replace(ttt, value_cap=None))  # full
    f_prep = jax.jit(prepare)
    goal = data.observations[5000 % data.n_rows]
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
    res = evaluate(setup, agents, data, **kw)
    first = time.perf_counter() - t0
    print(f"first episode (compile + run) {first:.1f} s, steps {int(res.steps.reshape(-1)[0])}", flush=True)
    walls = []
    for i in range(args.repeats):
        t0 = time.perf_counter()
        res = evaluate(setup, agents, data, **kw, seed=i + 1)
        walls.append(time.perf_counter() - t0)
        print(f"call {i + 1}: {walls[-1]:.1f} s for {B} episode(s), {walls[-1] / B:.2f} s per episode, steps "
              f"{int(res.steps.reshape(-1)[0])}", flush=True)  # fmt: skip
    rounds = int(res.rounds["active"].sum()) if "active" in res.rounds else None
    doc = {
        "dataset": args.dataset, "rows": int(data.n_rows), "profile": args.profile, "agent": "gciql (random weights)",
        "N": N, "K": K, "ft_batch": sampler.batch_size, "rule": "episodes", "bucket": bucket, "first_call_s": first,
        "batch": B, "episode_s": min(walls) / B if walls else None, "call_walls_s": walls, "value_pass_s": value_s,
        "update_ms": update_ms, "rounds_run": rounds, "steps": int(res.steps.reshape(-1)[0]),
        "max_steps": args.max_steps,
        "jax": jax.__version__, "machine": f"{platform.machine()}, {os.cpu_count()} cores", "date": time.strftime("%F"),
        "device": jax.devices()[0].device_kind,
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
