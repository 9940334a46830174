"""Cube-single kind: the harness check, the data check and the learning check of `benchmarks/cube_diagnosis.py`
(its records under benchmarks/results/cube/, each declared by file)."""

from __future__ import annotations

import json

from .records import RES


def _load(rel: str) -> dict:
    return json.loads((RES / rel).read_text())


def _tasks(xs) -> str:
    return ", ".join(f"{x:.2f}" for x in xs)


def harness(decl: dict) -> str:
    """OGBench's scripted plan oracle as the policy, through `ttt`'s evaluation path and through OGBench's env."""
    d = _load(decl["harness"])
    out = ["| policy | driver | success | per task | mean steps to success |", "|---|---|---|---|---|"]
    for r in d["rows"]:
        steps = f"{r['steps_success_mean']:.1f}" if r.get("steps_success_mean") is not None else "-"
        out.append(f"| plan oracle, noise {r['noise']:g} | {r['driver']} | {r['success']:.2f} | {_tasks(r['per_task'])}"
                   f" | {steps} |")  # fmt: skip
    checks = [r for r in d["rows"] if "goal_obs_vs_task_goal_max_m" in r]
    if checks:
        gap = max(r["goal_obs_vs_task_goal_max_m"] for r in checks)
        agree = all(r.get("agrees_with_info_success") for r in checks)
        out += ["", f"{d['env_id']}, {d['max_steps']} steps, {d['episodes_per_task']} episodes per task "
                f"(`results/{decl['harness']}`). The cube target read from the goal observation is within "
                f"{gap:.1e} m of the task's goal; `ttt`'s success test on goal coordinates ({d['goal_eps']} m) "
                f"{'agrees' if agree else 'does NOT agree'} with OGBench's `info['success']` in every "
                "episode."]  # fmt: skip
    return "\n".join(out)


def data(decl: dict) -> str:
    """What a 100-episode sample of the generated play data holds."""
    d = _load(decl["data"])
    out = [f"{d['episodes']} episodes x {d['episode_length'][0]} rows (`results/{decl['data']}`): "
           f"{d['lifts_per_episode_mean']:.1f} lifts per episode (min {d['lifts_per_episode_min']}; "
           f"{d['episodes_without_lift']} episodes without one); the cube off the table in "
           f"{d['cube_lifted_frac_rows']:.0%} of rows, moving in {d['cube_moving_frac_steps']:.0%} of steps, with "
           f"gripper contact in {d['gripper_contact_frac_rows']:.0%} of rows; cube x {d['cube_xy_min'][0]:.2f}-"
           f"{d['cube_xy_max'][0]:.2f} m, y {d['cube_xy_min'][1]:.2f}-{d['cube_xy_max'][1]:.2f} m.", "",
           "| task | rows with the cube within 0.04 m of the goal | episodes reaching the goal | episodes from near "
           "the start to the goal |", "|---|---|---|---|"]  # fmt: skip
    for t in d["tasks"]:
        out.append(f"| {t['task']} | {t['rows_within_eps_of_goal']:,} ({t['frac_rows_within_eps_of_goal']:.1%}) | "
                   f"{t['episodes_reaching_goal']} | {t['episodes_start_then_goal']} |")  # fmt: skip
    return "\n".join(out)


def learning(decl: dict) -> str:
    """One GC-IQL seed's base policy at each pre-training length: success and what it did to the cube."""
    out = ["| updates | episodes | success | per task | touched | moved | lifted | closest to goal (mean; start) | "
           "record |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for rel in decl["learning"]:
        d = _load(rel)
        out.append(f"| {d['step'] // 1000}k | {d['episodes']} | {d['success']:.2f} | {_tasks(d['per_task'])} | "
                   f"{d['touched']:.2f} | {d['moved']:.2f} | {d['lifted']:.2f} | {d['min_goal_dist_mean_m']:.3f} m; "
                   f"{d['start_goal_dist_mean_m']:.3f} m | `{rel.split('/')[-1]}` |")  # fmt: skip
    return "\n".join(out)


def pairs(decl: dict) -> str:
    """Base against GC-TTT (critic) per pre-training length, 3 seeds: mean +- s.e. over seeds, the difference, p over
    seeds (paired where both rows carry one checkpoint digest, else Welch's)."""
    from . import records
    from .cells import diff, pm

    out = ["| updates | seeds x tasks x episodes | base | GC-TTT (critic) | GC-TTT - base (s.e.) | p over seeds "
           "(test) |", "|---|---|---|---|---|---|"]  # fmt: skip
    for p in decl["pairs"]:
        a, b = records.load(p["base"]), records.load(p["critic"])
        d = diff(a, b)
        out.append(f"| {p['updates']} | {a['shape'].replace('x', ' x ')} | {pm(a)} | {pm(b)} | {d.diff:+.2f} "
                   f"({d.se:.2f}) | {d.p:.3f} ({'paired' if d.test == 'paired' else 'Welch, unpaired'}) |")  # fmt: skip
    return "\n".join(out)
