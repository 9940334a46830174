"""How far each fine-tuning update is from this CPU's matmul rate (issue 16: the floor the per-update targets meet).

    python benchmarks/update_flops.py [--speed benchmarks/results/speed/ttt_speed_idle.json]
        [--out benchmarks/results/speed/update_flops.json]

For each configuration of `benchmarks/ttt_speed.py`'s update part (GC-BC and GC-IQL cpu profile, GC-IQL paper
profile; random weights: the FLOPs do not depend on them) and the GC-BC value pass of 1M rows:
- FLOPs per update, as XLA counts them (`cost_analysis()` of a one-step `make_finetune`, compiled alone);
- this CPU's float32 matmul rate at the configuration's own hidden-layer shape, (batch x width) @ (width x width),
  best of 5 x 20 calls;
- the floor: FLOPs / rate, i.e. the time per update if every FLOP ran at that matmul rate;
- the measured time per update from `--speed` (ttt_speed.py's JSON, best "new" figure) and its share of the rate.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAV = "pointmaze-medium-navigate-v0"


def matmul_rate(rows: int, width: int) -> float:
    """GFLOP/s of a float32 (rows x width) @ (width x width) matmul on this CPU (best of 5 x 20 calls)."""
    import jax

    k1, k2 = jax.random.split(jax.random.key(0))
    x, w = jax.random.normal(k1, (rows, width)), jax.random.normal(k2, (width, width))
    f = jax.jit(lambda x, w: x @ w)
    f(x, w).block_until_ready()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(20):
            f(x, w).block_until_ready()
        best = min(best, (time.perf_counter() - t) / 20)
    return 2 * rows * width * width / best / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speed", type=Path, default=ROOT / "benchmarks/results/speed/ttt_speed_idle.json")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/speed/update_flops.json")
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp

    from ttt.data.files import load
    from ttt.data.specs import get_spec
    from ttt.episode import TTTConfig, make_round_fns
    from ttt.finetune import FinetuneConfig, make_finetune
    from ttt.presets import get_agent, make_configs
    from ttt.pretrain import init_state
    from ttt.select import SelectConfig

    measured = {}
    if args.speed.exists():
        for r in json.loads(args.speed.read_text())["results"]:
            key = "ms_per_step" if r["part"] == "update" else "s_per_episode" if r["part"] == "value" else None
            if key:
                measured[r["job"] or "value"] = min(x[key] for x in r["new"])
    data, spec = load(NAV), get_spec(NAV)
    rows = []
    for job, name, profile in [("gcbc-cpu", "gcbc", "cpu"), ("gciql-cpu", "gciql", "cpu"),
                               ("gciql-paper", "gciql", "paper")]:  # fmt: skip
        cfg, sampler = make_configs(name, spec, profile, {})
        backbone = get_agent(name).backbone
        agent = init_state(jax.random.key(0), backbone, data.obs_dim, data.action_dim, cfg).agent
        ft = jax.jit(make_finetune(backbone, cfg, sampler, FinetuneConfig(steps=1)))
        w = (jnp.arange(data.n_rows) % 100 < 3).astype(jnp.int32)
        cost = ft.lower(agent, None, jax.random.key(1), data, w, data.observations[5000]).compile().cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        flops = float(cost["flops"])
        width = max(cfg.actor_hidden_dims)
        rate = matmul_rate(sampler.batch_size, width)
        ms = measured.get(job)
        floor = 1e3 * flops / (rate * 1e9)
        rows.append(dict(job=job, flops_per_update=flops, batch=sampler.batch_size, width=width,
                         matmul_gflops=rate, floor_ms=floor, measured_ms=ms,
                         share_of_rate=None if ms is None else floor / ms))  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    # The value pass: GC-BC cpu, one goal over every row.
    cfg, sampler = make_configs("gcbc", spec, "cpu", {})
    backbone = get_agent("gcbc").backbone
    agent = init_state(jax.random.key(0), backbone, data.obs_dim, data.action_dim, cfg).agent
    ttt = TTTConfig(select=SelectConfig(mode="critic", rule="episodes"))
    prepare, _, _ = make_round_fns(backbone, cfg, sampler, spec, ttt)
    cost = jax.jit(prepare).lower(agent, data, data.observations[5000]).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    # lax.map is a while loop, whose body XLA counts once: scale by the number of chunks.
    chunks = -(-data.n_rows // ttt.value_chunk)
    flops = float(cost["flops"])
    rate = matmul_rate(ttt.value_chunk, max(cfg.value_hidden_dims))
    s = measured.get("value")
    rows.append(dict(job="value-gcbc-cpu", flops_counted_once=flops, chunks=chunks, chunk=ttt.value_chunk,
                     matmul_gflops=rate, measured_s=s))  # fmt: skip
    print(json.dumps(rows[-1]), flush=True)
    doc = {"rows": rows, "jax": jax.__version__, "date": time.strftime("%F"), "speed_file": str(args.speed)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
