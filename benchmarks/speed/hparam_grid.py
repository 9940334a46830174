"""An lr x q grid of GC-TTT as ONE program against one program per point.

Three ways to evaluate the same grid on the same episodes (same starts, goals and keys):

- `grid`: one `evaluate(..., grid={"lr": [...], "q": [...]})` call: the points are more elements of the vmapped
  batch, one compile;
- `per point, one program each`: one `evaluate` per point with the program caches cleared in between, i.e. what a
  sweep cost before the settings were traced (each point compiles its own program);
- `per point, shared program`: one `evaluate` per point without clearing: the points differ only in traced
  settings, so they reuse one program (one compile) but run one after the other.

Compile time is what JAX reports for tracing, lowering and compiling (`jax.monitoring` durations); wall time is the
whole call. The numbers of every point are compared with the grid's (max abs difference over success, steps, every
observation and every round metric).

    python benchmarks/speed/hparam_grid.py --ckpt CKPT --data-dir DIR [--out benchmarks/results/hparam_grid.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

import ttt  # noqa: E402
from ttt import evaluation as ev  # noqa: E402
from ttt.setups import checkpoint_setup  # noqa: E402

COMPILE: list[float] = []


def _listen(event: str, duration: float, **_) -> None:
    if event.startswith("/jax/core/compile/"):  # tracing, lowering to MLIR, XLA's compile
        COMPILE.append(duration)


jax.monitoring.register_event_duration_secs_listener(_listen)


def timed(fn):
    """`(fn(), wall s, compile s)`."""
    COMPILE.clear()
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, float(sum(COMPILE))


def fresh():
    ev.setup.cached_program.cache_clear()
    jax.clear_caches()


def max_diff(a, b) -> float:
    diffs = [np.abs(a.success - b.success).max(), np.abs(a.steps - b.steps).max(),
             np.abs(a.observations - b.observations).max()]  # fmt: skip
    for k in a.rounds:
        x, y = np.asarray(a.rounds[k], np.float64), np.asarray(b.rounds[k], np.float64)
        both_nan = np.isnan(x) & np.isnan(y)
        diffs.append(np.where(both_nan, 0.0, np.abs(x - y)).max())
    return float(max(diffs))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ckpt", required=True)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--variant", default="ttt-mc")
    p.add_argument("--lr", type=float, nargs="+", default=[1e-4, 3e-3])
    p.add_argument("--q", type=float, nargs="+", default=[0.05, 0.2, 0.5])
    p.add_argument("--K", type=int, default=250)
    p.add_argument("--N", type=int, default=20)
    p.add_argument("--episodes", type=int, default=1)
    p.add_argument("--tasks", type=int, nargs="+", default=[1, 2])
    p.add_argument("--out", default=None)
    args = p.parse_args()

    setup, agents, data, env = ttt.load_run(args.ckpt, data_dir=args.data_dir, variant=args.variant, K=args.K,
                                            N=args.N, lr=args.lr[0], q=args.q[0])  # fmt: skip
    ck = ttt.open_checkpoint(args.ckpt)

    def setup_at(**point):  # the setup of one grid point (load_run's: the checkpoint's, `make_setup`'s checks)
        return checkpoint_setup(ck, args.variant, where=args.ckpt, K=args.K, N=args.N, **point)

    kw = dict(episodes=args.episodes, tasks=tuple(args.tasks), env=env)
    points = [{"lr": lr, "q": q} for lr in args.lr for q in args.q]

    fresh()
    grid, grid_wall, grid_compile = timed(lambda: ev.evaluate(setup, agents, data, grid={"lr": args.lr, "q": args.q},
                                                              **kw))  # fmt: skip
    rows = [dict(way="grid (one program)", programs=1, compile_s=grid_compile, wall_s=grid_wall)]

    per, walls, compiles = [], [], []
    for point in points:  # one program per point: the caches cleared before each, as a sweep compiled before
        fresh()
        s = setup_at(**point)
        r, w, c = timed(lambda s=s: ev.evaluate(s, agents, data, **kw))
        per.append(r), walls.append(w), compiles.append(c)
    diff = max(max_diff(grid.at(**pt), r) for pt, r in zip(points, per, strict=True))
    rows.append(dict(way="per point, one program each", programs=len(points), compile_s=sum(compiles),
                     wall_s=sum(walls), max_abs_diff=diff))  # fmt: skip

    fresh()
    shared, walls, compiles = [], [], []
    for point in points:  # one after the other, sharing the program (the settings are traced)
        s = setup_at(**point)
        r, w, c = timed(lambda s=s: ev.evaluate(s, agents, data, **kw))
        shared.append(r), walls.append(w), compiles.append(c)
    diff = max(max_diff(grid.at(**pt), r) for pt, r in zip(points, shared, strict=True))
    rows.append(dict(way="per point, shared program", programs=1, compile_s=sum(compiles), wall_s=sum(walls),
                     max_abs_diff=diff))  # fmt: skip

    success = {f"lr={pt['lr']:g} q={pt['q']:g}": float(grid.at(**pt).success.mean()) for pt in points}
    doc = dict(machine=machine(), args=vars(args), points=len(points), episodes_per_point=int(per[0].success.size),
               rows=rows, success=success)  # fmt: skip
    print("| way | programs | compile s | wall s | max abs diff vs grid |")
    print("|---|---|---|---|---|")
    for r in rows:
        diff = r.get("max_abs_diff")
        print(f"| {r['way']} | {r['programs']} | {r['compile_s']:.1f} | {r['wall_s']:.1f} | "
              f"{'-' if diff is None else f'{diff:.1e}'} |")  # fmt: skip
    print("success per point (grid):", success)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
