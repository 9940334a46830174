"""The paper's Table 1 beside ours (issue 37): one line per (environment, dataset, backbone).

    python benchmarks/studies/table1.py [--write benchmarks/RESULTS.md]

Each cell is a finished evaluation record under benchmarks/results/ (found as `claims.py` finds them: the record with
the most episodes, then the newest): mean +- s.e. over the training seeds of each seed's success rate. `episodes` is
the total per row (seeds x tasks x episodes), `updates` the pre-training length of the checkpoint. The verdict
compares the critic row with the base row on the same checkpoint and episodes (paired): a difference under two
standard errors of the difference is "no difference"; the paper's own direction is read the same way from its
numbers (a paper gain under two of its s.e. expects no difference). `published code on our data` is the authors'
code run on our generated data (benchmarks/published/, records under benchmarks/results/published/), where run.
Missing rows print as `not run yet`. With `--write`, the table replaces the block between `<!-- table1 -->` and
`<!-- /table1 -->` in the given file.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claims import RES, Row, load, paired, replace_block, unpaired_note, welch  # noqa: E402

LC, T1, PM, LEADS = "learning-curves/evals", "table1/evals", "paper-main", "gciql-leads/evals"


# The paper's SAW on antmaze-medium (Table 1), navigate and stitch: base, s.e., critic, s.e.
SAW_ANTMAZE = ((0.97, 0.01, 0.97, 0.01), (0.98, 0.01, 0.97, 0.01))
# The same for GC-IQL (DDPG+BC)
GCIQL_ANT = ((0.64, 0.05, 0.85, 0.02), (0.24, 0.05, 0.68, 0.05))


def _pub(env: str, data: str, steps: int) -> str:
    """The glob of the published code's GC-IQL records for one dataset and pre-training length."""
    return f"published/{env}-{data}-v0__gciql__*__{steps}.json"


@dataclass(frozen=True)
class Line:
    env: str
    data: str
    backbone: str
    updates: str
    base: Row
    critic: Row
    free: Row | None  # critic-free (the paper reports it on navigate only)
    paper: tuple[float, float, float, float]  # base, base s.e., critic, critic s.e. (Table 1, tuned)
    published: str | None = None  # glob of the published code's records under benchmarks/results/published/
    note: str = ""


# The paper's Table 1 (tuned) on pointmaze-medium: (agent, label, navigate, stitch), each base, base s.e., critic,
# critic s.e.; shared by the cpu-profile, the GPU paper-profile and the GC-IQL leads' lines.
POINTMAZE_PAPER = (
    ("gcbc", "GC-BC", (0.05, 0.01, 0.78, 0.02), (0.30, 0.09, 0.93, 0.02)),
    ("gciql", "GC-IQL", (0.50, 0.03, 0.60, 0.00), (0.21, 0.04, 0.38, 0.05)),
)


