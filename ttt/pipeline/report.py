"""Results tables and plots of pipeline runs: results.json / results.csv, report.md (mean +- standard error over
seeds, each TTT row against its base row: a paired t-test by checkpoint digest, else Welch's; the paper's figure
beside ours) and plots (success bars, ablation curves, the data selected during an episode over the maze as in the
paper's Figure 2).

Everything here reads only what the pipeline saved in its output directory, so `ttt report DIR` rebuilds it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ttt.data.specs import get_spec
from ttt.envs.gym import max_episode_steps
from ttt.errors import TttError
from ttt.graph import TTGSConfig
from ttt.pipeline.config import load_pipeline
from ttt.pipeline.keys import record_ttgs_path
from ttt.pipeline.records import local_path
from ttt.presets import PROFILES
from ttt.safe_files import MAX_JSON_BYTES, loads_json, read_text, safe_load_npz
from ttt.safe_files import read_json as safe_read_json
from ttt.stats import paired, paired_test, unpaired
from ttt.storage import atomic_write_bytes, atomic_write_text, dumps, read_json, writable_dir

CSV_FIELDS = ("name", "group", "dataset", "agent", "variant", "profile", "steps", "seeds", "n_episodes", "mean", "se",
              "paper", "paper_se", "t", "p", "test", "base", "K", "N", "lr", "q", "eps", "mix", "H", "noise_alpha",
              "selection", "relevance", "c_rel", "episodes", "wall_s", "episodes_per_s", "checkpoint")  # fmt: skip
# Fine-tuning settings a row's label names beside CSV_FIELDS' (`settings_text`); kept in results.json's rows
SETTING_FIELDS = ("critic", "batch", "reuse_adam", "ft_train", "ft_alpha")


def _base_of(rec: dict, records: list[dict]) -> dict | None:
    """The base row evaluated on the same checkpoint, tasks, episodes and evaluation seed."""
    r = rec["run"]
    for o in records:
        q = o["run"]
        if (q["variant"] == "base" and o["checkpoint"] == rec["checkpoint"]
                and all(q[k] == r[k] for k in ("dataset", "tasks", "episodes", "eval_seed"))):  # fmt: skip
            return o
    return None


def _vs_base(rec: dict, base: dict) -> tuple[float, float, str]:
    """t and p of the row against its base row over seeds (`ttt.stats`, as every table): the paired t-test where both
    records carry the same checkpoint digest and ran the same episodes (`paired_test`), else `unpaired` (Welch's
    test; rows without spread get the exact permutation test's p; one seed gets none: "n/a")."""
    a, b = base["per_seed"], rec["per_seed"]
    d = paired(a, b) if paired_test(base, rec) else unpaired(a, b)
    return d.t, d.p, d.test


def _actor_dims(run: dict, profile: str | None) -> list[int] | None:
    """The policy's hidden widths: the run's `agent_config` override, else its profile's default."""
    dims = (run.get("agent_config") or {}).get("actor_hidden_dims")
    if dims is None and profile is not None:
        dims = PROFILES[profile].hidden_dims if profile in PROFILES else None
    return None if dims is None else [int(w) for w in dims]


def episode_flops(row: dict, steps: int) -> float | None:
    """The paper's estimate (appendix "Estimating FLOPs") of one `steps`-step episode's inference FLOPs: a forward
    pass costs C = 2 n w^2 for a policy of n hidden layers of width w (inputs and outputs neglected); every K steps
    GC-TTT adds one selection pass (C) and N fine-tuning steps (6 C each), so an episode costs
    steps * C * (1 + (1 + 6 N) / K) with TTT and steps * C without (1.6x / 2.2x / 4.0x at N 100, K 1000 / 500 / 200).
    None without the widths."""
    dims = row.get("actor_hidden_dims")
    if not dims:
        return None
    c = sum(2.0 * w * w for w in dims)
    if row["variant"] == "ttgs":  # graph search's cost is value passes over the graph, not this policy count
        return None
    if row["variant"] == "base":
        return steps * c
    return steps * c * (1.0 + (1.0 + 6.0 * row["N"]) / row["K"])


def rows(records: list[dict]) -> list[dict]:
    """One flat row per record, with its comparison to its base row."""
    out = []
    for rec in records:
        r = rec["run"]
        row = {k: r.get(k) for k in CSV_FIELDS if k in r}
        row.update({k: r.get(k) for k in r.get("grid", [])})  # every swept key, e.g. pre-training steps
        if r.get("paper_dataset") not in (None, r.get("dataset")):  # the paper's figure is for another dataset
            row.update(paper=None, paper_se=None, paper_ref=f"none for {r.get('dataset')} (the figure given is for "
                       f"{r['paper_dataset']})")  # fmt: skip
        if r.get("variant") in ("ttgs", "ttt+ttgs"):
            row["ttgs"] = r.get("ttgs") or {}
        row.update({k: r[k] for k in SETTING_FIELDS if r.get(k) is not None})  # what `settings_text` names
        row.update(
            profile=rec.get("profile"),
            seeds=rec["seeds"],
            n_episodes=rec["n_episodes"],
            mean=rec["mean"],
            se=rec["se"],
            wall_s=rec["wall_s"],
            episodes_per_s=rec["n_episodes"] / rec["wall_s"] if rec["wall_s"] else None,
            checkpoint=rec["checkpoint"],
            per_seed=rec["per_seed"],
            grid=r.get("grid", []),
            N=r.get("N"),
            K=r.get("K"),
            actor_hidden_dims=_actor_dims(r, rec.get("profile")),
        )
        base = _base_of(rec, records) if r["variant"] != "base" else None
        row["base"] = base["run"]["name"] if base else None
        row["base_mean"] = base["mean"] if base else None
        row["t"], row["p"], row["test"] = _vs_base(rec, base) if base else (None, None, None)
        out.append(row)
    return out


def results_text(table: list[dict], records: list[dict]) -> str:
    """results.json's text: the rows (`table`) indented, read by people; each record on one line (records repeat the
    episodes' per-round diagnostics, which indented take three times the bytes: results files travel with the tree)."""
    head = dumps(dict(rows=table), indent=1)[:-2]  # without the closing "\n}"
    body = ",\n".join(dumps(r, separators=(",", ":")) for r in records)
    return f'{head},\n "records": [\n{body}\n ]\n}}\n' if records else f'{head},\n "records": []\n}}\n'


def write_results(records: list[dict], out: Path) -> None:
    atomic_write_text(out / "results.json", results_text(rows(records), records))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore")
    w.writeheader()
    for row in rows(records):
        w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in CSV_FIELDS})
    atomic_write_text(out / "results.csv", buf.getvalue())


