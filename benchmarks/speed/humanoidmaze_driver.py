"""humanoidmaze on the compiled driver against the host driver: one base episode and one GC-TTT episode, each on
both drivers, side by side in one process; and how many poses OGBench's humanoid reset draws.

    XLA_FLAGS=--xla_cpu_multi_thread_eigen=false python benchmarks/speed/humanoidmaze_driver.py \
        [--env humanoidmaze-medium-v0] [--K 200] [--N 10] [--reps 3] [--tasks 1] [--resets 20000] [--out FILE.json]

- Resets: OGBench's own ``HumanoidEnv.reset_model`` (its rejection loop: a pose is drawn again while it penetrates
  anything) run ``--resets`` times after ``mj_resetData`` with OGBench's own generator, attempts counted: the
  evidence for ``ttt.envs.humanoidmaze.ATTEMPTS`` (32 poses drawn per loop).
- Episodes: a GC-BC agent at the cpu profile's widths, untrained (its episodes never reach the goal, so every one
  runs OGBench's full 2000 steps), on a small stitch dataset generated here with an untrained humanoid expert
  (``--data-episodes``; GC-TTT's value pass and selection scale with the rows, so its figure is a floor for a full
  dataset). One seed, one episode per task of ``--tasks`` (default: task 1 alone) per call; each (variant, driver)
  runs ``--reps`` times, alternating the drivers: the first call compiles, the others are warm (their median is the
  figure). Success and steps must agree.
  Also timed: OGBench's gymnasium step alone (the host driver's environment) and the compiled driver's C MuJoCo
  callbacks (seconds inside them, per warm call). The machine's load average is recorded before and after: wall
  times carry a shared machine's other work, so each call's process CPU seconds (``time.process_time``: this
  process's threads, XLA's and the physics workers' included) are recorded beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import jax  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from _common import machine  # noqa: E402


def count_reset_attempts(env_id: str, n: int, seed: int = 0) -> dict:
    """Attempts of OGBench's ``reset_model`` loop over ``n`` calls (its own code and generator)."""
    from ttt.envs.gym import make_gym_env

    env = make_gym_env(env_id)
    u = env.unwrapped
    env.reset(seed=seed, options=dict(task_id=1))
    calls = [0]
    disable = u.disable

    def counting(*flags):  # reset_model disables actuation once per pose it tries
        calls[0] += 1
        return disable(*flags)

    u.disable = counting
    counts = np.zeros(n, np.int64)
    t0 = time.perf_counter()
    for i in range(n):
        mujoco.mj_resetData(u.model, u.data)
        calls[0] = 0
        u.reset_model()
        counts[i] = calls[0]
    wall = time.perf_counter() - t0
    env.close()
    p = 1.0 / counts.mean()  # the geometric distribution's acceptance probability
    return dict(calls=n, mean=float(counts.mean()), max=int(counts.max()), accept=p,
                histogram=np.bincount(counts).tolist(), p_all_32_penetrate=float((1.0 - p) ** 32),
                ms_per_call=1e3 * wall / n)  # fmt: skip


