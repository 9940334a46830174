"""Re-run recorded episodes of the published code with the adapter's patches and print each against its record: the
check that a speed-up (or a retrained checkpoint) leaves outcomes as recorded. Runs in THEIR venv:

    $PUBLISHED_ROOT/venv/bin/python benchmarks/published/probe.py --root $PUBLISHED_ROOT \
        --dataset pointmaze-medium-navigate-v0 --variant ttt 0/1/0 1/1/0        # SEED/TASK/EPISODE ...

Episodes come from the run's log (`runs/DATASET/gciql-STEPS/VARIANT.jsonl`); nothing is written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import adapter  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("episodes", nargs="+", help="SEED/TASK/EPISODE of recorded episodes")
    p.add_argument("--root", type=Path, default=Path(os.environ.get("PUBLISHED_ROOT", "~/meta-gc-rl-published")))
    p.add_argument("--dataset", default="pointmaze-medium-navigate-v0")
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--variant", default="ttt", choices=adapter.VARIANTS)
    p.add_argument("--lr", type=float, default=3e-4, help="as the run's (adapter.py's defaults)")
    p.add_argument("--num-steps", type=int, default=100)
    p.add_argument("--replan", type=int, default=100)
    p.add_argument("--no-speedups", action="store_true")
    a = p.parse_args()
    try:
        want = [tuple(int(x) for x in e.split("/")) for e in a.episodes]
        assert all(len(w) == 3 for w in want)
    except (ValueError, AssertionError):
        adapter.fail(f"episodes {a.episodes}: each must be SEED/TASK/EPISODE, e.g. 0/1/0")
    root = a.root.expanduser().resolve()
    code, run = root / "meta-gc-rl", root / "runs" / a.dataset / f"gciql-{a.steps}"
    log = run / f"{a.variant}.jsonl"
    if not log.is_file():
        adapter.fail(f"no episode log {log}; run benchmarks/published/run.sh first")
    rec = {(d["seed"], d["task"], d["episode"]): d for d in map(json.loads, log.read_text().splitlines())}
    missing = [w for w in want if w not in rec]
    if missing:
        adapter.fail(f"{log} records no episode {', '.join('/'.join(map(str, w)) for w in missing)}")
    os.chdir(code)
    sys.path.insert(0, str(code))
    os.environ.setdefault("WANDB_MODE", "disabled")
    import wandb

    wandb.init(mode="disabled")
    cfgs = {s: adapter.make_cfg(code, a.dataset, s, a.steps, run / f"seed{s}", a.variant, a.lr, a.num_steps, a.replan)
            for s in sorted({w[0] for w in want})}  # fmt: skip
    pub = adapter.Published(code, cfgs, fast=not a.no_speedups)
    for s, t, e in want:
        d, r = pub.episode(s, t, e), rec[(s, t, e)]
        same = (d["success"], d["steps"]) == (r["success"], r["steps"])
        print(f"seed {s} task {t} ep {e}: now success {d['success']:.0f} in {d['steps']} steps ({d['wall_s']:.0f} s, "
              f"patches {d['patches']}); recorded {r['success']:.0f} in {r['steps']} ({r['wall_s']:.0f} s, patches "
              f"{r.get('patches')}): {'as recorded' if same else 'DIFFERENT'}", flush=True)


if __name__ == "__main__":
    main()
