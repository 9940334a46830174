"""Helpers shared by the test files: call the CLI in-process and check its one-line errors; compare the arrays of
two programs that must compute the same values; the toy point datasets, the hand-built batch and the float64 NumPy
forwards of the networks; the in-program OGBench envs reset and stepped in batch, and OGBench's own maze reset with
the numbers it draws."""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import os
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ttt.cli import main
from ttt.data.batch import Batch
from ttt.data.dataset import Dataset

if TYPE_CHECKING:
    from ttt.nets import MLP

# The suite compiles with XLA's older CPU fusion emitters (tests/conftest.py, FAST_COMPILE_FLAGS). Two different
# programs that compute the same values (the lazy and the full value pass, an empty selection and the base policy)
# may then differ in the last bit of a float, where XLA's default emitters give bit-identical arrays. With
# TTT_TESTS_DEFAULT_XLA=1 (XLA's default flags) `assert_same_values` compares bit for bit again.
BITWISE = "xla_cpu_use_fusion_emitters=false" not in os.environ.get("XLA_FLAGS", "")


def assert_same_values(x, y, err_msg: str = "") -> None:
    """Equal arrays: integers, booleans (selections, counts, success) always exactly; floats exactly under XLA's
    default emitters, else to float32 rounding (rtol 1e-5, atol 1e-6)."""
    x, y = np.asarray(x), np.asarray(y)
    if BITWISE or not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(y.dtype, np.floating)):
        np.testing.assert_array_equal(x, y, err_msg=err_msg)
    else:
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6, err_msg=err_msg)


STITCH = "pointmaze-medium-stitch-v0"
TINY = ["--set", "actor_hidden_dims=[8,8]", "--set", "value_hidden_dims=[8,8]", "--set", "batch_size=8"]


def run(argv, capsys):
    """`ttt ARGV` in this process: (exit code, stdout, stderr)."""
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_line_error(err: str) -> str:
    """The single `error: ...` line of stderr (asserts there is exactly one and no traceback)."""
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err and lines[0].startswith("error: "), err
    return lines[0]


def pretrain_argv(dataset: str, steps: int, out, data_dir, seeds: int = 2, chunk: int = 2) -> list[str]:
    """`ttt pretrain` arguments for a tiny GC-BC run."""
    return ["pretrain", "--dataset", dataset, "--agent", "gcbc", "--steps", str(steps), "--chunk", str(chunk),
            "--seeds", str(seeds), "--out", str(out), "--dir", str(data_dir), *TINY]  # fmt: skip


def select_round(key, tables, data, state_xy, cfg, goal_eps, row_values=None, *, params=None):
    """One round of the library's own stages from plain arguments: `ttt.select.round_weights` of the round's
    `Context` (the state's goal coordinates `state_xy`, the selection key `key`)."""
    from ttt.select import Context, round_weights

    ctx = Context(data=data, goal_eps=goal_eps, cfg=cfg, params=params, state_xy=state_xy, key=key,
                  row_values=row_values, tables=tables)  # fmt: skip
    return round_weights(ctx)


@contextlib.contextmanager
def within(seconds: float):
    """Fail (TimeoutError) when the block runs longer than `seconds` (SIGALRM; the main thread)."""

    def _alarm(*_):
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ---------------------------------------------------------------------------------------------------- data


def toy_dataset(lengths: Sequence[int], spread: float, seed: int = 0, step: float = 0.2) -> Dataset:
    """Straight-line point episodes, one of each length in `lengths`: each starts uniformly in [-spread, spread]^2
    and moves `step` * its constant action (uniform in [-1, 1]^2) a step."""
    rng = np.random.default_rng(seed)
    obs, act, term = [], [], []
    for length in lengths:
        start = rng.uniform(-spread, spread, 2)
        a = rng.uniform(-1, 1, 2)
        for t in range(length):
            obs.append(start + step * t * a)
            act.append(a)
            term.append(t == length - 1)
    return Dataset.from_arrays(np.array(obs, np.float32), np.array(act, np.float32), np.array(term))


