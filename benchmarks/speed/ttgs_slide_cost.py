"""What TTGS's path walk-on (`TTGSConfig.path = 'slide'`, `ttt.graph.slide_path`) costs per environment step,
beside one TTGS step's own value evaluations (`max_hops + 1` per episode).

    python benchmarks/speed/ttgs_slide_cost.py [--hops 64,128] [--batch 32] [--steps 200]

Times, per setting, `--steps` steps of a `lax.scan` over a batch of episodes (vmapped) doing (a) `slide_path` alone,
(b) nothing (the scan's floor), and (c) `max_hops + 1` evaluations of a cpu-profile (256x2) value MLP on a
pointmaze observation (what every TTGS step does for `d(s, path)`): the walk-on's cost is (a) - (b), to be read
against (c). Compiled first, then the median of 3 timed runs. Synthetic path and network weights: only shapes
matter for the timing.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from ttt.graph import path_from, slide_path


def _mlp(key, sizes):
    keys = jax.random.split(key, len(sizes) - 1)
    shapes = zip(keys, sizes[:-1], sizes[1:], strict=True)
    return [(jax.random.normal(k, (a, b)) / np.sqrt(a), jnp.zeros(b)) for k, a, b in shapes]


def _value(params, x):
    for i, (w, b) in enumerate(params):
        x = x @ w + b
        x = jax.nn.gelu(x) if i < len(params) - 1 else x
    return x[..., 0]


def _timed(fn, *args, repeats=3) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure(P: int, batch: int, steps: int, n: int = 1000) -> dict:
    succ = jnp.asarray(np.minimum(np.arange(n) + 1, n - 1), jnp.int32)  # a chain: every path is long
    cost = jnp.asarray(np.arange(n)[::-1].astype(np.float32))
    path, k, _, _ = path_from(succ, cost, 0, P)
    paths, ks, cl = jnp.tile(path, (batch, 1)), jnp.full((batch,), k), jnp.arange(batch, dtype=jnp.int32) % P
    params = _mlp(jax.random.key(0), (4, 256, 256, 1))  # V(s, g): observation and goal of a point maze
    pts = jax.random.normal(jax.random.key(1), (batch, P + 1, 4))

    def scan(step):
        def run(p, k, c, tables):
            def body(carry, _):
                return step(*carry, tables), None

            return jax.lax.scan(body, (p, k, c), None, length=steps)[0]

        return jax.jit(run)

    def values(p, k, c, tables):  # inputs move with the carry, so nothing is hoisted out of the loop
        x = tables["pts"] + c[:, None, None].astype(jnp.float32) * 1e-6
        return p, k, c + (jnp.sum(_value(tables["params"], x), axis=1) > 1e30).astype(jnp.int32)

    def walk(p, k, c, tables):
        return jax.vmap(lambda p, k, c: slide_path(tables["succ"], tables["cost"], p, k, c)[:3])(p, k, c)

    tables = dict(succ=succ, cost=cost, params=params, pts=pts)
    runs = (("slide", scan(walk)), ("floor", scan(lambda p, k, c, _: (p, k, (c + 1) % P))), ("values", scan(values)))
    t = {name: _timed(fn, paths, ks, cl, tables) for name, fn in runs}
    return dict(max_hops=P, batch=batch, steps=steps, slide_ms=1e3 * (t["slide"] - t["floor"]),
                values_ms=1e3 * (t["values"] - t["floor"]), floor_ms=1e3 * t["floor"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hops", default="64,128", help="max_hops values, comma-separated")
    ap.add_argument("--batch", type=int, default=32, help="episodes vmapped")
    ap.add_argument("--steps", type=int, default=200, help="environment steps scanned")
    args = ap.parse_args(argv)
    print(f"device {jax.devices()[0].device_kind}; {args.steps} steps x {args.batch} episodes (ms)")
    for P in (int(x) for x in args.hops.split(",")):
        r = measure(P, args.batch, args.steps)
        print(f"max_hops {P}: walk-on {r['slide_ms']:.1f} ms, the step's {P + 1} value evaluations "
              f"{r['values_ms']:.1f} ms (ratio {r['slide_ms'] / r['values_ms']:.2f}), scan floor "
              f"{r['floor_ms']:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
