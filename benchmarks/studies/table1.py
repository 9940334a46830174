"""The paper's Table 1 beside ours (issue 37): one line per (environment, dataset, backbone).

    python benchmarks/studies/table1.py [--write benchmarks/RESULTS.md] [--write benchmarks/README.md]

Each cell is a finished evaluation record under benchmarks/results/, chosen as `claims.load_pair` chooses (the most
episodes the base and critic rows hold on the same episodes, then a pair by digest; never by file time): mean +- s.e.
over the training seeds of each seed's success rate. `episodes` is the total per row (seeds x tasks x episodes;
"screen" under 150), `updates` the pre-training length of the checkpoint. B - A is critic minus base over seeds with
its s.e., the stratified bootstrap's 95% interval and p (`ttt.stats`): paired where both records carry the same
checkpoint digest, else Welch's test, marked "unpaired". The verdict is `ttt.stats.verdict` (docs/algorithm.md,
"Statistics and verdicts"), the paper's direction read from its own means and s.e.; the lines that change the method
(a BC weight at fine-tuning, TTGS's waypoints) are "modified method (not scored)". `published code on our data` is
the authors' code run on our generated data (benchmarks/published/, records under benchmarks/results/published/), with
its seeds and episodes. With `--write FILE`, the full table replaces the block between `<!-- table1 -->` and
`<!-- /table1 -->` and the front page's compact table the `<!-- table1-front -->` block, whichever FILE holds.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ttt import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claims import RES, Row, ci, diff, load, load_pair, replace_block  # noqa: E402

LC, T1, PM, LEADS = "learning-curves/evals", "table1/evals", "paper-main", "gciql-leads/evals"
# Issue 63's evidence rows: the antmaze navigate lines whose 3-seed verdict was "weak evidence", again with the paper's
# 5 training seeds (5 x 5 tasks x 6 = 150 episodes), on the reference draw of the data, one XLA thread on one core
T5 = "table1-5seeds/evals"


# The paper's SAW on antmaze-medium (Table 1), navigate and stitch: base, s.e., critic, s.e.
SAW_ANTMAZE = ((0.97, 0.01, 0.97, 0.01), (0.98, 0.01, 0.97, 0.01))
# The same for GC-IQL (DDPG+BC)
GCIQL_ANT = ((0.64, 0.05, 0.85, 0.02), (0.24, 0.05, 0.68, 0.05))
# The paper's Table 1 on cube-single play: (agent, label, (base, base s.e., critic, critic s.e.))
CUBE_PAPER = (("gcbc", "GC-BC", (0.05, 0.02, 0.08, 0.01)), ("gciql", "GC-IQL", (0.74, 0.03, 0.75, 0.02)),
              ("saw", "SAW", (0.73, 0.03, 0.71, 0.03)))  # fmt: skip
# `ttt run paper-main --set data_episodes=1000 --set steps=100000 --only "{gcbc,gciql,saw}-{base,ttt}-cube" --out
# benchmarks/results/table1-cube`
TC = "table1-cube/evals"


# Which generation of the antmaze data each antmaze line's checkpoint trained on (RESULTS.md, "Antmaze data"): the
# committed reference draw, or draw B (another machine's, which differs through the CPU's BLAS kernel).
ANT_DRAW = {("gcbc", "navigate"): "B", ("gcbc", "stitch"): "reference", ("gciql", "navigate"): "B",
            ("gciql", "stitch"): "B", ("saw", "navigate"): "reference", ("saw", "stitch"): "reference"}  # fmt: skip


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
    modified: bool = False  # not the paper's method (a changed loss or target): shown, not scored
    draw: str = ""  # antmaze: which generation of the data the checkpoint trained on
    superseded_by: str = ""  # the backbone label of a line that measures the same cell with more evidence


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
        # The 10k GC-IQL checkpoint of each dataset: the learning curves' 150-episode rows; gciql-leads' 30-episode
        # screens (and gciql-leads-150's rows) ran on the same cache key (the same eval keys where settings agree).
        p = f"{LC}/gciql-{short}-steps10000-variant"
        out.append(Line("pointmaze-medium", data, "GC-IQL", "10k", Row(p + "base"), Row(p + "ttt"),
                        Row(p + "ttt-mc") if data == "navigate" else None, paper,
                        published=_pub("pointmaze-medium", data, 10000)))
        lp = f"gciql-leads*/evals/{short}-"
        for alpha in ("0.3", "3"):
            free = Row(lp + f"ttt-mc-alpha{alpha}") if data == "navigate" else None
            out.append(Line("pointmaze-medium", data, f"GC-IQL, alpha {alpha} at fine-tuning", "10k", Row(lp + "base"),
                            Row(lp + f"ttt-alpha{alpha}"), free, paper, note="not the paper's loss", modified=True))
        if data == "stitch":
            # Issue 41's combined variant (test-time-methods: the 30-episode screen, or the 150-episode rows): GC-TTT
            # aimed at TTGS's waypoints (tau 12 / threshold 24), the backbone's own loss, on test-time-methods' own 10k
            # GC-IQL stitch checkpoint (cache key b89879cf16bd, another than the lines above: base 0.15, not 0.17);
            # base and combined rows pair by its digest.
            tm = "test-time-methods*/evals/stitch-gciql-"
            out.append(Line("pointmaze-medium", data, "GC-IQL, aimed at TTGS's waypoints (ttt+ttgs)", "10k",
                            Row(tm + "base"), Row(tm + "ttt+ttgs-thr24"), None, paper,
                            note="GC-TTT aimed at TTGS's subgoal", modified=True))  # fmt: skip
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
            five = f"{label}, 5 seeds" if data == "navigate" and agent != "saw" else ""
            out.append(Line("antmaze-medium", data, label, "100k", Row(f"{p}base-{data}"), Row(f"{p}ttt-{data}"),
                            Row(f"{p}ttt-mc-{data}") if data == "navigate" else None, paper,
                            published=_pub("antmaze-medium", data, 100000) if agent == "gciql" else None,
                            draw=ANT_DRAW[agent, data], superseded_by=five))  # fmt: skip
            if five:  # the same rows on a 5-seed checkpoint of the reference draw (no critic-free row)
                out.append(Line("antmaze-medium", data, five, "100k", Row(f"{T5}/{agent}-base-{data}"),
                                Row(f"{T5}/{agent}-ttt-{data}"), None, paper, draw="reference"))  # fmt: skip
            if agent == "gciql":  # issue 37's lead: alpha 3.0 during fine-tuning (the backbone's antmaze alpha is 0.3)
                label3 = "GC-IQL, alpha 3 at fine-tuning"
                out.append(Line("antmaze-medium", data, label3, "100k", Row(f"{p}base-{data}"),
                                Row(f"{p}ttt-alpha3-{data}"), None, paper, note="not the paper's loss", modified=True,
                                draw=ANT_DRAW[agent, data]))  # fmt: skip
    for agent, label, paper in CUBE_PAPER:
        # Issue 63's fourth environment: cube-single play at OGBench's size (1000 episodes), paper-main's tuned rows
        # (GC-BC lr 3e-4 N 100 K 100; GC-IQL lr 3e-5 N 50 K 100; SAW lr 3e-5 N 50 K 200), 100k cpu-profile updates
        p = f"{TC}/{agent}-"
        out.append(Line("cube-single", "play", label, "100k", Row(f"{p}base-cube"), Row(f"{p}ttt-cube"), None, paper))
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
    m, se = stats.mean_se(x["per_seed"])
    own = f" ({x['n']} ep.)" if n is not None and x["n"] != n else ""
    tied = f" (1 of {x['tied']} records)" if x.get("tied", 1) > 1 else ""
    return f"{m:.2f} +- {se:.2f}{own}{tied}"


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
        seeds = len(d.get("seeds", [])) or "?"
        return (f"{d['mean']:.2f} +- {d['se']:.2f} ({seeds} seeds, {d['n_episodes']} ep., "
                f"{d['wall_s_per_episode']:.0f} s/ep.)")  # fmt: skip

    return f"{cell('base')} -> {cell('ttt')}"


def records(ln: Line) -> tuple[dict | None, dict | None, dict | None]:
    """A line's base, critic and critic-free records: base and critic on the same episodes (`claims.load_pair`); the
    critic-free record of the critic's episode count where one exists."""
    base, critic = load_pair(ln.base, ln.critic)
    n = critic["n"] if critic is not None else None
    return base, critic, load(ln.free, n) if ln.free is not None else None


