"""`ttt` against the authors' published code, side by side: the same GC-TTT work, timed in turns.

One pair is two whole processes run one after the other on the same machine:

- A, published: their code (through `run.sh` and our adapter, with the adapter's speed-ups, which only make theirs
  faster; `--as-published`: without them) runs ONE GC-TTT episode with their critic rule on their own checkpoint of
  `--dataset` (training seed `--seed`, task `--task`, episode 0), in a scratch work folder that links their
  checkpoint, so nothing of a row's log or record is touched;
- B, `ttt`: `ttt eval CKPT --variants ttt` runs the same task once per training seed of `ttt`'s checkpoint (3), with
  the same settings: rule `episodes` (theirs), lr, N updates per round at fine-tuning batch `--batch` (theirs: 1024),
  a round every K steps.

Pick a task that both checkpoints fail (pointmaze-medium stitch task 3 at 10k updates: every episode of both rows
fails), so that every episode runs all 1000 steps and 10 rounds on both sides: equal work. The script says when an
episode succeeded (then the work is not equal and the ratio is not quoted).

Figures per pair: whole-process wall and CPU seconds (startup, data loading and compiling included: what a user
waits for), the episode seconds each side reports (published: their evaluate() call; `ttt`: the evaluation), and
the ratio A / B per episode (B's seconds over its episodes). The pairs alternate A B A B, so a machine whose load
drifts weighs on both; quote the median ratio.

    python benchmarks/published/speed_pair.py --published-root /work/cache/i37pub \
        --ckpt ~/.cache/ttt/ckpt/pointmaze-medium-stitch-v0/gciql-cpu-b89879cf16bd --pairs 3 \
        --out benchmarks/results/published/speed_pair.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent.parent


def fail(msg: str) -> None:
    print(f"speed_pair: {msg}", file=sys.stderr)
    raise SystemExit(2)


def _last_line(p: subprocess.CompletedProcess) -> str:
    """The last line a failed side printed (its one-line error, or the end of a traceback)."""
    lines = (p.stderr or p.stdout or "").strip().splitlines()
    return lines[-1] if lines else "(no output)"


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, float, subprocess.CompletedProcess]:
    """Run `cmd` to the end; its wall seconds and its (and its children's) CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, p


def published_side(args, scratch: Path) -> dict:
    run_dir = f"gciql-{args.steps}"
    src = args.published_root / "runs" / args.dataset / run_dir / f"seed{args.seed}"
    work = scratch / "work"
    for d in (work, scratch / "out"):  # fresh: the adapter skips (and adopts from a record) episodes it finds
        shutil.rmtree(d, ignore_errors=True)
    (work / args.dataset / run_dir).mkdir(parents=True)
    (work / args.dataset / run_dir / f"seed{args.seed}").symlink_to(src)
    cmd = ["bash", str(ROOT / "benchmarks" / "published" / "run.sh"), "--dataset", args.dataset, "--seeds",
           str(args.seed), "--steps", str(args.steps), "--tasks", str(args.task), "--episodes", "1", "--variants",
           "ttt", "--lr", str(args.lr), "--num-steps", str(args.N), "--replan", str(args.K), "--work", str(work),
           "--out", str(scratch / "out")] + (["--no-speedups"] if args.as_published else [])  # fmt: skip
    env = {**os.environ, "PUBLISHED_ROOT": str(args.published_root)}
    wall, cpu, p = timed(cmd, env)
    log = work / args.dataset / run_dir / "ttt.jsonl"
    if p.returncode != 0 or not log.is_file():
        fail(f"the published side failed (exit {p.returncode}): {_last_line(p)}")
    if f"ttt seed {args.seed} task {args.task} ep 0:" not in p.stdout:
        fail("the published side ran no episode (it found one to reuse): nothing to time")
    (ep,) = [json.loads(line) for line in log.read_text().splitlines()]
    return dict(
        wall_s=wall, cpu_s=cpu, episodes=1, episode_s=ep["wall_s"], success=[ep["success"]], steps=[ep["steps"]]
    )


def ttt_side(args, scratch: Path) -> dict:
    out = scratch / "ttt.json"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "ttt.cli", "eval", str(args.ckpt), "--variants", "ttt", "--rule", "episodes",
           "--tasks", str(args.task), "--episodes", "1", "--lr", str(args.lr), "--N", str(args.N), "--K",
           str(args.K), "--batch", str(args.batch), "--json", str(out)]  # fmt: skip
    wall, cpu, p = timed(cmd)
    if p.returncode != 0 or not out.is_file():
        fail(f"the ttt side failed (exit {p.returncode}): {_last_line(p)}")
    v = json.loads(out.read_text())["variants"]["ttt"]
    success = np.asarray(v["success"], float).ravel().tolist()  # (seeds, tasks, episodes) -> one list
    steps = np.asarray(v["steps"], int).ravel().tolist()
    return dict(wall_s=wall, cpu_s=cpu, episodes=len(success), episode_s=v.get("wall_s"), success=success, steps=steps)


