"""The second beyond-the-anchors recipe: the first recipe's kind (``beyond``: the choice, more seeds) with
what a second recipe adds: the pre-training beside the anchor's and the first recipe's word beside ours, TTGS's
settings checked against the rule of each checkpoint's own value horizon, and the diagnosis measured before (10k
updates) and after (100k).

The declaration (``beyond2``): ``beyond``'s keys (``datasets``, ``choose``, ``candidates``, ``rows``, ``more``), plus
``ours`` / ``anchors_pretrain`` (the pre-training, as words), per dataset ``iql`` / ``iql_ttgs`` (GC-IQL at 1M alone
and with TTGS, the TTGS paper's runs), ``first`` (per dataset short name: the first recipe's chosen row, a record
reference), ``before`` (the 10k rows: ``SHORT-base``, ``SHORT-ttt-alpha0.3``, ``SHORT-ttgs-rule``, record
references), ``remade`` (per dataset short name: this recipe's ``-10k-base`` row, the 10k checkpoint made
again), ``horizon_dir`` (the folder under benchmarks/results/ of ``value_horizon.py`` records) and
``probe_files`` (``near_goal_actions.py`` records), ``diagnoses`` (rows run to explain a result, never candidates:
each ``what``, ``row`` and ``against``, record references on one checkpoint, and an optional round ``metric``). A
horizon or probe record is found by the checkpoint digest of the dataset's base row; none yet reads "not measured
yet".
"""

from __future__ import annotations

import json
import math
import sys
from functools import cache

from ttt import stats
from ttt.graph import HORIZON_THRESHOLD_MAX, horizon_tau_threshold

from . import records
from .beyond import Study, anchor_verdict, choose, pooled
from .cells import diff

PROBE_OFFSETS = (1, 3, 6, 24)
NOT_RUN, NOT_MEASURED = "not run yet", "not measured yet"


@cache
def _json_docs(folder: str) -> tuple[dict, ...]:
    base = records.RES / folder
    return tuple(json.loads(p.read_text()) for p in sorted(base.glob("*.json"))) if base.is_dir() else ()


@cache
def _probe_rows(files: tuple[str, ...]) -> tuple[dict, ...]:
    out = []
    for f in files:
        p = records.RES / f
        if p.is_file():
            out += json.loads(p.read_text()).get("rows", [])
    return tuple(out)


def horizon_of(decl: dict, sha: str | None) -> dict | None:
    """The value-horizon record of the checkpoint with digest `sha` (None: none yet). Two records of one checkpoint
    must agree on H and the rule's settings (else the page refuses to render)."""
    if sha is None:
        return None
    hits = [d for d in _json_docs(decl["horizon_dir"]) if d.get("checkpoint_sha256") == sha]
    if len({(d["horizon"], d["tau"], d["threshold"]) for d in hits}) > 1:
        raise records.RecordError(f"{decl['horizon_dir']}: horizon records of checkpoint {sha[:12]} disagree")
    return hits[0] if hits else None


def probe_of(decl: dict, sha: str | None) -> dict | None:
    if sha is None:
        return None
    return next((r for r in _probe_rows(tuple(decl["probe_files"])) if r.get("checkpoint_sha256") == sha), None)


def _pm(x: dict | None) -> str:
    if x is None:
        return NOT_RUN
    m, s = stats.mean_se(x["per_seed"])
    return f"{m:.2f} +- {s:.2f}"


def _wall(x: dict | None) -> str:
    wall = None if x is None else x["raw"].get("wall_s")
    return "-" if wall is None else f"{wall / x['n']:.1f}"


def _before(decl: dict, short: str, suffix: str) -> dict | None:
    return records.maybe(decl.get("before", {}).get(f"{short}-{suffix}"))


def rule_follows(decl: dict, rec: dict) -> tuple[dict | None, str]:
    """Whether a TTGS (rule) row ran the rule's tau / threshold for its own checkpoint: (its horizon record, word)."""
    h = horizon_of(decl, rec["sha"])
    if h is None:
        return None, "no horizon record of its checkpoint"
    ttgs = (rec["raw"].get("run") or {}).get("ttgs") or {}
    tau, thr = horizon_tau_threshold(h["horizon"])
    ran = (ttgs.get("tau"), ttgs.get("threshold"))
    if ran == (tau, thr):
        return h, "yes"
    return h, f"NO: ran tau {ran[0]}, threshold {ran[1]}; the rule gives {tau:g}, {thr:g}"


