"""The test-time methods screen's table (issue 41): each row's success (mean +- s.e. over seeds), the Welch p
against the base row of its checkpoint, the wall time per episode, and TTGS's round metrics.

    python benchmarks/studies/test_time_methods_table.py benchmarks/results/test-time-methods/results.json
"""

from __future__ import annotations

import json
import sys

import numpy as np

from ttt.pipeline.report import welch


def main(path: str) -> None:
    records = json.load(open(path))["records"]
    bases = {r["checkpoint"]: r for r in records if r["run"]["variant"] == "base"}
    print("| row | agent | variant | success (mean +- s.e., 3 seeds x 5 tasks x 2 episodes) | vs base: Welch p | "
          "s / episode | TTGS: steps towards the final goal | path vertices | unreachable plans |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for r in records:
        run = r["run"]
        base = bases.get(r["checkpoint"])
        p = "-"
        if base is not None and base is not r:
            p = f"{welch(np.asarray(r['per_seed']), np.asarray(base['per_seed']))[1]:.3f}"
        rounds = r.get("rounds") or {}
        ttgs = ["-", "-", "-"]
        if "ttgs_goal_frac" in rounds:
            last = {k: np.asarray(rounds[k], dtype=float)[..., -1] for k in ("ttgs_goal_frac", "ttgs_hops",
                                                                              "ttgs_unreachable")}  # fmt: skip
            ttgs = [f"{np.nanmean(last['ttgs_goal_frac']):.2f}", f"{np.nanmean(last['ttgs_hops']):.1f}",
                    f"{int(np.nansum(last['ttgs_unreachable']))}"]  # fmt: skip
        n = np.asarray(r["success"]).size
        print(f"| {run['name']} | {run['agent']} | {run['variant']} | {r['mean']:.3f} +- {r['se']:.3f} | {p} | "
              f"{r['wall_s'] / n:.1f} | " + " | ".join(ttgs) + " |")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])
