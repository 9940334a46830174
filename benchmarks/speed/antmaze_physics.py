"""Can MJX run OGBench's ant maze at a useful speed on this machine? Time one environment step (5 physics
substeps of antmaze-medium-v0's own MjModel) with MJX (jitted, vmapped over a batch) against C MuJoCo
(``mj_step``), and OGBench's whole gymnasium step (what the host driver calls), in one run.

    python benchmarks/speed/antmaze_physics.py [--batches 1,16] [--out benchmarks/results/speed/antmaze_physics.json]

``--runner B`` instead times the compiled driver's step callback (``ttt.envs.antmaze``: ``hostsim.RowRunner`` over a
batch of B episodes, with one worker thread and with one per core) beside bare ``mj_step`` on the same states and
random actions: the physics floor under a compiled ant episode, and the callback's overhead above it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("MUJOCO_GL", "egl")
warnings.filterwarnings("ignore")

import gymnasium  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import ogbench  # noqa: E402,F401
from _common import machine  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="antmaze-medium-v0")
    p.add_argument("--batches", default="1,16")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--runner", type=int, default=0, help="time the step callback over this many episodes instead")
    p.add_argument("--steps", type=int, default=200, help="(--runner) environment steps timed")
    p.add_argument("--out", default="benchmarks/results/speed/antmaze_physics.json")
    args = p.parse_args()
    if args.runner < 0 or args.steps < 1:
        p.error(f"--runner must be >= 0 (got {args.runner}) and --steps >= 1 (got {args.steps})")
    if args.runner:
        return runner(args)
    from mujoco import mjx

    env = gymnasium.make(args.env)
    u = env.unwrapped
    env.reset(seed=0)
    m, skip = u.model, u.frame_skip
    res = dict(env=args.env, machine=machine(), frame_skip=skip, timestep=float(m.opt.timestep), ngeom=int(m.ngeom),
               nbody=int(m.nbody), mjx={})  # fmt: skip

    # C MuJoCo: 5 substeps per environment step, and OGBench's gymnasium step (physics + observation + success).
    data = mujoco.MjData(m)
    data.qpos[:] = u.data.qpos
    n = 2000
    t = time.perf_counter()
    for _ in range(n):
        mujoco.mj_step(m, data, nstep=skip)
    res["c_mujoco_ms_per_step"] = (time.perf_counter() - t) / n * 1e3
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    for _ in range(n):
        _, _, term, trunc, _ = env.step(rng.uniform(-1, 1, m.nu))
        if term or trunc:
            env.reset(seed=1)
    res["gym_ms_per_step"] = (time.perf_counter() - t) / n * 1e3
    print(f"C MuJoCo {res['c_mujoco_ms_per_step']:.3f} ms/step; gymnasium step {res['gym_ms_per_step']:.3f} ms/step")

    mx = mjx.put_model(m)
    d0 = mjx.put_data(m, u.data)

    def env_step(d, ctrl):
        d = d.replace(ctrl=ctrl)
        d, _ = jax.lax.scan(lambda d, _: (mjx.step(mx, d), None), d, None, length=skip)
        return d

    for b in (int(x) for x in args.batches.split(",")):
        f = jax.jit(jax.vmap(env_step))
        db = jax.tree.map(lambda x, b=b: jnp.broadcast_to(x, (b, *x.shape)), d0)
        ctrl = jnp.zeros((b, m.nu))
        t = time.perf_counter()
        out = jax.block_until_ready(f(db, ctrl))
        compile_s = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(args.reps):
            out = f(out, ctrl)
        jax.block_until_ready(out)
        ms = (time.perf_counter() - t) / args.reps * 1e3
        res["mjx"][str(b)] = dict(compile_s=compile_s, ms_per_batch_step=ms, ms_per_env_step=ms / b)
        print(f"MJX batch {b}: compile {compile_s:.1f} s, {ms:.1f} ms per batch step, {ms / b:.2f} ms per env step")
    best = min(v["ms_per_env_step"] for v in res["mjx"].values())
    res["mjx_over_c_mujoco"] = best / res["c_mujoco_ms_per_step"]
    print(f"MJX (best batch) / C MuJoCo per env step: {res['mjx_over_c_mujoco']:.0f}x")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")


def runner(args) -> None:
    """Time the step callback over ``args.runner`` episodes (1 worker, then one per core) against bare ``mj_step``."""
    from ttt.envs import hostsim
    from ttt.envs.antmaze import AntMaze

    env, b = AntMaze(args.env), args.runner
    tasks = jnp.arange(b) % env.num_tasks + 1
    state, _, _ = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.key(0), b), tasks)
    sim0 = np.asarray(state.sim)
    acts = np.random.default_rng(0).uniform(-1, 1, (args.steps, b, env.action_dim)).astype(np.float32)
    exits = np.zeros(b, np.int32)
    info = env.info

    def per_row_step_ms(fn) -> float:
        sim, t = sim0.copy(), time.perf_counter()
        for a in acts:
            sim, _, _ = fn(1, sim, a, exits)
        return (time.perf_counter() - t) / (args.steps * b) * 1e3

    one = hostsim.RowRunner(info.step_fn.fn, [mujoco.MjData(info.model)], info.step_fn.out_specs)
    res = dict(env=args.env, machine=machine(), episodes=b, steps=args.steps, workers=len(info.step_fn.contexts))
    res["callback_ms_one_worker"] = per_row_step_ms(one)
    res["callback_ms_all_workers"] = per_row_step_ms(info.step_fn)
    # bare physics: the same states and actions, one MjData, no callback, no state copies
    data, sims = mujoco.MjData(info.model), hostsim.unpack(sim0)
    skip = int(info.gym_env.unwrapped.frame_skip)
    t = time.perf_counter()
    for i in range(b):
        hostsim.set_state(info.model, data, sims[i, 2:])
        for a in acts[:, i]:
            data.ctrl[:] = a
            mujoco.mj_step(info.model, data, nstep=skip)
    res["mj_step_ms_one_core"] = (time.perf_counter() - t) / (args.steps * b) * 1e3
    res["mj_step_ms_floor_all_cores"] = res["mj_step_ms_one_core"] / res["workers"]
    for k, v in res.items():
        print(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