def _is_num(x, none: bool = False) -> bool:
    return (x is None and none) or (isinstance(x, int | float) and not isinstance(x, bool))


# What the report reads of a record, with what each must be (a record is refused, naming the first field that is not).
_RECORD_FIELDS = (
    ("mean", lambda x: _is_num(x), "a number (the mean success over seeds)"),
    ("se", lambda x: _is_num(x, True), "a number or null (the standard error over seeds)"),
    ("per_seed", lambda x: isinstance(x, list) and len(x) > 0 and all(_is_num(v) for v in x),
     "a non-empty list of numbers (each seed's success rate)"),
    ("seeds", lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 1, "an integer >= 1"),
    ("n_episodes", lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 1, "an integer >= 1"),
    ("wall_s", lambda x: _is_num(x, True), "a number or null (seconds)"),
    ("checkpoint", lambda x: isinstance(x, str), "a string (the checkpoint's path)"),
)  # fmt: skip
_RUN_FIELDS = (("name", str), ("variant", str), ("dataset", str), ("group", str))


def check_record(rec, where: str) -> dict:
    """`rec` if it is an evaluation record the report can read, else one line naming `where`, the first field that
    is wrong, what it holds and what is valid."""
    if not isinstance(rec, dict) or not isinstance(rec.get("run"), dict):
        raise TttError(f"{where}: not an evaluation record (a JSON object with its run); rebuild results.json with "
                       "`ttt report DIR --from-evals`")  # fmt: skip
    name = rec["run"].get("name")
    for key, kind in _RUN_FIELDS:
        if not isinstance(rec["run"].get(key), kind):
            raise TttError(f"{where}: run.{key} must be a string, got {json.dumps(rec['run'].get(key))}; rebuild "
                           "results.json with `ttt report DIR --from-evals`")  # fmt: skip
    for key, ok, valid in _RECORD_FIELDS:
        if not ok(rec.get(key)):
            got = json.dumps(rec.get(key)) if key in rec else "nothing (missing)"
            raise TttError(f"{where} (run {name!r}): {key} must be {valid}, got {got[:60]}; rebuild results.json with "
                           "`ttt report DIR --from-evals`, or run the row again")  # fmt: skip
    return rec


