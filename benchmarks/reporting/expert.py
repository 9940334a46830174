"""Expert kind: the locomotion experts that generate the maze data, one robot per declaration table
(``[robots.NAME]``), from their records under benchmarks/results/.

A robot declares:

- ``train``: its ``train.csv`` (one line per training episode, as ``ttt expert train`` writes it: ``step`` (the
  environment steps at the episode's end), ``return``, ``length`` and ``falls``; the ant's older file says ``fell``)
  and ``window`` (steps per line of the training table); an episode counts in the window in which it ended;
- its stage evaluations, either ``checkpoints`` (the ant's ``benchmarks/analyses/expert_checkpoints.py`` file: one
  entry per (actor, evaluation seed)) or ``stages`` (a folder of ``eval-STEPS.json`` files as ``ttt expert eval PATH
  --json FILE`` writes them, keyed by their ``trained_steps``; a stage appears by adding its file);
- ``final`` (optional): the evaluation ``ttt expert train`` wrote at the end of training;
- ``datasets`` (optional): the generated datasets' metadata (``NAME.json``), whose ``expert_sha256`` names the actor
  that generated them;
- ``gate``: the data-generation gate, the least maze success every task must reach.

Missing records are said, never filled: a robot without a stage says "no stage measured yet".
"""

from __future__ import annotations

import csv
import json
import re

import numpy as np

from .records import RES, ROOT


def _rel(rel: str) -> str:
    return (RES / rel).relative_to(ROOT).as_posix()


def _read_csv(rel: str) -> list[dict] | None:
    path = RES / rel
    if not path.is_file():
        return None
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def training(robot: dict) -> str:
    """The training curve, one line per window of environment steps: episodes ended in it, mean training return (the
    stochastic actor's), falls (episodes the fall ended, or falls counted) per episode, and progress and the fraction
    of steps up where the file has them."""
    rows = _read_csv(robot["train"])
    if not rows:
        return f"No training log yet (`{_rel(robot['train'])}`)."
    fall_key = "falls" if "falls" in rows[0] else "fell"
    step = np.array([int(r["step"]) for r in rows])
    ret = np.array([float(r["return"]) for r in rows])
    falls = np.array([float(r[fall_key]) for r in rows])
    extra = [k for k in ("progress", "up") if k in rows[0]]
    more = {k: np.array([float(r[k]) for r in rows]) for k in extra}
    w = int(robot["window"])
    names = {"progress": "mean progress along the direction", "up": "fraction of steps up"}
    head = ["steps (k)", "episodes", "mean return", "falls / episodes", *(names[k] for k in extra)]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for lo in range(0, int(step.max()), w):
        m = (step > lo) & (step <= lo + w)
        if not m.any():
            continue
        cells = [f"{lo // 1000}-{(lo + w) // 1000}", str(int(m.sum())), f"{ret[m].mean():.1f}",
                 f"{falls[m].sum():.0f} / {int(m.sum())}", *(f"{more[k][m].mean():.2f}" for k in extra)]  # fmt: skip
        out.append("| " + " | ".join(cells) + " |")
    out += ["", f"{len(rows)} episodes, {step.max():,} environment steps (`{_rel(robot['train'])}`)."]
    return "\n".join(out)


def _stage_rows(robot: dict) -> list[dict]:
    """Every stage evaluation as one row: steps, evaluation seed, digest (where recorded), direction following and
    the maze test."""
    if robot.get("checkpoints"):
        doc = json.loads((RES / robot["checkpoints"]).read_text())
        return [dict(steps=r["step"], seed=r["seed"], digest=r["digest"],
                     direction=dict(episodes=r["episodes"], mean_return=r["mean_return"], std_return=r["std_return"],
                                    min_return=r["min_return"], falls=r["falls"]),
                     maze=dict(env_id=r["maze"], episodes_per_task=r["maze_episodes"], noise=robot.get("maze_noise"),
                               success=r["maze_success"], flipped=r["maze_flipped"], overall=r["maze_overall"]))
                for r in sorted(doc["results"], key=lambda r: (r["step"], r["seed"]))]  # fmt: skip
    folder = RES / robot["stages"]
    rows, seen = [], set()
    for path in sorted(folder.glob("eval-*.json")) if folder.is_dir() else []:
        d = json.loads(path.read_text())
        m = re.fullmatch(r"eval-(\d+)\.json", path.name)
        if d.get("robot") != robot["name"] or not m or int(m[1]) != d.get("trained_steps"):
            raise ValueError(f"{path.relative_to(ROOT)}: not a {robot['name']} evaluation of {m and m[1]} steps "
                             f"(robot {d.get('robot')!r}, trained_steps {d.get('trained_steps')!r})")  # fmt: skip
        if d["trained_steps"] in seen:
            raise ValueError(f"{path.relative_to(ROOT)}: a second evaluation of {d['trained_steps']} steps")
        seen.add(d["trained_steps"])
        rows.append(dict(steps=d["trained_steps"], seed=d.get("seed"), digest=None, direction=d.get("direction"),
                         maze=d.get("maze")))  # fmt: skip
    return sorted(rows, key=lambda r: r["steps"])