def rule_check(decl: dict) -> str:
    """Each TTGS (rule) row beside its checkpoint's horizon and the settings the rule gives it."""
    out = ["| dataset | row | updates | checkpoint | H (per seed) | the rule: tau, threshold | the row ran: tau, "
           "threshold | follows the rule |", "|---|" + "---|" * 7]  # fmt: skip
    for ds in decl["datasets"]:
        short = ds["short"]
        rows = [
            ("10k", _before(decl, short, "ttgs-rule")),
            ("100k", records.maybe(decl["rows"].get(f"{short}-ttgs-rule"))),
        ]
        if decl["rows"].get(f"{short}-ttgs-rule-more"):  # the more seeds' own checkpoint and horizon
            rows.append(("100k, more seeds", records.maybe(decl["rows"][f"{short}-ttgs-rule-more"])))
        for label, rec in rows:
            if rec is None:
                out.append(f"| {short} | TTGS (rule), {label} | - | - | - | - | {NOT_RUN} | - |")
                continue
            h, word = rule_follows(decl, rec)
            ttgs = (rec["raw"].get("run") or {}).get("ttgs") or {}
            hcell = NOT_MEASURED if h is None else (f"{h['horizon']:.1f} ("
                                                    + ", ".join(f"{x:.0f}" for x in h["per_seed"]) + ")")  # fmt: skip
            rule = "-" if h is None else f"{h['tau']:g}, {h['threshold']:g}"
            out.append(f"| {short} | TTGS (rule), {label} | {rec['step']} | {rec['sha'][:12]} | {hcell} | {rule} | "
                       f"{ttgs.get('tau')}, {ttgs.get('threshold')} | {word} |")  # fmt: skip
    return "\n".join(out)


def anchors(decl: dict) -> str:
    """Every dataset against the best published, the pre-training beside the anchor's and the first recipe's
    word beside ours."""
    s = Study(decl)
    c = choose(s)
    labels = dict(s.candidates)
    heads = " | ".join(lb for _, lb in s.candidates)
    out = ["| dataset | best published (method; source) | GC-IQL 1M: alone -> TTGS | pre-training: anchor / ours | "
           f"first recipe (10k) | ours: recipe | base | {heads} | recipe - base (s.e., p) | s / episode | verdict |",
           "|---|" + "---|" * (9 + len(s.candidates))]  # fmt: skip
    for ds in s.datasets:
        short = ds["short"]
        anchor, anchor_se = s.anchor(ds)
        held = "" if short in s.choose else " (held out)"
        first = records.maybe(decl["first"].get(short))
        first_cell = NOT_RUN
        if first is not None:
            m, se = stats.mean_se(first["per_seed"])
            first_cell = f"{m:.2f} +- {se:.2f} ({anchor_verdict(m, se, anchor, anchor_se)})"
        base = s.row(short, "base")
        ours, gain, wall, verdict = "not chosen yet", "-", "-", "-"
        if c["recipe"] is not None:
            recipe = s.row(short, c["recipe"])
            ours = f"{labels[c['recipe']]}: {NOT_RUN}"
            if recipe is not None:
                m, se = stats.mean_se(recipe["per_seed"])
                ours, wall = f"{labels[c['recipe']]}: {m:.2f} +- {se:.2f}", _wall(recipe)
                verdict = anchor_verdict(m, se, anchor, anchor_se)
                if base is not None:
                    d = diff(base, recipe)
                    gain = f"{d.diff:+.2f} ({d.se:.2f}, {d.p:.3f} {d.test})"
        cells = " | ".join(_pm(s.row(short, cand)) for cand, _ in s.candidates)
        out.append(f"| {ds['name'].removesuffix('-v0')}{held} | {anchor:.3f} +- {anchor_se:.3f} ({ds['method']}; "
                   f"{ds['source']}) | {ds['iql']:.2f} -> {ds['iql_ttgs']:.2f} | {decl['anchors_pretrain']} / "
                   f"{decl['ours']} | {first_cell} | {ours} | "
                   f"{_pm(base)} | {cells} | {gain} | {wall} | {verdict} |")  # fmt: skip
    return "\n".join(out)


