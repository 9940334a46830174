"""The once-per-episode value pass (`ttt.episode.dataset_values`) at several chunk sizes, side by side in one process.

`TTTConfig.value_chunk` (default 4096) sets how many rows each step of the pass's `lax.map` evaluates; it changes
memory and speed, not the values (each row's value is computed by the same per-row arithmetic). This script times
the full pass over a dataset for each chunk size, interleaved (round robin over `--repeats` rounds, so load on a
shared machine hits every size alike), checks that every size gives the same values bit for bit as the default, and
reports seconds per pass, the ratio to the default and the FLOP rate (XLA's count of one chunk's FLOPs, scaled).

    python benchmarks/speed/value_chunk.py --dataset pointmaze-medium-navigate-v0 --agent gcbc \
        --chunks 512,1024,2048,4096,8192,16384 --out benchmarks/results/speed/value_chunk.json

The agent is freshly initialised (timing does not depend on the weights) with the cpu profile's networks.

`--ablate` also times the default chunk's pass with parts of the network taken out (GELU made the identity, then
LayerNorm too: not the same values, only the same matmuls), beside the floor (XLA's FLOP count of the whole pass at
the float32 matmul rate measured at the pass's shape): where the time above the floor goes.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ttt.data.files import load
from ttt.data.specs import get_spec
from ttt.episode import dataset_values
from ttt.presets import agent_backbone, make_configs
from ttt.storage import atomic_write_text, dumps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="pointmaze-medium-navigate-v0")
    ap.add_argument("--agent", default="gcbc", help="an agent preset with a value function (gcbc: its critic)")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--chunks", default="1024,2048,4096,8192,16384")
    ap.add_argument("--default", type=int, default=4096, help="the chunk the others are compared with")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ablate", action="store_true", help="time the pass without GELU, then without LayerNorm too")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    spec = get_spec(a.dataset)
    data = load(a.dataset)
    cfg, _ = make_configs(a.agent, spec, a.profile)
    backbone = agent_backbone(a.agent)
    agent = backbone.init(jax.random.key(0), data.obs_dim, data.action_dim, cfg)
    obs = data.observations
    goal = obs[obs.shape[0] // 3]
    chunks = sorted({int(c) for c in a.chunks.split(",")} | {a.default})

    fns = {c: jax.jit(lambda ag, o, g, c=c: dataset_values(backbone.value, ag, o, g, c)) for c in chunks}
    values = {c: np.asarray(fns[c](agent, obs, goal)) for c in chunks}  # compile + the values to compare
    one = jax.jit(lambda ag, o, g: backbone.value(ag, o, jnp.broadcast_to(g, o.shape)))
    cost = one.lower(agent, obs[: a.default], goal).compile().cost_analysis()
    flops_per_row = float((cost[0] if isinstance(cost, list) else cost)["flops"]) / a.default

    times: dict[int, list[float]] = {c: [] for c in chunks}
    for _ in range(a.repeats):
        for c in chunks:
            t0 = time.perf_counter()
            fns[c](agent, obs, goal).block_until_ready()
            times[c].append(time.perf_counter() - t0)

    base = min(times[a.default])
    rows = []
    for c in chunks:
        best = min(times[c])
        rows.append(dict(chunk=c, s_min=best, s_all=times[c], vs_default=base / best,
                         gflops=flops_per_row * obs.shape[0] / best / 1e9,
                         identical_to_default=bool(np.array_equal(values[c], values[a.default])),
                         max_abs_diff=float(np.max(np.abs(values[c] - values[a.default]))),
                         rows_differing=int(np.sum(values[c] != values[a.default]))))  # fmt: skip
        print(f"chunk {c:6d}: {best:.3f} s per pass (min of {a.repeats}), {base / best:.2f}x the default's speed, "
              f"{rows[-1]['gflops']:.1f} GFLOP/s, values identical to chunk {a.default}: "
              f"{rows[-1]['identical_to_default']} ({rows[-1]['rows_differing']} rows differ, at most by "
              f"{rows[-1]['max_abs_diff']:.2g})")  # fmt: skip
    ablation = _ablate(backbone, agent, obs, goal, a.default, a.repeats, flops_per_row, cfg) if a.ablate else None
    doc = dict(ablation=ablation, dataset=a.dataset, agent=a.agent, profile=a.profile, rows_in_pass=int(obs.shape[0]),
               flops_per_row=flops_per_row, default=a.default, repeats=a.repeats, results=rows,
               device=str(jax.devices()[0].device_kind), date=time.strftime("%Y-%m-%d %H:%M"))  # fmt: skip
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(a.out), dumps(doc, indent=1))


def _ablate(backbone, agent, obs, goal, chunk: int, repeats: int, flops_per_row: float, cfg) -> dict:
    """The full pass, then without GELU, then without GELU and LayerNorm (same matmuls), interleaved; the floor."""
    import ttt.nets as nets

    gelu, norm = jax.nn.gelu, nets.LayerNorm.__call__
    width = max(cfg.value_hidden_dims)
    x, w = jnp.ones((chunk, width)), jnp.ones((width, width))
    mm = jax.jit(lambda x, w: x @ w)
    mm(x, w).block_until_ready()
    t0 = time.perf_counter()
    for _ in range(20):
        mm(x, w).block_until_ready()
    rate = 2 * chunk * width * width * 20 / (time.perf_counter() - t0)

    def build(no_gelu: bool, no_norm: bool):
        jax.nn.gelu = (lambda v, approximate=True: v) if no_gelu else gelu
        nets.LayerNorm.__call__ = (lambda self, v: v) if no_norm else norm
        try:  # traced (and compiled) now, with the parts patched out
            f = jax.jit(lambda ag, o, g: dataset_values(backbone.value, ag, o, g, chunk))
            f(agent, obs, goal).block_until_ready()
            return f
        finally:
            jax.nn.gelu, nets.LayerNorm.__call__ = gelu, norm

    fns = {"full": build(False, False), "no GELU": build(True, False), "no GELU, no LayerNorm": build(True, True)}
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f(agent, obs, goal).block_until_ready()
            times[k].append(time.perf_counter() - t0)
    floor = flops_per_row * obs.shape[0] / rate
    out = dict(matmul_gflops=rate / 1e9, floor_s=floor, **{k: min(v) for k, v in times.items()})
    print(f"floor {floor:.2f} s (matmul {rate / 1e9:.0f} GFLOP/s at ({chunk}, {width}) x ({width}, {width})); "
          + "; ".join(f"{k}: {min(v):.2f} s ({min(v) / floor:.2f}x the floor)" for k, v in times.items()))
    return out


if __name__ == "__main__":
    main()