def load_results(run_dir: str | Path) -> dict:
    p = Path(run_dir) / "results.json"
    if not p.exists():
        raise TttError(f"{run_dir}: no results.json; `ttt run PIPELINE --out {run_dir}` produces it")
    rebuild = f"rebuild it from the evaluation records with `ttt report {run_dir} --from-evals`"
    try:
        text = read_text(p, MAX_JSON_BYTES, "")
    except TttError as e:
        raise TttError(f"{e}, so not a ttt results file; {rebuild}") from None
    try:
        doc = loads_json(text, "")
    except TttError as e:
        raise TttError(f"{p}: not valid JSON (truncated or edited{str(e).removeprefix(': not readable JSON')}); "
                       f"{rebuild}") from None
    if not isinstance(doc, dict) or "rows" not in doc or "records" not in doc:
        raise TttError(f"{p}: not a ttt results file (expected a JSON object with keys rows, records); {rebuild}")
    recs = doc["records"]
    if not isinstance(recs, list):
        raise TttError(f"{p}: not a ttt results file (records must be a list of evaluation records, each with its "
                       f"run); {rebuild}")  # fmt: skip
    for i, rec in enumerate(recs):
        check_record(rec, f"{p}: record {i + 1}")
    return doc


def records_from_evals(run_dir: str | Path, echo: Callable[[str], None] = print) -> list[dict]:
    """Every row's record from `RUN_DIR/evals/` (the evaluation cache, which keeps every record ever made there):
    per run name a record of graph search as it now runs (`ttgs_path`, where the row searches), then the record with
    the most episodes, then one with a checkpoint digest, then the newest by the time
    written inside it (`written`; file times are not used: a fresh clone makes them equal), then the file name; in the
    order of `pipeline.json`'s runs, then by name. For results that several invocations (`--only`, other machines)
    wrote into one directory. A tie that only the file name breaks is said."""
    ev = Path(run_dir) / "evals"
    files = sorted(ev.glob("*.json")) if ev.is_dir() else []
    best: dict[str, tuple] = {}
    counts: dict[str, int] = {}
    ties: dict[str, int] = {}
    for f in files:
        try:
            rec = safe_read_json(f)
        except TttError:
            raise TttError(f"{f}: not a ttt evaluation record (not valid JSON: truncated or edited); delete it and "
                           "run its row again") from None  # fmt: skip
        name, n = check_record(rec, str(f))["run"]["name"], rec["n_episodes"]
        counts[name] = counts.get(name, 0) + 1
        # a graph-search record of the path behaviour in force before one of an earlier default (`ttgs_path`)
        current = record_ttgs_path(rec) in (None, TTGSConfig.path)
        rank = (current, n, rec.get("checkpoint_sha256") is not None, str(rec.get("written") or ""))
        if name in best and rank == best[name][0]:
            ties[name] = ties.get(name, 1) + 1
        if name not in best or rank > best[name][0]:
            best[name] = (rank, rec, f)
            ties.pop(name, None)
    if not best:
        raise TttError(f"{run_dir}: no evaluation records in {ev}; `ttt run PIPELINE --out {run_dir}` writes them")
    pos = {n: i for i, n in enumerate(_pipeline_order(Path(run_dir)))}
    names = sorted(best, key=lambda n: (pos.get(n, len(pos)), n))
    for n in names:
        if counts[n] > 1:
            tie = f"; {ties[n]} equal by episodes, digest and time written: the first by file name" if n in ties else ""
            echo(f"  {n}: {counts[n]} records, kept {best[n][2].name} ({best[n][1]['n_episodes']} episodes{tie})")
    return [best[n][1] for n in names]


def _pipeline_order(run_dir: Path) -> list[str]:
    """The run names of the directory's pipeline in its order: the whole pipeline file named by `pipeline.json`'s
    source when it still loads (older `--only` invocations wrote only their own runs there), else those runs."""
    meta_p = run_dir / "pipeline.json"
    if not meta_p.exists():
        return []
    try:
        meta = safe_read_json(meta_p)
        names = [r["name"] for r in meta.get("runs", [])]
    except (TttError, KeyError, TypeError, AttributeError):
        return []  # an unreadable pipeline.json: order by name
    try:
        full = [r["name"] for r in load_pipeline(local_path(meta["source"])).runs]
    except (KeyError, TypeError, OSError, TttError):
        return names
    return full + [n for n in names if n not in full]


