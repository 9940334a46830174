"""Scale-out: the same evaluation sharded over 1, 2 and 4 devices (forced CPU devices here, real GPUs elsewhere),
and over two processes on localhost with `jax.distributed` (one device each), against the single-process result.

Usage:
    python benchmarks/speed/scale_out.py [--ckpt runs/base/cpu/pointmaze-medium-navigate-v0/gcbc] [--variant ttt-mc]
        [--episodes 2] [--devices 1,2,4] [--out benchmarks/results/speed/scale_out.json]

Each configuration runs in its own subprocess (`XLA_FLAGS=--xla_force_host_platform_device_count=D`, or two
processes joined by `jax.distributed.initialize` with gloo CPU collectives) and evaluates the same (seed, task,
episode) grid in one batch (3 seeds x 5 tasks x `--episodes`, padded to a multiple of the device count). Results
(success, steps, per-round selections) must be identical; times are wall clock with compilation, and without it
(a second call). Forced CPU devices share this machine's cores, so they show correctness, not speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import CKPT, machine  # noqa: E402

WORKER = textwrap.dedent(
    """
    import json, sys, time
    import jax
    pid, nproc, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    if nproc > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=f"localhost:{{port}}", num_processes=nproc, process_id=pid)
    sys.path.insert(0, {bench!r})
    from _common import open_run, variant_setup
    from ttt.evaluation import evaluate
    ck, states, data = open_run({ckpt!r})
    setup = variant_setup(ck, {variant!r})
    kw = dict(episodes={episodes}, seed=0)
    t0 = time.perf_counter()
    res = evaluate(setup, states.agent, data, **kw)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = evaluate(setup, states.agent, data, **kw)
    second = time.perf_counter() - t0
    print("RESULT " + json.dumps(dict(pid=pid, processes=jax.process_count(), devices=len(jax.devices()),
          first_s=first, second_s=second, episodes=int(res.success.size), success=res.success.tolist(),
          steps=res.steps.tolist(), n_selected=res.rounds["n_selected"].tolist() if res.rounds else None)))
    """
)


def parse(out: str) -> dict:
    line = next(ln for ln in out.splitlines()[::-1] if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", default=CKPT)
    ap.add_argument("--variant", default="ttt-mc")
    ap.add_argument("--episodes", type=int, default=2)
    ap.add_argument("--devices", default="1,2,4")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/speed/scale_out.json"))
    args = ap.parse_args()
    script = Path("/tmp") / f"ttt_scale_worker_{os.getpid()}.py"
    script.write_text(WORKER.format(bench=str(Path(__file__).parent.resolve()), ckpt=args.ckpt, variant=args.variant,
                                    episodes=args.episodes))  # fmt: skip
    base_env = dict(os.environ, JAX_PLATFORMS="cpu")
    runs = []
    for d in (int(x) for x in args.devices.split(",")):
        env = dict(base_env, XLA_FLAGS=f"--xla_force_host_platform_device_count={d}")
        p = subprocess.run([sys.executable, str(script), "0", "1", "0"], capture_output=True, text=True, env=env)
        if p.returncode:
            raise SystemExit(p.stderr[-3000:])
        r = dict(kind=f"{d} device(s), 1 process", **parse(p.stdout))
        runs.append(r)
        print(r["kind"], {k: r[k] for k in ("devices", "first_s", "second_s", "episodes")}, flush=True)
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = str(s.getsockname()[1])
    env = {k: v for k, v in base_env.items() if k != "XLA_FLAGS"}
    procs = [subprocess.Popen([sys.executable, str(script), str(i), "2", port], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for i in range(2)]  # fmt: skip
    outs = [p.communicate() for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        if p.returncode:
            raise SystemExit(err[-3000:])
    for out, _ in outs:
        r = dict(kind="2 processes (jax.distributed, localhost), 1 device each", **parse(out))
        runs.append(r)
        print(r["kind"], r["pid"], {k: r[k] for k in ("devices", "first_s", "second_s", "episodes")}, flush=True)
    ref = runs[0]
    keys = ("success", "steps", "n_selected")
    for r in runs:
        r["same_as_1_device"] = all(r[k] == ref[k] for k in keys)
    print("all identical:", all(r["same_as_1_device"] for r in runs), flush=True)
    doc = dict(machine=machine(), checkpoint=args.ckpt, variant=args.variant, command="python " + " ".join(sys.argv),
               runs=[{k: v for k, v in r.items() if k not in keys} for r in runs],
               all_identical=all(r["same_as_1_device"] for r in runs), success_mean=float(
                   sum(map(sum, (e for s in ref["success"] for e in s))) / ref["episodes"]))  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    script.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
