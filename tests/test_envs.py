"""The in-program PointMaze against OGBench's gymnasium env: parity, resets, jit/vmap, the factory."""

from __future__ import annotations

import collections
import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ttt.envs import (
    HOST_ONLY_ENVS,
    JAX_ENVS,
    MJX_ENVS,
    PointMaze,
    has_jax_env,
    has_mjx,
    impose_start_goal,
    make_env,
)
from ttt.envs.pointmaze import _make_gym_env
from ttt.errors import TttError

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


_TRACES: collections.Counter = collections.Counter()


@eqx.filter_jit
def _rollout(env, state, actions):
    _TRACES[env.backend, env.env_id] += 1  # Python runs only when the program is traced: the traces per env

    def body(s, a):
        s, obs, success = env.step(s, a)
        return s, (obs, success)

    return jax.lax.scan(body, state, actions)[1]


@eqx.filter_jit
def _reset_to(env, init, goal, key=None):
    """``env.reset_to`` compiled once (MJX's ``make_data`` op by op is a hundred small compiles)."""
    return env.reset_to(init, goal, key=key)


def _rollout_rebuilt_last(env, state, actions, last: bool):
    """``_rollout``; the last call of a test with a freshly built env, which must reuse the program traced for the
    cached env: the env is a jit argument, not a constant (at most one trace per test, none for the rebuilt env)."""
    key = (env.backend, env.env_id)
    if last:
        before = _TRACES[key]
        out = _rollout(make_env(env.env_id, env.backend), state, actions)
        assert _TRACES[key] == before, "a rebuilt env retraced the rollout"
        return out
    return _rollout(env, state, actions)


def _check_parity(backend: str, tasks: tuple[int, ...] = TASKS) -> float:
    env = _env(backend)
    worst, contacts = 0.0, 0
    traced = _TRACES[backend, ENV_ID]
    for task in tasks:
        ep = _gym_episode(task)
        state, obs, goal_obs = _reset_to(env, ep["init"], ep["goal"])
        np.testing.assert_allclose(obs, ep["obs"], atol=1e-6)
        np.testing.assert_allclose(goal_obs, ep["goal_obs"], atol=1e-6)
        actions = jnp.asarray(ep["actions"], jnp.float32)
        qpos, success = (np.asarray(x) for x in _rollout_rebuilt_last(env, state, actions, task == tasks[-1]))
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
    assert _TRACES[backend, ENV_ID] - traced <= 1, "the rollout was traced more than once for one env"
    return worst


def test_parity_mujoco_backend_with_ogbench():
    """C-MuJoCo backend: same positions as OGBench's env (<= 1e-3 over 1000 steps x 5 tasks, with contacts)."""
    _check_parity("mujoco")


@pytest.mark.slow
def test_parity_mjx_backend_with_ogbench():
    """MJX backend: same positions as OGBench's env (<= 1e-3 over 1000 steps x 2 tasks, with 309 + 232 contact
    steps). Two of the five tasks: the tasks' starts and goals are the backends' shared code, checked on all five by
    the C-MuJoCo test above; here the physics is what differs, and each task's 1000 MJX steps cost ~3.5 s on this
    CPU (26.8 s for five tasks, 16.4 s for two, benchmarks/results/layout/tests.md)."""
    _check_parity("mjx", tasks=(1, 3))


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
    # The reset and the slicing are compiled once (op by op, MJX's data of ~100 leaves costs hundreds of compiles).
    reset = eqx.filter_jit(lambda e, k, t: jax.vmap(e.reset)(k, t))
    states, _, _ = reset(env, jax.random.split(jax.random.key(3), b), jnp.arange(b) % 5 + 1)
    actions = jax.random.uniform(jax.random.key(4), (b, 2), minval=-1.5, maxval=1.5)  # some beyond the clip
    _assert_batch_is_loop(env, states, actions, range(b))


def _assert_batch_is_loop(env, states, actions, elements) -> None:
    """``_vstep`` on the batch equals one unbatched step of each of ``elements``: observation, next position and
    key, success flag."""
    step = eqx.filter_jit(lambda e, s, a, i: e.step(jax.tree.map(lambda x: x[i], s), a[i]))  # one unbatched step
    nxt, obs, success = _vstep(env, states, actions)
    for i in elements:
        n_i, o_i, ok_i = step(env, states, actions, jnp.int32(i))
        np.testing.assert_allclose(obs[i], o_i, atol=1e-6)
        np.testing.assert_allclose(nxt.qpos[i], n_i.qpos, atol=1e-6)
        assert bool(success[i]) == bool(ok_i)
        if env.has_teleports:
            np.testing.assert_array_equal(jax.random.key_data(nxt.key[i]), jax.random.key_data(n_i.key))


