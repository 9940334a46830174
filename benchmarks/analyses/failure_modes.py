"""How maze episodes fail: where each one ended, how close it came, and whether it was still moving.

Reads the xy path of every episode of pipeline rows from the per-task parts the run kept where it ran
(`OUT/evals/.partial-KEY/taskT.npz`, KEY the record's `eval_key`; they are not committed) and measures, with the
maze's shortest-path distance through the free cells (`ttt.envs.oracle`, at cell resolution; an ant maze uses the
point maze of the same layout, which has the same cells, unit and offset):

- `start` / `final` / `closest`: path distance to the goal at the start, at the end, and the least along the way;
- `on_its_back` (ant mazes): a failed episode that ended with the ant on its back, read from each episode's last
  observation (`final_obs`, which the parts hold for runs since 26 Nov 2026; `?` in the table where they predate it,
  and `--rerun BASE_ROWS` reruns such base rows from their checkpoints to read it);
- the other failures: `stalled` (the last `--window` steps stayed within `--radius` of where the episode ended:
  stuck) more than one maze cell from the goal (`stalled_far`) or within one (`stalled_near`), or `moving` (still
  going when the step limit came);
- per row: these as fractions of all episodes, and the mean path distance the failures ended at and came within;
- with `--by-task`, per row and task: success, the mean speed (distance a step while the episode ran), the share of
  slow steps (under `--slow`), and the mean path distance at the start and after `--first` steps.

    python benchmarks/analyses/failure_modes.py --results benchmarks/results/table1 \
        --rows gcbc-base-navigate,gcbc-ttt-navigate [--out FILE.json]

Rows are compared on their common (seed, task, episode) grid (paired episodes); the first row is the reference for
`closer`: the mean over episodes both rows failed of how much closer (path distance at the end) this row ended.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
from _maze import write_doc

from ttt.data.files import default_dir
from ttt.envs.gym import upside_down


def oracle_for(dataset: str):
    """The maze oracle of a dataset's maze: `antmaze-medium-navigate-v0` -> the `pointmaze-medium-v0` layout."""
    from ttt.envs.oracle import maze_oracle

    m = re.match(r"^(?:point|ant)maze-(medium|large|giant)-", dataset)
    if m is None:
        raise ValueError(f"no maze oracle for {dataset!r}: point or ant mazes medium / large / giant only")
    return maze_oracle(f"pointmaze-{m.group(1)}-v0")


def load_row(results: Path, name: str) -> tuple[dict, dict[str, np.ndarray]]:
    """A row's record (the newest `evals/NAME-KEY.json`, by time written) and its episodes' arrays, the tasks
    concatenated on axis 1."""
    found = sorted((results / "evals").glob(f"{name}-*.json"), key=lambda p: p.stat().st_mtime)
    found = [p for p in found if p.stem[len(name) + 1 :].isalnum()]
    if not found:
        raise ValueError(f"no record evals/{name}-KEY.json under {results}")
    record = json.loads(found[-1].read_text())
    part = results / "evals" / f".partial-{record['eval_key']}"
    files = sorted(part.glob("task*.npz"), key=lambda p: int(p.stem[4:]))
    if not files:
        raise ValueError(f"{name}: no per-task parts in {part} (they stay only where the run ran)")
    parts = [np.load(f) for f in files]
    keys = ("success", "xy", "goal_xy") + (("final_obs",) if all("final_obs" in p for p in parts) else ())
    arrays = {k: np.concatenate([p[k] for p in parts], axis=1).astype(np.float32) for k in keys}
    return record, arrays


def rerun_final_obs(record: dict) -> np.ndarray:
    """Each episode's last observation, for a base row whose parts predate `final_obs`: its episodes again from its
    checkpoint, as the pipeline ran them (one `evaluate` call per task, the record's eval seed and chunk; a base
    episode is deterministic, and the success must match the record's, which is checked)."""
    import ttt
    from ttt.evaluation import evaluate
    from ttt.pipeline.keys import resolve_checkpoint

    run = record["run"]
    if run["variant"] != "base":
        raise ValueError(f"--rerun: {run['name']} is a {run['variant']} row; only base rows are rerun (cheap)")
    ckpt = resolve_checkpoint(record["checkpoint"])  # a cache key (or, in older records, a path)
    setup, agents, data, env = ttt.load_run(ckpt, run["data_dir"], variant="base")
    res = [evaluate(setup, agents, data, episodes=run["episodes"], tasks=(t,), seed=run["eval_seed"], env=env,
                    batch_size=run["chunk"]) for t in run["tasks"]]  # fmt: skip
    success = np.concatenate([r.success for r in res], axis=1)
    if not np.array_equal(success, np.asarray(record["success"], success.dtype)):
        raise ValueError(f"--rerun: {run['name']}'s episodes did not come out as recorded (another machine?)")
    return np.concatenate([r.observations[..., -1, :] for r in res], axis=1)