def gym_step_ms(env_id: str, steps: int = 500) -> float:
    from ttt.envs.gym import make_gym_env

    env = make_gym_env(env_id, terminate_at_goal=False)
    env.reset(seed=0, options=dict(task_id=1))
    acts = np.random.default_rng(0).uniform(-1, 1, (steps, 21)).astype(np.float32)
    t0 = time.perf_counter()
    for a in acts:
        env.step(a)
    env.close()
    return 1e3 * (time.perf_counter() - t0) / steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="humanoidmaze-medium-v0")
    ap.add_argument("--K", type=int, default=200)
    ap.add_argument("--N", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tasks", default="1", help="comma-separated task ids: one episode each per call (a batch)")
    ap.add_argument("--resets", type=int, default=20000)
    ap.add_argument("--data-episodes", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.reps < 2 or args.resets < 0 or args.data_episodes < 1:
        ap.error("--reps >= 2 (the first compiles), --resets >= 0, --data-episodes >= 1")
    command = "python " + " ".join(sys.argv)
    if os.environ.get("XLA_FLAGS"):
        command = f"XLA_FLAGS={os.environ['XLA_FLAGS']} {command}"
    print(command, flush=True)
    tasks = tuple(int(t) for t in args.tasks.split(","))
    doc = dict(command=command, machine=machine(), env=args.env, tasks=list(tasks), load_before=os.getloadavg(),
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))  # fmt: skip

    if args.resets:
        doc["resets"] = count_reset_attempts(args.env, args.resets)
        print("reset_model attempts:", json.dumps(doc["resets"]), flush=True)

    from ttt.agents import get_backbone
    from ttt.data import generate as gen
    from ttt.data.expert import save_actor
    from ttt.data.files import load
    from ttt.data.sac import SACConfig, TanhGaussianActor
    from ttt.data.specs import SPECS
    from ttt.envs import make_env
    from ttt.evaluation import evaluate
    from ttt.presets import make_configs
    from ttt.pretrain import init_state
    from ttt.setups import make_setup

    name = next(n for n, s in SPECS.items() if s.env_id == args.env and s.kind == "stitch")
    spec = SPECS[name]
    tmp = Path(tempfile.mkdtemp(prefix="ttt-humanoid-bench-"))
    actor = TanhGaussianActor(jax.random.key(0), spec.ob_dim, spec.action_dim, (16,), final_init_scale=1.0)
    save_actor(tmp / "h.npz", actor, SACConfig(actor_hidden_dims=(16,)), dict(step=0), robot="humanoid")
    t0 = time.perf_counter()
    gen.generate(name, episodes=args.data_episodes, seed=0, directory=tmp, workers=1, expert=tmp / "h.npz")
    data = load(name, tmp)
    print(f"data: {name}, {data.n_rows} rows, generated in {time.perf_counter() - t0:.1f} s", flush=True)
    backbone = get_backbone("gcbc")
    cfg, sampler = make_configs("gcbc", spec, "cpu")
    agents = jax.vmap(lambda k: init_state(k, backbone, spec.ob_dim, spec.action_dim, cfg).agent)(
        jax.random.split(jax.random.key(0), 1)
    )
    env = make_env(args.env)
    max_steps = env.max_steps
    doc.update(dataset=name, data_rows=int(data.n_rows), agent="gcbc (cpu profile widths, untrained)", K=args.K,
               N=args.N, max_steps=max_steps, gym_step_ms=gym_step_ms(args.env))  # fmt: skip
    print(f"OGBench gym step: {doc['gym_step_ms']:.3f} ms", flush=True)
    rows = []
    for variant in ("base", "ttt"):
        setup = make_setup(variant, backbone, cfg, sampler, spec, max_steps, K=args.K, N=args.N, bucket=1)
        runs = {"compiled": [], "host": []}
        results = {}
        for rep in range(args.reps):
            for driver in ("compiled", "host"):
                env_s = env.info.step_fn.seconds + env.info.reset_fn.seconds
                t, c = time.perf_counter(), time.process_time()
                res = evaluate(setup, agents, data, episodes=1, tasks=tasks, seed=0, driver=driver)
                wall, cpu = time.perf_counter() - t, time.process_time() - c
                cb = env.info.step_fn.seconds + env.info.reset_fn.seconds - env_s
                runs[driver].append(dict(wall_s=wall, cpu_s=cpu, steps=int(res.steps.sum()), callbacks_s=cb if driver ==
                                         "compiled" else None))  # fmt: skip
                if driver in results:
                    assert (res.success == results[driver].success).all()
                results[driver] = res
                print(f"{variant} {driver} rep {rep}: {wall:.2f} s ({cpu:.2f} CPU-s), {int(res.steps.sum())} steps"
                      + (f", callbacks {cb:.2f} s" if driver == "compiled" else ""), flush=True)  # fmt: skip
        same = bool((results["compiled"].success == results["host"].success).all()
                    and (results["compiled"].steps == results["host"].steps).all())  # fmt: skip
        warm = {d: statistics.median(r["wall_s"] for r in runs[d][1:]) for d in runs}
        warm_cpu = {d: statistics.median(r["cpu_s"] for r in runs[d][1:]) for d in runs}
        row = dict(variant=variant, same_success_and_steps=same, first_call_s={d: runs[d][0]["wall_s"] for d in runs},
                   warm_s=warm, host_over_compiled=warm["host"] / warm["compiled"], warm_cpu_s=warm_cpu,
                   host_over_compiled_cpu=warm_cpu["host"] / warm_cpu["compiled"],
                   compiled_callbacks_warm_s=statistics.median(r["callbacks_s"] for r in runs["compiled"][1:]),
                   runs=runs)  # fmt: skip
        rows.append(row)
        print(f"{variant}: warm call ({len(tasks)} episode(s)) compiled {warm['compiled']:.2f} s, host "
              f"{warm['host']:.2f} s (host / compiled {row['host_over_compiled']:.2f}; in process CPU-s "
              f"{warm_cpu['compiled']:.2f} / {warm_cpu['host']:.2f}, {row['host_over_compiled_cpu']:.2f}); first "
              f"call (compiles) compiled {row['first_call_s']['compiled']:.2f} s, host "
              f"{row['first_call_s']['host']:.2f} s; same success and steps: {same}", flush=True)  # fmt: skip
    doc["rows"] = rows
    doc["load_after"] = os.getloadavg()
    print(f"load average before {doc['load_before']}, after {doc['load_after']}", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
