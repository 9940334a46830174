"""The in-program humanoid mazes (OGBench's MjModel in C MuJoCo through a callback, ``ttt.envs.humanoidmaze``) against
OGBench's gymnasium env: the reset reproduces OGBench's own from the same draws (its rejection loop included), and
the compiled env and the gymnasium env (the host driver's) give the same trajectories, bit for bit, for the same keys
and actions; ``ttt eval`` gives the same episodes on both drivers."""

from __future__ import annotations

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from helpers import batch_draws, batch_reset, batch_rollout, cached_env, ogbench_maze_reset, run

from ttt.envs import HumanoidMaze, hostsim, make_env, resolve_driver
from ttt.envs import humanoidmaze as hm
from ttt.envs.gym import make_gym_env
from ttt.errors import TttError

HUM = "humanoidmaze-medium-v0"


def _gym_rollouts(env, draws, actions):
    """The host driver's view: OGBench's gymnasium env per episode, put where ``env.reset`` starts (``impose``), then
    stepped with ``actions`` (steps, batch, act): ``(obs0, goal_obs, obs (steps, batch, obs), success, states)``,
    ``states`` the float64 integration states at the end (the in-program state's words, unpacked)."""
    obs0, goals, obs, success, states = [], [], [], [], []
    for b in range(actions.shape[1]):
        g = make_gym_env(env.env_id, terminate_at_goal=False)
        g.reset(seed=b, options=dict(task_id=1 + b % 5))
        o, go = env.impose(g, {k: v[b] for k, v in draws.items()})
        obs0.append(o)
        goals.append(go)
        steps = [g.step(a) for a in actions[:, b]]
        obs.append([s[0] for s in steps])
        success.append([bool(s[4]["success"]) for s in steps])
        u = g.unwrapped
        states.append(np.concatenate([u.cur_goal_xy, hostsim.get_state(u.model, u.data)]))
        g.close()
    f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731  (the drivers' observations are float32)
    return f32(obs0), f32(goals), f32(obs).swapaxes(0, 1), np.array(success).T, np.stack(states)


def _random_actions(steps: int, batch: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (steps, batch, 21)).astype(np.float32)


@pytest.mark.parametrize("maze, key, tasks, steps", [("medium", 7, (1, 3, 5), 40), ("medium", 8, (2, 4, 2), 25),
                                                     ("large", 2, (3,), 10), ("giant", 1, (1, 2), 15)])  # fmt: skip
def test_compiled_humanoid_gives_the_gym_trajectories_bit_for_bit(maze, key, tasks, steps):
    """Episodes vmapped, as the compiled episode runs them (the physics split over worker threads): first
    observation, goal observation and every step's observation equal OGBench's gymnasium env exactly, with random
    actions; success flags agree; MuJoCo's float64 integration state at the end is OGBench's, bit for bit."""
    env = cached_env(f"humanoidmaze-{maze}-v0")
    keys = jax.random.split(jax.random.key(key), len(tasks))
    tasks = jnp.array(tasks)
    actions = _random_actions(steps, len(tasks), key)
    state, obs0, goal_obs = batch_reset(env, keys, tasks)
    state, obs, success = batch_rollout(env, state, jnp.asarray(actions))
    draws = jax.tree.map(np.asarray, batch_draws(env, keys, tasks))
    ref0, ref_goal, ref_obs, ref_success, ref_states = _gym_rollouts(env, draws, actions)
    assert obs0.shape == (len(tasks), 69) and env.obs_dim == 69 and env.action_dim == 21
    np.testing.assert_array_equal(np.asarray(obs0), ref0)
    np.testing.assert_array_equal(np.asarray(goal_obs), ref_goal)
    np.testing.assert_array_equal(np.asarray(obs), ref_obs)
    np.testing.assert_array_equal(np.asarray(success), ref_success)
    np.testing.assert_array_equal(hostsim.unpack(np.asarray(state.sim)), ref_states)
    assert np.abs(np.diff(np.asarray(obs), axis=0)).max() > 1e-2  # the episodes moved
    assert len({tuple(x) for x in np.asarray(obs0)[:, :2].round(3)}) == len(tasks)  # different starts


def test_humanoid_reset_is_ogbench_reset_from_its_own_draws():
    """``humanoidmaze.ogbench_reset`` given the numbers OGBench's reset draws from its generators (numpy's global one
    for the start and goal noise; the env's for ``reset_model``'s poses, two rejection loops; the action space's for
    the 40 random steps) ends where OGBench's own reset ends: same observation, goal observation and MuJoCo state,
    bit for bit. Seed 4 makes both loops reject a penetrating pose first (2 attempts each)."""
    env = make_gym_env(HUM)
    u = env.unwrapped
    m = u.model
    env.reset(seed=4, options=dict(task_id=2))
    obs, info, rng, box, init, goal = ogbench_maze_reset(env, task_id=2)
    poses = []  # HumanoidEnv.reset_model's draws, attempt after attempt, in its order
    for _ in range(2 * hm.ATTEMPTS):
        q, v = rng.uniform(size=4), 0.1 * rng.standard_normal(m.nv)
        poses.append((q, v, np.array([rng.uniform(*m.jnt_range[j]) for j in range(1, m.njnt)])))
    quat, qvel, joints = (np.array([p[i] for p in poses]) for i in range(3))
    scratch = make_gym_env(HUM).unwrapped  # how many poses OGBench's first loop takes from the generator
    mujoco.mj_resetData(scratch.model, scratch.data)
    n1 = hm.reset_model(scratch, quat, qvel, joints)
    mujoco.mj_resetData(scratch.model, scratch.data)
    n2 = hm.reset_model(scratch, quat[n1:], qvel[n1:], joints[n1:])
    assert (n1, n2) == (2, 2)  # both loops rejected a pose: the loop is exercised
    draws = dict(init=init, goal=goal, goal_quat=quat, goal_qvel=qvel, goal_joints=joints,
                 actions=np.array([box.sample() for _ in range(hm.RANDOM_ACTIONS)]),
                 quat=quat[n1:], qvel=qvel[n1:], joints=joints[n1:])  # fmt: skip
    other = make_gym_env(HUM)
    other.reset(seed=0, options=dict(task_id=5))
    mine, mine_goal = hm.ogbench_reset(other.unwrapped, draws)
    np.testing.assert_array_equal(mine, obs)
    np.testing.assert_array_equal(mine_goal, info["goal"])
    np.testing.assert_array_equal(other.unwrapped.cur_goal_xy, u.cur_goal_xy)
    o = other.unwrapped
    np.testing.assert_array_equal(hostsim.get_state(o.model, o.data), hostsim.get_state(m, u.data))


def test_a_reset_whose_poses_all_penetrate_raises():
    """All poses penetrating (here: the humanoid's root put at the floor): one clear error, no endless loop."""
    u = make_gym_env(HUM).unwrapped
    mujoco.mj_resetData(u.model, u.data)
    u.data.qpos[2] = 0.0
    poses = np.full((3, 4), 0.5), np.zeros((3, u.model.nv)), np.zeros((3, u.model.njnt - 1))
    with pytest.raises(TttError, match="all 3 poses drawn for this episode penetrate"):
        hm.reset_model(u, *poses)


def test_reset_to_success_after_the_step_and_the_same_on_the_gym_env():
    """A goal at the start: success from the first step, on the compiled env and on OGBench's env put in the same
    episode (``impose`` with ``reset_to``'s draws); a goal away: no success. ``reset_to`` refuses a batch."""
    env = cached_env(HUM)
    start = jnp.array([0.0, 0.0])
    key = jax.random.key(3)
    actions = _random_actions(3, 1, 3)
    for goal, expect in ((start, True), (jnp.array([4.0, 0.0]), False)):
        state, obs0, goal_obs = eqx.filter_jit(lambda e, s, g, k: e.reset_to(s, g, k))(env, start, goal, key)
        _, obs, success = jax.tree.map(np.asarray, batch_rollout(env, jax.tree.map(lambda x: x[None], state),
                                                                 jnp.asarray(actions)))  # fmt: skip
        assert success.all() == expect and success.any() == expect
        assert np.allclose(env.goal_coords(np.asarray(obs0)), start, atol=1e-6)
        assert np.allclose(env.goal_coords(np.asarray(goal_obs)), goal, atol=1e-6)
        draws = dict(task=np.int32(0), init=np.asarray(start), goal=np.asarray(goal),
                     bits=np.asarray(jax.random.bits(key, (env.n_uniforms, 2), jnp.uint32)))  # fmt: skip
        ref0, ref_goal, ref_obs, ref_success, _ = _gym_rollouts(env, jax.tree.map(lambda x: x[None], draws), actions)
        np.testing.assert_array_equal(np.asarray(obs0)[None], ref0)
        np.testing.assert_array_equal(np.asarray(goal_obs)[None], ref_goal)
        np.testing.assert_array_equal(obs, ref_obs)
        np.testing.assert_array_equal(success, ref_success)
    with pytest.raises(TttError, match="reset_to: init_xy must be the maze's xy coordinates, shape \\(2,\\)"):
        env.reset_to(jnp.zeros((2, 2)), start)


def test_batch_rows_equal_single_episodes_and_reset_is_a_function_of_the_key():
    """A vmapped batch is the episodes one by one (no row sees another's); the same key gives the same episode, another
    key another; out-of-range tasks are refused; rebuilt envs share the host side."""
    env = cached_env(HUM)
    keys = jnp.stack([jax.random.key(4), jax.random.key(4), jax.random.key(5)])
    tasks = jnp.array([2, 2, 3])
    actions = _random_actions(6, 3, 1)
    state, obs0, goal = batch_reset(env, keys, tasks)
    _, obs, _ = batch_rollout(env, state, jnp.asarray(actions))
    obs0, goal, obs = np.asarray(obs0), np.asarray(goal), np.asarray(obs)
    np.testing.assert_array_equal(obs0[0], obs0[1])
    assert not np.array_equal(obs0[0], obs0[2])
    single = eqx.filter_jit(lambda e, k, t: e.reset(k, t))
    for b in (0, 2):
        s, o, g = single(env, keys[b], tasks[b])
        np.testing.assert_array_equal(np.asarray(o), obs0[b])
        np.testing.assert_array_equal(np.asarray(g), goal[b])
        s = jax.tree.map(lambda x: x[None], s)
        _, ob, _ = batch_rollout(env, s, jnp.asarray(actions[:, b : b + 1]))
        np.testing.assert_array_equal(np.asarray(ob)[:, 0], obs[:, b])
    # The goal observation near the task's goal (OGBench's noise, the humanoid moved there after its random steps).
    assert np.abs(env.goal_coords(goal[0]) - np.asarray(env.reset_draws(keys[0], 2)["goal"])).max() < 1e-5
    with pytest.raises(ValueError, match=f"task 6 does not exist in {HUM}; valid: 1..5"):
        env.reset(jax.random.key(0), 6)
    assert make_env(HUM).info is env.info  # programs are reused


def test_registered_for_the_compiled_driver():
    """Every humanoid maze resolves to the compiled driver; MJX is refused with its reason; OGBench's tasks, episode
    lengths and threshold."""
    for maze, steps in (("medium", 2000), ("large", 2000), ("giant", 4000)):
        env_id = f"humanoidmaze-{maze}-v0"
        assert resolve_driver("auto", "mujoco", env_id) == "compiled"
        assert resolve_driver("host", "mujoco", env_id) == "host"
        with pytest.raises(TttError, match=f"{env_id} runs on C MuJoCo only \\(not built: MJX"):
            resolve_driver("auto", "mjx", env_id)
        env = cached_env(env_id)
        assert isinstance(env, HumanoidMaze) and env.max_steps == steps and env.goal_eps == 0.5
        u = env.info.gym_env.unwrapped
        np.testing.assert_array_equal(env.init_xy, [u.ij_to_xy(t["init_ij"]) for t in u.task_infos])
        np.testing.assert_array_equal(env.goal_xy, [u.ij_to_xy(t["goal_ij"]) for t in u.task_infos])
    with pytest.raises(TttError, match="humanoidmaze-medium-v0 has no MJX backend"):
        make_env(HUM, backend="mjx")


@pytest.mark.slow
def test_ttt_eval_compiled_equals_host(tmp_path, capsys):
    """``ttt eval`` end to end on a 2-episode humanoidmaze dataset made with an untrained (random) expert: the base
    policy's full episodes (2000 steps) on the compiled driver and on the host driver give the same per-episode
    success and steps; GC-TTT through the Python API (a short horizon, where the result holds every observation):
    the same starts and goals exactly, the same selections, final positions and success."""
    from helpers import pretrain_argv

    from ttt.checkpoint import open_checkpoint
    from ttt.data import generate as gen
    from ttt.data.expert import save_actor
    from ttt.data.files import load
    from ttt.data.sac import SACConfig, TanhGaussianActor
    from ttt.data.specs import get_spec
    from ttt.episode import TTTConfig
    from ttt.evaluation import EvalSetup, evaluate
    from ttt.finetune import FinetuneConfig
    from ttt.select import SelectConfig

    name = "humanoidmaze-medium-stitch-v0"
    actor = TanhGaussianActor(jax.random.key(0), 69, 21, (16,), final_init_scale=1.0)
    save_actor(tmp_path / "h.npz", actor, SACConfig(actor_hidden_dims=(16,)), dict(step=0), robot="humanoid")
    gen.generate(name, episodes=2, seed=0, directory=tmp_path, workers=1, expert=tmp_path / "h.npz")
    ck = tmp_path / "ck"
    rc, _, err = run(pretrain_argv(name, 2, ck, tmp_path, seeds=1, chunk=2), capsys)
    assert rc == 0, err
    docs = {}
    for driver in ("compiled", "host"):
        rc, out, err = run(["eval", str(ck), "--dir", str(tmp_path), "--episodes", "1", "--tasks", "1,4",
                            "--variants", "base", "--driver", driver,
                            "--json", str(tmp_path / f"{driver}.json")], capsys)  # fmt: skip
        assert rc == 0, err
        docs[driver] = json.loads((tmp_path / f"{driver}.json").read_text())
    comp, host = docs["compiled"]["variants"]["base"], docs["host"]["variants"]["base"]
    assert np.array(comp["success"]).shape == (1, 2, 1)
    assert comp["success"] == host["success"] and comp["steps"] == host["steps"]
    # GC-TTT and final positions, through the Python API on a short horizon.
    data = load(name, tmp_path)
    checkpoint = open_checkpoint(ck)
    ag = checkpoint.load().agent
    # A relevance radius of 20 m: the two dataset episodes are relevant from any start, so selections happen.
    ttt = TTTConfig(K=15, select=SelectConfig(q=0.5, mode="mc", eps_rel=40), finetune=FinetuneConfig(steps=2, lr=1e-3))
    setup = EvalSetup(checkpoint.backbone, checkpoint.cfg, checkpoint.sampler, get_spec(name), ttt, max_steps=30)
    kw = dict(episodes=1, tasks=(1, 2), seed=0)
    comp = evaluate(setup, ag, data, driver="compiled", **kw)
    host = evaluate(setup, ag, data, driver="host", **kw)
    assert comp.observations.shape == (1, 2, 1, 30, 69)
    np.testing.assert_array_equal(comp.starts, host.starts)
    np.testing.assert_array_equal(comp.goals, host.goals)
    # The two drivers' fine-tuned policies are two programs: their actions may differ in a float's last bit
    # (tests/helpers.py), and 30 steps of the humanoid's contacts grow that to ~1e-4 relative (velocities reach 12).
    np.testing.assert_allclose(comp.observations, host.observations, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(comp.observations[..., -1, :2], host.observations[..., -1, :2], atol=1e-4)  # final xy
    np.testing.assert_array_equal(comp.success, host.success)
    np.testing.assert_array_equal(comp.steps, host.steps)
    for k in ("active", "empty", "n_rel", "n_selected", "n_train_rows"):
        np.testing.assert_array_equal(comp.rounds[k], host.rounds[k], err_msg=k)
    assert (comp.rounds["n_selected"] > 0).any()  # real selections were compared
