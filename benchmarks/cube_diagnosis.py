"""Why every backbone scores 0.00 on cube-single-play (issue 17, item 2): the checks, cheapest first.

    python benchmarks/cube_diagnosis.py harness [--episodes 10] [--out benchmarks/results/cube/harness.json]
    python benchmarks/cube_diagnosis.py data --data DIR [--out benchmarks/results/cube/data.json]
    python benchmarks/cube_diagnosis.py layout [--out benchmarks/results/cube/layout.json]
    python benchmarks/cube_diagnosis.py learn CKPT --data DIR [--episodes 5] [--out benchmarks/results/cube/learn.json]

- `harness`: OGBench's own cube plan oracle (the scripted policy that makes the play data) drives our host
  evaluation path, `ttt.evaluate.run_host`, unchanged: the same gymnasium env construction, reset with task ids 1-5,
  goal observation and success accounting that `ttt eval` uses for cube-single-v0. The oracle plans ONLY from what
  an agent is given: the current observation's state (through the env, for the plan's clock) and the goal
  OBSERVATION the harness hands the agent (cube position = goal[19:22] / 10 + (0.425, 0, 0), yaw from
  goal[26:28]). As a control, the same oracle with OGBench's own task goal (``cur_task_info``), outside our harness.
- `layout`: OGBench's observation layout of cube-single against ours (``DatasetSpec.goal_coords``).
- `data`: statistics of a generated cube-single-play dataset against OGBench's description and the 5 evaluation
  tasks (episode length, cube moved / lifted / grasped, the cube's xy coverage, rows within 0.04 m of each task's
  goal and of each task's start, episodes that carry the cube from a task's start region to its goal).
- `learn`: a checkpoint's base success on the 5 tasks (host driver, as `ttt eval`) and what its policy does to the
  cube (touched, moved, lifted, closest approach to the goal), so that learning shows before success does.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

CENTER = np.array([0.425, 0.0, 0.0])
GOAL_EPS = 0.04  # OGBench's cube success threshold (CubeEnv._compute_successes)


def _task_infos():
    from ttt.envs.gym import make_gym_env

    env = make_gym_env("cube-single-v0")
    infos = [dict(name=t["task_name"], init=t["init_xyzs"][0].tolist(), goal=t["goal_xyzs"][0].tolist())
             for t in env.unwrapped.task_infos]  # fmt: skip
    env.close()
    return infos


# ----------------------------------------------------------------------------------------------------------- harness
class _OracleFromGoalObs:
    """OGBench's CubePlanOracle as a policy of (state, goal observation): the target cube pose comes from the goal
    observation the harness hands the agent; the plan's clock and the effector / cube poses from the env (the same
    numbers the observation holds, unscaled)."""

    def __init__(self, envs: list, noise: float):
        from ogbench.manipspace.oracles.plan.cube_plan import CubePlanOracle

        self.envs, self.noise, self.oracles = envs, noise, {}
        self.CubePlanOracle = CubePlanOracle
        self.goal_error = []  # |target from the goal observation - OGBench's task goal| per episode

    def info(self, b: int, goal: np.ndarray) -> dict:
        u = self.envs[b].unwrapped
        info = u.compute_ob_info()
        target = goal[19:22] / 10.0 + CENTER
        info["privileged/target_block"] = 0
        info["privileged/target_block_pos"] = target
        info["privileged/target_block_yaw"] = np.array([np.arctan2(goal[27], goal[26])])
        return info

    def __call__(self, agent, obs, goals, keys):
        obs, goals = np.asarray(obs), np.asarray(goals)
        actions = np.zeros((len(obs), 5), np.float32)
        for b in range(len(obs)):
            info = self.info(b, goals[b])
            if b not in self.oracles:
                o = self.CubePlanOracle(env=self.envs[b], noise=self.noise, noise_smoothing=0.5)
                o.reset(obs[b], info)
                self.oracles[b] = o
                true_goal = self.envs[b].unwrapped.cur_task_info["goal_xyzs"][0]
                self.goal_error.append(float(np.linalg.norm(info["privileged/target_block_pos"] - true_goal)))
            actions[b] = np.clip(self.oracles[b].select_action(obs[b], info), -1, 1)
        return actions


def harness(args) -> dict:
    import ttt.evaluate as ev
    from ttt.data.specs import get_spec
    from ttt.envs.gym import make_gym_env, max_episode_steps, seed_env

    spec = get_spec("cube-single-play-v0")
    L = max_episode_steps(spec.env_id)
    setup = ev.EvalSetup("gciql", None, None, spec, None, L)
    tasks = (1, 2, 3, 4, 5)
    out = dict(env_id=spec.env_id, max_steps=L, goal_eps=spec.goal_eps, episodes_per_task=args.episodes, rows=[])
    for noise in (0.0, 0.1):
        created = []

        def recording_make(env_id, created=created, **kw):
            env = make_gym_env(env_id, **kw)
            created.append(env)
            return env

        batch = ev.episode_batch(args.seed, 1, tasks, args.episodes)
        policy = _OracleFromGoalObs(created, noise)
        fns = (None, None, policy, lambda agents, seed_idx: None)
        ev.make_gym_env, saved = recording_make, ev.make_gym_env  # count the envs run_host makes, in batch order
        np.random.seed(1234)
        t0 = time.perf_counter()
        try:
            res = ev.run_host(setup, None, None, None, batch, seed=args.seed, fns=fns)
        finally:
            ev.make_gym_env = saved
        succ = res["success"].reshape(len(tasks), args.episodes)
        # our success test on goal coordinates (DESIGN: obs[19:22] / 10, 0.04 m) at the episode's last observation
        last = res["observations"][np.arange(len(batch)), res["steps"] - 1]
        d_last = np.linalg.norm(spec.goal_coords(last) - spec.goal_coords(res["goal"]), axis=-1)
        out["rows"].append(dict(
            driver="ttt.evaluate.run_host (our harness), goal from the goal observation",
            noise=noise,
            success=float(succ.mean()),
            per_task=succ.mean(1).tolist(),
            steps_mean=float(res["steps"].mean()),
            steps_success_mean=float(res["steps"][res["success"]].mean()) if res["success"].any() else None,
            goal_obs_vs_task_goal_max_m=float(max(policy.goal_error)),
            success_by_goal_coords_at_end=float((d_last <= GOAL_EPS).mean()),
            agrees_with_info_success=bool(((d_last <= GOAL_EPS) == res["success"]).all()),
            wall_s=time.perf_counter() - t0,
        ))  # fmt: skip
        print(json.dumps(out["rows"][-1]), flush=True)

        # control: the oracle on OGBench's env directly, target from OGBench's task definition
        from ogbench.manipspace.oracles.plan.cube_plan import CubePlanOracle

        np.random.seed(1234)
        succ2 = np.zeros((len(tasks), args.episodes))
        for i, task in enumerate(tasks):
            for e in range(args.episodes):
                env = make_gym_env(spec.env_id)
                seed_env(env, 10_000 + 100 * task + e)
                ob, info = env.reset(seed=10_000 + 100 * task + e, options=dict(task_id=task))
                u = env.unwrapped
                info["privileged/target_block"] = 0
                info["privileged/target_block_pos"] = u.cur_task_info["goal_xyzs"][0]
                info["privileged/target_block_yaw"] = np.array([0.0])
                oracle = CubePlanOracle(env=env, noise=noise, noise_smoothing=0.5)
                oracle.reset(ob, info)
                done = False
                while not done:
                    a = np.clip(oracle.select_action(ob, info), -1, 1)
                    ob, _, term, trunc, info = env.step(a)
                    info["privileged/target_block"] = 0
                    info["privileged/target_block_pos"] = u.cur_task_info["goal_xyzs"][0]
                    info["privileged/target_block_yaw"] = np.array([0.0])
                    succ2[i, e] = max(succ2[i, e], float(info["success"]))
                    done = term or trunc
                env.close()
        out["rows"].append(dict(driver="OGBench env directly, goal from cur_task_info", noise=noise,
                                success=float(succ2.mean()), per_task=succ2.mean(1).tolist()))  # fmt: skip
        print(json.dumps(out["rows"][-1]), flush=True)
    return out


# ------------------------------------------------------------------------------------------------------------ layout
def layout(args) -> dict:
    """Where the cube's position sits in the observation and how it is scaled, read from OGBench's env."""
    from ttt.data.specs import get_spec
    from ttt.envs.gym import make_gym_env

    env = make_gym_env("cube-single-v0")
    ob, info = env.reset(seed=0, options=dict(task_id=2))
    pos = info["privileged/block_0_pos"]
    spec = get_spec("cube-single-play-v0")
    goal = info["goal"]
    out = dict(
        ob_dim=int(ob.shape[0]),
        cube_pos_m=pos.tolist(),
        obs_19_22=ob[19:22].tolist(),
        obs_19_22_from_pos=((pos - CENTER) * 10).tolist(),
        goal_coords_ours=spec.goal_coords(ob).tolist(),
        goal_coords_error_m=float(np.abs(spec.goal_coords(ob) - pos).max()),
        goal_obs_cube_m=spec.goal_coords(goal).tolist(),
        task_goal_m=env.unwrapped.cur_task_info["goal_xyzs"][0].tolist(),
    )
    env.close()
    return out


# -------------------------------------------------------------------------------------------------------------- data
def data_stats(args) -> dict:
    from ttt.data.specs import get_spec

    spec = get_spec("cube-single-play-v0")
    path = Path(args.data)
    path = path / "cube-single-play-v0.npz" if path.is_dir() else path
    z = np.load(path)
    obs, term = z["observations"], z["terminals"]
    n = len(obs)
    ends = np.flatnonzero(term)
    lengths = np.diff(np.concatenate([[-1], ends]))
    E = len(ends)
    cube = spec.goal_coords(obs)  # (n, 3) metres
    L = int(lengths[0])
    cube_e = cube.reshape(E, L, 3)
    grip_contact = obs[:, 18].reshape(E, L)
    lifted = cube_e[..., 2] > 0.04  # cube rests at z = 0.02
    disp = np.linalg.norm(np.diff(cube_e, axis=1), axis=-1)  # per-step cube motion
    moving = disp > 1e-3
    # pick-and-place segments: maximal runs of rows with the cube off the table
    per_ep_lifts = [int(np.sum(np.diff(lifted[e].astype(int)) == 1)) for e in range(E)]
    tasks = _task_infos()
    task_rows = []
    for t in tasks:
        g, s = np.array(t["goal"]), np.array(t["init"])
        dg = np.linalg.norm(cube - g, axis=-1)
        ds = np.linalg.norm(cube[:, :2] - s[:2], axis=-1)
        near_g, near_s = (dg <= GOAL_EPS).reshape(E, L), (ds <= 0.02).reshape(E, L)
        # an episode that holds the cube near the task start (within 2 cm: OGBench's +-1 cm start noise) and LATER
        # within 0.04 m of the task goal
        carried = 0
        for e in range(E):
            if near_s[e].any() and near_g[e].any():
                if np.flatnonzero(near_g[e]).max() > np.flatnonzero(near_s[e]).min():
                    carried += 1
        task_rows.append(dict(task=t["name"], goal=t["goal"], rows_within_eps_of_goal=int(near_g.sum()),
                              frac_rows_within_eps_of_goal=float(near_g.mean()),
                              episodes_reaching_goal=int(near_g.any(1).sum()),
                              rows_near_start=int(near_s.sum()), episodes_near_start=int(near_s.any(1).sum()),
                              episodes_start_then_goal=carried))  # fmt: skip
    xy = cube[:, :2]
    hist, xe, ye = np.histogram2d(xy[:, 0], xy[:, 1], bins=[5, 6], range=[[0.3, 0.55], [-0.3, 0.3]])
    out = dict(
        file=str(path),
        rows=n,
        episodes=E,
        episode_length=sorted(set(lengths.tolist())),
        cube_lifted_frac_rows=float(lifted.mean()),
        cube_moving_frac_steps=float(moving.mean()),
        lifts_per_episode_mean=float(np.mean(per_ep_lifts)),
        lifts_per_episode_min=int(np.min(per_ep_lifts)),
        episodes_without_lift=int(np.sum(np.array(per_ep_lifts) == 0)),
        gripper_contact_frac_rows=float((grip_contact > 0.5).mean()),
        cube_xy_min=xy.min(0).tolist(),
        cube_xy_max=xy.max(0).tolist(),
        cube_z_max=float(cube[:, 2].max()),
        cube_xy_hist_counts=hist.astype(int).tolist(),
        cube_xy_hist_x_edges=xe.tolist(),
        cube_xy_hist_y_edges=ye.tolist(),
        tasks=task_rows,
        action_abs_mean=np.abs(z["actions"]).mean(0).tolist(),
        action_clip_frac=(np.abs(z["actions"]) >= 0.999).mean(0).tolist(),
    )
    return out


# ------------------------------------------------------------------------------------------------------------- learn
def learn(args) -> dict:
    """Base success of a checkpoint on the 5 tasks (host driver, as `ttt eval`), with what the policy did to the
    cube: touched it (gripper contact), moved it (> 2 cm from its start), lifted it (z > 4 cm), the closest it got to
    the goal, and its distance to the goal at the end."""
    from ttt.evaluate import evaluate
    from ttt.pretrain import read_meta
    from ttt.setups import load_run

    setup, agents, data, env = load_run(args.ckpt, args.data)
    meta = read_meta(args.ckpt)
    t0 = time.perf_counter()
    res = evaluate(setup, agents, data, episodes=args.episodes, driver="host", seed=args.seed)
    spec = setup.spec
    obs = res.observations  # (seeds, tasks, episodes, L, obs)
    cube = spec.goal_coords(obs)
    goal = spec.goal_coords(res.goals)[..., None, :]
    start = spec.goal_coords(res.starts)[..., None, :]
    valid = np.arange(obs.shape[3]) < res.steps[..., None]
    d_goal = np.where(valid, np.linalg.norm(cube - goal, axis=-1), np.inf)
    moved = np.where(valid, np.linalg.norm(cube - start, axis=-1), 0).max(-1) > 0.02
    lifted = np.where(valid, cube[..., 2], 0).max(-1) > 0.04
    contact = np.where(valid, obs[..., 18], 0).max(-1) > 0.5
    end = d_goal[np.arange(d_goal.shape[0])[:, None, None], np.arange(d_goal.shape[1])[None, :, None],
                 np.arange(d_goal.shape[2])[None, None, :], res.steps - 1]  # fmt: skip
    start_goal = np.linalg.norm(start[..., 0, :] - goal[..., 0, :], axis=-1)
    mean, se = res.mean_and_se()
    return dict(
        checkpoint=str(args.ckpt), step=int(meta.get("step", -1)), dataset_rows=int(data.observations.shape[0]),
        profile=meta.get("profile"), seeds=int(res.success.shape[0]), episodes=int(res.success.size),
        success=mean, success_se=se, per_task=res.per_task().tolist(),
        touched=float(contact.mean()), moved=float(moved.mean()), lifted=float(lifted.mean()),
        min_goal_dist_mean_m=float(d_goal.min(-1).mean()), end_goal_dist_mean_m=float(end.mean()),
        start_goal_dist_mean_m=float(start_goal.mean()),
        wall_s=time.perf_counter() - t0,
    )  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("harness")
    h.add_argument("--episodes", type=int, default=10)
    h.add_argument("--seed", type=int, default=0)
    h.add_argument("--out", default="benchmarks/results/cube/harness.json")
    d = sub.add_parser("data")
    d.add_argument("--data", required=True)
    d.add_argument("--out", default="benchmarks/results/cube/data.json")
    le = sub.add_parser("learn")
    le.add_argument("ckpt")
    le.add_argument("--data", required=True)
    le.add_argument("--episodes", type=int, default=5)
    le.add_argument("--seed", type=int, default=0)
    le.add_argument("--out", default="benchmarks/results/cube/learn.json")
    lay = sub.add_parser("layout")
    lay.add_argument("--out", default="benchmarks/results/cube/layout.json")
    args = p.parse_args()
    fn = dict(harness=harness, data=data_stats, layout=layout, learn=learn)[args.cmd]
    out = fn(args)
    out["command"] = "python benchmarks/cube_diagnosis.py " + " ".join(sys.argv[1:])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1)[:4000])


if __name__ == "__main__":
    main()
