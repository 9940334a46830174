"""Beyond-the-anchors kind: a recipe chosen by a rule stated before the runs, then every dataset against the best
published success.

The declaration: ``datasets`` (``short``, ``name``, the anchor ``anchor``, ``method``, ``source``, its s.d. ``sd``
over ``anchor_seeds`` seeds, so s.e. = sd / sqrt(seeds); ``qrl``, ``iql``, ``iql_ttgs``: OGBench's QRL and our
backbone at the anchors' scale), ``choose`` (the datasets of the choice), ``candidates`` ([row suffix, label],
cheapest first), ``under_horizon``, ``more`` and ``rows`` (each row name's record reference).

1. The choice: each candidate's mean over the choice datasets; the recipe is the highest mean; a candidate whose mean
   is within two s.e. of the leader's (the s.e. of the difference of the two means, from the per-dataset B - A over
   seeds, ``sqrt(sum se_d^2) / datasets``) ties with it, and of tied candidates the one with the shorter wall time per
   episode is the recipe.
2. Against the anchors: above / level / below by two combined s.e. (``level``: the difference is within two combined
   s.e.; it does not say the two are equal).
3. More seeds where the recipe's verdict was within two s.e.: the first and the added seeds pooled.
"""

from __future__ import annotations

import math

import numpy as np

from ttt import stats

from . import records
from .cells import diff


class Study:
    def __init__(self, decl: dict):
        self.decl = decl
        self.choose = decl["choose"]
        self.candidates = [tuple(c) for c in decl["candidates"]]
        self.datasets = decl["datasets"]

    def row(self, short: str, suffix: str) -> dict | None:
        return records.maybe(self.decl["rows"].get(f"{short}-{suffix}"))

    def anchor(self, ds: dict) -> tuple[float, float]:
        return ds["anchor"], ds["sd"] / math.sqrt(ds["anchor_seeds"]) if ds["sd"] else 0.0


def _wall(x: dict) -> float:
    wall = x["raw"].get("wall_s")
    return math.nan if wall is None else wall / x["n"]


def _fmt(x: dict | None) -> str:
    if x is None:
        return "not run yet"
    m, s = stats.mean_se(x["per_seed"])
    return f"{m:.2f} +- {s:.2f}"


def _fmt_diff(d: stats.Diff) -> str:
    return f"{d.diff:+.2f} ({d.se:.2f}, {d.p:.3f} {d.test})"


def _gap(a: dict | None, b: dict | None) -> str:
    return "-" if a is None or b is None else _fmt_diff(diff(a, b))


def anchor_verdict(ours: float, ours_se: float, anchor: float, anchor_se: float) -> str:
    """Above / level / below the anchor by two combined s.e.; '-' where our s.e. is undefined (one seed)."""
    if math.isnan(ours_se):
        return "-"
    se = math.hypot(ours_se, anchor_se)
    if ours - anchor > 2 * se:
        return "above"
    if anchor - ours > 2 * se:
        return "below"
    return "level"


def choose(s: Study) -> dict:
    rows = {c: {d: s.row(d, c) for d in s.choose} for c, _ in s.candidates}
    order = [c for c, _ in s.candidates if all(rows[c][d] is not None for d in s.choose)]
    means = {c: float(np.mean([stats.mean_se(rows[c][d]["per_seed"])[0] for d in s.choose])) for c in order}
    wall = {c: float(np.mean([_wall(rows[c][d]) for d in s.choose])) for c in order}
    out = dict(rows=rows, means=means, wall=wall, gap={}, tests={}, ties=[], leader=None, recipe=None, why="")
    if len(order) < len(s.candidates):
        return {**out, "why": "not every candidate has run on all four datasets"}
    if any(len(rows[c][d]["per_seed"]) < 2 for c in order for d in s.choose):
        return {**out, "why": "a row has fewer than 2 training seeds (no s.e.)"}
    cost = lambda c: wall[c] if not math.isnan(wall[c]) else math.inf  # noqa: E731
    leader = max(order, key=lambda c: (means[c], -cost(c), -order.index(c)))
    gap, tests = {}, {}
    for c in order:
        diffs = [diff(rows[leader][d], rows[c][d]) for d in s.choose]
        gap[c] = (float(np.mean([x.diff for x in diffs])), math.sqrt(sum(x.se**2 for x in diffs)) / len(s.choose))
        tests[c] = sorted({x.test for x in diffs})
    ties = [c for c in order if c == leader or abs(gap[c][0]) <= 2 * gap[c][1]]
    recipe = min(ties, key=lambda c: (cost(c), order.index(c)))
    return {**out, "gap": gap, "tests": tests, "ties": ties, "leader": leader, "recipe": recipe}


