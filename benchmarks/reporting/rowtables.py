"""Row-table kinds: the base rows (every backbone pre-trained and evaluated without GC-TTT) and the ``ttt eval`` rows
(base against GC-TTT at the paper's tuned hyper-parameters). Each declared row names its record (``ref``) and, where
the table has them, the hyper-parameters it ran (``hp``) and the paper's figure (``paper``)."""

from __future__ import annotations

from . import records


def _per_seed(success) -> str:
    return ", ".join(f"{sum(map(sum, s)) / (len(s) * len(s[0])):.2f}" for s in success)


def _paper(row: dict) -> str:
    return "-" if row.get("paper") is None else f"{row['paper']:.2f}"


def ttt_rows(table: dict) -> str:
    lines = ["| dataset | agent | variant | lr, N, K | seeds x tasks x episodes | success (mean +- s.e.) | per seed | "
             "paper | episodes/s | wall s |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for row in table["rows"]:
        _, d, variant = records.raw(row["ref"])
        v = d["variants"][variant]
        n = (len(v["success"]), len(d["tasks"]), d["episodes"])
        lines.append(f"| {d['dataset']} | {d['agent']} | {variant} | {row.get('hp', '-')} | {n[0]} x {n[1]} x {n[2]} | "
                     f"{v['mean']:.3f} +- {v['se']:.3f} | {_per_seed(v['success'])} | {_paper(row)} | "
                     f"{v['episodes_per_s']:.2f} | {v['wall_s']:.0f} |")  # fmt: skip
    return "\n".join(lines)


def base_rows(table: dict) -> str:
    lines = ["| dataset | agent | steps | seeds x tasks x episodes | success (mean +- s.e.) | per seed | paper base | "
             "train s | updates/s |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for row in table["rows"]:
        d = records.raw(row["ref"])[1]
        lines.append(f"| {d['dataset']} | {d['agent']} | {d['step']} | {len(d['success'])} x {len(d['tasks'])} x "
                     f"{d['episodes']} | {d['mean']:.3f} +- {d['se']:.3f} | {_per_seed(d['success'])} | "
                     f"{_paper(row)} | {d.get('train_s', float('nan')):.0f} | "
                     f"{d.get('updates_per_s', float('nan')):.1f} |")  # fmt: skip
    return "\n".join(lines)


def pipeline_rows(table: dict) -> str:
    """Pipeline rows (``rows``: each ``ref`` and, for a GC-TTT row, its ``base``), one line each: the row's settings,
    mean +- s.e. over seeds, the paper's figure as the record's run holds it (``paper`` +- ``paper_se``), and the row
    against its base (p over seeds: paired where both records carry one checkpoint digest, else Welch's)."""
    from .cells import diff, pm

    lines = ["| group | agent | variant | dataset | lr, N, K | seeds x tasks x episodes | success (mean +- s.e.) | "
             "paper | vs base: p over seeds (test) |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for row in table["rows"]:
        x = records.load(row["ref"])
        run = x["raw"]["run"]
        paper = "-" if run.get("paper") is None else f"{run['paper']:.2f} +- {run.get('paper_se') or 0:.2f}"
        p = "-"
        if row.get("base"):
            d = diff(records.load(row["base"]), x)
            p = f"{d.p:.3f} ({'paired' if d.test == 'paired' else 'Welch, unpaired'})"
        lines.append(f"| {run['group']} | {run['agent']} | {run['variant']} | {run['dataset'].removesuffix('-v0')} | "
                     f"{run['lr']:g}, {run['N']}, {run['K']} | {x['shape'].replace('x', ' x ')} | {pm(x)} | {paper} | "
                     f"{p} |")  # fmt: skip
    return "\n".join(lines)