def lines() -> list[Line]:
    out = []
    for agent, label, nav, st in POINTMAZE_PAPER:
        for data, short, paper in (("navigate", "nav", nav), ("stitch", "stitch", st)):
            p = f"{LC}/{agent}-{short}-steps100000-variant"
            out.append(Line("pointmaze-medium", data, label, "100k", Row(p + "base"), Row(p + "ttt"),
                            Row(p + "ttt-mc") if data == "navigate" else None, paper,
                            published=_pub("pointmaze-medium", data, 100000) if agent == "gciql" else None))
    devices = sorted(g.parent.name for g in RES.glob("gpu/*/table1"))
    for agent, label, nav, st in POINTMAZE_PAPER if devices else ():
        for data, paper in (("navigate", nav), ("stitch", st)):
            # The GPU queue's paper-profile rows (benchmarks/gpu_queue.sh: OGBench's 512x3 networks and batch 1024,
            # GPU_QUEUE_STEPS updates, 200k by default, so that a row fits one 15-minute lease). A lease may get
            # another kind of card, so each line is read from the device folder that holds it (critic record first,
            # then base); base and critic from that one folder, which holds the checkpoint they share.
            held = [d for kind in ("ttt", "base") for d in devices
                    if any(RES.glob(f"gpu/{d}/{T1}/{agent}-{kind}-{data}-*.json"))]  # fmt: skip
            dev = held[0] if held else "*"
            p = f"gpu/{dev}/{T1}/{agent}-"
            out.append(Line("pointmaze-medium", data, f"{label}, paper profile" + (f" ({dev})" if held else ""),
                            "200k", Row(f"{p}base-{data}"), Row(f"{p}ttt-{data}"), None, paper))
    _, _, iql_nav, iql_st = POINTMAZE_PAPER[1]
    for data, short, paper in (("navigate", "nav", iql_nav), ("stitch", "stitch", iql_st)):
        p = f"{LEADS}/{short}-"
        out.append(Line("pointmaze-medium", data, "GC-IQL", "10k", Row(p + "base"), Row(p + "ttt"),
                        Row(p + "ttt-mc") if data == "navigate" else None, paper,
                        published=_pub("pointmaze-medium", data, 10000)))
        for alpha in ("0.3", "3"):
            free = Row(p + f"ttt-mc-alpha{alpha}") if data == "navigate" else None
            out.append(Line("pointmaze-medium", data, f"GC-IQL, alpha {alpha} at fine-tuning", "10k", Row(p + "base"),
                            Row(p + f"ttt-alpha{alpha}"), free, paper, note="not the paper's loss"))  # fmt: skip
        if data == "stitch":
            # Issue 41's combined variant on the same 10k checkpoint (test-time-methods: the 30-episode screen, or the
            # 150-episode rows): GC-TTT aimed at TTGS's waypoints (tau 12 / threshold 24), the backbone's own loss.
            tm = "test-time-methods*/evals/stitch-gciql-"
            out.append(Line("pointmaze-medium", data, "GC-IQL, aimed at TTGS's waypoints (ttt+ttgs)", "10k",
                            Row(tm + "base"), Row(tm + "ttt+ttgs-thr24"), None, paper,
                            note="not the paper's method: GC-TTT aimed at TTGS's subgoal"))  # fmt: skip
    for data, paper in (("navigate", (0.96, 0.01, 0.99, 0.01)), ("stitch", (0.84, 0.03, 0.97, 0.01))):
        # paper-main's 15-episode screen (its critic row ran rule `paper`) or paper-main-150's rows (the default rule
        # `episodes`): the record with the most episodes wins, as everywhere.
        p = f"{PM}*/evals/saw-"
        rule_paper = not any(RES.glob(f"{PM}-150/evals/saw-ttt-{data}-*.json"))
        out.append(Line("pointmaze-medium", data, "SAW", "10k", Row(f"{p}base-{data}"), Row(f"{p}ttt-{data}"),
                        Row(f"{p}ttt-mc-{data}") if data == "navigate" else None, paper,
                        note="rule paper" if rule_paper else ""))
    for agent, label, nav, st in (
        ("gcbc", "GC-BC", (0.29, 0.02, 0.48, 0.03), (0.47, 0.05, 0.76, 0.03)),
        ("gciql", "GC-IQL", *GCIQL_ANT),
        ("saw", "SAW", *SAW_ANTMAZE),
    ):
        for data, paper in (("navigate", nav), ("stitch", st)):
            p = f"{T1}/{agent}-"
            out.append(Line("antmaze-medium", data, label, "100k", Row(f"{p}base-{data}"), Row(f"{p}ttt-{data}"),
                            Row(f"{p}ttt-mc-{data}") if data == "navigate" else None, paper,
                            published=_pub("antmaze-medium", data, 100000) if agent == "gciql" else None))
            if agent == "gciql":  # issue 37's lead: alpha 3.0 during fine-tuning (the backbone's antmaze alpha is 0.3)
                label3 = "GC-IQL, alpha 3 at fine-tuning"
                out.append(Line("antmaze-medium", data, label3, "100k", Row(f"{p}base-{data}"),
                                Row(f"{p}ttt-alpha3-{data}"), None, paper, note="not the paper's loss"))  # fmt: skip
    for gpu in sorted(RES.glob("gpu/*/table1-antmaze")):
        # The GPU queue's antmaze rows (benchmarks/gpu_queue.sh, ANT_GROUPS): pipelines/table1.toml's SAW rows as the
        # CPU runs them (cpu profile, 100k; earlier queues), and its GC-IQL stitch rows in the paper profile
        # (GPU_QUEUE_STEPS updates, 200k by default), each line where the folder holds its records.
        dev = gpu.parent.name
        p = f"gpu/{dev}/table1-antmaze/evals/"
        if any(gpu.glob("evals/saw-*")):
            for data, paper in zip(("navigate", "stitch"), SAW_ANTMAZE, strict=True):
                out.append(Line("antmaze-medium", data, f"SAW, cpu profile ({dev})", "100k",
                                Row(f"{p}saw-base-{data}"), Row(f"{p}saw-ttt-{data}"),
                                Row(f"{p}saw-ttt-mc-{data}") if data == "navigate" else None, paper))
        if any(gpu.glob("evals/gciql-*")):
            out.append(Line("antmaze-medium", "stitch", f"GC-IQL, paper profile ({dev})", "200k",
                            Row(f"{p}gciql-base-stitch"), Row(f"{p}gciql-ttt-stitch"), None, GCIQL_ANT[1]))
    return out


def _pm(x: dict | None, n: int | None = None) -> str:
    """``mean +- s.e.`` over seeds; ``(K ep.)`` added when the record holds another number of episodes than the row's
    ``n`` (e.g. a 30-episode screen beside a 150-episode pair), so no cell passes for a figure it is not."""
    if x is None:
        return "not run yet"
    s = x["per_seed"]
    own = f" ({x['n']} ep.)" if n is not None and x["n"] != n else ""
    return f"{s.mean():.2f} +- {s.std(ddof=1) / math.sqrt(len(s)):.2f}{own}"


def _se(x: dict) -> float:
    return x["per_seed"].std(ddof=1) / math.sqrt(len(x["per_seed"]))


