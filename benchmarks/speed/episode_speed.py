"""Episodes/s of the compiled GC-TTT path against the host driver, on the same checkpoint, episodes and keys.

Usage:
    python benchmarks/speed/episode_speed.py [--ckpt runs/base/cpu/pointmaze-medium-navigate-v0/gcbc] [--dir DATA_DIR]
        [--variants base,ttt-mc,ttt] [--episodes 1] [--chunk 3] [--K 100] [--N 100] [--lr 3e-4] [--breakdown]
        [--buckets 1] [--out benchmarks/results/ttt/episode_speed.json]

For each variant both drivers run the same (seed, task, episode) grid (seeds x 5 tasks x `--episodes`) one
after the other in this process: `compiled` (whole episodes as one program per batch of `--chunk` episodes,
C MuJoCo physics in the program) and `host` (OGBench's gymnasium env stepped from Python in lockstep over the
same batches, with the same jitted round and action functions). Wall time includes compilation, which is also
reported separately (the first batch's extra time over the mean of the others), with the episodes/s of the
batches after the first. Success must agree. Episode length: the environment's own (pointmaze and antmaze 1000,
cube-single 200).

`--buckets 1,0`: the compiled GC-TTT rows once per `TTTConfig.bucket` (live episodes adapted together each round; 0:
the whole batch, as the host driver's one vmapped `adapt` call does), each beside the same host run; the row's
`compiled` entry is the first bucket's, the others are `compiled_bucket_B`.

`--breakdown` (ant mazes and cube-single, whose compiled env counts the seconds its host callbacks take): where a
compiled episode's time goes, per episode, from the batches after the first: `env` (the C MuJoCo callbacks,
measured), `value pass + selection` (GC-TTT with N = 0 minus the base policy), `updates` (GC-TTT minus GC-TTT with
N = 0), and the rest (the policy's actions, the program's own work: the base policy minus `env`). The host
driver's environment share is OGBench's gymnasium step timed alone (`gym_step_ms`: 300 random steps).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import jax
import numpy as np

from ttt.checkpoint import open_checkpoint
from ttt.data.files import load
from ttt.evaluation import evaluate
from ttt.setups import checkpoint_setup


def _env_counters(env_id):
    """The host callbacks' counters of an in-program env that has them (ant mazes, cube-single), else None."""
    from ttt.envs import has_jax_env, make_env

    if not has_jax_env(env_id):
        return None
    info = getattr(make_env(env_id), "info", None)
    return None if info is None else (info.reset_fn, info.step_fn)


def run(setup, agents, data, driver, episodes, chunk):
    marks = []
    counters = _env_counters(setup.spec.env_id) if driver == "compiled" else None
    env_marks = []
    t0 = time.perf_counter()

    def env_seconds():
        return sum(c.seconds for c in counters) if counters else 0.0

    def progress(done, total):
        marks.append((done, time.perf_counter() - t0))
        env_marks.append(env_seconds())

    res = evaluate(setup, agents, data, episodes=episodes, driver=driver, batch_size=chunk, progress=progress)
    per_batch = np.diff([t for _, t in marks])
    compile_s = float(per_batch[0] - per_batch[1:].mean()) if len(per_batch) > 1 else float("nan")
    n = res.success.size
    after = (n - chunk) / float(per_batch[1:].sum()) if len(per_batch) > 1 else None
    out = dict(
        episodes=n,
        wall_s=res.wall_s,
        episodes_per_s=n / res.wall_s,
        compile_s=compile_s,
        episodes_per_s_after_compile=after,
        success=float(res.success.mean()),
        env_steps=int(res.steps.sum()),
    )
    if counters and len(per_batch) > 1:  # seconds per episode in the C MuJoCo callbacks, batches after the first
        out["env_s_per_episode_after_compile"] = float(np.diff(env_marks)[1:].sum()) / (n - chunk)
    return res, out


