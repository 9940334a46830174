"""The cost of one SAC update of the locomotion experts (``ttt.data.sac``) at several critic sizes, side by side in
one process: what sizes the humanoid expert's recipe for a CPU (``ttt.data.expert.ROBOTS``).

    XLA_FLAGS=--xla_cpu_multi_thread_eigen=false taskset -c 1 python benchmarks/speed/sac_update_cost.py [--json F]

Each size: the humanoid's dimensions (69 observation numbers, 21 actions), batch 256, actor 256x2, LayerNorm critics
and the mean of the two (OGBench's humanoid flags); ``--updates`` updates in one ``lax.scan`` after a compiled warm-up
call, best of ``--repeats``. The ant's critics (256x2, no LayerNorm) for scale.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

from ttt.data.sac import SACConfig, init_sac, make_sac_update  # noqa: E402

SIZES = {  # name: (critic hidden dims, LayerNorm, min of the two critics)
    "ant (OGBench): 256x2": ((256, 256), False, True),
    "humanoid, ours: 256x2 LN": ((256, 256), True, False),
    "humanoid: 512x2 LN": ((512, 512), True, False),
    "humanoid: 512x3 LN": ((512, 512, 512), True, False),
    "humanoid (OGBench): 1024x3 LN": ((1024, 1024, 1024), True, False),
}


def time_update(value_dims, layer_norm, min_q, updates: int, repeats: int) -> float:
    """Seconds per update, best of ``repeats`` calls of ``updates`` scanned updates."""
    cfg = SACConfig(value_hidden_dims=value_dims, layer_norm=layer_norm, min_q=min_q)
    state = init_sac(jax.random.key(0), 69, 21, cfg)
    update = make_sac_update(cfg, 21)
    rng = np.random.default_rng(0)
    batch = dict(
        observations=jnp.asarray(rng.normal(size=(256, 69)), jnp.float32),
        actions=jnp.asarray(rng.uniform(-1, 1, (256, 21)), jnp.float32),
        rewards=jnp.ones(256),
        masks=jnp.ones(256),
        next_observations=jnp.asarray(rng.normal(size=(256, 69)), jnp.float32),
    )

    @eqx.filter_jit
    def many(state, key):
        return jax.lax.scan(lambda s, k: (update(s, batch, k)[0], None), state, jax.random.split(key, updates))[0]

    state = jax.block_until_ready(many(state, jax.random.key(1)))
    best = float("inf")
    for r in range(repeats):
        t = time.perf_counter()
        state = jax.block_until_ready(many(state, jax.random.key(2 + r)))
        best = min(best, (time.perf_counter() - t) / updates)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = ap.parse_args()
    rows = []
    for name, (dims, ln, min_q) in SIZES.items():
        s = time_update(dims, ln, min_q, args.updates, args.repeats)
        rows.append(dict(size=name, ms_per_update=round(s * 1e3, 2)))
        print(f"{name:32s} {s * 1e3:8.2f} ms / update", flush=True)
    base = next(r["ms_per_update"] for r in rows if r["size"].startswith("humanoid, ours"))
    for r in rows:
        r["relative_to_ours"] = round(r["ms_per_update"] / base, 2)
    print("relative to ours:", ", ".join(f"{r['size']}: {r['relative_to_ours']}x" for r in rows))
    if args.json:
        Path(args.json).write_text(json.dumps(dict(machine=machine(), updates=args.updates, rows=rows), indent=1))


if __name__ == "__main__":
    main()
