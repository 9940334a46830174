"""The in-program PointMaze against OGBench's gymnasium env: parity, resets, jit/vmap, the factory."""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ttt.envs import JAX_ENVS, PointMaze, has_jax_env, impose_start_goal, make_env
from ttt.envs.pointmaze import _make_gym_env

ENV_ID = "pointmaze-medium-v0"
TASKS = (1, 2, 3, 4, 5)
PARITY_TOL = 1e-3


@functools.cache
def _env(backend: str, env_id: str = ENV_ID) -> PointMaze:
    return make_env(env_id, backend)


@functools.cache
def _gym_episode(task: int) -> dict[str, np.ndarray]:
    """One 1000-step episode of OGBench's gymnasium env from the JAX env's start/goal draw for ``task``.

    Actions: OGBench's BFS-oracle direction plus N(0, 0.3^2), with every other 40-step segment replaced by a
    persistent random direction (which pushes into walls and slides along them), all clipped to [-1, 1].
    Termination at the goal is off, so all steps are compared.
    """
    init, goal = (np.asarray(x, np.float64) for x in _env("mujoco").sample_start_goal(jax.random.key(task), task))
    np.random.seed(task)  # OGBench's reset draws from numpy's global RNG; its draws are overridden below
    env = _make_gym_env(ENV_ID, terminate_at_goal=False)
    env.reset(seed=task, options=dict(task_id=task))
    obs, goal_obs = impose_start_goal(env, init, goal)
    u = env.unwrapped
    rng = np.random.default_rng(task)
    actions, qpos, success = [], [], []
    for t in range(1000):
        if (t // 40) % 2:
            if t % 40 == 0:
                push = rng.uniform(-1, 1, 2)
            a = push
        else:
            sub, _ = u.get_oracle_subgoal(u.get_xy(), u.cur_goal_xy)
            d = sub - u.get_xy()
            a = d / (np.linalg.norm(d) + 1e-6) + rng.normal(0, 0.3, 2)
        a = np.clip(a, -1, 1)
        o, _, _, _, info = env.step(a)
        actions.append(a)
        qpos.append(o)
        success.append(info["success"] == 1.0)
    env.close()
    return dict(
        init=init,
        goal=goal,
        obs=obs,
        goal_obs=goal_obs,
        actions=np.array(actions),
        qpos=np.array(qpos),
        success=np.array(success),
    )


@eqx.filter_jit
def _rollout(env, state, actions):
    def body(s, a):
        s, obs, success = env.step(s, a)
        return s, (obs, success)

    return jax.lax.scan(body, state, actions)[1]


def _check_parity(backend: str) -> float:
    env = _env(backend)
    worst, contacts = 0.0, 0
    for task in TASKS:
        ep = _gym_episode(task)
        state, obs, goal_obs = env.reset_to(ep["init"], ep["goal"])
        np.testing.assert_allclose(obs, ep["obs"], atol=1e-6)
        np.testing.assert_allclose(goal_obs, ep["goal_obs"], atol=1e-6)
        qpos, success = (np.asarray(x) for x in _rollout(env, state, jnp.asarray(ep["actions"], jnp.float32)))
        err = np.abs(qpos - ep["qpos"]).max()
        assert err <= PARITY_TOL, f"task {task}: max |xy error| {err:.2e} over 1000 steps"
        worst = max(worst, err)
        # Success flags agree wherever the distance is not within float error of the threshold.
        dist = np.linalg.norm(ep["qpos"] - ep["goal"], axis=-1)
        clear = np.abs(dist - env.goal_eps) > 1e-4
        np.testing.assert_array_equal(success[clear], ep["success"][clear])
        assert ep["success"].any(), f"task {task}: the oracle segments should reach the goal"
        # Wall contacts: steps whose displacement falls short of the commanded 0.2 * a on some axis.
        prev = np.concatenate([ep["init"][None], ep["qpos"][:-1]])
        short = np.abs(ep["qpos"] - prev) < 0.2 * np.abs(ep["actions"]) - 1e-3
        contacts += int(short.any(-1).sum())
    assert contacts >= 100, f"only {contacts} contact steps: the test would not exercise the walls"
    return worst


def test_parity_mujoco_backend_with_ogbench():
    """C-MuJoCo backend: same positions as OGBench's env (<= 1e-3 over 1000 steps x 5 tasks, with contacts)."""
    _check_parity("mujoco")


@pytest.mark.slow
def test_parity_mjx_backend_with_ogbench():
    """MJX backend: same positions as OGBench's env (<= 1e-3 over 1000 steps x 5 tasks, with contacts)."""
    _check_parity("mjx")


def test_reset_draws_ogbench_noise_and_indexes_tasks_under_vmap():
    """Starts and goals lie within +-1 (noise * maze_unit / 4) of the task cells; keys matter; vmap = per-task."""
    env = _env("mujoco")
    gym = _make_gym_env(ENV_ID).unwrapped
    n = 256
    keys = jax.random.split(jax.random.key(0), n)
    for task in TASKS:
        info = gym.task_infos[task - 1]
        init, goal = jax.vmap(env.sample_start_goal, in_axes=(0, None))(keys, task)
        for xy, centre in ((init, info["init_xy"]), (goal, info["goal_xy"])):
            off = np.asarray(xy) - np.asarray(centre)
            assert np.all(np.abs(off) <= 1.0), "noise beyond OGBench's +-maze_unit/4"
            assert off.min() < -0.9 and off.max() > 0.9, "noise does not span OGBench's range"
            assert len(np.unique(off, axis=0)) == n, "different keys must give different draws"
    tasks = jnp.asarray(np.resize(TASKS, n), jnp.int32)
    states, obs, goal_obs = jax.vmap(env.reset)(keys, tasks)
    for i in (0, 1, 7, 100, 255):
        s, o, g = env.reset(keys[i], int(tasks[i]))
        np.testing.assert_array_equal(obs[i], o)
        np.testing.assert_array_equal(goal_obs[i], g)
        np.testing.assert_array_equal(states.goal[i], s.goal)
    np.testing.assert_array_equal(obs, states.qpos)
    with pytest.raises(ValueError, match="valid: 1..5"):
        env.reset(keys[0], 6)


def _batched_vs_loop(backend: str) -> None:
    env = _env(backend)
    b = 6
    states, _, _ = jax.vmap(env.reset)(jax.random.split(jax.random.key(3), b), jnp.arange(b) % 5 + 1)
    actions = jax.random.uniform(jax.random.key(4), (b, 2), minval=-1.5, maxval=1.5)  # some beyond the clip
    step = eqx.filter_jit(lambda e, s, a: e.step(s, a))
    nxt, obs, success = eqx.filter_jit(lambda e, s, a: jax.vmap(e.step)(s, a))(env, states, actions)
    for i in range(b):
        s_i = jax.tree.map(lambda x, i=i: x[i], states)
        n_i, o_i, ok_i = step(env, s_i, actions[i])
        np.testing.assert_allclose(obs[i], o_i, atol=1e-6)
        np.testing.assert_allclose(nxt.qpos[i], n_i.qpos, atol=1e-6)
        assert bool(success[i]) == bool(ok_i)


def test_vmapped_step_equals_a_loop_mujoco():
    _batched_vs_loop("mujoco")


@pytest.mark.slow
def test_vmapped_step_equals_a_loop_mjx():
    _batched_vs_loop("mjx")


@pytest.mark.parametrize("backend", ["mujoco", pytest.param("mjx", marks=pytest.mark.slow)])
def test_env_is_a_jit_argument_without_retrace(backend):
    """The env passes through ``eqx.filter_jit`` as an argument; a second call (and a rebuilt env) reuses the trace."""
    env = _env(backend)

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def run(env, key, task):
        state, _, _ = env.reset(key, task)
        return env.step(state, jnp.array([0.5, -0.5]))[1]

    a = run(env, jax.random.key(0), jnp.int32(1))
    b = run(env, jax.random.key(1), jnp.int32(2))
    c = run(make_env(ENV_ID, backend), jax.random.key(1), jnp.int32(2))
    assert not np.allclose(a, b)
    np.testing.assert_array_equal(b, c)


def test_goal_coords_and_attributes():
    env = _env("mujoco")
    assert (env.env_id, env.obs_dim, env.action_dim, env.goal_dim) == (ENV_ID, 2, 2, 2)
    assert (env.max_steps, env.goal_eps, env.num_tasks) == (1000, 1.0, 5)
    obs = jnp.arange(12.0).reshape(3, 2, 2)
    np.testing.assert_array_equal(env.goal_coords(obs), obs[..., :2])


@pytest.mark.parametrize("env_id", ["pointmaze-large-v0", "pointmaze-giant-v0"])
def test_other_mazes_match_ogbench_tasks(env_id):
    """large/giant read their tasks from OGBench and step like its env (C backend, a short oracle-free walk)."""
    env = _env("mujoco", env_id)
    gym = _make_gym_env(env_id, terminate_at_goal=False)
    gym.reset(seed=0, options=dict(task_id=1))
    u = gym.unwrapped
    np.testing.assert_array_equal(env.init_xy, [t["init_xy"] for t in u.task_infos])
    np.testing.assert_array_equal(env.goal_xy, [t["goal_xy"] for t in u.task_infos])
    init, goal = env.sample_start_goal(jax.random.key(0), 1)
    impose_start_goal(gym, np.asarray(init), np.asarray(goal))
    actions = np.clip(np.random.default_rng(0).normal(0, 1, (60, 2)), -1, 1)
    ref = np.array([gym.step(a)[0] for a in actions])
    qpos, _ = _rollout(env, env.reset_to(init, goal)[0], jnp.asarray(actions, jnp.float32))
    np.testing.assert_allclose(qpos, ref, atol=PARITY_TOL)


def test_make_env_errors():
    assert JAX_ENVS == ("pointmaze-medium-v0", "pointmaze-large-v0", "pointmaze-giant-v0")
    assert has_jax_env(ENV_ID) and not has_jax_env("cube-single-v0") and not has_jax_env("pointmaze-teleport-v0")
    with pytest.raises(ValueError, match="valid ids: pointmaze-medium-v0, pointmaze-large-v0") as e:
        make_env("pointmaze-huge-v0")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="teleport"):
        make_env("pointmaze-teleport-v0")
    with pytest.raises(ValueError, match="host driver"):
        make_env("cube-single-v0")
    with pytest.raises(ValueError, match="valid backends: mujoco, mjx"):
        make_env(ENV_ID, backend="brax")
    with pytest.raises(ValueError, match="numpy's global RNG"):
        PointMaze("pointmaze-teleport-v0")
