"""Table 1 kind: the paper's base -> critic beside ours, one line per (environment, dataset, backbone).

A line (``[[lines]]`` of the declaration): ``env``, ``data``, ``backbone``, ``updates``, ``paper`` (base, base s.e.,
critic, critic s.e.: the paper's Table 1, tuned), ``base`` / ``critic`` (record references; "" while not run),
``free`` (the critic-free row's reference, where the line has that column), ``published`` (runs of the published
code: ``{sub, base, ttt}``), ``note``, ``modified`` (a changed loss or target: shown, not scored), ``draw`` (antmaze:
which generation of the data), ``superseded_by`` (the backbone label of a line measuring the same cell with more
evidence, left out of the aggregate). Cells: mean +- s.e. over training seeds; critic - base over seeds with its s.e.,
the stratified bootstrap's 95% interval and p (paired where both records carry one checkpoint digest, else Welch's,
"unpaired"); the verdict is `ttt.stats.verdict`, the paper's direction read from its own means and s.e.
"""

from __future__ import annotations

import numpy as np

from ttt import stats

from . import records
from .cells import ci, diff

_NOT_RUN = object()


def _rec(ref):
    return records.maybe(ref)


def _records(ln: dict):
    free = ln.get("free")
    return _rec(ln.get("base")), _rec(ln.get("critic")), (_NOT_RUN if free is None else _rec(free))


def _pm(x: dict | None, n: int | None = None) -> str:
    """``mean +- s.e.``; ``(K ep.)`` where the record holds another number of episodes than the row's ``n``."""
    if x is None:
        return "not run yet"
    m, se = stats.mean_se(x["per_seed"])
    own = f" ({x['n']} ep.)" if n is not None and x["n"] != n else ""
    return f"{m:.2f} +- {se:.2f}{own}"


def _published(runs: list | None) -> str:
    if runs is None:
        return "-"
    if not runs:
        return "not run"
    return "; ".join((f"{r['sub']}: " if r.get("sub") else "") + _published_run(r) for r in runs)


def _published_run(run: dict) -> str:
    def cell(v: str) -> str:
        if not run.get(v):
            return "not run"
        d = records.raw(run[v])[1]
        if not d.get("complete", True) or d.get("mean") is None:
            asked = d.get("episodes_asked", 0) * len(d.get("seeds", [])) * len(d.get("tasks", []))
            done = len(d.get("episodes_run", []))
            return f"incomplete: {done} of {asked} episodes run, {d.get('mean_episodes_run', float('nan')):.2f}"
        seeds = len(d.get("seeds", [])) or "?"
        return (f"{d['mean']:.2f} +- {d['se']:.2f} ({seeds} seeds, {d['n_episodes']} ep., "
                f"{d['wall_s_per_episode']:.0f} s/ep.)")  # fmt: skip

    return f"{cell('base')} -> {cell('ttt')}"


def score(ln: dict, base: dict | None, critic: dict | None):
    """(critic - base, its 95% interval, the verdict) of a line; None without both records."""
    if base is None or critic is None:
        return None
    pb, pbs, pc, pcs = ln["paper"]
    d = diff(base, critic)
    v = stats.verdict(stats.paper_direction(pb, pbs, pc, pcs), d, float(base["per_seed"].mean()),
                      float(critic["per_seed"].mean()), paper_base=pb, modified=ln.get("modified", False))  # fmt: skip
    return d, ci(base, critic), v


def _episodes(n: int | None) -> str:
    return "-" if n is None else f"{n}" if n >= 150 else f"{n} (screen)"