def gate(maze: dict | None, least: float, episodes: int = 0) -> str:
    """The data-generation gate on one maze test: "met" where every task's success is at least ``least`` on at least
    ``episodes`` episodes a task; a test of fewer episodes a task is not the gate's, and says only which way it
    points."""
    if not maze:
        return "not measured"
    low = {t: v for t, v in maze["success"].items() if v < least - 1e-9}
    if maze["episodes_per_task"] < episodes:
        where = "every task at or above" if not low else "below on " + ", ".join(f"task {t}" for t in low)
        return f"{where} ({maze['episodes_per_task']} episodes a task; the gate reads {episodes})"
    return "met" if not low else "not met (" + ", ".join(f"task {t} {v:.2f}" for t, v in low.items()) + ")"


def _progress(d: dict) -> tuple[float, float]:
    """Mean progress along the direction and its s.e. over episodes (from the per-episode list where recorded)."""
    from ttt import stats

    if d.get("progress"):
        return stats.mean_se(d["progress"])
    n = d["episodes"]
    return d["mean_progress"], d["std_progress"] / max(n - 1, 1) ** 0.5  # np.std (ddof 0) -> s.e. of the mean


def moved(before: dict | None, after: dict | None) -> str:
    """The stop rule's test on progress: the change from the stage before against two combined s.e.; the fraction of
    steps up as its change only (the record holds no per-episode fraction, so no s.e.)."""
    if not before or not after or before.get("mean_progress") is None or after.get("mean_progress") is None:
        return "-"
    (m0, s0), (m1, s1) = _progress(before), _progress(after)
    two = 2 * (s0**2 + s1**2) ** 0.5
    word = "moved" if abs(m1 - m0) > two else "within 2 s.e."
    return f"progress {m1 - m0:+.1f} (2 s.e. {two:.1f}): {word}; up {after['up_fraction'] - before['up_fraction']:+.2f}"


def _k(steps: int) -> str:
    return f"{steps / 1000:.0f}k" if steps < 1_000_000 or steps % 1_000_000 else f"{steps // 1_000_000}M"


def stages(robot: dict) -> str:
    """One row per stage (and evaluation seed): direction following (deterministic actor; return along the direction,
    its spread and minimum, falls, and where recorded progress, steps up and episode length) and the maze test (the
    BFS oracle steering, generation noise: success per task, overall, robots turned over or falls) with the gate."""
    rows = _stage_rows(robot)
    where = _rel(robot.get("checkpoints") or robot["stages"] + "/eval-STEPS.json")
    if not rows:
        return f"No stage measured yet (`{where}`, written by `ttt expert eval PATH --json FILE`)."
    seeds = any(r["seed"] is not None for r in rows)
    rich = any((r["direction"] or {}).get("up_fraction") is not None for r in rows)
    mazes = sorted({(m["env_id"], m["episodes_per_task"], m.get("noise")) for r in rows if (m := r["maze"])},
                   key=str)  # fmt: skip
    tasks = sorted({t for r in rows if r["maze"] for t in r["maze"]["success"]}, key=int)
    lost = "falls" if any(r["maze"] and "falls" in r["maze"] for r in rows) else "turned over"
    head = ["steps", *(["eval seed"] if seeds else []), "episodes", "return (mean +- std, min)", "falls",
            *(["progress (mean +- std)", "fraction up", "mean length", "vs the stage before"] if rich else []),
            f"maze: tasks {' / '.join(tasks)} (overall)", f"maze: {lost}", f"gate (every task >= {robot['gate']:.2f})"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]  # fmt: skip
    prev = None
    for r in rows:
        d, m = r["direction"] or {}, r["maze"]
        cells = [_k(r["steps"]), *([str(r["seed"]) if r["seed"] is not None else "-"] if seeds else [])]
        if d:
            cells += [str(d["episodes"]), f"{d['mean_return']:.1f} +- {d['std_return']:.1f}, {d['min_return']:.1f}",
                      str(d["falls"])]  # fmt: skip
            if rich:
                cells += [f"{d['mean_progress']:.1f} +- {d['std_progress']:.1f}", f"{d['up_fraction']:.2f}",
                          f"{d['mean_length']:.0f}", moved(prev, d)]  # fmt: skip
        else:
            cells += ["-"] * (7 if rich else 3)
        prev = d or prev
        if m:
            per = " / ".join(f"{m['success'][t]:.2f}" if t in m["success"] else "-" for t in tasks)
            cells += [f"{per} ({m['overall']:.2f})", str(sum((m.get("falls") or m.get("flipped") or {}).values()))]
        else:
            cells += ["-", "-"]
        out.append("| " + " | ".join(cells + [gate(m, robot["gate"], robot.get("gate_episodes", 0))]) + " |")
    said = "; ".join(f"{e}, {n} episodes per task" + (f", action noise {z:g}" if z is not None else "")
                     for e, n, z in mazes)  # fmt: skip
    out += ["", f"Maze test: {said}. Records: `{where}`."]
    return "\n".join(out)