def checkpoints(decl: dict) -> str:
    """Which 10k checkpoint each dataset's before rows use: the first recipe's (the checkpoint of its chosen row) and
    the one made again here (``remade``), by digest and dataset hash; a dataset whose before rows are not all on one
    checkpoint says so. Beside them the 100k checkpoint (its base row's) and whether it was trained on the same copy
    of the data as the 10k rows' checkpoint (the generator's output differs between machines: another copy means the
    100k run did not continue the 10k rows' checkpoint)."""
    out = ["| dataset | first recipe's 10k checkpoint (dataset hash) | made again here (dataset hash) | the same | "
           "the 10k rows use | 100k checkpoint (dataset hash) | 100k on the 10k rows' data |",
           "|---|---|---|---|---|---|---|"]  # fmt: skip

    def cell(rec: dict | None) -> str:
        return NOT_RUN if rec is None else f"{rec['sha'][:12]} ({rec['raw'].get('dataset_hash')})"

    for ds in decl["datasets"]:
        short = ds["short"]
        first, again = records.maybe(decl["first"].get(short)), records.maybe(decl.get("remade", {}).get(short))
        same = "-" if first is None or again is None else ("yes" if first["sha"] == again["sha"] else "no")
        before = [r for r in (_before(decl, short, k) for k in ("base", "ttt-alpha0.3", "ttgs-rule")) if r]
        used = {r["sha"] for r in before}
        after = records.maybe(decl.get("rows", {}).get(f"{short}-base"))
        if after is None or not before:
            on_same = "-"
        else:
            on_same = (
                "yes"
                if {r["raw"].get("dataset_hash") for r in before} == {after["raw"].get("dataset_hash")}
                else "no: another copy"
            )
        if not used:
            use = NOT_RUN
        elif len(used) > 1:
            use = "MIXED: " + ", ".join(sorted(x[:12] for x in used))
        else:
            (sha,) = used
            if first is not None and sha == first["sha"]:
                use = f"{sha[:12]}: the first recipe's"
            elif again is not None and sha == again["sha"]:
                use = f"{sha[:12]}: made again"
            else:
                use = f"{sha[:12]}: neither"
        out.append(f"| {short} | {cell(first)} | {cell(again)} | {same} | {use} | {cell(after)} | {on_same} |")
    return "\n".join(out)


def horizon(decl: dict) -> str:
    """The value's horizon and what the rule makes of it, 10k against 100k, with the oracle beside."""
    out = ["| dataset | updates | checkpoint | H (per seed) | the rule: tau, threshold | oracle steps, 0.95 quantile "
           "| Spearman with the oracle (per seed) | pairs over the threshold read within it |",
           "|---|" + "---|" * 7]  # fmt: skip
    for ds in decl["datasets"]:
        short = ds["short"]
        for label, base in (("10k", _before(decl, short, "base")), ("100k", records.maybe(
                decl["rows"].get(f"{short}-base")))):  # fmt: skip
            h = None if base is None else horizon_of(decl, base["sha"])
            if h is None:
                why = "no checkpoint yet" if base is None else base["sha"][:12]
                out.append(f"| {short} | {label} | {why} | {NOT_MEASURED} | - | - | - | - |")
                continue
            rho = ", ".join(f"{r:.2f}" for r in h["spearman"])
            far = "-" if h.get("far_read_near") is None else f"{h['far_read_near']:.2f}"
            out.append(f"| {short} | {label} | {h['checkpoint_sha256'][:12]} | {h['horizon']:.1f} ("
                       + ", ".join(f"{x:.0f}" for x in h["per_seed"]) + f") | {h['tau']:g}, {h['threshold']:g} | "
                       f"{h['oracle_quantile']:.0f} | {rho} | {far} |")  # fmt: skip
    return "\n".join(out)


def probe(decl: dict) -> str:
    """The near-goal probe (the policy's action towards a goal k steps ahead of the data), 10k against 100k."""
    ks = " | ".join(f"k = {k}" for k in PROBE_OFFSETS)
    out = ["Cosine of the policy's action with the data's way to a goal k steps ahead (mean over seeds; action norm "
           "in brackets).", "", f"| dataset | updates | checkpoint | {ks} |",
           "|---|---|---|" + "---|" * len(PROBE_OFFSETS)]  # fmt: skip
    for ds in decl["datasets"]:
        short = ds["short"]
        for label, base in (("10k", _before(decl, short, "base")), ("100k", records.maybe(
                decl["rows"].get(f"{short}-base")))):  # fmt: skip
            p = None if base is None else probe_of(decl, base["sha"])
            if p is None:
                why = "no checkpoint yet" if base is None else base["sha"][:12]
                out.append(f"| {short} | {label} | {why} | " + " | ".join([NOT_MEASURED] * len(PROBE_OFFSETS)) + " |")
                continue
            by_k = {o["offset"]: o for o in p["offsets"]}
            cells = [f"{by_k[k]['cosine']:+.2f} ({by_k[k]['norm']:.2f})" if k in by_k else "-" for k in PROBE_OFFSETS]
            out.append(f"| {short} | {label} | {p['checkpoint_sha256'][:12]} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def _round_metrics(rec: dict | None) -> dict:
    if rec is None:
        return {}
    sys.path.insert(0, str(records.ROOT / "benchmarks" / "analyses"))
    from round_diagnostics import summarise

    return summarise(rec["raw"])


def _metric(m: dict, k: str) -> str:
    v = m.get(k)
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}"