def full(decl: dict) -> str:
    head = ("| env | data | backbone | updates | episodes | base | critic-free | critic | "
            "critic - base (s.e.) [95% CI] "
            "| p over seeds | paper base → critic | published code on our data | verdict |")
    rows = [head, "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for ln in decl["lines"]:
        base, critic, free = _records(ln)
        n = critic["n"] if critic is not None else (base["n"] if base is not None else None)
        pb, pbs, pc, pcs = ln["paper"]
        free_cell = "-" if free is _NOT_RUN else _pm(free, n)
        note = f" ({ln['note']})" if ln.get("note") and critic is not None else ""
        steps = {x["step"] for x in (base, critic, free) if isinstance(x, dict) and x.get("step")}
        updates = ", ".join(f"{k // 1000}k" for k in sorted(steps)) or ln["updates"]
        sc = score(ln, base, critic)
        if sc is None:
            dcell, pcell, vcell = "-", "-", "-"
        else:
            d, (lo, hi), v = sc
            dcell = f"{d.diff:+.2f} ({d.se:.2f}) [{lo:+.2f}, {hi:+.2f}]"
            pcell = f"{d.p:.3f} ({'paired' if d.test == 'paired' else 'Welch, unpaired'})"
            vcell = f"**{v.word}**" + (f" ({v.why})" if v.why else "")
        draw = f", {ln['draw']} draw" if ln.get("draw") else ""
        rows.append(
            f"| {ln['env']} | {ln['data']}{draw} | {ln['backbone']} | {updates} | {_episodes(n)} | {_pm(base, n)} | "
            f"{free_cell} | {_pm(critic)}{note} | {dcell} | {pcell} | {pb:.2f} +- {pbs:.2f} → {pc:.2f} +- {pcs:.2f} | "
            f"{_published(ln.get('published'))} | {vcell} |"
        )
    return "\n".join(rows)


def front(decl: dict, link: str = "") -> str:
    """One cell per line, ``base → critic`` and the verdict's mark, the paper beside it."""
    marks = " ".join(f"{m} {w}" for w, m in stats.MARKS.items())
    rows = ["| env, data | backbone (updates) | ours: base → critic | paper | verdict |", "|---|---|---|---|---|"]
    for ln in decl["lines"]:
        base, critic, _ = _records(ln)
        pb, _, pc, _ = ln["paper"]
        sc = score(ln, base, critic)
        if sc is None:
            ours, v = "not run yet", "-"
        else:
            d, _, verdict = sc
            ours = f"{base['per_seed'].mean():.2f} → {critic['per_seed'].mean():.2f}"
            ours += "" if critic["n"] >= 150 else f" (screen, {critic['n']} ep.)"
            ours += "" if d.test == "paired" else " (unpaired)"
            v = f"{stats.MARKS[verdict.word]} {verdict.word}"
        draw = f" ({ln['draw']} draw)" if ln.get("draw") else ""
        rows.append(f"| {ln['env'].removesuffix('-medium')} {ln['data']}{draw} | {ln['backbone']} ({ln['updates']}) | "
                    f"{ours} | {pb:.2f} → {pc:.2f} | {v} |")  # fmt: skip
    return "\n".join(rows) + f"\n\nMarks: {marks}."


def aggregate(decl: dict) -> str:
    """The scored lines (the paper's method, both records) aggregated: the interquartile mean of base and critic over
    every (seed, task) rate, and the probability that the critic row beats the base row on a task (each line's tasks
    compared over its own seeds, then averaged over all lines' tasks)."""
    base_m, crit_m = [], []
    every = decl["lines"]
    done = {(ln["env"], ln["data"], ln["backbone"]) for ln in every if ln.get("base") and ln.get("critic")}
    for ln in every:
        if ln.get("modified") or (ln["env"], ln["data"], ln.get("superseded_by", "")) in done:
            continue
        base, critic, _ = _records(ln)
        if base is None or critic is None or base["per_task"].shape != critic["per_task"].shape:
            continue
        base_m.append(base["per_task"])
        crit_m.append(critic["per_task"])
    if not base_m:
        return ""
    tasks = sum(b.shape[1] for b in base_m)
    seeds = "/".join(str(k) for k in sorted({b.shape[0] for b in base_m}))
    b, c = (np.concatenate([m.ravel() for m in ms]) for ms in (base_m, crit_m))
    pi = sum(stats.prob_improvement(cm, bm) * bm.shape[1] for bm, cm in zip(base_m, crit_m, strict=True)) / tasks
    return (f"Aggregate over the {len(base_m)} scored lines ({tasks} tasks x {seeds} seeds; `ttt.stats`): "
            f"interquartile mean base {stats.iqm(b):.2f} → critic {stats.iqm(c):.2f}; probability of improvement "
            f"P(critic > base) {pi:.2f}.")  # fmt: skip


def commands(decl: dict) -> str:
    out = []
    for ln in decl["lines"]:
        base, critic, free = _records(ln)
        for what, x in (("base", base), ("critic-free", free), ("critic", critic)):
            if isinstance(x, dict):
                out.append(f"- {ln['env']} {ln['data']} {ln['backbone']} {what} ({x['shape']}): {x['command']}")
    return "\n".join(out)


def tally(decl: dict) -> str:
    """How many lines carry each verdict word (the modified lines apart), and, in a paragraph of its own, which lines
    are not run yet, by environment and dataset (``env data (backbone / backbone)``)."""
    counts: dict[str, int] = {}
    missing: dict[str, list[str]] = {}
    for ln in decl["lines"]:
        base, critic, _ = _records(ln)
        sc = score(ln, base, critic)
        if sc is None:
            missing.setdefault(f"{ln['env']} {ln['data']}", []).append(ln["backbone"])
            continue
        counts[sc[2].word] = counts.get(sc[2].word, 0) + 1
    words = "; ".join(f"{stats.MARKS[w]} {w}: {counts[w]}" for w in stats.WORDS if w in counts)
    lines = "; ".join(f"{where} ({' / '.join(backbones)})" for where, backbones in missing.items())
    return f"Lines by verdict: {words}." + (f"\n\nNot run yet: {lines}." if missing else "")
