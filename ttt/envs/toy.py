"""`OpenPoint`: a point mass without walls, PointMaze's step rule in plain JAX.

A minimal `Env` for tests, examples and as a template for new environments: the state is the position and the
goal; `step` moves by `0.2 * clip(action, -1, 1)`; success is `||xy - goal|| <= goal_eps`. Tasks are given as
arrays of start and goal positions; starts and goals get uniform noise of +-`noise` per coordinate.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray

from ttt.envs.base import Env


class OpenPointState(eqx.Module):
    xy: Float[Array, " 2"]
    goal_xy: Float[Array, " 2"]


class OpenPoint(Env):
    """Point mass in the open plane with `num_tasks` (start, goal) pairs."""

    starts: Float[Array, "tasks 2"]
    goals: Float[Array, "tasks 2"]
    noise: float = eqx.field(static=True, default=0.0)
    env_id: str = eqx.field(static=True, default="open-point")
    obs_dim: int = eqx.field(static=True, default=2)
    action_dim: int = eqx.field(static=True, default=2)
    goal_dim: int = eqx.field(static=True, default=2)
    max_steps: int = eqx.field(static=True, default=100)
    goal_eps: float = eqx.field(static=True, default=1.0)
    num_tasks: int = eqx.field(static=True, default=1)

    def __init__(self, starts, goals, noise: float = 0.0, max_steps: int = 100, goal_eps: float = 1.0):
        self.starts = jnp.asarray(starts, jnp.float32)
        self.goals = jnp.asarray(goals, jnp.float32)
        if self.starts.shape != self.goals.shape or self.starts.ndim != 2 or self.starts.shape[1] != 2:
            raise ValueError(
                f"starts and goals must both be (tasks, 2), got {self.starts.shape} and {self.goals.shape}"
            )
        self.noise = float(noise)
        self.max_steps = int(max_steps)
        self.goal_eps = float(goal_eps)
        self.num_tasks = int(self.starts.shape[0])
        self.env_id = "open-point"
        self.obs_dim = self.action_dim = self.goal_dim = 2

    def sample_start_goal(self, key: PRNGKeyArray, task: Int[ArrayLike, ""]):
        k_s, k_g = jax.random.split(key)
        i = jnp.asarray(task, jnp.int32) - 1
        u = lambda k: jax.random.uniform(k, (2,), minval=-self.noise, maxval=self.noise)  # noqa: E731
        return self.starts[i] + u(k_s), self.goals[i] + u(k_g)

    def reset_to(self, init_xy, goal_xy):
        xy, g = jnp.asarray(init_xy, jnp.float32), jnp.asarray(goal_xy, jnp.float32)
        return OpenPointState(xy, g), xy, g

    def step(
        self, state: OpenPointState, action: Float[ArrayLike, " 2"]
    ) -> tuple[OpenPointState, Float[Array, " 2"], Bool[Array, ""]]:
        xy = state.xy + 0.2 * jnp.clip(jnp.asarray(action, jnp.float32), -1.0, 1.0)
        return OpenPointState(xy, state.goal_xy), xy, jnp.linalg.norm(xy - state.goal_xy) <= self.goal_eps

    def goal_coords(self, obs: Float[Array, "*batch 2"]) -> Float[Array, "*batch 2"]:
        return obs[..., :2]
