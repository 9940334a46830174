"""Same-checkpoint kind: one checkpoint evaluated by the published code and by `ttt`, episode by episode.

Each declared pair names two records under benchmarks/results/ (``published``: the published code's
``benchmarks/published/run.sh`` record; ``ttt``: ``benchmarks/published/same_checkpoint.py``'s record of `ttt` on the
same checkpoint and episodes) and the labels of the checkpoint and of each side. The engine pairs episodes by (seed,
task, episode), never by file order, and refuses two records on different data (``dataset_sha256_arrays``). A table
reads the episodes both codes ran for every seed and task: the first E episodes of each, E the largest count both
sides completed everywhere (an extra episode one side ran on some task only is left out, so every seed weighs its
tasks alike). "Identical" paths: never more than 1e-4 apart, observation and action, step by step (the record's
``path.first_step`` is None).
"""

from __future__ import annotations

import json

import numpy as np

from ttt import stats

from .records import RES


def _load(rel: str) -> dict:
    return json.loads((RES / rel).read_text())


def _by_key(d: dict) -> dict[tuple[int, int, int], dict]:
    return {(e["seed"], e["task"], e["episode"]): e for e in d["episodes_run"]}


def episodes(published: dict, ttt: dict) -> tuple[list[tuple[int, int, int]], tuple[int, int, int]]:
    """The (seed, task, episode) keys both records ran on every seed and task, and the grid's shape."""
    if published.get("dataset_sha256_arrays") != ttt.get("dataset_sha256_arrays"):
        raise ValueError("same checkpoint: the two records ran on different data (dataset_sha256_arrays)")
    a, b = _by_key(published), _by_key(ttt)
    seeds = sorted({k[0] for k in a} & {k[0] for k in b})
    tasks = sorted({k[1] for k in a} & {k[1] for k in b})
    n = 0
    while all((s, t, n) in a and (s, t, n) in b for s in seeds for t in tasks):
        n += 1
    if not (seeds and tasks and n):
        raise ValueError("same checkpoint: the two records share no complete grid of episodes")
    return [(s, t, e) for s in seeds for t in tasks for e in range(n)], (len(seeds), len(tasks), n)


def _per_seed(eps: dict, keys: list) -> np.ndarray:
    seeds = sorted({k[0] for k in keys})
    return np.array([np.mean([eps[k]["success"] for k in keys if k[0] == s]) for s in seeds])


def _pm(x: np.ndarray) -> str:
    m, se = stats.mean_se(x)
    return f"{m:.2f} +- {se:.2f}"


def _e(x: float) -> str:
    return f"{x:.1e}".replace("e-0", "e-")


def base_table(decl: dict) -> str:
    """Each pair's two evaluations of one checkpoint, no fine-tuning: success over seeds, how many episodes agree in
    outcome and length, and how many paths are identical."""
    out = ["| checkpoint | evaluated by | seeds x tasks x episodes | success (mean +- s.e. over seeds) | episodes "
           "agreeing: success / steps | paths identical | paths that part |",
           "|---|---|---|---|---|---|---|"]  # fmt: skip
    for pair in decl["pairs"]:
        pub, mine = _load(pair["published"]), _load(pair["ttt"])
        keys, shape = episodes(pub, mine)
        a, b = _by_key(pub), _by_key(mine)
        grid = " x ".join(map(str, shape))
        n = len(keys)
        same_s = sum(a[k]["success"] == b[k]["success"] for k in keys)
        same_t = sum(a[k]["steps"] == b[k]["steps"] for k in keys)
        same = [k for k in keys if b[k]["path"]["first_step"] is None]
        parts = [k for k in keys if b[k]["path"]["first_step"] is not None]
        gap = max(b[k]["path"]["max_obs_gap"] for k in same) if same else None
        ident = f"{len(same)} of {n}" + (f" (largest gap {_e(gap)})" if gap is not None else "")
        part = "; ".join(f"seed {s}, task {t}, episode {e} ({'success' if b[(s, t, e)]['success'] else 'failure'}):"
                         f" from step {b[(s, t, e)]['path']['first_step']}, largest gap "
                         f"{_e(b[(s, t, e)]['path']['max_obs_gap'])}" for s, t, e in parts) or "-"  # fmt: skip
        out.append(f"| {pair['checkpoint']} | {pair['published_by']} | {grid} | {_pm(_per_seed(a, keys))} | | | |")
        out.append(f"| {pair['checkpoint']} | {pair['ttt_by']} | {grid} | {_pm(_per_seed(b, keys))} | "
                   f"{same_s} / {same_t} of {n} | {ident} | {part} |")  # fmt: skip
    return "\n".join(out)


def ttt_table(decl: dict) -> str:
    """GC-TTT on one checkpoint by both codes (``published``, ``ttt``), beside the base on the same episodes
    (``base``: the base record of `ttt` on that checkpoint): success over seeds, per task, the episodes with the same
    outcome, and `ttt` minus published over seeds (paired: one checkpoint, the same starts) with its verdict."""
    pub, mine, base = _load(decl["published"]), _load(decl["ttt"]), _load(decl["base"])
    keys, shape = episodes(pub, mine)
    a, b, z = _by_key(pub), _by_key(mine), _by_key(base)
    if any(k not in z for k in keys) or base.get("checkpoint_sha256") != mine.get("checkpoint_sha256"):
        raise ValueError("same checkpoint: the base record lacks these episodes or is of another checkpoint")
    tasks = sorted({k[1] for k in keys})
    out = ["| checkpoint | GC-TTT by | seeds x tasks x episodes | success (mean +- s.e. over seeds) | per seed | "
           f"per task {tasks[0]}-{tasks[-1]} | base on the same episodes |",
           "|---|---|---|---|---|---|---|"]  # fmt: skip
    for by, eps in ((decl["published_by"], a), (decl["ttt_by"], b)):
        ps = _per_seed(eps, keys)
        pt = ", ".join(f"{np.mean([eps[k]['success'] for k in keys if k[1] == t]):.2f}" for t in tasks)
        out.append(f"| {decl['checkpoint']} | {by} | {' x '.join(map(str, shape))} | {_pm(ps)} | "
                   f"{', '.join(f'{x:.2f}' for x in ps)} | {pt} | {_pm(_per_seed(z, keys))} |")  # fmt: skip
    d = stats.paired(_per_seed(a, keys), _per_seed(b, keys))
    word = "no difference" if d.p >= stats.CLEAR_P else ("`ttt` higher" if d.diff > 0 else "published higher")
    same = sum(a[k]["success"] == b[k]["success"] for k in keys)
    who = {True: "`ttt`", False: "the published code"}
    differ = "; ".join(f"seed {s}, task {t}, episode {e}: {who[bool(b[(s, t, e)]['success'])]} succeeds"
                       for s, t, e in keys if a[(s, t, e)]["success"] != b[(s, t, e)]["success"])  # fmt: skip
    out += ["", f"Same outcome in {same} of {len(keys)} episodes" + (f" ({differ})" if differ else "")
            + f"; `ttt` minus published {d.diff:+.2f}, s.e. {d.se:.2f} over the {shape[0]} seeds' paired differences, "
            f"p {d.p:.2g}: **{word}**."]  # fmt: skip
    return "\n".join(out)
