"""Why one pytest process crashed in XLA's CPU compiler: every compiled executable holds memory mappings (its code,
read-only data and data sections, mapped apart), and Linux refuses new mappings past `vm.max_map_count` (65530 by
default); LLVM's JIT then segfaults instead of reporting the failed allocation.

    python benchmarks/analyses/map_count_repro.py [--n 300] [--clear-every 0]

Compiles N distinct small programs (a new shape each: one executable each), keeping no reference to them, and
prints the process's mapping count as it goes; `--clear-every K` calls `jax.clear_caches()` and `gc.collect()` every
K compilations (what tests/conftest.py does after every test module)."""

from __future__ import annotations

import argparse
import gc
import json

import jax
import jax.numpy as jnp


def maps() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--clear-every", type=int, default=0)
    args = ap.parse_args()
    rows = [dict(compiled=0, maps=maps())]
    for i in range(1, args.n + 1):

        def f(x):  # matmuls between sorts: several kernels per executable, as in the episode programs
            for k in range(20):
                x = jnp.sort(jnp.tanh(x @ x.T)[:, :3] + k, axis=0)
            return x.sum()

        jax.jit(f)(jnp.ones((i + 3, 3))).block_until_ready()  # a new function and shape: a new executable
        del f
        if args.clear_every and i % args.clear_every == 0:
            jax.clear_caches()
            gc.collect()
        if i % (args.n // 10) == 0:
            rows.append(dict(compiled=i, maps=maps()))
            print(json.dumps(rows[-1]), flush=True)
    with open("/proc/sys/vm/max_map_count") as f:
        limit = int(f.read())
    per = (rows[-1]["maps"] - rows[0]["maps"]) / args.n
    print(json.dumps(dict(jax=jax.__version__, max_map_count=limit, maps_per_executable=round(per, 2),
                          clear_every=args.clear_every)))  # fmt: skip


if __name__ == "__main__":
    main()
