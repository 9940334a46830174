"""How far each fine-tuning update is from this CPU's matmul rate (the floor the per-update targets meet).

    python benchmarks/speed/update_flops.py [--speed benchmarks/results/speed/ttt_speed_idle.json]
        [--out benchmarks/results/speed/update_flops.json] [--time STEPS] [--dir DIR]

With `--time STEPS` (what `benchmarks/gpu_queue.sh` runs on a GPU) the updates are also timed here, in this
process (random weights, a `make_finetune` scan of STEPS updates, best of 3 calls after one compiling call), the
device's peak is measured as the rate of one large float32 matmul (8192^3 on a GPU, 2048^3 on a CPU, JAX's default
precision), and each update's share of both rates is recorded; `--speed` is then not read.

For each configuration of `benchmarks/speed/ttt_speed.py`'s update part (GC-BC and GC-IQL cpu profile, GC-IQL paper
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

ROOT = Path(__file__).resolve().parents[2]
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


def peak_rate() -> tuple[float, int]:
    """GFLOP/s of one large float32 matmul (the device's attainable peak at JAX's default precision) and its size."""
    import jax

    n = 8192 if jax.default_backend() == "gpu" else 2048
    k1, k2 = jax.random.split(jax.random.key(0))
    a, b = jax.random.normal(k1, (n, n)), jax.random.normal(k2, (n, n))
    f = jax.jit(lambda a, b: a @ b)
    f(a, b).block_until_ready()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        f(a, b).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9, n


def time_update(ft, args, steps: int) -> float:
    """ms per update of the compiled `steps`-update scan `ft(*args)`: best of 3 calls after a compiling one."""
    import jax

    jax.block_until_ready(ft(*args))
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        jax.block_until_ready(ft(*args))
        best = min(best, time.perf_counter() - t)
    return 1e3 * best / steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speed", type=Path, default=ROOT / "benchmarks/results/speed/ttt_speed_idle.json")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/speed/update_flops.json")
    ap.add_argument("--time", type=int, default=0, metavar="STEPS",
                    help="time STEPS-update scans here (0: read --speed)")  # fmt: skip
    ap.add_argument("--dir", default=None, help="dataset directory (default: OGBench's)")
    ap.add_argument("--jobs", default="gcbc-cpu,gciql-cpu,gciql-paper,value", help="which updates (and the value pass)")
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp

    from ttt.checkpoint import init_state
    from ttt.data.files import load
    from ttt.data.specs import get_spec
    from ttt.episode import TTTConfig, make_round_fns
    from ttt.finetune import FinetuneConfig, make_finetune
    from ttt.presets import agent_backbone, make_configs
    from ttt.select import SelectConfig

    measured = {}
    if not args.time and args.speed.exists():
        for r in json.loads(args.speed.read_text())["results"]:
            key = "ms_per_step" if r["part"] == "update" else "s_per_episode" if r["part"] == "value" else None
            if key:
                measured[r["job"] or "value"] = min(x[key] for x in r["new"])
    data, spec = load(NAV, args.dir), get_spec(NAV)
    peak, peak_n = peak_rate() if args.time else (None, None)
    if peak:
        print(f"{jax.devices()[0].device_kind}: float32 {peak_n}^3 matmul {peak:.0f} GFLOP/s", flush=True)
    rows = []
    for job, name, profile in [("gcbc-cpu", "gcbc", "cpu"), ("gciql-cpu", "gciql", "cpu"),
                               ("gciql-paper", "gciql", "paper")]:  # fmt: skip
        if job not in args.jobs.split(","):
            continue
        cfg, sampler = make_configs(name, spec, profile, {})
        backbone = agent_backbone(name)
        agent = init_state(jax.random.key(0), backbone, data.obs_dim, data.action_dim, cfg).agent
        ft = jax.jit(make_finetune(backbone, cfg, sampler, FinetuneConfig(steps=1)))
        w = (jnp.arange(data.n_rows) % 100 < 3).astype(jnp.int32)
        goal = data.observations[5000 % data.n_rows]
        cost = ft.lower(agent, None, jax.random.key(1), data, w, goal).compile().cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        flops = float(cost["flops"])
        width = max(cfg.actor_hidden_dims)
        rate = matmul_rate(sampler.batch_size, width)
        ms = measured.get(job)
        if args.time:
            ftn = jax.jit(make_finetune(backbone, cfg, sampler, FinetuneConfig(steps=args.time)))
            ms = time_update(ftn, (agent, None, jax.random.key(1), data, w, data.observations[5 % data.n_rows]),
                             args.time)  # fmt: skip
        floor = 1e3 * flops / (rate * 1e9)
        rows.append(dict(job=job, flops_per_update=flops, batch=sampler.batch_size, width=width,
                         matmul_gflops=rate, floor_ms=floor, measured_ms=ms,
                         share_of_rate=None if ms is None else floor / ms))  # fmt: skip
        if peak:
            achieved = flops / (ms * 1e6)
            rows[-1].update(peak_gflops=peak, achieved_gflops=achieved, share_of_peak=achieved / peak)
        print(json.dumps(rows[-1]), flush=True)
    # The value pass: GC-BC cpu, one goal over every row.
    if "value" not in args.jobs.split(","):
        return write(args.out, rows, jax, data, peak, peak_n, args)
    cfg, sampler = make_configs("gcbc", spec, "cpu", {})
    backbone = agent_backbone("gcbc")
    agent = init_state(jax.random.key(0), backbone, data.obs_dim, data.action_dim, cfg).agent
    ttt = TTTConfig(select=SelectConfig(mode="critic", rule="episodes"), value_cap=None)  # the full pass
    prepare, _, _ = make_round_fns(backbone, cfg, sampler, spec, ttt)
    goal = data.observations[5000 % data.n_rows]
    f_prep = jax.jit(prepare)
    cost = f_prep.lower(agent, data, goal).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    # lax.map is a while loop, whose body XLA counts once: scale by the number of chunks.
    chunks = -(-data.n_rows // ttt.value_chunk)
    flops = float(cost["flops"])
    rate = matmul_rate(ttt.value_chunk, max(cfg.value_hidden_dims))
    s = measured.get("value")
    if args.time:
        s = time_update(f_prep, (agent, data, goal), 1) / 1e3  # seconds per pass
    rows.append(dict(job="value-gcbc-cpu", flops_counted_once=flops, chunks=chunks, chunk=ttt.value_chunk,
                     matmul_gflops=rate, measured_s=s))  # fmt: skip
    print(json.dumps(rows[-1]), flush=True)
    return write(args.out, rows, jax, data, peak, peak_n, args)


def write(out: Path, rows: list, jax, data, peak, peak_n, args) -> int:
    doc = {"rows": rows, "jax": jax.__version__, "date": time.strftime("%F"), "device": jax.devices()[0].device_kind,
           "n_rows": int(data.n_rows), "timed_here": bool(args.time), "peak_gflops": peak, "peak_matmul": peak_n,
           "speed_file": None if args.time else str(args.speed)}  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
