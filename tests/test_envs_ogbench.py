"""The in-program ant mazes and cube-single (OGBench's MjModel in C MuJoCo through a callback) against OGBench's
gymnasium envs: the resets reproduce OGBench's own from the same draws, and the compiled env and the gymnasium env
(the host driver's) give the same trajectories, bit for bit, for the same keys and actions."""

from __future__ import annotations

import copy

import equinox as eqx
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import batch_draws, batch_reset, batch_rollout, cached_env, ogbench_maze_reset

from ttt.agents import get_backbone
from ttt.envs import AntMaze, CubeSingle, make_env
from ttt.envs import antmaze as ant_mod
from ttt.envs import cube as cube_mod
from ttt.envs.gym import make_gym_env

GCBC = get_backbone("gcbc")

ANT = "antmaze-medium-v0"
CUBE = "cube-single-v0"


def _gym_rollouts(env, keys, tasks, actions):
    """The host driver's view: OGBench's gymnasium env per episode, put where ``env.reset`` starts (``impose``), then
    stepped with ``actions`` (steps, batch, act); ``(obs0, goal_obs, obs (steps, batch, obs), success)``."""
    draws = jax.tree.map(np.asarray, batch_draws(env, keys, tasks))
    obs0, goals, obs, success = [], [], [], []
    for b in range(len(tasks)):
        g = make_gym_env(env.env_id, terminate_at_goal=False)
        g.reset(seed=b, options=dict(task_id=int(tasks[b])))
        o, go = env.impose(g, {k: v[b] for k, v in draws.items()})
        obs0.append(o)
        goals.append(go)
        steps = [g.step(a) for a in actions[:, b]]
        obs.append([s[0] for s in steps])
        success.append([bool(s[4]["success"]) for s in steps])
        g.close()
    f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731  (the drivers' observations are float32)
    return f32(obs0), f32(goals), f32(obs).swapaxes(0, 1), np.array(success).T


@pytest.mark.parametrize("env_id, steps", [(ANT, 60), (CUBE, 30)])
def test_compiled_env_gives_the_gym_trajectories_bit_for_bit(env_id, steps):
    """Three episodes (tasks 1, 3, 5) vmapped, as the compiled episode runs them (the ant's physics split over
    worker threads): first observation, goal observation and every step's observation equal OGBench's gymnasium env
    exactly, with random actions, and success flags agree."""
    env = cached_env(env_id)
    keys = jax.random.split(jax.random.key(7), 3)
    tasks = jnp.array([1, 3, 5])
    actions = np.random.default_rng(0).uniform(-1, 1, (steps, 3, env.action_dim)).astype(np.float32)
    state, obs0, goal_obs = batch_reset(env, keys, tasks)
    obs, success = (np.asarray(x) for x in batch_rollout(env, state, jnp.asarray(actions))[1:])
    ref0, ref_goal, ref_obs, ref_success = _gym_rollouts(env, keys, tasks, actions)
    np.testing.assert_array_equal(np.asarray(obs0), ref0)
    np.testing.assert_array_equal(np.asarray(goal_obs), ref_goal)
    np.testing.assert_array_equal(obs, ref_obs)
    np.testing.assert_array_equal(success, ref_success)
    assert np.abs(np.diff(obs, axis=0)).max() > 1e-3  # the episodes moved
    assert len({tuple(x) for x in np.asarray(obs0)[:, :2].round(3)}) == 3  # three different starts


def test_success_is_measured_after_the_step_on_both_paths():
    """A goal at the start: success from the first step, the same on the compiled env and OGBench's env."""
    for env_id, start in ((ANT, jnp.array([0.0, 0.0])), (CUBE, jnp.array([0.425, 0.1, 0.02]))):
        env = cached_env(env_id)
        state, obs0, _ = eqx.filter_jit(lambda e, s: e.reset_to(s, s))(env, start)
        actions = jnp.zeros((3, env.action_dim))
        _, success = jax.tree.map(np.asarray, eqx.filter_jit(_single_rollout)(env, state, actions))
        assert success.all(), env_id
        assert np.allclose(env.goal_coords(np.asarray(obs0)), start, atol=0.02)


def _single_rollout(env, state, actions):
    def body(s, a):
        s, obs, success = env.step(s, a)
        return s, (obs, success)

    return jax.lax.scan(body, state, actions)[1]


@pytest.mark.parametrize("maze", ["large", "giant", "teleport"])
def test_every_ant_maze_matches_ogbench(maze):
    """The other ant mazes: tasks read from OGBench, reset and 20 steps equal OGBench's env (the teleport maze's
    episodes start far from its teleports)."""
    env = cached_env(f"antmaze-{maze}-v0")
    u = make_gym_env(env.env_id).unwrapped
    np.testing.assert_array_equal(np.asarray(env.init_xy), np.array([u.ij_to_xy(t["init_ij"]) for t in u.task_infos]))
    assert env.has_teleports == (maze == "teleport") and env.max_steps == 1000 and env.goal_eps == 0.5
    keys = jax.random.split(jax.random.key(1), 2)
    tasks = jnp.array([1, 2])
    actions = np.random.default_rng(1).uniform(-1, 1, (20, 2, 8)).astype(np.float32)
    state, obs0, goal_obs = batch_reset(env, keys, tasks)
    _, obs, _ = batch_rollout(env, state, jnp.asarray(actions))
    ref0, ref_goal, ref_obs, _ = _gym_rollouts(env, keys, tasks, actions)
    np.testing.assert_array_equal(np.asarray(obs0), ref0)
    np.testing.assert_array_equal(np.asarray(goal_obs), ref_goal)
    np.testing.assert_array_equal(np.asarray(obs), ref_obs)


def test_ant_reset_is_ogbench_reset_from_its_own_draws():
    """``antmaze.ogbench_reset`` given the numbers OGBench's reset draws from its generators (numpy's global one for
    the start and goal noise, the env's for the joint noise, the action space's for the random steps) ends where
    OGBench's own reset ends: same observation and goal observation, bit for bit."""
    env = make_gym_env(ANT)
    u = env.unwrapped
    env.reset(seed=3, options=dict(task_id=2))
    obs, info, rng, box, init, goal = ogbench_maze_reset(env, task_id=2)
    s = u._reset_noise_scale
    nq, nv = u.model.nq, u.model.nv
    draws = dict(init=init, goal=goal, goal_qpos=rng.uniform(-s, s, nq), goal_qvel=s * rng.standard_normal(nv))
    draws["actions"] = np.array([box.sample() for _ in range(ant_mod.RANDOM_ACTIONS)])
    draws["qpos"], draws["qvel"] = rng.uniform(-s, s, nq), s * rng.standard_normal(nv)
    other = make_gym_env(ANT)
    other.reset(seed=0, options=dict(task_id=5))
    mine, mine_goal = ant_mod.ogbench_reset(other.unwrapped, draws)
    np.testing.assert_array_equal(mine, obs)
    np.testing.assert_array_equal(mine_goal, info["goal"])
    np.testing.assert_array_equal(other.unwrapped.cur_goal_xy, u.cur_goal_xy)


def test_cube_reset_is_ogbench_reset_from_its_own_draws(monkeypatch):
    """``cube.ogbench_reset`` given the numbers OGBench's reset draws (the env's generator for the arm poses, the
    cube's start noise and yaw; a fresh action space's for the random steps, fixed here) ends where OGBench's own
    reset ends: same observation and goal observation, bit for bit."""
    env = make_gym_env(CUBE)
    u = env.unwrapped
    env.reset(seed=3, options=dict(task_id=4))
    fixed = np.random.default_rng(5).uniform(-1, 1, (cube_mod.RANDOM_ACTIONS, 5)).astype(np.float32)
    it = iter(fixed)
    monkeypatch.setattr(gymnasium.spaces.Box, "sample", lambda self, *a, **k: next(it))
    rng = copy.deepcopy(u.np_random)
    obs, info = env.reset(options=dict(task_id=4))
    monkeypatch.undo()
    rng.permutation(1)
    lo, hi = u._arm_sampling_bounds
    goal_arm, goal_yaw = rng.uniform(lo, hi), rng.uniform(-np.pi, np.pi)
    arm, yaw = rng.uniform(lo, hi), rng.uniform(-np.pi, np.pi)
    init = u.task_infos[3]["init_xyzs"][0].copy()
    init[:2] += rng.uniform(-0.01, 0.01, size=2)
    draws = dict(init=init, goal=u.task_infos[3]["goal_xyzs"][0], goal_arm=goal_arm, goal_yaw=goal_yaw,
                 actions=fixed, arm=arm, yaw=yaw, cube_yaw=rng.uniform(0, 2 * np.pi))  # fmt: skip
    other = make_gym_env(CUBE)
    other.reset(seed=0, options=dict(task_id=1))
    mine, mine_goal = cube_mod.ogbench_reset(other.unwrapped, draws)
    np.testing.assert_array_equal(mine, obs)
    np.testing.assert_array_equal(mine_goal, info["goal"])


def test_reset_is_a_function_of_the_key_and_tasks_are_checked():
    for cls, env_id in ((AntMaze, ANT), (CubeSingle, CUBE)):
        env = cached_env(env_id)
        keys = jnp.stack([jax.random.key(4), jax.random.key(4), jax.random.key(5)])
        _, obs, goal = batch_reset(env, keys, jnp.array([2, 2, 2]))
        obs, goal = np.asarray(obs), np.asarray(goal)
        np.testing.assert_array_equal(obs[0], obs[1])
        assert not np.array_equal(obs[0], obs[2])
        # Goal coordinates of the goal observation near the task's goal (OGBench's noise and settling).
        tol = 2.0 if cls is AntMaze else 0.05
        assert np.abs(env.goal_coords(goal) - np.asarray(env.reset_draws(keys[0], 2)["goal"])).max() < tol
        with pytest.raises(ValueError, match=f"task 6 does not exist in {env_id}; valid: 1..5"):
            env.reset(jax.random.key(0), 6)
        assert make_env(env_id).info is env.info  # rebuilt envs share the host side: programs are reused


def _random_dataset(env, episodes: int, rows: int, seed: int):
    """A tiny dataset of the env's own random-action episodes (compiled rollouts), goals by the spec's coordinates."""
    from ttt.data.dataset import Dataset

    keys = jax.random.split(jax.random.key(seed), episodes)
    state, obs0, _ = batch_reset(env, keys, jnp.arange(episodes) % env.num_tasks + 1)
    actions = np.random.default_rng(seed).uniform(-1, 1, (rows - 1, episodes, env.action_dim)).astype(np.float32)
    _, obs, _ = batch_rollout(env, state, jnp.asarray(actions))
    obs = np.concatenate([np.asarray(obs0)[None], np.asarray(obs)])  # (rows, episodes, obs)
    acts = np.concatenate([actions, np.zeros((1, episodes, env.action_dim), np.float32)])
    flat = lambda x: np.swapaxes(x, 0, 1).reshape(episodes * rows, -1)  # noqa: E731
    terminals = np.tile(np.arange(rows) == rows - 1, episodes)
    return Dataset.from_arrays(flat(obs), flat(acts), terminals, goal_fn=env.goal_coords)


@pytest.mark.slow
def test_cube_gc_ttt_episodes_compiled_equal_host():
    """GC-TTT on cube-single, end to end: the compiled program (the env inside, vmapped over seeds x tasks) and the
    host driver (OGBench's gymnasium env) face the same episodes and make the same selections; trajectories agree
    to float error (the actions come from different XLA programs)."""
    from ttt.data.specs import get_spec
    from ttt.episode import TTTConfig
    from ttt.evaluation import EvalSetup, evaluate
    from ttt.finetune import FinetuneConfig
    from ttt.presets import make_configs
    from ttt.pretrain import init_state
    from ttt.select import SelectConfig

    env = cached_env(CUBE)
    spec = get_spec("cube-single-play-v0")
    data = _random_dataset(env, episodes=3, rows=31, seed=0)  # the shapes of the first test's programs
    cfg, sampler = make_configs("gcbc", spec, "cpu", {"actor_hidden_dims": (16,), "value_hidden_dims": (16,),
                                                      "batch_size": 16})  # fmt: skip
    ttt = TTTConfig(K=10, select=SelectConfig(q=0.5, mode="mc", eps_rel=3.0), finetune=FinetuneConfig(steps=2, lr=1e-3))
    setup = EvalSetup(GCBC, cfg, sampler, spec, ttt, max_steps=20)
    keys = jax.random.split(jax.random.key(0), 2)
    ag = eqx.filter_jit(eqx.filter_vmap(lambda k: init_state(k, GCBC, 28, 5, cfg).agent))(keys)
    kw = dict(episodes=1, tasks=(1, 4), seed=0)
    comp = evaluate(setup, ag, data, driver="compiled", **kw)
    host = evaluate(setup, ag, data, driver="host", **kw)
    assert comp.observations.shape == (2, 2, 1, 20, 28)
    np.testing.assert_array_equal(comp.starts, host.starts)
    np.testing.assert_array_equal(comp.goals, host.goals)
    np.testing.assert_allclose(comp.observations, host.observations, atol=1e-3)
    np.testing.assert_array_equal(comp.steps, host.steps)
    for k in ("active", "empty", "n_rel", "n_selected", "n_train_rows"):
        np.testing.assert_array_equal(comp.rounds[k], host.rounds[k], err_msg=k)
    assert (comp.rounds["n_selected"] > 0).any()  # real selections were compared
    assert not np.allclose(comp.observations[0, 0, 0, -1], comp.observations[0, 0, 0, 0])  # the arm moved