def episode_measures(oracle, xy: np.ndarray, goal_xy: np.ndarray, window: int, radius: float, first: int = 200) -> dict:
    """Per-episode path distances (start, after `first` steps, final, closest) and whether the end was a stall, for
    (..., T, 2) paths."""
    import jax.numpy as jnp

    flat, goals = xy.reshape(-1, *xy.shape[-2:]), goal_xy.reshape(-1, 2)
    geo = lambda p, g: np.asarray(oracle.geodesic(jnp.asarray(p), jnp.asarray(g)))  # noqa: E731
    dist = np.stack([geo(p, g) for p, g in zip(flat, goals, strict=True)])
    dist = np.where(dist >= 1e8, np.nan, dist)  # a point inside a wall cell (the ant's centre can graze one)
    last = flat[:, -window:]
    spread = np.linalg.norm(last - flat[:, -1:], axis=-1).max(axis=-1)
    shape = xy.shape[:-2]
    return dict(
        start=dist[:, 0].reshape(shape),
        early=dist[:, min(first, dist.shape[1] - 1)].reshape(shape),
        final=dist[:, -1].reshape(shape),
        closest=np.nanmin(dist, axis=-1).reshape(shape),
        stalled=(spread < radius).reshape(shape),
    )


def motion(xy: np.ndarray, steps: np.ndarray, slow: float) -> dict:
    """How each episode moved while it ran, for (..., T, 2) paths and (...) episode lengths: `speed`, the mean
    distance a step; `slow`, the share of its steps that moved less than `slow` (the steps after an early success
    are left out)."""
    step = np.linalg.norm(np.diff(xy, axis=-2), axis=-1)  # (..., T - 1)
    ran = np.arange(step.shape[-1]) < (np.asarray(steps)[..., None] - 1)
    n = np.maximum(ran.sum(-1), 1)
    return dict(speed=(step * ran).sum(-1) / n, slow=((step < slow) & ran).sum(-1) / n)