def published(pattern: str | None) -> str:
    """The published code's base -> critic on our data, from its records (benchmarks/published/: `variant`, `mean`,
    `se`, `n_episodes`, `complete`, `wall_s_per_episode`), if run."""
    if pattern is None:
        return "-"
    # the first run's records, then any rerun on other checkpoints in a subfolder (e.g. retrained/: the same seeds
    # pre-trained again on a replacement machine, whose parameters differ), each shown as its own base -> critic
    folder, name = pattern.rsplit("/", 1)
    runs = []
    for sub in ("", *sorted(p.name for p in (RES / folder).glob("*/") if p.is_dir())):
        rows = {}
        for p in sorted((RES / folder / sub).glob(name)):
            d = json.loads(p.read_text())
            rows[d.get("variant", p.stem)] = d
        if rows:
            runs.append((sub, rows))
    if not runs:
        return "not run"
    return "; ".join((f"{sub}: " if sub else "") + _published_run(rows) for sub, rows in runs)


def _published_run(rows: dict) -> str:
    def cell(v: str) -> str:
        d = rows.get(v)
        if d is None:
            return "not run"
        if not d.get("complete", True) or d.get("mean") is None:
            asked = d.get("episodes_asked", 0) * len(d.get("seeds", [])) * len(d.get("tasks", []))
            done = len(d.get("episodes_run", []))
            return f"incomplete: {done} of {asked} episodes run, {d.get('mean_episodes_run', float('nan')):.2f}"
        return f"{d['mean']:.2f} +- {d['se']:.2f} ({d['n_episodes']} ep., {d['wall_s_per_episode']:.0f} s/ep.)"

    return f"{cell('base')} -> {cell('ttt')}"


def verdict(line: Line, base: dict | None, critic: dict | None) -> str:
    if base is None or critic is None:
        return "-"
    pb, pbs, pc, pcs = line.paper
    paper_gain = pc - pb > 2 * math.hypot(pbs, pcs)
    diff = critic["per_seed"].mean() - base["per_seed"].mean()
    two_se = 2 * math.hypot(_se(base), _se(critic))
    shown = "no difference" if abs(diff) <= two_se or diff == 0 else ("gain" if diff > 0 else "loss")
    p_seed = welch(base["per_seed"], critic["per_seed"])
    p_ep = welch(base["episodes"], critic["episodes"]) if paired(base, critic) else float("nan")
    ok = (shown == "gain") if paper_gain else (shown == "no difference")
    word = "reproduced" if ok else "not reproduced"
    note = unpaired_note(base, critic)
    return f"{word} ({shown}, {diff:+.2f}; Welch p {p_seed:.2f} seeds / {p_ep:.2f} episodes){note}"


def records(ln: Line) -> tuple[dict | None, dict | None, dict | None]:
    """A line's base, critic and critic-free records; the base is the one of the critic's episode count where it
    exists (a 30-episode screen is compared with the base's first 30, not its 150)."""
    critic = load(ln.critic)
    base = load(ln.base, critic["n"] if critic is not None else None)
    return base, critic, load(ln.free) if ln.free is not None else None


def table() -> str:
    head = ("| env | data | backbone | updates | episodes | base | critic-free | critic | paper base → critic | "
            "published code on our data | verdict |")
    rows = [head, "|---|---|---|---|---|---|---|---|---|---|---|"]
    for ln in lines():
        base, critic, free = records(ln)
        n = critic["n"] if critic is not None else (base["n"] if base is not None else None)
        pb, pbs, pc, pcs = ln.paper
        free_cell = "-" if ln.free is None else _pm(free, n)
        note = f" ({ln.note})" if ln.note and critic is not None else ""
        steps = {x["step"] for x in (base, critic, free) if x is not None and x.get("step")}
        updates = ", ".join(f"{k // 1000}k" for k in sorted(steps)) or ln.updates
        rows.append(
            f"| {ln.env} | {ln.data} | {ln.backbone} | {updates} | {n if n is not None else '-'} | {_pm(base, n)} | "
            f"{free_cell} | {_pm(critic)}{note} | {pb:.2f} +- {pbs:.2f} → {pc:.2f} +- {pcs:.2f} | "
            f"{published(ln.published)} | {verdict(ln, base, critic)} |"
        )
    return "\n".join(rows)


def commands() -> str:
    """Each line's records and the commands that wrote them (as `claims.py` reconstructs them)."""
    out = []
    for ln in lines():
        base, critic, free = records(ln)
        for what, x in (("base", base), ("critic-free", free), ("critic", critic)):
            if x is not None:
                out.append(f"- {ln.env} {ln.data} {ln.backbone} {what} ({x['shape']}): {x['command']}")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, help="replace the <!-- table1 --> block of this file")
    args = ap.parse_args()
    out = table() + "\n\nCommands (seeds x tasks x episodes):\n\n" + commands()
    print(out)
    return replace_block(args.write, "table1", out) if args.write else 0


if __name__ == "__main__":
    raise SystemExit(main())