def final(robot: dict) -> str:
    """The evaluation at the end of training (``ttt expert train``): one line."""
    path = RES / robot["final"]
    d = json.loads(path.read_text())
    return (f"At the end of training (`{_rel(robot['final'])}`, written by `ttt expert train`): {d['episodes']} "
            f"direction-following episodes, return {d['mean_return']:.1f} +- {d['std_return']:.1f} (min "
            f"{d['min_return']:.1f}), {d['falls']} falls, mean length {d['mean_length']:.0f}.")  # fmt: skip


def data_gate(robot: dict) -> str:
    """Which actor generated each dataset (by the digest the dataset's metadata records) and the gate at every
    evaluation of that actor."""
    metas = [json.loads((RES / rel).read_text()) for rel in robot.get("datasets", [])]
    if not metas:
        return f"No {robot['name']} dataset generated yet."
    rows = _stage_rows(robot)
    out = ["| dataset | split | generating actor (digest) | its steps | its evaluations: gate |",
           "|---|---|---|---|---|"]
    for d in metas:
        evals = [r for r in rows if r["digest"] and r["digest"] == d["expert_sha256"]]
        steps = ", ".join(sorted({_k(r["steps"]) for r in evals})) or "not among the evaluated actors"
        verdicts = "; ".join(f"seed {r['seed']}: {gate(r['maze'], robot['gate'], robot.get('gate_episodes', 0))}"
                             for r in evals) or "-"  # fmt: skip
        out.append(f"| {d['name']} | {d['split']} | {d['expert_sha256'][:12]} | {steps} | {verdicts} |")
    for digest in dict.fromkeys(d["expert_sha256"] for d in metas):
        evals = [r["direction"] for r in rows if r["digest"] == digest and r["direction"]]
        if evals:
            n, k = sum(e["episodes"] for e in evals), sum(e["falls"] for e in evals)
            out += ["", f"The actor {digest[:12]} fell in {k} of its {n} direction-following evaluation episodes: its "
                    f"fall rate is below {fall_bound(k, n):.1%} (one-sided 95% Clopper-Pearson bound), not known to "
                    "be zero."]  # fmt: skip
    return "\n".join(out)


def fall_bound(k: int, n: int, level: float = 0.95) -> float:
    """The one-sided upper confidence bound of a rate seen k times in n (Clopper-Pearson)."""
    from scipy import stats

    return 1.0 if k >= n else float(stats.beta.ppf(level, k + 1, n - k))


def datasets(robot: dict) -> str:
    """The generated datasets' metadata: size, the behaviour policy's goals, turned-over robots, the data's digest."""
    metas = [json.loads((RES / rel).read_text()) for rel in robot.get("datasets", [])]
    if not metas:
        return f"No {robot['name']} dataset generated yet."
    out = ["| dataset | split | episodes x rows | noise | goals (behaviour policy) | episodes turned over (rows) | "
           "arrays sha256 |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for d in metas:
        if "goals_reached_mean" in d:
            goals = (f"{d['goals_reached_mean']:.2f} reached per episode; {d['episodes_without_goal']} of "
                     f"{d['episodes']} reach none")  # fmt: skip
        else:
            goals = (f"{d['goal_reached_fraction']:.1%} reach their goal; first arrival median "
                     f"{d['first_arrival_median']:.0f}, 90th percentile {d['first_arrival_p90']:.0f} "
                     "steps")  # fmt: skip
        flips = f"{d['flipped_episodes']} of {d['episodes']} ({d['flipped_rows_fraction']:.1%})"
        out.append(f"| {d['name']} | {d['split']} | {d['episodes']} x {d['episode_rows']} | {d['noise']:g} | {goals} | "
                   f"{flips} | {d['sha256_arrays'][:12]} |")  # fmt: skip
    return "\n".join(out)


def misses(robot: dict) -> str:
    """Stitch episodes re-run outside the data: how many reach the goal, how the others miss it."""
    d = json.loads((RES / robot["misses"]).read_text())["summary"]
    lo, hi = d["missed_upright_closest"]
    flo, fhi = d["missed_upright_final"]
    upright = d["missed"] - d["missed_turned_over"]
    return (f"{d['episodes']} {d['dataset']} episodes re-run the way the generator runs them "
            f"(`{_rel(robot['misses'])}`): {d['reached']} reached the goal (first arrival median "
            f"{d['first_arrival_median']:.0f} steps), {d['missed']} missed it; {d['missed_turned_over']} of those "
            f"turned over, the other {upright} came within {lo:.2f}-{hi:.2f} of the goal but never inside the 0.5 "
            f"success radius, and ended {flo:.1f}-{fhi:.1f} from it.")  # fmt: skip