def summarise(success: np.ndarray, m: dict, cell: float) -> dict:
    """Fractions of all episodes: success, and the failures by class; `on_its_back` (an ant that ended on its back,
    where known) comes first and the other classes exclude it."""
    fail = success < 0.5
    n = success.size
    out = dict(episodes=int(n), success=float(success.mean()))
    if "flipped" in m:
        out["on_its_back"] = float((fail & m["flipped"]).sum() / n)
        fail = fail & ~m["flipped"]
    far = m["final"] > cell
    out.update(
        stalled_far=float((fail & m["stalled"] & far).sum() / n),
        stalled_near=float((fail & m["stalled"] & ~far).sum() / n),
        moving=float((fail & ~m["stalled"]).sum() / n),
    )
    fail = success < 0.5
    if fail.any():
        out["fail_final"] = float(np.nanmean(m["final"][fail]))
        out["fail_closest"] = float(np.nanmean(m["closest"][fail]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", type=Path, required=True, help="a pipeline's --out folder")
    ap.add_argument("--rows", required=True, help="comma-separated run names; the first is the reference")
    ap.add_argument("--window", type=int, default=200, help="steps at the end a stall is judged over")
    ap.add_argument("--radius", type=float, default=1.0, help="a stall stays within this distance of its end")
    ap.add_argument("--rerun", default="", help="comma-separated base rows whose parts predate final_obs: rerun them")
    ap.add_argument("--by-task", action="store_true", help="also a table per task: success, speed, slow steps, "
                    "and the path distance gained in the first --first steps")  # fmt: skip
    ap.add_argument("--slow", type=float, default=0.02, help="a step that moves less than this is slow (--by-task)")
    ap.add_argument("--first", type=int, default=200, help="steps the early progress is measured over (--by-task)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    names = [r for r in a.rows.split(",") if r]
    if a.window < 1 or a.radius <= 0 or a.slow <= 0 or a.first < 1 or not names:
        print("failure_modes: --window and --first must be >= 1, --radius and --slow > 0, --rows at least one name",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        rows = {n: load_row(a.results, n) for n in names}
        for n in (r for r in a.rerun.split(",") if r):
            if n not in rows:
                raise ValueError(f"--rerun {n}: not one of --rows")
            if "final_obs" not in rows[n][1]:
                rows[n][1]["final_obs"] = rerun_final_obs(rows[n][0])
        oracle = oracle_for(rows[names[0]][0]["run"]["dataset"])
    except (ValueError, KeyError, OSError) as e:
        print(f"failure_modes: {e}", file=sys.stderr)
        return 2
    # the paired grid: the smallest (seeds, tasks, episodes) all rows share
    grid = tuple(min(r[1]["success"].shape[i] for r in rows.values()) for i in range(3))
    cut = lambda x: x[: grid[0], : grid[1], : grid[2]]  # noqa: E731
    measured = {}
    for n, (rec, arr) in rows.items():
        m = episode_measures(oracle, cut(arr["xy"]), cut(arr["goal_xy"]), a.window, a.radius, a.first)
        m.update(motion(cut(arr["xy"]), cut(np.asarray(rec["steps"])), a.slow))
        if "final_obs" in arr and rows[n][0]["run"]["dataset"].startswith("antmaze-"):
            m["flipped"] = upside_down(cut(arr["final_obs"]))  # the ant's observation starts with its qpos
        measured[n] = (cut(arr["success"]), m)
    ref_s, ref_m = measured[names[0]]
    doc = dict(results=str(a.results), grid=list(grid), window=a.window, radius=a.radius, cell=oracle.unit, rows={})
    dataset = rows[names[0]][0]["run"]["dataset"]
    sidecar = default_dir() / f"{dataset}.json"  # what `ttt data generate` counted: episodes holding a fallen ant
    if dataset.startswith("antmaze-") and sidecar.exists():
        meta = json.loads(sidecar.read_text())
        doc["data"] = {k: meta[k] for k in ("flipped_episodes", "flipped_rows_fraction") if k in meta}
        print(f"{dataset}, as generated: {doc['data']}")
    print(
        f"| row | episodes | success | on its back | stalled > 1 cell | stalled <= 1 cell | moving | "
        f"failures end at | failures come within | closer than {names[0]} (both failed) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in names:
        s, m = measured[n]
        row = summarise(s, m, oracle.unit)
        both = (s < 0.5) & (ref_s < 0.5)
        if n != names[0] and both.any():
            d = ref_m["final"][both] - m["final"][both]
            d = d[np.isfinite(d)]
            row["closer"] = float(d.mean())
            row["closer_se"] = float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else float("nan")
            row["both_failed"] = int(both.sum())
        doc["rows"][n] = row
        closer = f"{row['closer']:+.2f} +- {row['closer_se']:.2f} ({row['both_failed']})" if "closer" in row else "-"
        back = f"{row['on_its_back']:.2f}" if "on_its_back" in row else "?"
        print(
            f"| {n} | {row['episodes']} | {row['success']:.2f} | {back} | {row['stalled_far']:.2f} | "
            f"{row['stalled_near']:.2f} | {row['moving']:.2f} | {row.get('fail_final', float('nan')):.1f} | "
            f"{row.get('fail_closest', float('nan')):.1f} | {closer} |"
        )
    if a.by_task:
        print(f"\n| row | task | success | speed (a step) | slow steps (< {a.slow}) | path distance: start -> after "
              f"{a.first} steps |", "|---|---|---|---|---|---|", sep="\n")  # fmt: skip
        for n in names:
            s, m = measured[n]
            doc["rows"][n]["by_task"] = []
            for t in range(s.shape[1]):
                row = dict(task=t + 1, success=float(s[:, t].mean()), speed=float(m["speed"][:, t].mean()),
                           slow=float(m["slow"][:, t].mean()), start=float(np.nanmean(m["start"][:, t])),
                           early=float(np.nanmean(m["early"][:, t])))  # fmt: skip
                doc["rows"][n]["by_task"].append(row)
                print(f"| {n} | {t + 1} | {row['success']:.2f} | {row['speed']:.3f} | {row['slow']:.2f} | "
                      f"{row['start']:.1f} -> {row['early']:.1f} |")  # fmt: skip
    if a.out is not None:
        write_doc(a.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