def success(decl: dict) -> str:
    """Each method at 10k (the first recipe's checkpoints) against 100k: success (Welch's test over seeds: other
    checkpoints) and the round diagnostics that carried the diagnosis (TTGS's share of steps towards the final goal;
    GC-TTT's kept spans that reach the goal's region)."""
    s = Study(decl)
    out = ["| dataset | method | 10k | 100k | 100k - 10k (s.e., p) | round diagnostic | 10k | 100k |",
           "|---|" + "---|" * 7]  # fmt: skip
    methods = [("base", "base", None), ("ttt-alpha0.3", "GC-TTT (alpha 0.3)", "reach_frac"),
               ("ttgs-rule", "TTGS (rule)", "ttgs_goal_frac")]  # fmt: skip
    for ds in s.datasets:
        short = ds["short"]
        for suffix, label, metric in methods:
            before, after = _before(decl, short, suffix), s.row(short, suffix)
            gap = "-"
            if before is not None and after is not None:
                d = diff(before, after)
                gap = f"{d.diff:+.2f} ({d.se:.2f}, {d.p:.3f} {d.test})"
            mb, ma = _round_metrics(before), _round_metrics(after)
            diag = "-" if metric is None else metric
            cells = ("-", "-") if metric is None else (_metric(mb, metric), _metric(ma, metric))
            out.append(f"| {short} | {label} | {_pm(before)} | {_pm(after)} | {gap} | {diag} | {cells[0]} | "
                       f"{cells[1]} |")  # fmt: skip
    return "\n".join(out)


def diagnoses(decl: dict) -> str:
    """Each declared diagnosis row against the row it explains, paired by checkpoint digest (``ttt.stats``)."""
    out = ["| diagnosis | row | against | row: success | against: success | row - against (s.e., p, test) | "
           "round diagnostic | row / against |", "|---|" + "---|" * 7]  # fmt: skip
    for d in decl.get("diagnoses", []):
        a, b = records.load(d["row"]), records.load(d["against"])
        g, k = diff(b, a), d.get("metric")
        pair = "-" if k is None else f"{_metric(_round_metrics(a), k)} / {_metric(_round_metrics(b), k)}"
        out.append(f"| {d['what']} | {a['raw']['run']['name']} | {b['raw']['run']['name']} | {_pm(a)} | {_pm(b)} | "
                   f"{g.diff:+.2f} ({g.se:.2f}, {g.p:.3f} {g.test}) | {k or '-'} | {pair} |")  # fmt: skip
    if len(out) == 2:
        out.append("| none yet | - | - | - | - | - | - | - |")
    return "\n".join(out)


def front_line(decl: dict) -> str:
    """One line for the front page: the recipe (or why none yet) and its verdict per dataset (pooled over the first
    and the more seeds where those ran), "So far" until every dataset has its row."""
    s = Study(decl)
    c = choose(s)
    if c["recipe"] is None:
        return f"So far: no recipe yet ({c['why']})."
    label = dict(s.candidates)[c["recipe"]]
    words = []
    for ds in s.datasets:
        x = s.row(ds["short"], c["recipe"])
        if x is None:
            continue
        both = pooled(s, ds["short"], c["recipe"]) if ds["short"] in decl.get("more", []) else None
        if both is not None:
            words.append(f"{ds['short']} {both['mean']:.2f} over {both['seeds']} seeds ({both['verdict']})")
            continue
        m, se = stats.mean_se(x["per_seed"])
        words.append(f"{ds['short']} {m:.2f} ({anchor_verdict(m, se, *s.anchor(ds))})")
    lead = "The" if len(words) == len(s.datasets) else "So far: the"
    return f"{lead} recipe is {label}; " + (", ".join(words) if words else "no row of it yet") + "."


