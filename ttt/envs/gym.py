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


def oracle_direction(env) -> np.ndarray:
    """Unit vector from the agent towards OGBench's BFS oracle subgoal."""
    u = env.unwrapped
    xy = u.get_xy()
    subgoal_xy, _ = u.get_oracle_subgoal(xy, u.cur_goal_xy)
    d = subgoal_xy - xy
    return d / (np.linalg.norm(d) + 1e-6)


def upside_down(qpos: np.ndarray) -> np.ndarray:
    """Whether the ant's torso is upside down (its z-axis points down), from ``qpos[..., 3:7]`` (w, x, y, z)."""
    qx, qy = qpos[..., 4], qpos[..., 5]
    return 1.0 - 2.0 * (qx**2 + qy**2) < 0.0
