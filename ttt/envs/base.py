"""The protocol every in-program environment implements.

An ``Env`` is an Equinox module: its array fields (task tables, a physics model) are pytree leaves, so
the env is passed to jitted functions as an argument and never closed over; its static fields hold only
names, shapes and flags. All methods act on ONE environment and are pure: batch them with ``jax.vmap``
(the task id and the key are traced, so a vmapped reset can mix tasks). Keys are typed
(``jax.random.key``).

Episode semantics follow OGBench: ``reset`` draws the start and goal like OGBench's ``reset(options=
dict(task_id=...))``, ``step`` applies OGBench's step rule and reports ``success`` measured AFTER the
step (OGBench's ``success_timing='post'``); terminating at the goal and truncating at ``max_steps`` are
the caller's business.
"""

from __future__ import annotations

import abc
from typing import Any

import equinox as eqx
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray

# An environment's state: a pytree of arrays (the env's own ``eqx.Module``), holding the goal.
State = Any


class Env(eqx.Module):
    """An OGBench environment as a pure JAX function of an explicit state.

    Concrete envs declare these attributes as static fields:

    - ``env_id``: the gymnasium id of the OGBench env it reproduces, e.g. ``'pointmaze-medium-v0'``;
    - ``obs_dim``, ``action_dim``: observation and action sizes (actions live in ``[-1, 1]``);
    - ``goal_dim``: size of the goal coordinates ``goal_coords(obs)`` on which success is measured;
    - ``max_steps``: OGBench's ``max_episode_steps``;
    - ``goal_eps``: the success threshold on the goal coordinates (``||c(s) - c(g)|| <= goal_eps``);
    - ``num_tasks``: number of OGBench evaluation tasks (ids ``1..num_tasks``).
    """

    env_id: eqx.AbstractVar[str]
    obs_dim: eqx.AbstractVar[int]
    action_dim: eqx.AbstractVar[int]
    goal_dim: eqx.AbstractVar[int]
    max_steps: eqx.AbstractVar[int]
    goal_eps: eqx.AbstractVar[float]
    num_tasks: eqx.AbstractVar[int]

    @abc.abstractmethod
    def sample_start_goal(
        self, key: PRNGKeyArray, task: Int[ArrayLike, ""]
    ) -> tuple[Float[Array, " goal"], Float[Array, " goal"]]:
        """OGBench's noisy start and goal of evaluation task ``task`` (1-based, traced), drawn from ``key``."""

    @abc.abstractmethod
    def reset_to(
        self, init_xy: Float[ArrayLike, " goal"], goal_xy: Float[ArrayLike, " goal"]
    ) -> tuple[State, Float[Array, " obs"], Float[Array, " obs"]]:
        """``(state, obs, goal_obs)`` of an episode that starts at ``init_xy`` with its goal at ``goal_xy``."""

    @abc.abstractmethod
    def step(
        self, state: State, action: Float[ArrayLike, " action"]
    ) -> tuple[State, Float[Array, " obs"], Bool[Array, ""]]:
        """OGBench's step rule: ``(next_state, next_obs, success)``, success measured after the step."""

    @abc.abstractmethod
    def goal_coords(self, obs: Float[Array, "*batch obs"]) -> Float[Array, "*batch goal"]:
        """The coordinates of observations (or goal observations) on which success is measured."""

    def contains(self, xy: ArrayLike) -> bool:
        """Whether concrete goal coordinates `xy` are a place the agent can be (host-side; checks a user's start or
        goal). Default: any finite point; a maze refuses walls and the outside."""
        import numpy as np

        return bool(np.isfinite(np.asarray(xy, np.float64)).all())

    def reset(
        self, key: PRNGKeyArray, task: Int[ArrayLike, ""]
    ) -> tuple[State, Float[Array, " obs"], Float[Array, " obs"]]:
        """``(state, obs, goal_obs)`` of a fresh episode of task ``task`` (1-based), noise drawn from ``key``."""
        return self.reset_to(*self.sample_start_goal(key, task))

    def reset_draws(self, key: PRNGKeyArray, task: Int[ArrayLike, ""]) -> dict[str, Array]:
        """What ``reset(key, task)`` draws, for ``impose`` (the host driver): by default the start and goal
        (``init``, ``goal``) of ``sample_start_goal``."""
        init, goal = self.sample_start_goal(key, task)
        return dict(init=init, goal=goal)

    def impose(self, gym_env, draws: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Put OGBench's gymnasium env of this id (already reset) into the episode ``reset`` starts from these draws
        (``reset_draws``, as NumPy arrays): ``(obs, goal_obs)``. The host driver's reset, so that both drivers face
        the same episodes. Envs that reproduce an OGBench env implement it."""
        raise NotImplementedError(f"{type(self).__name__} cannot impose its episodes on a gymnasium env")