def per_task(decl: dict) -> str:
    """Success per evaluation task (mean over seeds x episodes) of base and each candidate, 10k against 100k: where
    a dataset's mean comes from (a task every row misses, or one that a method alone solves)."""
    s = Study(decl)
    methods = [("base", "base")] + [tuple(c) for c in s.candidates]
    shown = [(ds["short"], label, updates, rec) for ds in s.datasets for suffix, label in methods
             for updates, rec in (("10k", _before(decl, ds["short"], suffix)), ("100k", s.row(ds["short"], suffix)))
             if rec is not None]  # fmt: skip
    n_tasks = max((len(rec["raw"].get("per_task") or []) for *_, rec in shown), default=0)
    heads = "".join(f" task {i + 1} |" for i in range(n_tasks))
    out = [f"| dataset | method | updates |{heads} all |", "|---|---|---|" + "---|" * (n_tasks + 1)]
    for short, label, updates, rec in shown:
        tasks = rec["raw"].get("per_task") or []
        cells = [f"{x:.2f}" for x in tasks] + ["-"] * (n_tasks - len(tasks))
        out.append(f"| {short} | {label} | {updates} | " + "".join(f"{c} | " for c in cells) + f"{_pm(rec)} |")
    return "\n".join(out)


GOAL_SHARE_10K = 0.74  # the protocol's stated bound: the first recipe's 10k TTGS rows went to the final goal in 74-100%


def _gain_word(before: dict, after: dict) -> tuple[str, str]:
    """100k - 10k of one method (Welch over seeds: other checkpoints) and its word by the page's two-s.e. rule
    (`anchor_verdict` of the difference against 0): gain / level / loss."""
    d = diff(before, after)
    word = {"above": "gain", "below": "loss"}.get(anchor_verdict(d.diff, d.se, 0.0, 0.0), "level")
    return f"{d.diff:+.2f} ({d.se:.2f})", word


def diagnosis_held(decl: dict) -> str:
    """The protocol's four outcomes that would say the diagnosis held, each as measured on each dataset: H at 100k with
    the rule's threshold at its cap (48), TTGS (rule)'s share of steps towards the final goal at 100k under the first
    recipe's 10k rows' lowest (0.74), the stitch probe's cosine positive at 1, 3 and 6 steps at 100k, and TTGS (rule)
    gaining from 10k to 100k by two s.e.; each cell "yes" or "no" beside what it read, "-" where it does not apply or
    is not measured yet, and a last line counting them."""
    s = Study(decl)
    cap = HORIZON_THRESHOLD_MAX
    out = [f"| dataset | H: 10k -> 100k (threshold at its cap {cap:g}) | TTGS (rule) towards the final goal, 100k "
           f"(under {GOAL_SHARE_10K:.2f}) | stitch probe at 1 / 3 / 6 steps, 100k (all positive) | TTGS (rule) "
           "100k - 10k, s.e. (a gain by two s.e.) |", "|---|---|---|---|---|"]  # fmt: skip
    tally: list[list[str]] = [[], [], [], []]
    for ds in s.datasets:
        short = ds["short"]
        base10, base100 = _before(decl, short, "base"), s.row(short, "base")
        h10 = None if base10 is None else horizon_of(decl, base10["sha"])
        h100 = None if base100 is None else horizon_of(decl, base100["sha"])
        cells = []
        if h100 is None:
            cells.append("-")
        else:
            word = "yes" if h100["threshold"] >= cap else "no"
            tally[0].append(word)
            start = "?" if h10 is None else f"{h10['horizon']:.1f}"
            cells.append(f"{start} -> {h100['horizon']:.1f}, threshold {h100['threshold']:g}: {word}")
        share = _round_metrics(s.row(short, "ttgs-rule")).get("ttgs_goal_frac")
        if share is None or math.isnan(share):
            cells.append("-")
        else:
            word = "yes" if share < GOAL_SHARE_10K else "no"
            tally[1].append(word)
            cells.append(f"{share:.2f}: {word}")
        p = None if base100 is None else probe_of(decl, base100["sha"])
        if "stitch" not in short or p is None:
            cells.append("-")
        else:
            by_k = {o["offset"]: o["cosine"] for o in p["offsets"]}
            cos = [by_k.get(k, math.nan) for k in (1, 3, 6)]
            word = "yes" if all(c > 0 for c in cos) else "no"
            tally[2].append(word)
            cells.append(" / ".join(f"{c:+.2f}" for c in cos) + f": {word}")
        before, after = _before(decl, short, "ttgs-rule"), s.row(short, "ttgs-rule")
        if before is None or after is None:
            cells.append("-")
        else:
            gap, g = _gain_word(before, after)
            word = "yes" if g == "gain" else "no"
            tally[3].append(word)
            cells.append(f"{gap}, {g}: {word}")
        out.append(f"| {short} | " + " | ".join(cells) + " |")
    counts = [f"{t.count('yes')} of {len(t)} yes" if t else "-" for t in tally]
    out.append("| measured so far | " + " | ".join(counts) + " |")
    return "\n".join(out)
