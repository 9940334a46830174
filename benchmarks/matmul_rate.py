"""This CPU's float32 matmul rate at the value pass's shape: (2 heads x 4096 rows x 256) @ (256 x 256), written three
ways (a batched einsum, two 2-D dots, a vmap), 50 calls each after one warm-up; prints ms per call and GFLOP/s.

    python benchmarks/matmul_rate.py
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp


def main(n: int = 50) -> None:
    k_x, k_w = jax.random.split(jax.random.key(0))
    x = jax.random.normal(k_x, (2, 4096, 256))
    w = jax.random.normal(k_w, (2, 256, 256))
    flops = 2 * 2 * 4096 * 256 * 256
    ways = {
        "batched einsum": jax.jit(lambda x, w: jnp.einsum("hbi,hio->hbo", x, w)),
        "two 2-D dots": jax.jit(lambda x, w: jnp.stack([x[0] @ w[0], x[1] @ w[1]])),
        "vmap": jax.jit(jax.vmap(lambda x, w: x @ w)),
    }
    for name, f in ways.items():
        f(x, w).block_until_ready()
        t = time.perf_counter()
        for _ in range(n):
            f(x, w).block_until_ready()
        dt = (time.perf_counter() - t) / n
        print(f"{name}: {dt * 1e3:.2f} ms, {flops / dt / 1e9:.0f} GFLOP/s")


if __name__ == "__main__":
    main()