def _per_row(s: Study) -> str:
    xs = [s.row(d["short"], c) for d in s.datasets for c in ("base", *(c for c, _ in s.candidates))]
    shapes = sorted({x["shape"] for x in xs if x is not None})
    return f"seeds x tasks x episodes {', '.join(shapes)}" if shapes else "no row has run yet"


def choice(decl: dict) -> str:
    s = Study(decl)
    c = choose(s)
    out = [f"Mean +- s.e. over training seeds; {_per_row(s)}.", "",
           "| candidate | " + " | ".join(s.choose)
           + " | mean over the 4 | minus the leader (s.e.; test) | s / episode |",
           "|---|" + "---|" * (len(s.choose) + 3)]  # fmt: skip
    out.append("| base | " + " | ".join(_fmt(s.row(d, "base")) for d in s.choose) + " | - | - | - |")
    for cand, label in s.candidates:
        mean = f"{c['means'][cand]:.3f}" if cand in c["means"] else "-"
        gap = "-"
        if cand in c["gap"] and cand != c["leader"]:
            gap = f"{c['gap'][cand][0]:+.3f} ({c['gap'][cand][1]:.3f}; {'/'.join(c['tests'][cand])})"
        wall = f"{c['wall'][cand]:.1f}" if cand in c["wall"] else "-"
        out.append(f"| {label} | " + " | ".join(_fmt(c["rows"][cand][d]) for d in s.choose) + f" | {mean} | {gap} | "
                   f"{wall} |")  # fmt: skip
    labels = dict(s.candidates)
    if c["recipe"] is None:
        out += ["", f"No recipe yet: {c['why']}."]
    else:
        tied = [labels[t] for t in c["ties"] if t != c["leader"]]
        out += ["", f"Recipe: **{labels[c['recipe']]}** (leader {labels[c['leader']]}"
                + (f"; within two s.e. of it: {', '.join(tied)}; the cheapest per episode taken" if tied else "")
                + ")."]  # fmt: skip
    return "\n".join(out)


def anchors(decl: dict) -> str:
    s = Study(decl)
    c = choose(s)
    labels = dict(s.candidates)
    out = [f"Ours: {_per_row(s)}.", "",
           "| dataset | best published (method; source, protocol) | OGBench QRL | GC-IQL 1M: alone -> TTGS "
           "| ours: recipe | base | TTGS | GC-TTT | GC-TTT + TTGS | recipe - base (s.e., p) | s / episode | verdict |",
           "|---|" + "---|" * 11]  # fmt: skip
    for ds in s.datasets:
        short = ds["short"]
        anchor, anchor_se = s.anchor(ds)
        held = "" if short in s.choose else " (held out)"
        cells = [_fmt(s.row(short, cand)) for cand, _ in s.candidates]
        verdict, gain, wall, ours = "-", "-", "-", "not chosen yet"
        base = s.row(short, "base")
        if c["recipe"] is not None and s.row(short, c["recipe"]) is not None:
            recipe = s.row(short, c["recipe"])
            if base is not None:
                gain = _fmt_diff(diff(base, recipe))
            m, se = stats.mean_se(recipe["per_seed"])
            ours, wall = f"{labels[c['recipe']]}: {m:.2f} +- {se:.2f}", f"{_wall(recipe):.1f}"
            verdict = anchor_verdict(m, se, anchor, anchor_se)
        elif c["recipe"] is not None:
            ours = f"{labels[c['recipe']]}: not run yet"
        published = f"{anchor:.3f} +- {anchor_se:.3f} ({ds['method']}; {ds['source']})"
        published += f" | {ds['qrl']:.2f} | {ds['iql']:.2f} -> {ds['iql_ttgs']:.2f}"
        out.append(f"| {ds['name'].removesuffix('-v0')}{held} | {published} | {ours} | "
                   f"{_fmt(base)} | " + " | ".join(cells) + f" | {gain} | {wall} | {verdict} |")  # fmt: skip
    return "\n".join(out)


