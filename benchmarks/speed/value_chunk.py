"""The once-per-episode value pass (`ttt.episode.dataset_values`) at several chunk sizes, side by side in one process.

`TTTConfig.value_chunk` (default 4096) sets how many rows each step of the pass's `lax.map` evaluates; it changes
memory and speed, not the values (each row's value is computed by the same per-row arithmetic). This script times
the full pass over a dataset for each chunk size, interleaved (round robin over `--repeats` rounds, so load on a
shared machine hits every size alike), checks that every size gives the same values bit for bit as the default, and
reports seconds per pass, the ratio to the default and the FLOP rate (XLA's count of one chunk's FLOPs, scaled).

    python benchmarks/speed/value_chunk.py --dataset pointmaze-medium-navigate-v0 --agent gcbc \
        --chunks 512,1024,2048,4096,8192,16384 --out benchmarks/results/speed/value_chunk.json

The agent is freshly initialised (timing does not depend on the weights) with the cpu profile's networks.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ttt.agents import get_backbone
from ttt.data.files import load
from ttt.data.specs import get_spec
from ttt.episode import dataset_values
from ttt.presets import get_agent, make_configs
from ttt.storage import atomic_write_text, dumps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="pointmaze-medium-navigate-v0")
    ap.add_argument("--agent", default="gcbc", help="an agent preset with a value function (gcbc: its critic)")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--chunks", default="1024,2048,4096,8192,16384")
    ap.add_argument("--default", type=int, default=4096, help="the chunk the others are compared with")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    spec = get_spec(a.dataset)
    data = load(a.dataset)
    cfg, _ = make_configs(a.agent, spec, a.profile)
    backbone = get_backbone(get_agent(a.agent).backbone)
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
    doc = dict(dataset=a.dataset, agent=a.agent, profile=a.profile, rows_in_pass=int(obs.shape[0]),
               flops_per_row=flops_per_row, default=a.default, repeats=a.repeats, results=rows,
               device=str(jax.devices()[0].device_kind), date=time.strftime("%Y-%m-%d %H:%M"))  # fmt: skip
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(a.out), dumps(doc, indent=1))


if __name__ == "__main__":
    main()
