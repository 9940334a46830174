"""Episodes/s of the compiled GC-TTT path against the host driver, on the same checkpoint, episodes and keys.

Usage:
    python benchmarks/episode_speed.py [--ckpt runs/base/cpu/pointmaze-medium-navigate-v0/gcbc]
        [--variants base,ttt-mc,ttt] [--episodes 1] [--chunk 3] [--K 100] [--N 100] [--lr 3e-4]
        [--out benchmarks/results/ttt/episode_speed.json]

For each variant both drivers run the same (seed, task, episode) grid (3 seeds x 5 tasks x `--episodes`) one
after the other in this process: `compiled` (whole episodes as one program per batch of `--chunk` episodes,
C MuJoCo physics in the program) and `host` (OGBench's gymnasium env stepped from Python in lockstep over the
same batches, with the same jitted round and action functions). Wall time includes compilation, which is also
reported separately (the first batch's extra time over the mean of the others). Success must agree.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import numpy as np

from ttt.data.files import load
from ttt.data.specs import get_spec
from ttt.episode import TTTConfig
from ttt.evaluate import EvalSetup, evaluate
from ttt.finetune import FinetuneConfig
from ttt.pretrain import backbone_config, load_checkpoint, read_meta, sampler_config
from ttt.select import SelectConfig


def run(setup, agents, data, driver, episodes, chunk):
    marks = []
    t0 = time.perf_counter()

    def progress(done, total):
        marks.append((done, time.perf_counter() - t0))

    res = evaluate(setup, agents, data, episodes=episodes, driver=driver, batch_size=chunk, progress=progress)
    per_batch = np.diff([t for _, t in marks])
    compile_s = float(per_batch[0] - per_batch[1:].mean()) if len(per_batch) > 1 else float("nan")
    n = res.success.size
    return res, dict(
        episodes=n,
        wall_s=res.wall_s,
        episodes_per_s=n / res.wall_s,
        compile_s=compile_s,
        episodes_per_s_after_compile=(n - chunk) / float(per_batch[1:].sum()) if len(per_batch) > 1 else None,
        success=float(res.success.mean()),
        env_steps=int(res.steps.sum()),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", default="runs/base/cpu/pointmaze-medium-navigate-v0/gcbc")
    ap.add_argument("--variants", default="base,ttt-mc,ttt")
    ap.add_argument("--episodes", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=3)
    ap.add_argument("--K", type=int, default=100)
    ap.add_argument("--N", type=int, default=100)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/ttt/episode_speed.json"))
    args = ap.parse_args()
    meta = read_meta(args.ckpt)
    states, meta = load_checkpoint(args.ckpt, meta)
    spec = get_spec(meta["dataset"])
    data = load(meta["dataset"])
    cfg, sampler = backbone_config(meta), sampler_config(meta)
    rows = []
    for variant in args.variants.split(","):
        ttt = None
        if variant != "base":
            mode = "critic" if variant == "ttt" else "mc"
            ttt = TTTConfig(K=args.K, select=SelectConfig(mode=mode), finetune=FinetuneConfig(steps=args.N, lr=args.lr))
        setup = EvalSetup(meta["backbone"], cfg, sampler, spec, ttt, 1000)
        out = {}
        results = {}
        for driver in ("compiled", "host"):
            results[driver], out[driver] = run(setup, states.agent, data, driver, args.episodes, args.chunk)
            print(variant, driver, json.dumps(out[driver]), flush=True)
        same = bool((results["compiled"].success == results["host"].success).all())
        ratio = out["compiled"]["episodes_per_s"] / out["host"]["episodes_per_s"]
        rows.append(dict(variant=variant, same_success=same, ratio=ratio, **out))
        print(f"{variant}: compiled / host episodes/s = {ratio:.2f} (same success: {same})", flush=True)
    doc = dict(
        checkpoint=args.ckpt,
        agent=meta["agent"],
        dataset=meta["dataset"],
        profile=meta.get("profile"),
        K=args.K,
        N=args.N,
        lr=args.lr,
        chunk=args.chunk,
        device=str(jax.devices()[0]),
        command=" ".join(sys.argv),
        rows=rows,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