def gym_step_ms(env_id: str, steps: int = 300) -> float:
    """Milliseconds per step of OGBench's gymnasium env (what the host driver calls), random actions."""
    from ttt.envs.gym import make_gym_env

    env = make_gym_env(env_id, terminate_at_goal=False)
    env.reset(seed=0, options=dict(task_id=1))
    acts = np.random.default_rng(0).uniform(-1, 1, (steps,) + env.action_space.shape).astype(np.float32)
    t0 = time.perf_counter()
    for a in acts:
        env.step(a)
    env.close()
    return 1e3 * (time.perf_counter() - t0) / steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", default="runs/base/cpu/pointmaze-medium-navigate-v0/gcbc")
    ap.add_argument("--variants", default="base,ttt-mc,ttt")
    ap.add_argument("--episodes", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=3)
    ap.add_argument("--K", type=int, default=100)
    ap.add_argument("--N", type=int, default=100)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--dir", default=None, help="dataset directory (default: OGBench's)")
    ap.add_argument("--breakdown", action="store_true", help="where a compiled GC-TTT episode's time goes")
    ap.add_argument("--buckets", default="1", help="comma-separated TTTConfig.bucket values for the compiled GC-TTT "
                    "rows (0: the whole batch); the first is the row's `compiled` entry")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/ttt/episode_speed.json"))
    args = ap.parse_args()
    ck = open_checkpoint(args.ckpt)
    states, data = ck.load(), load(ck.dataset, args.dir)

    buckets = [int(b) or None if b.strip().isdigit() else -1 for b in args.buckets.split(",")]
    if -1 in buckets:
        raise SystemExit(f"--buckets takes comma-separated ints >= 0 (0: the whole batch), got {args.buckets!r}")

    def make(variant, N, bucket=buckets[0]):
        setup = checkpoint_setup(ck, variant, K=args.K, N=max(N, 1), lr=args.lr, bucket=bucket)
        if N == 0 and setup.ttt is not None:  # make_setup takes N >= 1; N = 0: the value pass and selection alone
            ttt = dataclasses.replace(setup.ttt, finetune=dataclasses.replace(setup.ttt.finetune, steps=0))
            setup = dataclasses.replace(setup, ttt=ttt)
        return setup

    base = make("base", 1)
    spec, max_steps = base.spec, base.max_steps  # the episode length: the environment's own

    rows = []
    for variant in args.variants.split(","):
        setup = make(variant, args.N)
        out = {}
        results = {}
        for driver in ("compiled", "host"):
            results[driver], out[driver] = run(setup, states.agent, data, driver, args.episodes, args.chunk)
            print(variant, driver, json.dumps(out[driver]), flush=True)
        for bucket in buckets[1:] if variant != "base" else []:
            name = f"compiled_bucket_{bucket or 0}"
            results[name], out[name] = run(make(variant, args.N, bucket), states.agent, data, "compiled",
                                           args.episodes, args.chunk)  # fmt: skip
            out[name]["ratio_to_host"] = out[name]["episodes_per_s"] / out["host"]["episodes_per_s"]
            out[name]["same_success_as_compiled"] = bool((results[name].success == results["compiled"].success).all())
            print(variant, name, json.dumps(out[name]), flush=True)
        same = bool((results["compiled"].success == results["host"].success).all())
        ratio = out["compiled"]["episodes_per_s"] / out["host"]["episodes_per_s"]
        a, b = out["compiled"]["episodes_per_s_after_compile"], out["host"]["episodes_per_s_after_compile"]
        ratio_after = a / b if a and b else None
        rows.append(dict(variant=variant, same_success=same, ratio=ratio, ratio_after_compile=ratio_after, **out))
        print(f"{variant}: compiled / host episodes/s = {ratio:.2f}, after compile {ratio_after} (same success: "
              f"{same})", flush=True)  # fmt: skip
    breakdown = None
    if args.breakdown:
        breakdown = _breakdown(make, states.agent, data, args, rows, spec.env_id)
        print("breakdown", json.dumps(breakdown), flush=True)
    doc = dict(
        checkpoint=args.ckpt,
        agent=ck.agent_name,
        step=ck.meta.get("step"),
        dataset=ck.dataset,
        data_rows=int(data.n_rows),
        profile=ck.meta.get("profile"),
        K=args.K,
        N=args.N,
        lr=args.lr,
        chunk=args.chunk,
        buckets=[b or 0 for b in buckets],
        max_steps=max_steps,
        device=str(jax.devices()[0]),
        cpus=len(os.sched_getaffinity(0)),
        command=" ".join(sys.argv),
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        rows=rows,
        breakdown=breakdown,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    return 0


def _breakdown(make, agents, data, args, rows, env_id) -> dict:
    """Seconds per compiled episode (batches after the first) by part; see the module docstring."""
    per_ep = lambda r: 1.0 / r["compiled"]["episodes_per_s_after_compile"]  # noqa: E731
    by = {r["variant"]: r for r in rows}
    if "base" not in by or not any(v in by for v in ("ttt", "ttt-mc")):
        raise SystemExit("--breakdown needs variants base and ttt (or ttt-mc)")
    base = by["base"]
    out = dict(gym_step_ms=gym_step_ms(env_id), base=dict(total=per_ep(base),
               env=base["compiled"].get("env_s_per_episode_after_compile")))  # fmt: skip
    out["base"]["rest (actions, program)"] = out["base"]["total"] - (out["base"]["env"] or 0.0)
    for variant in ("ttt", "ttt-mc"):
        if variant not in by:
            continue
        _, idle = run(make(variant, 0), agents, data, "compiled", args.episodes, args.chunk)
        print(variant, "N=0 compiled", json.dumps(idle), flush=True)
        full = by[variant]["compiled"]
        t_full, t_idle = per_ep(by[variant]), 1.0 / idle["episodes_per_s_after_compile"]
        out[variant] = {
            "total": t_full,
            "env": full.get("env_s_per_episode_after_compile"),
            "value pass + selection": t_idle - out["base"]["total"],
            "updates": t_full - t_idle,
            "N=0 total": t_idle,
            "host driver total": 1.0 / by[variant]["host"]["episodes_per_s_after_compile"],
        }
    return out


if __name__ == "__main__":
    sys.exit(main())