def hand_batch(rng: np.random.Generator, rows: int, obs_dim: int, act_dim: int) -> Batch:
    """`rows` rows of standard normal float32 draws from `rng`; row 0 has its value goal at the current state (reward
    0, mask 0), as `gc_negative` gives."""
    f = lambda *shape: rng.normal(size=shape).astype(np.float32)  # noqa: E731
    obs = f(rows, obs_dim)
    value_goals = f(rows, obs_dim)
    value_goals[0] = obs[0]
    rewards = -np.ones(rows, np.float32)
    rewards[0] = 0.0
    return Batch(
        observations=jnp.asarray(obs),
        actions=jnp.asarray(np.clip(f(rows, act_dim), -1, 1)),
        next_observations=jnp.asarray(obs + 0.1 * f(rows, obs_dim)),
        value_goals=jnp.asarray(value_goals),
        actor_goals=jnp.asarray(f(rows, obs_dim)),
        rewards=jnp.asarray(rewards),
        masks=jnp.asarray(-rewards),
        idxs=jnp.arange(rows),
        value_goal_idxs=jnp.arange(rows).at[1:].add(3),
        actor_goal_idxs=jnp.arange(rows) + 5,
    )


# ---------------------------------------------------------------------------------------- NumPy forwards (float64)


def a64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def np_gelu(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def np_layer_norm(x, scale, bias, eps=1e-6):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * scale + bias


def np_mlp(mlp: MLP, x, index=None):
    """Forward of an OGBench MLP in NumPy, reading the weights from `mlp` (member `index` of a stack)."""
    pick = (lambda a: a64(a)) if index is None else (lambda a: a64(a)[index])
    n = len(mlp.layers)
    for i, layer in enumerate(mlp.layers):
        x = x @ pick(layer.weight) + pick(layer.bias)
        if i + 1 < n or mlp.activate_final:
            x = np_gelu(x)
            if mlp.layer_norm:
                x = np_layer_norm(x, pick(mlp.norms[i].scale), pick(mlp.norms[i].bias))
    return x


# ---------------------------------------------------------------------------------------------------- OGBench envs


@functools.cache
def cached_env(env_id: str):
    """`ttt.envs.make_env(env_id)`, made once per id."""
    from ttt.envs import make_env

    return make_env(env_id)


@eqx.filter_jit
def batch_reset(env, keys, tasks):
    return jax.vmap(env.reset)(keys, tasks)


@eqx.filter_jit
def batch_draws(env, keys, tasks):
    return jax.vmap(env.reset_draws)(keys, tasks)


@eqx.filter_jit
def batch_rollout(env, state, actions):
    """``actions`` (steps, batch, act): the vmapped env stepped by a scan, as the compiled episode steps it:
    ``(final state, obs (steps, batch, obs), success (steps, batch))``."""

    def body(s, a):
        s, obs, success = jax.vmap(env.step)(s, a)
        return s, (obs, success)

    state, (obs, success) = jax.lax.scan(body, state, actions)
    return state, obs, success


def ogbench_maze_reset(env, task_id: int):
    """OGBench's own reset of its gymnasium maze env `env` to task `task_id`, with numpy's global generator seeded
    11, and the numbers it draws: ``(obs, info, rng, box, init, goal)``, ``rng`` and ``box`` copies of the env's
    generator and action space as they were before the reset, ``init`` and ``goal`` the start and goal xy it draws
    from the global generator (OGBench's add_noise: a quarter maze unit of uniform noise on each coordinate)."""
    u = env.unwrapped
    np.random.seed(11)
    glob = np.random.get_state()
    rng, box = copy.deepcopy(u.np_random), copy.deepcopy(u.action_space)
    obs, info = env.reset(options=dict(task_id=task_id))
    rs = np.random.RandomState()
    rs.set_state(glob)
    noise = lambda: rs.uniform(low=-u._noise, high=u._noise) * u._maze_unit / 4  # noqa: E731  (OGBench's add_noise)
    task = u.task_infos[task_id - 1]
    ix, iy = u.ij_to_xy(task["init_ij"])
    init = np.array([ix + noise(), iy + noise()])
    gx, gy = u.ij_to_xy(task["goal_ij"])
    goal = np.array([gx + noise(), gy + noise()])
    return obs, info, rng, box, init, goal
