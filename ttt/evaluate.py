"""Evaluation of pre-trained agents without TTT on OGBench's own CPU environments (the "base" rows).

Every (seed, task, episode) gets its own gymnasium environment; all of them step in lockstep from one host
loop, and one jitted, seed-vmapped call computes every environment's action per step (the mean action at
temperature 0). Success is OGBench's: the episode ends when the goal is reached (`terminate_at_goal`), and
counts as a success iff `info['success']` at its last step. Environment seeds and OGBench's numpy-global goal
noise are seeded per (task, episode), so every seed of a checkpoint faces the same start and goal draws.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ttt.agents import get_backbone
from ttt.errors import TttError


@dataclasses.dataclass(frozen=True)
class EvalResult:
    success: np.ndarray  # (seeds, tasks, episodes) in {0, 1}
    steps: np.ndarray  # (seeds, tasks, episodes) environment steps taken
    tasks: tuple[int, ...]

    def per_seed(self) -> np.ndarray:
        """Success rate of each seed over all tasks and episodes."""
        return self.success.mean(axis=(1, 2))

    def mean_and_se(self) -> tuple[float, float]:
        """Mean over seeds of the per-seed success rate, and its standard error over seeds."""
        rates = self.per_seed()
        se = float(rates.std(ddof=1) / np.sqrt(len(rates))) if len(rates) > 1 else float("nan")
        return float(rates.mean()), se

    def per_task(self) -> np.ndarray:
        return self.success.mean(axis=(0, 2))


def make_env(env_id: str, **kwargs):
    os.environ.setdefault("MUJOCO_GL", "egl")
    warnings.filterwarnings("ignore")
    import gymnasium
    import ogbench  # noqa: F401

    return gymnasium.make(env_id, **kwargs)


def make_policy(backbone_name: str) -> Callable:
    """Jitted `(agents, obs[seeds, n, obs], goals[seeds, n, obs], key) -> actions[seeds, n, act]` (mean actions)."""
    backbone = get_backbone(backbone_name)

    def act_one(agent, obs, goals, key):
        return backbone.act(agent, obs, goals, key, 0.0)

    return eqx.filter_jit(eqx.filter_vmap(act_one, in_axes=(0, 0, 0, None)))


def evaluate_base(
    agents,
    backbone_name: str,
    env_id: str,
    episodes: int,
    tasks: tuple[int, ...] = (1, 2, 3, 4, 5),
    seed: int = 0,
    max_steps: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> EvalResult:
    """Roll out seed-stacked `agents` (leading seed axis) on OGBench's evaluation tasks, E episodes each."""
    if episodes < 1:
        raise TttError(f"episodes must be >= 1, got {episodes}")
    n_seeds = int(jax.tree.leaves(eqx.filter(agents, eqx.is_array))[0].shape[0])
    policy = make_policy(backbone_name)
    envs, obs, goals = [], [], []
    for task in tasks:
        for ep in range(episodes):
            for _ in range(n_seeds):
                env = make_env(env_id)
                if task < 1 or task > env.unwrapped.num_tasks:
                    raise TttError(f"task {task} does not exist in {env_id}; valid: 1..{env.unwrapped.num_tasks}")
                ep_seed = int(np.random.SeedSequence([seed, task, ep]).generate_state(1)[0])
                np.random.seed(ep_seed)  # OGBench draws start/goal noise from numpy's global RNG
                o, info = env.reset(seed=ep_seed, options=dict(task_id=task))
                envs.append(env)
                obs.append(o)
                goals.append(info["goal"])
    limit = max_steps or envs[0].spec.max_episode_steps
    n = len(envs)
    obs, goals = np.asarray(obs, np.float32), np.asarray(goals, np.float32)
    done = np.zeros(n, bool)
    success = np.zeros(n, np.float32)
    steps = np.zeros(n, np.int64)
    # Row r = ((task * episodes) + ep) * n_seeds + s; the policy wants (seeds, envs per seed, dim).
    key = jax.random.key(seed)
    for t in range(limit):
        a = policy(agents, _by_seed(obs, n_seeds), _by_seed(goals, n_seeds), key)
        actions = np.asarray(a).transpose(1, 0, 2).reshape(n, -1)
        for i in np.flatnonzero(~done):
            o, _, terminated, truncated, info = envs[i].step(actions[i])
            obs[i] = o
            steps[i] += 1
            if terminated or truncated or steps[i] >= limit:
                done[i] = True
                success[i] = info["success"]
        if progress:
            progress(t + 1, limit)
        if done.all():
            break
    for env in envs:
        env.close()
    shape = (len(tasks), episodes, n_seeds)
    return EvalResult(success.reshape(shape).transpose(2, 0, 1), steps.reshape(shape).transpose(2, 0, 1), tuple(tasks))


def _by_seed(x: np.ndarray, n_seeds: int) -> jnp.ndarray:
    """(envs, dim) ordered env-major with the seed fastest -> (seeds, envs / seeds, dim)."""
    return jnp.asarray(x.reshape(-1, n_seeds, x.shape[-1]).transpose(1, 0, 2))