# --------------------------------------------------------------------------------------------------- tables


def _pm(m, s, digits: int = 3) -> str:
    if m is None:
        return "-"
    return (
        f"{m:.{digits}f}"
        if s is None or (isinstance(s, float) and math.isnan(s))
        else f"{m:.{digits}f} +- {s:.{digits}f}"
    )


def _stars(p) -> str:
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return ""
    return " (***)" if p < 0.01 else " (**)" if p < 0.05 else " (*)" if p < 0.1 else " (ns)"


def _ttgs_text(row: dict) -> str:
    given = row.get("ttgs") or {}
    return "TTGS " + (", ".join(f"{k} {v}" for k, v in sorted(given.items())) or "defaults")


def settings_text(row: dict) -> str:
    """A row's settings in words (lr, N, K and every setting that differs from its default; TTGS's where it plans);
    '-' for base."""
    if row["variant"] == "base":
        return "-"
    if row["variant"] == "ttgs":
        return _ttgs_text(row)
    parts = [f"lr {row['lr']:g}", f"N {row['N']}", f"K {row['K']}"]
    if row["q"] != 0.05:
        parts.append(f"q {row['q']:g}")
    if row["mix"]:
        parts.append(f"mix {row['mix']:g}")
    for k in ("eps", "H", "c_rel"):
        if row.get(k) is not None:
            parts.append(f"{k} {row[k]:g}")
    if row.get("noise_alpha"):
        parts.append(f"alpha {row['noise_alpha']:g}")
    if row.get("selection") not in (None, "both"):
        parts.append(f"select {row['selection']}")
    if row.get("relevance") == "value":
        parts.append("value relevance")
    if row.get("critic") == "oracle":
        parts.append("oracle critic")
    if row.get("batch") is not None:
        parts.append(f"batch {row['batch']}")
    if row.get("reuse_adam"):
        parts.append("reused Adam")
    if row.get("ft_train", "all") != "all":
        parts.append(f"fine-tunes {row['ft_train']}")
    if row.get("ft_alpha") is not None:
        parts.append(f"ft alpha {row['ft_alpha']:g}")
    if row["variant"] == "ttt+ttgs":
        parts.append(_ttgs_text(row))
    return ", ".join(parts)


