"""OGBench's gymnasium environments as the host side of `ttt` uses them (data generation, the ant expert, the host
driver): made with the rendering backend set and warnings quiet, seeded reproducibly, and read (the BFS oracle's
direction, the ant's orientation, the step limit). The one place that sets `MUJOCO_GL`."""

from __future__ import annotations

import os
import warnings

import numpy as np


def quiet() -> None:
    """Headless MuJoCo rendering (EGL) unless the user chose a backend, and no gymnasium / OGBench warnings."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    warnings.filterwarnings("ignore")


def make_gym_env(env_id: str, **kwargs):
    """`gymnasium.make(env_id, **kwargs)` with OGBench's environments registered."""
    quiet()
    import gymnasium
    import ogbench  # noqa: F401  (registers the environments)

    return gymnasium.make(env_id, **kwargs)


def max_episode_steps(env_id: str) -> int:
    """The step limit of an OGBench environment id (its evaluation episode length)."""
    quiet()
    import gymnasium
    import ogbench  # noqa: F401

    return int(gymnasium.spec(env_id).max_episode_steps)


def seed_env(env, seed: int) -> None:
    """Seed what an OGBench reset draws from beyond ``env.reset(seed=...)``: NumPy's global generator (the noise on
    a maze's start and goal) and the action space's own (the random steps before the goal observation)."""
    np.random.seed(seed % 2**32)
    env.action_space.seed(seed)


def oracle_subgoal(env) -> np.ndarray:
    """OGBench's BFS oracle subgoal (``get_oracle_subgoal``) for the agent's position and the current goal, memoised
    per (agent cell, goal cell) on the environment.

    OGBench's oracle runs a breadth-first search over the whole maze at every call, and its answer (the centre of
    the next cell towards the goal) depends only on the two cells: the maze is fixed and no random number is drawn.
    The agent stays in one cell for many steps, so the memo returns the very array values OGBench would and spares
    44-65% of a pointmaze generation step (medium to giant; `benchmarks/speed/oracle_memo.py`)."""
    u = env.unwrapped
    key = (u.xy_to_ij(u.get_xy()), u.xy_to_ij(u.cur_goal_xy))
    memo = u.__dict__.setdefault("_ttt_oracle_memo", {})
    if key not in memo:
        memo[key] = np.array(u.get_oracle_subgoal(u.get_xy(), u.cur_goal_xy)[0])
        memo[key].flags.writeable = False  # shared by every later call: read-only
    return memo[key]


def oracle_direction(env) -> np.ndarray:
    """Unit vector from the agent towards OGBench's BFS oracle subgoal (`oracle_subgoal`)."""
    d = oracle_subgoal(env) - env.unwrapped.get_xy()
    return d / (np.linalg.norm(d) + 1e-6)


def upside_down(qpos: np.ndarray) -> np.ndarray:
    """Whether the ant's torso is upside down (its z-axis points down), from ``qpos[..., 3:7]`` (w, x, y, z)."""
    qx, qy = qpos[..., 4], qpos[..., 5]
    return 1.0 - 2.0 * (qx**2 + qy**2) < 0.0
