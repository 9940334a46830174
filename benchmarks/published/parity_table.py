"""The parity table: `ttt`'s own update on the reference agents' fixtures (tests/fixtures/parity/), per case the
largest difference of the forward outputs, of every loss term over 100 updates and of the final parameters, and the
same figures between `ttt` and itself started from initial parameters nudged by 1e-7 (relative): float32 rounding's
own reach, against which the cross-implementation figures are read.

    python benchmarks/published/parity_table.py [--out benchmarks/results/parity/parity.json]

Differences are relative above 1 and absolute below (`tests/parity_cases.max_rel`). No flax needed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import parity_cases as pc  # noqa: E402


def _nudged(original):
    def imported(case, which):
        cfg, st = original(case, which)
        if which != "init":
            return cfg, st
        leaves, tdef = jax.tree.flatten(st.agent)
        keys = jax.random.split(jax.random.key(1), len(leaves))
        leaves = [x * (1 + 1e-7 * jax.random.normal(k, x.shape)) if jnp.issubdtype(x.dtype, jnp.floating) else x
                  for x, k in zip(leaves, keys, strict=True)]  # fmt: skip
        return cfg, type(st)(jax.tree.unflatten(tdef, leaves), st.opt_state, st.step)

    return imported


def figures(r, against=None) -> dict:
    """Largest differences of one replay against the reference (or against another replay's ttt side)."""
    if against is None:
        fwd = [pc.max_rel(a, b) for a, b in (*r.init_forward.values(), *r.final_forward.values())]
        loss = [pc.max_rel(a, b) for a, b in r.losses.values()]
        first = [int(np.argmax(np.abs(a - b) / np.maximum(np.abs(b), 1) > 2e-5)) if pc.max_rel(a, b) > 2e-5 else None
                 for a, b in r.losses.values()]  # fmt: skip
        par = [pc.max_rel(a, b) for _, a, b in r.final]
    else:
        fwd = [pc.max_rel(r.final_forward[k][0], against.final_forward[k][0]) for k in r.final_forward]
        loss = [pc.max_rel(r.losses[k][0], against.losses[k][0]) for k in r.losses]
        first = [None]
        par = [pc.max_rel(a, b) for (_, a, _), (_, b, _) in zip(r.final, against.final, strict=True)]
    above = [f for f in first if f is not None]
    first_above = min(above) if above else None
    return dict(forward=max(fwd), loss=max(loss), params=max(par), first_update_above_2e_5=first_above)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="also write the table as JSON here")
    args = ap.parse_args()
    rows = []
    for name in pc.CASES:
        t0 = time.perf_counter()
        case = pc.load_case(name)
        r = pc.replay(case)
        original = pc.imported
        pc.imported = _nudged(original)
        try:
            nudged = pc.replay(case)
        finally:
            pc.imported = original
        row = dict(case=name, agent=case.backbone, reference=case.meta["reference"]["repository"],
                   obs_dim=case.meta["obs_dim"], updates=case.meta["num_updates"], vs_reference=figures(r),
                   vs_nudged_self=figures(r, nudged), terms=sorted(r.losses),
                   wall_s=time.perf_counter() - t0)  # fmt: skip
        rows.append(row)
        v, s = row["vs_reference"], row["vs_nudged_self"]
        print(f"| {name} | {v['forward']:.1e} | {v['loss']:.1e} | {v['params']:.1e} | {v['first_update_above_2e_5']} "
              f"| {s['loss']:.1e} | {s['params']:.1e} |", flush=True)  # fmt: skip
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(dict(rows=rows, command=" ".join(sys.argv)), indent=1) + "\n")


if __name__ == "__main__":
    main()
