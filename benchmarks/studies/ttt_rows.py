"""Base vs GC-TTT rows on pointmaze-medium navigate and stitch (cpu profile), through `ttt eval`.

Usage:
    python benchmarks/studies/ttt_rows.py [--only DATASET:AGENT:VARIANT,...] [--episodes 10] [--chunk 3]
        [--ckpt runs/base/cpu] [--out benchmarks/results/ttt] [--report]

Every (dataset, agent, variant) is one `ttt eval CHECKPOINT --variants VARIANT --json OUT/...json` with the
paper's tuned GC-TTT hyper-parameters (its hyper-parameter table: pointmaze "expert" = navigate, "play" =
stitch; q = 0.05); finished ones are skipped, so an interrupted sweep continues where it stopped. The checkpoints
are the base rows' (benchmarks/studies/base_rows.py: cpu profile, 3 seeds, 10k steps). `--report` rebuilds
OUT/ttt_rows.md from the JSON files: mean and standard error over seeds of the per-seed success rate.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

NAV, STITCH = "pointmaze-medium-navigate-v0", "pointmaze-medium-stitch-v0"
# (agent, variant, dataset) -> (lr, N, K) from the paper's hyper-parameter table.
TUNED = {
    ("gcbc", "ttt-mc", NAV): (3e-4, 50, 100),
    ("gcbc", "ttt-mc", STITCH): (3e-5, 100, 200),
    ("gcbc", "ttt", NAV): (3e-5, 200, 100),
    ("gcbc", "ttt", STITCH): (3e-4, 100, 100),
    ("gciql", "ttt-mc", NAV): (3e-4, 50, 100),
    ("gciql", "ttt-mc", STITCH): (3e-4, 200, 100),
    ("gciql", "ttt", NAV): (3e-4, 100, 200),
    ("gciql", "ttt", STITCH): (3e-4, 200, 100),
}
# The paper's Table 1 (5 seeds): pointmaze expert (navigate) / play (stitch); None where it reports none.
PAPER = {
    ("gcbc", "base", NAV): 0.05, ("gcbc", "base", STITCH): 0.30,
    ("gcbc", "ttt-mc", NAV): 0.76, ("gcbc", "ttt-mc", STITCH): None,
    ("gcbc", "ttt", NAV): 0.78, ("gcbc", "ttt", STITCH): 0.93,
    ("gciql", "base", NAV): 0.50, ("gciql", "base", STITCH): 0.21,
    ("gciql", "ttt-mc", NAV): 0.55, ("gciql", "ttt-mc", STITCH): None,
    ("gciql", "ttt", NAV): 0.60, ("gciql", "ttt", STITCH): 0.38,
}  # fmt: skip
DEFAULT = [
    (NAV, "gcbc", "base"), (NAV, "gcbc", "ttt-mc"), (NAV, "gcbc", "ttt"),
    (STITCH, "gcbc", "base"), (STITCH, "gcbc", "ttt"),
    (NAV, "gciql", "base"), (NAV, "gciql", "ttt"),
    (STITCH, "gciql", "base"), (STITCH, "gciql", "ttt"),
    (STITCH, "gcbc", "ttt-mc"), (NAV, "gciql", "ttt-mc"),
]  # fmt: skip


def command(ckpt: Path, dataset: str, agent: str, variant: str, episodes: int, chunk: int, out: Path) -> list[str]:
    cmd = ["ttt", "eval", str(ckpt / dataset / agent), "--variants", variant, "--episodes", str(episodes),
           "--chunk", str(chunk), "--json", str(out)]  # fmt: skip
    if variant != "base":
        lr, n, k = TUNED[(agent, variant, dataset)]
        cmd += ["--lr", str(lr), "--N", str(n), "--K", str(k)]
    return cmd


def report(out: Path) -> str:
    lines = [
        "| dataset | agent | variant | lr, N, K | seeds x tasks x episodes | success (mean +- s.e.) | per seed | "
        "paper | episodes/s | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for dataset, agent, variant in DEFAULT:
        f = out / dataset / f"{agent}-{variant}.json"
        if not f.exists():
            continue
        d = json.loads(f.read_text())
        v = d["variants"][variant]
        per_seed = [sum(map(sum, s)) / (len(s) * len(s[0])) for s in v["success"]]
        hp = "-" if variant == "base" else ", ".join(str(x) for x in TUNED[(agent, variant, dataset)])
        paper = PAPER.get((agent, variant, dataset))
        n = (len(v["success"]), len(d["tasks"]), d["episodes"])
        lines.append(
            f"| {dataset} | {agent} | {variant} | {hp} | {n[0]} x {n[1]} x {n[2]} | {v['mean']:.3f} +- {v['se']:.3f} "
            f"| {', '.join(f'{r:.2f}' for r in per_seed)} | {'-' if paper is None else f'{paper:.2f}'} | "
            f"{v['episodes_per_s']:.2f} | {v['wall_s']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="comma-separated DATASET:AGENT:VARIANT")
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--chunk", type=int, default=3)
    ap.add_argument("--ckpt", type=Path, default=Path("runs/base/cpu"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/ttt"))
    ap.add_argument("--report", action="store_true")
    args = ap.parse_args()
    todo = DEFAULT if args.only is None else [tuple(x.split(":")) for x in args.only.split(",")]
    if not args.report:
        for dataset, agent, variant in todo:
            out = args.out / dataset / f"{agent}-{variant}.json"
            if out.exists():
                print(f"skip {out} (done)", flush=True)
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            cmd = command(args.ckpt, dataset, agent, variant, args.episodes, args.chunk, out)
            print("+", " ".join(cmd), flush=True)
            t0 = time.time()
            subprocess.run(cmd, check=True)
            print(f"  ({time.time() - t0:.0f} s)", flush=True)
    (args.out / "ttt_rows.md").parent.mkdir(parents=True, exist_ok=True)
    text = report(args.out)
    (args.out / "ttt_rows.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