def front(decl: dict) -> str:
    """The front page's compact table: base, each method, the best published and the verdict."""
    s = Study(decl)
    c = choose(s)
    labels = dict(s.candidates)
    out = ["| dataset | base | " + " | ".join(lb for _, lb in s.candidates) + " | best published | recipe vs it |",
           "|---|---|" + "---|" * len(s.candidates) + "---|---|"]  # fmt: skip
    for ds in s.datasets:
        short = ds["short"]
        anchor, anchor_se = s.anchor(ds)
        held = "" if short in s.choose else " (held out)"
        cells = []
        for cand, _ in s.candidates:
            cell = _fmt(s.row(short, cand))
            cells.append(f"**{cell}**" if cand == c["recipe"] else cell)
        verdict = "-"
        recipe = s.row(short, c["recipe"]) if c["recipe"] else None
        if recipe is not None:
            m, se = stats.mean_se(recipe["per_seed"])
            verdict = anchor_verdict(m, se, anchor, anchor_se)
        pub = f"{anchor:.3f} +- {anchor_se:.3f} ({ds['method']})" if anchor_se else f"{anchor:.2f} ({ds['method']})"
        name = ds["name"].removeprefix("pointmaze-").removesuffix("-v0").replace("-", " ")
        out.append(f"| {name}{held} | {_fmt(s.row(short, 'base'))} | " + " | ".join(cells) + f" | {pub} | {verdict} |")
    return "\n".join(out) + f"\n\nBold: the recipe, {labels.get(c['recipe'], '-')} (chosen on medium and large)."


def under_horizon(decl: dict) -> str:
    s = Study(decl)
    out = ["| dataset | method | published threshold | threshold 24 | minus published (s.e., p) "
           "| minus base (s.e., p) | s / episode |", "|---|" + "---|" * 6]  # fmt: skip
    for short in s.choose:
        for cand, label in decl["under_horizon"]:
            new, pub, base = s.row(short, f"{cand}-thr24"), s.row(short, cand), s.row(short, "base")
            wall = f"{_wall(new):.1f}" if new is not None else "-"
            out.append(f"| {short} | {label} | {_fmt(pub)} | {_fmt(new)} | {_gap(pub, new)} | "
                       f"{_gap(base, new)} | {wall} |")  # fmt: skip
    return "\n".join(out)


def pooled(s: Study, short: str, recipe: str) -> dict | None:
    pairs = [(s.row(short, "base"), s.row(short, recipe)), (s.row(short, "base-more"), s.row(short, f"{recipe}-more"))]
    if any(x is None or y is None or not stats.pairable(x["rec"], y["rec"]) for x, y in pairs):
        return None
    base = np.concatenate([np.asarray(x["per_seed"], float) for x, _ in pairs])
    ours = np.concatenate([np.asarray(y["per_seed"], float) for _, y in pairs])
    ds = next(d for d in s.datasets if d["short"] == short)
    anchor, anchor_se = s.anchor(ds)
    m, se = stats.mean_se(ours)
    return dict(first=stats.mean_se(pairs[0][1]["per_seed"]), more=stats.mean_se(pairs[1][1]["per_seed"]), mean=m,
                se=se, seeds=len(ours), shape=" + ".join(y["shape"] for _, y in pairs), gain=stats.paired(base, ours),
                verdict=anchor_verdict(m, se, anchor, anchor_se), anchor=(anchor, anchor_se),
                data=[y["raw"].get("dataset_hash") for _, y in pairs])  # fmt: skip


def more_seeds(decl: dict) -> str:
    """The recipe on the first and the more seeds, pooled, against the anchor; a dataset whose two halves were trained
    on different copies of the data (the generator's output differs between machines) says so under the table."""
    s = Study(decl)
    c = choose(s)
    out = ["| dataset | recipe | first seeds | more seeds | pooled | seeds x tasks x "
           "episodes | recipe - base, pooled (s.e., p paired) | anchor | verdict |", "|---|" + "---|" * 8]  # fmt: skip
    labels = dict(s.candidates)
    copies = []
    for short in decl["more"]:
        x = None if c["recipe"] is None else pooled(s, short, c["recipe"])
        if x is None:
            out.append(f"| {short} | {labels.get(c['recipe'], '-')} | - | not run yet | - | - | - | - | - |")
            continue
        (f, fs), (n, ns), g = x["first"], x["more"], x["gain"]
        out.append(f"| {short} | {labels[c['recipe']]} | {f:.2f} +- {fs:.2f} | {n:.2f} +- {ns:.2f} | "
                   f"**{x['mean']:.2f} +- {x['se']:.2f}** ({x['seeds']} seeds) | {x['shape']} | {g.diff:+.2f} "
                   f"({g.se:.2f}, {g.p:.3g}) | {x['anchor'][0]:.3f} +- {x['anchor'][1]:.3f} | "
                   f"{x['verdict']} |")  # fmt: skip
        if len(set(x["data"])) > 1:
            copies.append(f"{short}: the first seeds were trained on the copy of the data with hash {x['data'][0]}, "
                          f"the more seeds on the copy with hash {x['data'][1]} (the same generator and seed, run on "
                          "another machine); each half is paired with its own base.")  # fmt: skip
    return "\n".join(out + ([""] + copies if copies else []))