def table_md(rs: list[dict]) -> str:
    lines = [
        "| run | dataset | agent | variant | settings | seeds x episodes | success (mean +- s.e.) | paper "
        "| vs base: t, p | episodes/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rs:
        vs_txt = "-"
        if r["base"] is not None:
            t, p = r["t"], r["p"]
            paired_txt = " paired" if r["test"] == "paired" else ""
            no_test = p is None or math.isnan(p)  # one seed in a row: nothing to test with
            vs_txt = "n/a (one seed)" if no_test else f"{t:.2f}, {p:.3f}{_stars(p)}{paired_txt}"
        eps = f"{r['episodes_per_s']:.2f}" if r.get("episodes_per_s") else "-"
        lines.append(
            f"| {r['name']} | {r['dataset'].removesuffix('-v0')} | {r['agent']} | {r['variant']} | "
            f"{settings_text(r)} | "
            f"{r['seeds']} x {r['n_episodes'] // r['seeds']} | {_pm(r['mean'], r['se'])} | "
            f"{_pm(r.get('paper'), r.get('paper_se'), 2)} | {vs_txt} | {eps} |"
        )
    return "\n".join(lines)


def paper_table_md(rs: list[dict]) -> str:
    """Agents x variants (rows) by datasets (columns): ours, with the paper's figure in brackets."""
    datasets = list(dict.fromkeys(r["dataset"] for r in rs))
    keys = list(dict.fromkeys((r["agent"], r["variant"]) for r in rs))
    head = "| agent | variant | " + " | ".join(d.removesuffix("-v0") for d in datasets) + " |"
    lines = [head, "|---|---|" + "---|" * len(datasets)]
    for agent, variant in keys:
        cells = []
        for d in datasets:
            m = [r for r in rs if (r["agent"], r["variant"], r["dataset"]) == (agent, variant, d)]
            if not m:
                cells.append("")
                continue
            r = m[0]
            paper = "" if r.get("paper") is None else f" [{r['paper']:.2f}]"
            cells.append(f"{_pm(r['mean'], r['se'], 2)}{paper}{_stars(r['p'] if r['base'] else None)}")
        lines.append(f"| {agent} | {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------- plots


VARIANT_LABELS = {"base": "base (no TTT)", "ttt-mc": "GC-TTT, critic-free", "ttt": "GC-TTT, critic",
                  "ttgs": "TTGS (graph search)", "ttt+ttgs": "GC-TTT towards TTGS's subgoal"}  # fmt: skip
AXIS_LABELS = {
    "steps": "pre-training updates",
    "K": "TTT period K (environment steps)",
    "N": "fine-tuning steps N",
    "lr": "fine-tuning learning rate",
    "q": "kept quantile q",
    "H": "fixed horizon H",
    "eps": "relevance radius eps",
    "noise_alpha": "value noise alpha",
    "c_rel": "value-relevance threshold C (V(s | s_1) > C)",
    "selection": "selection criteria",
    "variant": "variant",
}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _savefig(fig, path: Path, dpi: int) -> None:
    """A figure as a PNG file, written atomically (a full disk is one line naming the file)."""
    atomic_write_bytes(path, lambda f: fig.savefig(f, dpi=dpi, format="png"))


def plot_bars(rs: list[dict], path: Path, title: str) -> None:
    plt = _plt()
    datasets = list(dict.fromkeys(r["dataset"] for r in rs))
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.4), squeeze=False)
    colors = {"base": "#999999", "ttt-mc": "#7fb3d5", "ttt": "#e67e22", "ttgs": "#27ae60", "ttt+ttgs": "#8e44ad"}
    for ax, d in zip(axes[0], datasets, strict=True):
        sub = [r for r in rs if r["dataset"] == d]
        agents = list(dict.fromkeys(r["agent"] for r in sub))
        variants = [v for v in ("base", "ttt-mc", "ttt", "ttgs", "ttt+ttgs") if any(r["variant"] == v for r in sub)]
        w = 0.8 / max(len(variants), 1)
        for vi, v in enumerate(variants):
            for ai, a in enumerate(agents):
                m = [r for r in sub if (r["agent"], r["variant"]) == (a, v)]
                if not m:
                    continue
                r = m[0]
                x = ai + (vi - (len(variants) - 1) / 2) * w
                ax.bar(x, r["mean"], w, yerr=r["se"] or 0, color=colors.get(v, "C0"), capsize=2,
                       label=VARIANT_LABELS.get(v, v) if ai == 0 else None)  # fmt: skip
                if r.get("paper") is not None:
                    ax.plot([x - w / 2, x + w / 2], [r["paper"]] * 2, "k--", lw=1,
                            label="paper" if (vi, ai) == (0, 0) else None)  # fmt: skip
        ax.set_xticks(range(len(agents)), agents, rotation=20)
        ax.set_ylim(0, 1.05)
        ax.set_title(d.removesuffix("-v0"), fontsize=9)
        ax.set_ylabel("success rate")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    _savefig(fig, path, dpi=110)
    plt.close(fig)


def _line_with_band(ax, xs, pts: list[dict], label: str) -> None:
    """One curve: the rows' success at `xs` with a +- 1 s.e. band in the line's colour."""
    ms, ses = np.array([r["mean"] for r in pts]), np.array([r["se"] or 0.0 for r in pts])
    (line,) = ax.plot(xs, ms, marker="o", label=label)
    ax.fill_between(xs, ms - ses, ms + ses, color=line.get_color(), alpha=0.18, lw=0)


def _finish_curve(plt, fig, ax, xlabel: str, title: str, path: Path) -> None:
    """Axes labels, the success range, a wrapped title and the legend; save and close."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel("success rate (+- 1 s.e.)")
    ax.set_ylim(0, 1.05)
    ax.set_title(textwrap.fill(title, 60), fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    _savefig(fig, path, dpi=110)
    plt.close(fig)


def _widths(row: dict) -> str:
    """The policy's hidden widths as `256x256`."""
    return "x".join(str(d) for d in row["actor_hidden_dims"] or ())


def curve_labels(rs: list[dict], key: str) -> list[str]:
    """One legend label per row of a curve over `key`: only what tells its line apart from the others."""

    def fmt(k: str, v) -> str:
        return f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"

    varying = [k for k in ("agent", "dataset") if len({r[k] for r in rs}) > 1]
    labels = []
    for r in rs:
        parts = [r["agent"]] if "agent" in varying else []
        parts += [r["dataset"].removesuffix("-v0")] if "dataset" in varying else []
        parts += [VARIANT_LABELS.get(r["variant"], r["variant"])] if key != "variant" else []
        others = ", ".join(fmt(k, r[k]) for k in r["grid"] if k not in (key, "variant"))
        labels.append(" ".join(parts) + (f" ({others})" if others and parts else others))
    return labels