def summarise(pairs: list[dict]) -> dict:
    """Median ratios over the pairs, quoted only when every episode on both sides failed (all rounds: equal work)."""
    equal = all(x == 0 for pr in pairs for side in ("published", "ttt") for x in pr[side]["success"])
    ratios = [pr["ratio_wall_per_episode"] for pr in pairs]
    inner = [pr["ratio_episode_s"] for pr in pairs if pr["ratio_episode_s"]]
    return dict(
        median_ratio_wall_per_episode=statistics.median(ratios) if equal else None,
        median_ratio_episode_s=statistics.median(inner) if equal and inner else None,
        equal_work=equal,
        note=None if equal else "an episode succeeded on one side: unequal work, no ratio quoted",
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--published-root", type=Path, required=True, help="PUBLISHED_ROOT (their checkout, venv, runs)")
    p.add_argument("--ckpt", type=Path, required=True, help="`ttt`'s checkpoint folder (same dataset and budget)")
    p.add_argument("--dataset", default="pointmaze-medium-stitch-v0")
    p.add_argument("--steps", type=int, default=10_000, help="their checkpoint's pre-training updates")
    p.add_argument("--seed", type=int, default=0, help="their checkpoint's training seed")
    p.add_argument("--task", type=int, default=3, help="a task both checkpoints fail (equal work: all 10 rounds)")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--N", type=int, default=100, help="fine-tuning updates per round (theirs: num_steps)")
    p.add_argument("--K", type=int, default=100, help="steps per round (theirs: replan_horizon)")
    p.add_argument("--batch", type=int, default=1024, help="fine-tuning batch (theirs: 1024)")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument(
        "--as-published",
        action="store_true",
        help="run their code exactly as published: without the adapter's speed-ups (README, Cost)",
    )
    p.add_argument("--out", type=Path, default=None, help="write the figures to this JSON file")
    args = p.parse_args()
    if args.pairs < 1:
        fail("--pairs must be >= 1")
    if not (args.published_root / "meta-gc-rl").is_dir():
        fail(f"--published-root {args.published_root}: no meta-gc-rl/ checkout there (benchmarks/published/setup.sh)")
    src = args.published_root / "runs" / args.dataset / f"gciql-{args.steps}" / f"seed{args.seed}"
    if not (src / f"params_{args.steps}.pkl").is_file():
        fail(f"no published checkpoint {src}/params_{args.steps}.pkl (benchmarks/published/run.sh pre-trains it)")
    args.ckpt = args.ckpt.expanduser()
    if not (args.ckpt / "meta.json").is_file():
        fail(f"--ckpt {args.ckpt}: not a ttt checkpoint folder (no meta.json)")
    pairs = []
    with tempfile.TemporaryDirectory(prefix="speed-pair-") as tmp:
        scratch = Path(tmp)
        for i in range(args.pairs):
            a = published_side(args, scratch)
            print(
                f"pair {i + 1}: published {a['wall_s']:.1f} s wall ({a['episode_s']:.1f} s episode), "
                f"success {a['success']}, steps {a['steps']}",
                flush=True,
            )
            b = ttt_side(args, scratch)
            per_b = b["wall_s"] / b["episodes"]
            ratio = a["wall_s"] / per_b
            print(
                f"pair {i + 1}: ttt {b['wall_s']:.1f} s wall for {b['episodes']} episodes ({per_b:.1f} s each), "
                f"success {b['success']}, steps {b['steps']}; published / ttt per episode {ratio:.2f}x",
                flush=True,
            )
            pairs.append(dict(published=a, ttt=b, ratio_wall_per_episode=ratio,
                              ratio_episode_s=(a["episode_s"] / (b["episode_s"] / b["episodes"])
                                               if b["episode_s"] else None)))  # fmt: skip
    summary = summarise(pairs)
    print(
        f"median published / ttt per episode: whole process {summary['median_ratio_wall_per_episode']}, "
        f"episode only {summary['median_ratio_episode_s']} ({summary['note'] or 'equal work'})"
    )
    if args.out:
        doc = dict(
            what=__doc__.split("\n")[0],
            command="python benchmarks/published/speed_pair.py " + " ".join(sys.argv[1:]),
            published_speedups=not args.as_published,
            settings=dict(
                dataset=args.dataset,
                steps=args.steps,
                seed=args.seed,
                task=args.task,
                lr=args.lr,
                N=args.N,
                K=args.K,
                batch=args.batch,
                rule="episodes (theirs: filter_by_recursive_mdp)",
            ),
            machine=f"{platform.node()}, {os.cpu_count()} CPUs",
            load_avg_1m_at_end=os.getloadavg()[0],
            written=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            pairs=pairs,
            **summary,
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