def test_vmapped_step_equals_a_loop_mujoco():
    _batched_vs_loop("mujoco")


@pytest.mark.parametrize("env_id", [ENV_ID, "pointmaze-teleport-v0"])
def test_env_is_a_jit_argument_without_retrace(env_id):
    """The env passes through ``eqx.filter_jit`` as an argument; a second call (and a rebuilt env) reuses the trace.
    The MJX backend's env (its model a jit argument too) is checked the same way by the parity tests, whose last
    rollout runs a rebuilt env through the program traced for the cached one (``_rollout_rebuilt_last``)."""
    backend = "mujoco"
    env = _env(backend, env_id)

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def run(env, key, task):
        state, _, _ = env.reset(key, task)
        return env.step(state, jnp.array([0.5, -0.5]))[1]

    a = run(env, jax.random.key(0), jnp.int32(1))
    b = run(env, jax.random.key(1), jnp.int32(2))
    c = run(make_env(env_id, backend), jax.random.key(1), jnp.int32(2))
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
    mazes = ("medium", "large", "giant", "teleport")
    humanoid = tuple(f"humanoidmaze-{m}-v0" for m in mazes[:3])
    assert JAX_ENVS == (*(f"pointmaze-{m}-v0" for m in mazes), *(f"antmaze-{m}-v0" for m in mazes), "cube-single-v0",
                        *humanoid)  # fmt: skip
    assert has_jax_env(ENV_ID) and has_jax_env(TELEPORT_ID) and has_jax_env("cube-single-v0")
    assert HOST_ONLY_ENVS == {} and MJX_ENVS == tuple(f"pointmaze-{m}-v0" for m in mazes)
    assert has_mjx(ENV_ID) and not has_mjx("antmaze-medium-v0") and not has_mjx("cube-single-v0")
    with pytest.raises(TttError, match="valid ids: pointmaze-medium-v0, pointmaze-large-v0") as e:
        make_env("pointmaze-huge-v0")
    assert "\n" not in str(e.value)
    with pytest.raises(TttError, match="cube-single-v0 has no MJX backend .*mesh contacts.*use backend 'mujoco'"):
        make_env("cube-single-v0", backend="mjx")
    with pytest.raises(TttError, match="antmaze-medium-v0 has no MJX backend .*slower than C MuJoCo"):
        make_env("antmaze-medium-v0", backend="mjx")
    with pytest.raises(TttError, match="valid backends: mujoco, mjx"):
        make_env(ENV_ID, backend="brax")


# ---------------------------------------------------------------------------------------------------------------
# pointmaze-teleport: OGBench's MazeEnv.step moves an agent within 1.5 * teleport_radius of an inbound teleport
# (after the physics step and the success check) to an outbound teleport drawn with np.random.randint; the
# observation it returns is the pre-teleport one.

TELEPORT_ID = "pointmaze-teleport-v0"
UP = np.array([0.0, 1.0])