def curve_refs(sub: list[dict], key: str) -> list[dict]:
    """The GC-TTT rows of a group that do not sweep `key` (e.g. the reward-based relevance row beside a sweep of the
    value threshold C): drawn on that key's curve as labelled horizontal reference lines."""
    return [r for r in sub if key not in r["grid"] and r["variant"] != "base"]


def plot_curves(rs: list[dict], key: str, path: Path, title: str, refs: list[dict] = ()) -> list[str]:
    """Success vs one swept key, one line per (dataset, agent, variant, other swept values); +- 1 s.e. bands;
    `refs` (`curve_refs`) as dashed horizontal lines named by their runs. Returns the legend's labels."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.6, 3.4))
    lines: dict[str, list] = {}
    for r, label in zip(rs, curve_labels(rs, key), strict=True):
        lines.setdefault(label, []).append(r)
    numeric = all(isinstance(r[key], int | float) and not isinstance(r[key], bool) for r in rs)
    cats = list(dict.fromkeys(str(r[key]) for r in rs))
    for label, pts in lines.items():
        pts = sorted(pts, key=lambda r: r[key] if numeric else cats.index(str(r[key])))
        xs = [r[key] if numeric else cats.index(str(r[key])) for r in pts]
        _line_with_band(ax, xs, pts, label)
    # Base rows drawn as their own line (a grid over variant) need no reference lines.
    bases = {} if any(r["variant"] == "base" for r in rs) else {r["base"]: r["base_mean"] for r in rs if r.get("base")}
    for i, m in enumerate(bases.values()):
        ax.axhline(m, color="grey", ls=":", lw=1, label=VARIANT_LABELS["base"] if i == 0 else None)
    for i, r in enumerate(refs):
        ax.axhline(r["mean"], color=f"C{len(lines) + i}", ls="--", lw=1.2,
                   label=f"{r['name']}: {r['mean']:.2f} +- {r['se'] or 0:.2f}")  # fmt: skip
    vals = sorted({r[key] for r in rs}) if numeric else []
    if numeric and len(vals) > 2 and vals[0] > 0 and vals[-1] / vals[0] >= 10:
        # log axis ticked at the swept values only (no crowded minor labels)
        from matplotlib.ticker import NullFormatter

        ax.set_xscale("log")
        ax.set_xticks(vals, [f"{v:g}" for v in vals], fontsize=8)
        ax.xaxis.set_minor_formatter(NullFormatter())
    elif numeric and len(vals) <= 3:  # a few points: tick them (matplotlib's own ticks crowd around one value)
        ax.set_xticks(vals, [f"{v:g}" for v in vals], fontsize=8)
        if len(vals) == 1:
            half = abs(vals[0]) / 4 or 1.0
            ax.set_xlim(vals[0] - half, vals[0] + half)
    if not numeric:
        ticks = [VARIANT_LABELS.get(c, c) for c in cats] if key == "variant" else cats
        ax.set_xticks(range(len(cats)), ticks, fontsize=8)
    labels = ax.get_legend_handles_labels()[1]
    _finish_curve(plt, fig, ax, AXIS_LABELS.get(key, key), title, path)
    return labels


def flops_rows(sub: list[dict], rs: list[dict]) -> list[dict] | None:
    """The rows of a FLOP-matching group: base rows of two or more policy widths and GC-TTT rows (plus the base rows
    the GC-TTT rows are compared with, from anywhere in `rs`); None when `sub` is not one."""
    bases = [r for r in sub if r["variant"] == "base"]
    ttt = [r for r in sub if r["variant"] != "base"]
    if not ttt or len({tuple(r["actor_hidden_dims"] or ()) for r in bases}) < 2:
        return None
    names = {r["name"] for r in sub}
    extra = [r for r in rs if r["name"] in {t["base"] for t in ttt} and r["name"] not in names]
    return sub + extra


def plot_flops(rs: list[dict], steps: int, path: Path, title: str) -> None:
    """Success against estimated inference FLOPs per episode (`episode_flops`): wider policies without TTT
    against GC-TTT at several periods K, +- 1 s.e. (the paper's Figure 5, right)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.6, 3.4))
    series = {"wider policy, no TTT": [r for r in rs if r["variant"] == "base"]}
    for r in rs:
        if r["variant"] != "base":
            series.setdefault(f"{VARIANT_LABELS.get(r['variant'], r['variant'])} ({_widths(r)})", []).append(r)
    for label, pts in series.items():
        pts = sorted(pts, key=lambda r: episode_flops(r, steps))
        xs = [episode_flops(r, steps) for r in pts]
        _line_with_band(ax, xs, pts, label)
        for r, x in zip(pts, xs, strict=True):
            note = _widths(r) if r["variant"] == "base" else f"K {r['K']}"
            ax.annotate(note, (x, r["mean"]), textcoords="offset points", xytext=(3, 4), fontsize=6)
    ax.set_xscale("log")
    _finish_curve(plt, fig, ax, f"inference FLOPs per {steps}-step episode (paper's estimate)", title, path)


def _episode_steps(dataset: str) -> int | None:
    """The evaluation episode's length (OGBench's max_episode_steps), None for a dataset ttt does not know."""
    try:
        return max_episode_steps(get_spec(dataset).env_id)
    except Exception:  # noqa: BLE001 - a report still draws its other figures
        return None


def _draw_selection(ax, plt, z, label: str) -> None:
    u = float(z["maze_unit"])
    for x, y in z["walls"]:
        ax.add_patch(plt.Rectangle((x - u / 2, y - u / 2), u, u, color="#444444", lw=0))
    off = 0
    for n in z["bg_len"]:
        ax.plot(*z["bg_xy"][off : off + n].T, color="#cccccc", lw=0.4, zorder=1)
        off += n
    cmap = plt.get_cmap("autumn")
    n_rounds = max(len(z["round_start"]), 1)
    off = 0
    for n, r in zip(z["seg_len"], z["seg_round"], strict=True):
        ax.plot(*z["seg_xy"][off : off + n].T, color=cmap(r / n_rounds), lw=0.7, alpha=0.7, zorder=2)
        off += n
    ax.plot(*z["traj"].T, color="black", lw=1.4, zorder=3)
    ax.scatter(*z["round_start"].T, color="black", s=12, zorder=4)
    ax.scatter(*z["traj"][0], marker="D", color="tab:blue", s=50, zorder=5, label="start")
    ax.scatter(*z["goal"], marker="*", color="tab:green", s=160, zorder=5, label="goal")
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ok = "reached" if float(z["success"]) else "not reached"
    ax.set_title(
        f"{label}: episode {int(z['episode'])}\nK = {int(z['K'])}, {len(z['round_start'])} rounds, goal {ok}",
        fontsize=8,
    )
    ax.legend(fontsize=7, loc="lower right")


def plot_selection(fig_npzs: list[Path], path: Path, title: str) -> None:
    """The paper's Figure 2, one panel per episode (a success and a failure side by side, each labelled): a
    random subset of the dataset (grey), the sub-trajectories selected in each round (one colour per round), the
    agent's path (black), its start (diamond) and goal (star)."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(fig_npzs), figsize=(4.8 * len(fig_npzs), 4.9), squeeze=False)
    for ax, f in zip(axes[0], fig_npzs, strict=True):
        z = safe_load_npz(f)
        _draw_selection(ax, plt, z, "success" if float(z["success"]) else "failure")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    _savefig(fig, path, dpi=120)
    plt.close(fig)


def selection_figures(fig_dir: Path) -> dict[str, list[Path]]:
    """Figure-2 files per run: `NAME.success.npz` then `NAME.failure.npz` (either may be missing), or an older
    single `NAME.npz`."""
    out: dict[str, list[Path]] = {}
    for f in sorted(fig_dir.glob("*.npz")):
        name = f.name.removesuffix(".npz")
        kind = 0
        for i, suffix in enumerate((".success", ".failure")):
            if name.endswith(suffix):
                name, kind = name.removesuffix(suffix), i
        out.setdefault(name, []).append((kind, f))
    return {k: [f for _, f in sorted(v)] for k, v in out.items()}


# --------------------------------------------------------------------------------------------------- report


def write_report(run_dir: str | Path, echo: Callable[[str], None] = print, out: Path | None = None) -> Path:
    """Rebuild report.md and plots/ of a pipeline output directory from its saved results."""
    run_dir = Path(run_dir)
    out = run_dir if out is None else Path(out)
    doc = load_results(run_dir)
    rs = rows(doc["records"])
    plots = writable_dir(out / "plots", "the report's plots directory")
    meta_p = run_dir / "pipeline.json"
    meta = read_json(meta_p) if meta_p.exists() else {}
    meta = meta if isinstance(meta, dict) else {}  # an unreadable pipeline.json: the directory's name as the title
    profiles = sorted({str(r["profile"]) for r in rs})
    md = [f"# {meta.get('name', run_dir.name)}", ""]
    if meta.get("description"):
        md += [meta["description"], ""]
    md += [
        f"Profile(s): {', '.join(profiles)}. Success = mean over seeds of each seed's success rate over its "
        "tasks x episodes; +- is the standard error over seeds. t, p: the row's per-seed success rates against its "
        "base row's (same checkpoint, tasks, episodes and evaluation seed): the paired t-test where both records "
        "carry the same checkpoint digest (marked paired), else Welch's; "
        "(*) p < 0.1, (**) p < 0.05, (***) p < 0.01. paper: the paper's figure for the same row (its own "
        "networks, 1M pre-training steps; see each run's paper_ref).",
        "",
    ]
    groups = list(dict.fromkeys(r["group"] for r in rs))
    for g in groups:
        sub = [r for r in rs if r["group"] == g]
        md += [f"## {g}", "", table_md(sub), ""]
        swept = list(dict.fromkeys(k for r in sub for k in r["grid"]))
        if not swept:
            if len({(r["agent"], r["variant"]) for r in sub}) > 1:
                md += ["Paper layout (ours +- s.e. [paper]):", "", paper_table_md(sub), ""]
            p = plots / f"bars-{_slug(g)}.png"
            plot_bars(sub, p, g)
            md += [f"![{g}](plots/{p.name})", ""]
        fl = flops_rows(sub, rs)
        steps = _episode_steps(sub[0]["dataset"]) if fl else None
        if fl and steps:
            p = plots / f"flops-{_slug(g)}.png"
            plot_flops(fl, steps, p, f"{g}: success vs inference FLOPs")
            md += [f"![{g} vs inference FLOPs](plots/{p.name})", ""]
        for key in swept:
            p = plots / f"curve-{_slug(g)}-{key}.png"
            plot_curves([r for r in sub if key in r["grid"]], key, p, f"{g}: success vs {AXIS_LABELS.get(key, key)}",
                        refs=curve_refs(sub, key))  # fmt: skip
            md += [f"![{g} vs {key}](plots/{p.name})", ""]
    figs = selection_figures(run_dir / "figures") if (run_dir / "figures").exists() else {}
    if figs:
        md += ["## Data selected during an episode (the paper's Figure 2)", ""]
        for name, files in figs.items():
            p = plots / f"selection-{name}.png"
            plot_selection(files, p, name)
            md += [f"![{name}](plots/{p.name})", ""]
            for f in files:
                z = safe_load_npz(f)
                agree = np.array_equal(z["n_selected"], z["n_selected_recorded"][: len(z["n_selected"])])
                what = "success" if float(z["success"]) else "failure"
                md += [
                    f"{name}, {what} (episode {int(z['episode'])}): rows selected per round "
                    f"{z['n_selected'].tolist()} (recomputed with the episode's keys; "
                    f"{'equal to' if agree else 'DIFFERENT from'} what the episode recorded).",
                    "",
                ]
            # (at most 100 drawn, fewer in a small dataset)
            shown = len(safe_load_npz(files[0])["bg_len"]) if files else 0
            md += [f"Colours: rounds; grey: {shown} dataset episodes; black: the agent's path.", ""]
    path = out / "report.md"
    atomic_write_text(path, "\n".join(md))
    echo(f"report: {path} ({len(rs)} rows, plots in {plots})")
    return path


def combine(run_dirs: list[str | Path], out: Path, echo: Callable[[str], None] = print) -> Path:
    """One report over several pipeline output directories."""
    records, names = [], []
    for d in run_dirs:
        doc = load_results(d)
        records += doc["records"]
        names.append(Path(d).name)
    writable_dir(out, "--out")
    write_results(records, out)
    atomic_write_text(out / "pipeline.json", json.dumps(dict(name=" + ".join(names), description="")))
    return write_report(out, echo=echo)


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in s.lower()).strip("-")