def score(ln: Line, base: dict | None, critic: dict | None):
    """(B - A, its 95% interval, the verdict) of a line; None without both records."""
    if base is None or critic is None:
        return None
    pb, pbs, pc, pcs = ln.paper
    d = diff(base, critic)
    v = stats.verdict(stats.paper_direction(pb, pbs, pc, pcs), d, float(base["per_seed"].mean()),
                      float(critic["per_seed"].mean()), paper_base=pb, modified=ln.modified)  # fmt: skip
    return d, ci(base, critic), v


def _episodes(n: int | None) -> str:
    return "-" if n is None else f"{n}" if n >= 150 else f"{n} (screen)"


def table() -> str:
    head = ("| env | data | backbone | updates | episodes | base | critic-free | critic | "
            "critic - base (s.e.) [95% CI] "
            "| p over seeds | paper base → critic | published code on our data | verdict |")
    rows = [head, "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for ln in lines():
        base, critic, free = records(ln)
        n = critic["n"] if critic is not None else (base["n"] if base is not None else None)
        pb, pbs, pc, pcs = ln.paper
        free_cell = "-" if ln.free is None else _pm(free, n)
        note = f" ({ln.note})" if ln.note and critic is not None else ""
        steps = {x["step"] for x in (base, critic, free) if x is not None and x.get("step")}
        updates = ", ".join(f"{k // 1000}k" for k in sorted(steps)) or ln.updates
        sc = score(ln, base, critic)
        if sc is None:
            dcell, pcell, vcell = "-", "-", "-"
        else:
            d, (lo, hi), v = sc
            dcell = f"{d.diff:+.2f} ({d.se:.2f}) [{lo:+.2f}, {hi:+.2f}]"
            pcell = f"{d.p:.3f} ({'paired' if d.test == 'paired' else 'Welch, unpaired'})"
            vcell = f"**{v.word}**" + (f" ({v.why})" if v.why else "")
        draw = f", {ln.draw} draw" if ln.draw else ""
        rows.append(
            f"| {ln.env} | {ln.data}{draw} | {ln.backbone} | {updates} | {_episodes(n)} | {_pm(base, n)} | "
            f"{free_cell} | {_pm(critic)}{note} | {dcell} | {pcell} | {pb:.2f} +- {pbs:.2f} → {pc:.2f} +- {pcs:.2f} | "
            f"{published(ln.published)} | {vcell} |"
        )
    return "\n".join(rows)


def front() -> str:
    """The front page's Table 1: one cell per line, `base → critic` and the verdict's mark, the paper beside it."""
    marks = " ".join(f"{m} {w}" for w, m in stats.MARKS.items())
    rows = ["| env, data | backbone (updates) | ours: base → critic | paper | verdict |", "|---|---|---|---|---|"]
    for ln in lines():
        base, critic, _ = records(ln)
        pb, _, pc, _ = ln.paper
        sc = score(ln, base, critic)
        if sc is None:
            ours, v = "not run yet", "-"
        else:
            d, _, verdict = sc
            ours = f"{base['per_seed'].mean():.2f} → {critic['per_seed'].mean():.2f}"
            ours += "" if critic["n"] >= 150 else f" (screen, {critic['n']} ep.)"
            ours += "" if d.test == "paired" else " (unpaired)"
            v = f"{stats.MARKS[verdict.word]} {verdict.word}"
        draw = f" ({ln.draw} draw)" if ln.draw else ""
        rows.append(f"| {ln.env.removesuffix('-medium')} {ln.data}{draw} | {ln.backbone} ({ln.updates}) | {ours} | "
                    f"{pb:.2f} → {pc:.2f} | {v} |")  # fmt: skip
    return "\n".join(rows) + f"\n\nMarks: {marks}."


def aggregate() -> str:
    """The scored lines (the paper's method, both records) aggregated: the interquartile mean of base and critic
    over every (seed, task) rate, and the probability that the critic row beats the base row on a task (each line's
    tasks compared over its own seeds, then averaged over all lines' tasks: lines may hold 3 or 5 seeds; the IQM pools
    every (seed, task) rate, so a 5-seed line weighs 5/3 of a 3-seed one there)."""
    base_m, crit_m = [], []
    every = lines()
    done = {(ln.env, ln.data, ln.backbone) for ln in every if all(records(ln)[:2])}
    for ln in every:
        if ln.modified or (ln.env, ln.data, ln.superseded_by) in done:  # one line per cell: the one with more evidence
            continue
        base, critic, _ = records(ln)
        if base is None or critic is None or base["per_task"].shape != critic["per_task"].shape:
            continue
        base_m.append(base["per_task"])  # (seeds, tasks)
        crit_m.append(critic["per_task"])
    if not base_m:
        return ""
    tasks = sum(b.shape[1] for b in base_m)
    seeds = "/".join(str(k) for k in sorted({b.shape[0] for b in base_m}))
    b, c = (np.concatenate([m.ravel() for m in ms]) for ms in (base_m, crit_m))  # every (seed, task) rate
    pi = sum(stats.prob_improvement(cm, bm) * bm.shape[1] for bm, cm in zip(base_m, crit_m, strict=True)) / tasks
    return (f"Aggregate over the {len(base_m)} scored lines ({tasks} tasks x {seeds} seeds; `ttt.stats`): "
            f"interquartile mean base {stats.iqm(b):.2f} → critic {stats.iqm(c):.2f}; probability of improvement "
            f"P(critic > base) {pi:.2f}.")  # fmt: skip


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
    ap.add_argument("--write", type=Path, help="replace this file's <!-- table1 --> / <!-- table1-front --> blocks")
    args = ap.parse_args()
    out = table() + "\n\n" + aggregate() + "\n\nCommands (seeds x tasks x episodes):\n\n" + commands()
    print(out)
    if not args.write:
        return 0
    text = args.write.read_text() if args.write.is_file() else ""
    blocks = [(n, o) for n, o in (("table1", out), ("table1-front", front())) if f"<!-- {n} -->" in text]
    if not blocks:
        print(f"{args.write}: no <!-- table1 --> or <!-- table1-front --> block", file=sys.stderr)
        return 2
    return max(replace_block(args.write, n, o) for n, o in blocks)


if __name__ == "__main__":
    raise SystemExit(main())