def _chi2_sf(x: float, dof: int) -> float:
    """Survival function of the chi-square distribution (closed forms for integer ``dof``)."""
    h = x / 2
    if dof % 2 == 0:
        return math.exp(-h) * sum(h**i / math.factorial(i) for i in range(dof // 2))
    return math.erfc(math.sqrt(h)) + math.exp(-h) * sum(
        h ** (i - 0.5) / math.gamma(i + 0.5) for i in range(1, (dof - 1) // 2 + 1)
    )


def _assert_uniform(counts: np.ndarray, what: str, p_min: float = 1e-6) -> None:
    """Pearson's chi-square test of equal frequencies: reject (fail) below ``p_min``."""
    counts = np.asarray(counts, np.float64).ravel()
    expected = counts.sum() / counts.size
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    p = _chi2_sf(chi2, counts.size - 1)
    assert p >= p_min, f"{what}: counts {counts.astype(int).tolist()} are not uniform (chi2 {chi2:.1f}, p {p:.1e})"


def _exit_index(env: PointMaze, xy) -> np.ndarray:
    """Index of the outbound teleport each row of ``xy`` sits exactly on (-1: none)."""
    out = np.asarray(env.teleport_out, np.float64)
    eq = np.all(np.asarray(xy, np.float64)[..., None, :] == out, axis=-1)
    return np.where(eq.any(-1), eq.argmax(-1), -1)


def _teleport_approaches(env: PointMaze) -> np.ndarray:
    """A start 1.55 below each inbound teleport (free cells in the teleport maze), from where ``UP`` enters it."""
    return np.asarray(env.teleport_in, np.float64) - [0.0, env.teleport_reach + 0.05]


def test_teleport_geometry_is_read_from_ogbench():
    env = _env("mujoco", TELEPORT_ID)
    tp = _make_gym_env(TELEPORT_ID).unwrapped._teleport_info
    np.testing.assert_array_equal(env.teleport_in, tp["teleport_in_xys"])
    np.testing.assert_array_equal(env.teleport_out, tp["teleport_out_xys"])
    assert env.teleport_reach == 1.5 * tp["teleport_radius"]
    assert env.has_teleports and not _env("mujoco").has_teleports
    assert (env.num_tasks, env.max_steps, env.goal_eps) == (5, 1000, 1.0)
    # Mazes without teleports carry no key: their state pytree is what it was.
    state = _env("mujoco").reset(jax.random.key(0), 1)[0]
    assert state.key is None and len(jax.tree.leaves(state)) == 2


def test_teleport_reset_keys():
    """``reset`` draws the start/goal like ``sample_start_goal`` and the exit key from the same reset key."""
    env = _env("mujoco", TELEPORT_ID)
    keys = jax.random.split(jax.random.key(0), 8)
    states, obs, goal_obs = jax.vmap(env.reset)(keys, jnp.arange(8) % 5 + 1)
    init, goal = jax.vmap(env.sample_start_goal)(keys, jnp.arange(8) % 5 + 1)
    np.testing.assert_array_equal(obs, init)
    np.testing.assert_array_equal(goal_obs, goal)
    assert jnp.issubdtype(states.key.dtype, jax.dtypes.prng_key) and states.key.shape == (8,)
    assert len(np.unique(np.asarray(jax.random.key_data(states.key)), axis=0)) == 8
    # reset_to: a fixed default key, or the one given.
    a, b = env.reset_to(init[0], goal[0])[0], env.reset_to(init[0], goal[0])[0]
    np.testing.assert_array_equal(jax.random.key_data(a.key), jax.random.key_data(jax.random.key(0)))
    np.testing.assert_array_equal(jax.random.key_data(a.key), jax.random.key_data(b.key))
    c = env.reset_to(init[0], goal[0], key=jax.random.key(5))[0]
    np.testing.assert_array_equal(jax.random.key_data(c.key), jax.random.key_data(jax.random.key(5)))
    with pytest.raises(TypeError, match="typed key"):
        env.reset_to(init[0], goal[0], key=jax.random.PRNGKey(0))


def _check_teleport_parity_away(backend: str) -> None:
    """Episodes in the right half of the teleport maze (never within 8 of an inbound teleport, but through the
    exit at (36, 20)) step exactly as OGBench's env: same positions and success flags."""
    env = _env(backend, TELEPORT_ID)
    gym = _make_gym_env(TELEPORT_ID, terminate_at_goal=False)
    gym.reset(seed=0, options=dict(task_id=1))
    u = gym.unwrapped
    tin = np.asarray(env.teleport_in, np.float64)
    contacts, traced = 0, _TRACES[backend, TELEPORT_ID]
    for seed in (1, 2, 4):
        # Start of task 1 (cell (1, 10)), goal of task 4 (cell (7, 10)): the corridor of the right column.
        init = np.asarray(env.sample_start_goal(jax.random.key(seed), 1)[0], np.float64)
        goal = np.asarray(env.sample_start_goal(jax.random.key(seed), 4)[1], np.float64)
        obs, goal_obs = impose_start_goal(gym, init, goal)
        state, obs_j, goal_j = _reset_to(env, init, goal, key=jax.random.key(seed))
        np.testing.assert_allclose(obs_j, obs, atol=1e-6)
        np.testing.assert_allclose(goal_j, goal_obs, atol=1e-6)
        rng = np.random.default_rng(seed)
        actions, ref, ok, push = [], [], [], None
        for t in range(1000):  # oracle segments alternate with 40-step persistent pushes (wall contacts)
            if (t // 40) % 2:
                push = rng.uniform(-1, 1, 2) if t % 40 == 0 else push
                a = push
            else:
                sub, _ = u.get_oracle_subgoal(u.get_xy(), u.cur_goal_xy)
                d = sub - u.get_xy()
                a = d / (np.linalg.norm(d) + 1e-6) + rng.normal(0, 0.3, 2)
            a = np.clip(a, -1, 1)
            o, _, _, _, info = u.step(a)
            actions.append(a)
            ref.append(o)
            ok.append(info["success"] == 1.0)
            np.testing.assert_array_equal(u.get_xy(), o)  # gym never teleported
        actions, ref, ok = np.array(actions), np.array(ref), np.array(ok)
        assert np.linalg.norm(ref[:, None] - tin, axis=-1).min() > 8.0, "the walk came near an inbound teleport"
        rollout = _rollout_rebuilt_last(env, state, jnp.asarray(actions, jnp.float32), seed == 4)
        qpos, success = (np.asarray(x) for x in rollout)
        err = np.abs(qpos - ref).max()
        assert err <= PARITY_TOL, f"seed {seed}: max |xy error| {err:.2e} over 1000 steps"
        clear = np.abs(np.linalg.norm(ref - goal, axis=-1) - env.goal_eps) > 1e-4
        np.testing.assert_array_equal(success[clear], ok[clear])
        assert ok.any(), f"seed {seed}: the oracle segments should reach the goal"
        prev = np.concatenate([init[None], ref[:-1]])
        contacts += int((np.abs(ref - prev) < 0.2 * np.abs(actions) - 1e-3).any(-1).sum())
    gym.close()
    assert contacts >= 100, f"only {contacts} contact steps: the test would not exercise the walls"
    assert _TRACES[backend, TELEPORT_ID] - traced <= 1, "the rollout was traced more than once for one env"


@pytest.mark.parametrize("backend", ["mujoco", pytest.param("mjx", marks=pytest.mark.slow)])
def test_teleport_maze_parity_away_from_teleports(backend):
    _check_teleport_parity_away(backend)


@eqx.filter_jit
def _vreset_to(env, init, goal, keys):
    return jax.vmap(lambda i, g, k: env.reset_to(i, g, key=k))(init, goal, keys)


@eqx.filter_jit
def _vstep(env, states, actions):
    """One vmapped step (MJX's step compiled once per env and batch size and called by several tests, instead of
    copies inlined in one program each: compiling it is most of an MJX test's time)."""
    return jax.vmap(env.step)(states, actions)


def _up(n: int) -> jnp.ndarray:
    return jnp.broadcast_to(jnp.asarray(UP, jnp.float32), (n, 2))


def _teleport_steps(backend: str, n: int):
    """``n`` episodes in front of each inbound teleport, all stepping ``UP`` into it: the reset state, the teleport
    step, the step from the exit, and a second teleport step from the same place (the state's next key)."""
    env = _env(backend, TELEPORT_ID)
    init = np.repeat(_teleport_approaches(env), n, axis=0)
    goal = init + UP * 0.2  # reached by the teleport step: success is measured before the teleport
    keys = jax.random.split(jax.random.key(7), len(init))
    s0, _, _ = _vreset_to(env, jnp.asarray(init), jnp.asarray(goal), keys)
    s1, o1, ok1 = _vstep(env, s0, _up(len(init)))
    s2, o2, ok2 = _vstep(env, s1, _up(len(init)))  # from the exit
    s1b = eqx.tree_at(lambda s: s.qpos, s1, s0.qpos)  # back in front of the same teleport
    s3, _, _ = _vstep(env, s1b, _up(len(init)))
    return init, (s0, s1, o1, ok1, o2, ok2, s3)


@pytest.mark.parametrize("backend", ["mujoco", pytest.param("mjx", marks=pytest.mark.slow)])
def test_teleport_step_returns_pre_teleport_obs_and_draws_exits_uniformly(backend):
    """Stepping into an inbound teleport: the step returns the pre-teleport position (and its success flag), the
    next state sits exactly on an outbound teleport, and the next step starts there. Over 2 x 1500 keys every
    exit is drawn equally often, and two consecutive draws of one episode are independent (the key is split at
    every step): chi-square tests at p >= 1e-6. MJX (whose vmapped physics costs ~100x C MuJoCo's on CPU): the
    same checks on 2 x 40 keys, and the very exits the C backend draws from those keys (the draw is the env's,
    not the physics'), so the C backend's uniformity test covers it."""
    env = _env(backend, TELEPORT_ID)
    starts = _teleport_approaches(env)
    n_in, n_out, n = len(starts), len(env.teleport_out), 1500 if backend == "mujoco" else 40
    init, (s0, s1, o1, ok1, o2, ok2, s3) = _teleport_steps(backend, n)
    np.testing.assert_allclose(o1, init + UP * 0.2, atol=1e-5)  # the pre-teleport position
    assert np.asarray(ok1).all() and not np.asarray(ok2).any()
    first, second = _exit_index(env, s1.qpos), _exit_index(env, s3.qpos)
    assert (first >= 0).all() and (second >= 0).all(), "the next state must sit exactly on an outbound teleport"
    # The step after the teleport starts from the exit (free space around every exit: a plain move).
    np.testing.assert_allclose(o2, np.asarray(env.teleport_out)[first] + UP * 0.2, atol=1e-5)
    assert not np.array_equal(jax.random.key_data(s0.key), jax.random.key_data(s1.key))
    if backend == "mjx":
        np.testing.assert_array_equal(s1.data.qpos, s1.qpos)
        _, (_, c1, _, _, _, _, c3) = _teleport_steps("mujoco", n)
        np.testing.assert_array_equal(first, _exit_index(env, c1.qpos))
        np.testing.assert_array_equal(second, _exit_index(env, c3.qpos))
        assert len(np.unique(first)) == n_out and len(np.unique(second)) == n_out  # every exit is drawn
    else:
        for i in range(n_in):
            _assert_uniform(np.bincount(first[i * n : (i + 1) * n], minlength=n_out), f"exits of inbound {i}")
        _assert_uniform(np.bincount(first * n_out + second, minlength=n_out**2), "pairs of consecutive exits")
    # Just outside the reach (1.6 > 1.5 from the centre after the step): no teleport, the key still advances (the
    # programs above, the batch filled with this one start).
    outside = np.repeat((starts[0] - UP * 0.25)[None], len(init), axis=0)
    keys = jax.random.split(jax.random.key(1), len(init))
    s0, _, _ = _vreset_to(env, jnp.asarray(outside), jnp.asarray(outside + UP * 0.25), keys)
    s1, o1, _ = _vstep(env, s0, _up(len(init)))
    np.testing.assert_array_equal(s1.qpos, o1)
    np.testing.assert_allclose(o1, outside + UP * 0.2, atol=1e-5)
    assert not (jax.random.key_data(s0.key) == jax.random.key_data(s1.key)).all(-1).any()


@pytest.mark.parametrize("backend", ["mujoco", pytest.param("mjx", marks=pytest.mark.slow)])
def test_vmapped_step_equals_a_loop_in_the_teleport_maze(backend):
    """The teleport maze (exits drawn from each state's key), in the batch of the teleport tests below, whose
    compiled reset and step it shares (MJX: one step program fewer to compile): half the episodes step into an
    inbound teleport, the others in random directions (some beyond the clip); the vmapped step equals a loop of
    unbatched steps, the drawn exit and the next key included."""
    env = _env(backend, TELEPORT_ID)
    init = np.repeat(_teleport_approaches(env), 40, axis=0)  # the MJX teleport test's batch
    n = len(init)
    states, _, _ = _vreset_to(env, jnp.asarray(init), jnp.asarray(init), jax.random.split(jax.random.key(5), n))
    rand = jax.random.uniform(jax.random.key(6), (n, 2), minval=-1.5, maxval=1.5)
    actions = jnp.where((jnp.arange(n) % 2 == 0)[:, None], _up(n), rand)
    assert (_exit_index(env, _vstep(env, states, actions)[0].qpos[::2]) >= 0).all(), "UP steps should teleport"
    _assert_batch_is_loop(env, states, actions, range(0, n, 5) if backend == "mjx" else range(n))


def test_ogbench_teleport_draws_the_same_exits_in_distribution():
    """OGBench's own env, its global numpy RNG seeded per trial: the step into an inbound teleport returns the
    pre-teleport position (as the JAX env's does), lands exactly on an outbound teleport, each drawn equally
    often (chi-square, p >= 1e-6), and its next step from the exit matches the JAX env's from the same exit."""
    env = _env("mujoco", TELEPORT_ID)
    gym = _make_gym_env(TELEPORT_ID, terminate_at_goal=False)
    gym.reset(seed=0, options=dict(task_id=1))
    u = gym.unwrapped
    starts = _teleport_approaches(env)
    n_out, n = len(env.teleport_out), 600
    step = eqx.filter_jit(lambda e, s, a: e.step(s, a))
    for i, start in enumerate(starts):
        state = env.reset_to(start, start, key=jax.random.key(i))[0]
        _, o_jax, _ = step(env, state, UP)
        exits, after = [], {}
        for seed in range(n):
            np.random.seed(seed)
            impose_start_goal(gym, start, start)
            o, _, _, _, _ = u.step(UP)
            np.testing.assert_allclose(o, o_jax, atol=PARITY_TOL)
            exits.append(_exit_index(env, u.get_xy()))
            after.setdefault(int(exits[-1]), u.step(UP)[0])
        exits = np.array(exits)
        assert (exits >= 0).all(), "OGBench's env must land exactly on an outbound teleport"
        _assert_uniform(np.bincount(exits, minlength=n_out), f"OGBench's exits of inbound {i}")
        for j, o_next in after.items():
            exit_state = eqx.tree_at(lambda s: s.qpos, state, env.teleport_out[j])
            np.testing.assert_allclose(step(env, exit_state, UP)[1], o_next, atol=PARITY_TOL)
    gym.close()


def test_teleport_lockstep_parity_with_imposed_exits():
    """Long walks through the teleports, OGBench's env and the JAX env in lockstep, OGBench's exit replaced by the
    JAX env's after each teleport (``set_xy``): both teleport at the same steps, return the same (pre-teleport)
    observations and success flags, and continue from the same exit."""
    env = _env("mujoco", TELEPORT_ID)
    gym = _make_gym_env(TELEPORT_ID, terminate_at_goal=False)
    gym.reset(seed=0, options=dict(task_id=2))
    u = gym.unwrapped
    step = eqx.filter_jit(lambda e, s, a: e.step(s, a))
    tin = np.asarray(env.teleport_in, np.float64)
    teleports, exits_seen, worst = 0, set(), 0.0
    for seed in range(8):
        init, goal = (np.asarray(x, np.float64) for x in env.sample_start_goal(jax.random.key(seed), 2))
        impose_start_goal(gym, init, goal)
        state, _, _ = env.reset_to(init, goal, key=jax.random.key(100 + seed))
        rng, push = np.random.default_rng(seed), None
        for t in range(400):  # oracle towards the first inbound teleport, with 25-step persistent pushes
            if (t // 25) % 3 == 2:
                push = rng.uniform(-1, 1, 2) if t % 25 == 0 else push
                a = push
            else:
                sub, _ = u.get_oracle_subgoal(u.get_xy(), tin[0])
                d = sub - u.get_xy()
                a = d / (np.linalg.norm(d) + 1e-6) + rng.normal(0, 0.3, 2)
            a = np.clip(a, -1, 1).astype(np.float32)
            o, _, _, _, info = u.step(a)
            state, o_jax, ok = step(env, state, a)
            err = np.abs(np.asarray(o_jax) - o).max()
            assert err <= PARITY_TOL, f"seed {seed} step {t}: |xy error| {err:.2e}"
            worst = max(worst, err)
            dist_in = np.linalg.norm(o - tin, axis=-1).min()
            if abs(dist_in - env.teleport_reach) > 1e-4:
                assert (not np.array_equal(u.get_xy(), o)) == (not np.array_equal(state.qpos, o_jax))
            if abs(np.linalg.norm(o - goal) - env.goal_eps) > 1e-4:
                assert bool(ok) == (info["success"] == 1.0)
            if not np.array_equal(state.qpos, o_jax):  # the JAX env teleported: impose its exit on OGBench's
                assert _exit_index(env, u.get_xy()) >= 0 and _exit_index(env, state.qpos) >= 0
                exits_seen.add(int(_exit_index(env, state.qpos)))
                u.set_xy(np.asarray(state.qpos, np.float64))
                teleports += 1
    gym.close()
    assert teleports >= 8 and exits_seen == set(range(len(env.teleport_out))), f"{teleports} teleports to {exits_seen}"
