"""The statistics a cell shows, all from `ttt.stats` (docs/algorithm.md, "Statistics and verdicts")."""

from __future__ import annotations

import math

from ttt import stats


def pm(x: dict | None) -> str:
    """``mean +- s.e.`` over the training seeds of a loaded record; "not run yet" where none is declared."""
    if x is None:
        return "not run yet"
    m, se = stats.mean_se(x["per_seed"])
    return f"{m:.2f} +- {se:.2f}"


def diff(a: dict, b: dict) -> stats.Diff:
    """B - A over seeds: paired where both records carry the same checkpoint digest, else Welch's test."""
    return stats.compare_records(a["rec"], b["rec"])


def paired(a: dict, b: dict) -> bool:
    return stats.pairable(a["rec"], b["rec"])


def ci(a: dict, b: dict) -> tuple[float, float]:
    """The stratified bootstrap's 95% interval of B - A (seeds resampled within tasks, generator seed 0); nan for rows
    of other tasks."""
    if a["per_task"].shape[1] != b["per_task"].shape[1]:
        return math.nan, math.nan
    return stats.bootstrap_ci(a["per_task"], b["per_task"], paired_rows=paired(a, b))


def esc(text: str) -> str:
    """A table cell's text with its ``|`` escaped (a bare ``|`` splits the cell)."""
    return text.replace("\\|", "|").replace("|", "\\|")
