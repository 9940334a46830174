"""Claims kind: each insight of the paper (and its appendix table) against ours, with a verdict.

A claim (``[[claims]]`` of the declaration): ``claim``, ``setting`` (ours), ``paper`` (the paper's figure; a leading
``0.05 -> `` is its base), ``a`` / ``b`` (the reference row A and the treatment row B: ``{ref, label}``), ``expect``
(the paper's direction for B - A: gain, loss or none), ``partly`` (a caveat printed with the verdict), ``why`` (printed
where the verdict is "not reproduced"), ``modified`` (our own diagnostic or a changed method: shown, not scored).
Cells: mean +- s.e. over seeds; B - A over seeds with its s.e., the stratified bootstrap's 95% interval and p, paired
where both records carry one checkpoint digest, else Welch's ("unpaired"); the verdict is `ttt.stats.verdict`.
"""

from __future__ import annotations

import re

from ttt import stats

from . import records
from .cells import ci, diff, esc

_PAPER_BASE = re.compile(r"^(\d\.\d\d) -> ")


def verdict(c: dict, A: dict, B: dict) -> stats.Verdict:
    m = _PAPER_BASE.match(c["paper"])
    return stats.verdict(c.get("expect", "gain"), diff(A, B), float(A["per_seed"].mean()),
                         float(B["per_seed"].mean()), paper_base=float(m.group(1)) if m else None,
                         modified=c.get("modified", False))  # fmt: skip


def fmt(x: dict) -> str:
    m, se = stats.mean_se(x["per_seed"])
    return f"{m:.2f} +- {se:.2f}"


def _merge_commands(a: str, b: str) -> str:
    """One ``ttt run`` for both rows when they differ only in ``--only`` (the usual pair), else both commands."""
    if a == b:
        return a
    tr = "`python benchmarks/studies/ttt_rows.py` ("
    if a.startswith(tr) and b.startswith(tr):
        return f"{tr}{a[len(tr):-1]}, {b[len(tr):-1]})"
    pat = re.compile(r'--only "([^"]*)"')
    if pat.search(a) and pat.sub("", a) == pat.sub("", b):
        both = f'--only "{pat.search(a).group(1)},{pat.search(b).group(1)}"'
        return pat.sub(lambda _: both, a)
    return f"{a}; {b}"


def pair(c: dict) -> tuple[dict | None, dict | None]:
    return records.maybe(c["a"]["ref"]), records.maybe(c["b"]["ref"])


def table(decl: dict) -> str:
    lines = [
        "| claim | ours: setting | paper | A (reference) | B | seeds x tasks x episodes | B - A (s.e.) [95% CI] | "
        "p over seeds | verdict | command (A; B) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in decl["claims"]:
        A, B = pair(c)
        la, lb = c["a"].get("label", ""), c["b"].get("label", "")
        if A is None or B is None:
            lines.append(f"| {esc(c['claim'])} | {esc(c['setting'])} | {esc(c['paper'])} | {la} | {lb} | - | - | "
                         f"- | not run yet | - |")  # fmt: skip
            continue
        n = A["shape"] if A["shape"] == B["shape"] else f"{A['shape']} / {B['shape']}"
        cmd = _merge_commands(A["command"], B["command"])
        d, (lo, hi) = diff(A, B), ci(A, B)
        v = verdict(c, A, B)
        note = c.get("partly", "") or (c.get("why", "") if v.word == stats.NOT else "")
        test = "paired" if d.test == "paired" else "Welch, unpaired"
        lines.append(
            f"| {esc(c['claim'])} | {esc(c['setting'])} | {esc(c['paper'])} | {la}: {fmt(A)} | {lb}: {fmt(B)} | "
            f"{n} | {d.diff:+.2f} ({d.se:.2f}) [{lo:+.2f}, {hi:+.2f}] | {d.p:.3f} ({test}) | **{v.word}** ({v.why})"
            f"{': ' + esc(note) if note else ''} | {cmd} |"
        )
    return "\n".join(lines)


def tally(decl: dict) -> str:
    """How many claims carry each verdict word."""
    counts: dict[str, int] = {}
    for c in decl["claims"]:
        A, B = pair(c)
        w = "not run yet" if A is None or B is None else verdict(c, A, B).word
        counts[w] = counts.get(w, 0) + 1
    return ", ".join(f"{w}: {counts[w]}" for w in (*stats.WORDS, "not run yet") if w in counts)
