"""Base rows (no TTT): pre-train every agent on each dataset and evaluate it on OGBench's CPU environment.

Usage:
    python benchmarks/studies/base_rows.py [--datasets pointmaze-medium-navigate-v0,pointmaze-medium-stitch-v0]
        [--agents gcbc,gciql,gciql-awr,saw,qrl] [--profile cpu] [--seeds 3] [--episodes 10]
        [--out benchmarks/results/base] [--ckpt runs/base] [--dir DIR]

Each (dataset, agent) runs `ttt pretrain` (resumable: rerunning continues an interrupted run) and then
`ttt eval --json`; finished evaluations are skipped. `--report` only rebuilds `OUT/base_rows.md` from the
JSON files. Figures are mean and standard error over seeds of the per-seed success rate (5 tasks x episodes).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

# GC-TTT paper, base rows for pointmaze "expert" (navigate) / "play" (stitch): Table 1 (5 seeds) for GC-BC,
# GC-IQL-DDPG and SAW; Table 2 (3 seeds) for GC-IQL-AWR; the QRL table of the appendix.
PAPER_BASE = {
    ("gcbc", "pointmaze-medium-navigate-v0"): 0.05,
    ("gcbc", "pointmaze-medium-stitch-v0"): 0.30,
    ("gciql", "pointmaze-medium-navigate-v0"): 0.50,
    ("gciql", "pointmaze-medium-stitch-v0"): 0.21,
    ("saw", "pointmaze-medium-navigate-v0"): 0.96,
    ("saw", "pointmaze-medium-stitch-v0"): 0.84,
    ("gciql-awr", "pointmaze-medium-navigate-v0"): 0.16,
    ("gciql-awr", "pointmaze-medium-stitch-v0"): 0.31,
    ("qrl", "pointmaze-medium-navigate-v0"): 0.91,
    ("qrl", "pointmaze-medium-stitch-v0"): 0.72,
}


def sh(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    t0 = time.time()
    subprocess.run(cmd, check=True)
    print(f"  ({time.time() - t0:.0f} s)", flush=True)


def report(out: Path) -> str:
    rows = []
    for f in sorted(out.glob("*.json")):
        doc = json.loads(f.read_text())
        rows.append(doc)
    lines = [
        "| dataset | agent | steps | seeds x tasks x episodes | success (mean +- s.e.) | per seed | paper base | "
        "train s | updates/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for d in rows:
        per_seed = [sum(sum(t) for t in s) / (len(s) * len(s[0])) for s in d["success"]]
        paper = PAPER_BASE.get((d["agent"], d["dataset"]))
        lines.append(
            f"| {d['dataset']} | {d['agent']} | {d['step']} | {len(d['success'])} x {len(d['tasks'])} x "
            f"{d['episodes']} | {d['mean']:.3f} +- {d['se']:.3f} | {', '.join(f'{r:.2f}' for r in per_seed)} | "
            f"{'-' if paper is None else f'{paper:.2f}'} | {d.get('train_s', float('nan')):.0f} | "
            f"{d.get('updates_per_s', float('nan')):.1f} |"
        )
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", default="pointmaze-medium-navigate-v0,pointmaze-medium-stitch-v0")
    p.add_argument("--agents", default="gcbc,gciql,gciql-awr,saw,qrl")
    p.add_argument("--profile", default="cpu")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--out", default="benchmarks/results/base")
    p.add_argument("--ckpt", default="runs/base")
    p.add_argument("--dir", default=None)
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ttt = [sys.executable, "-m", "ttt.cli"]
    d_opt = ["--dir", args.dir] if args.dir else []
    if not args.report:
        for dataset in args.datasets.split(","):
            for agent in args.agents.split(","):
                result = out / f"{dataset}__{agent}.json"
                if result.exists():
                    continue
                ck = Path(args.ckpt) / args.profile / dataset / agent
                t0 = time.time()
                sh([*ttt, "pretrain", "--dataset", dataset, "--agent", agent, "--seeds", str(args.seeds),
                    "--profile", args.profile, "--out", str(ck), *d_opt])
                train_s = time.time() - t0
                tmp = out / f".{result.name}.tmp"
                sh([*ttt, "eval", str(ck), "--episodes", str(args.episodes), "--json", str(tmp), *d_opt])
                doc = json.loads(tmp.read_text())
                meta = json.loads((ck / "meta.json").read_text())
                doc.update(train_s=train_s, updates_per_s=meta.get("updates_per_s", float("nan")),
                           command=" ".join(["python", *sys.argv]))
                result.write_text(json.dumps(doc, indent=1))
                tmp.unlink()
    table = report(out)
    (out / "base_rows.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
