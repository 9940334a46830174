"""The compiled driver: whole episodes as one jitted program (`ttt.episode.make_episodes`), the environment inside,
vmapped over a batch of elements and sharded over devices (`make_compiled`, `compiled_calls`); `run_episode`, one
episode from a start and goal of your own."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ttt.checks import check_agents, check_vector
from ttt.data.dataset import Dataset
from ttt.envs.oracle import has_oracle, maze_oracle
from ttt.episode import make_episodes
from ttt.errors import TttError
from ttt.evaluation.setup import EpisodeBatch, EvalSetup, cached_program, gather, program_setup, setup_hparams
from ttt.evaluation.sharding import fetch, put_global
from ttt.hparams import HParams


class Shared(eqx.Module):
    """What every element of a compiled call reads (replicated over the devices): the seed-stacked agents, their
    optimiser states (None unless `reuse_opt_state`), the in-program environment, the dataset and the maze oracle
    (None without one)."""

    agents: Any
    opt_states: Any
    env: Any
    data: Dataset
    oracle: Any = None


class Elements(eqx.Module):
    """The elements of a compiled call (leading axis B, sharded over the devices): each one's seed (its index into the
    seed-stacked agents), reset and GC-TTT keys, task, and traced settings (`ttt.hparams.HParams`; None: the
    setup's)."""

    seed_idx: Array
    reset_keys: Array
    ttt_keys: Array
    tasks: Array
    params: HParams | None = None


def make_compiled(setup: EvalSetup, max_traces: int | None = None):
    """The jitted batch program `(shared: Shared, elements: Elements) -> EpisodeOut[B]` (`episode.make_episodes` on
    each element's seed of the seed-stacked agents); shard `elements` to spread it over devices."""
    episodes = make_episodes(
        setup.backbone, setup.cfg, setup.sampler, setup.spec, setup.ttt, setup.max_steps, setup.transforms, setup.ttgs
    )

    def program(shared: Shared, el: Elements):
        opt0 = None if shared.opt_states is None else gather(shared.opt_states, el.seed_idx)
        return episodes(gather(shared.agents, el.seed_idx), opt0, shared.env, shared.data, el.reset_keys, el.ttt_keys,
                        el.tasks, shared.oracle, el.params)  # fmt: skip

    if max_traces is not None:
        program = eqx.debug.assert_max_traces(program, max_traces=max_traces)
    return eqx.filter_jit(program)


def compiled_calls(setup: EvalSetup, agents, opt_states, data, env, oracle, eb: EpisodeBatch, hps, batch_sh, repl):
    """`run(idx)` for the compiled driver: the elements `idx` of the point-major grid (each its episode of `eb` and
    its point's settings of the stacked `hps`) as one call of the cached compiled program, the elements sharded over
    `batch_sh`'s devices and the rest replicated (`repl`); the outputs as host arrays."""
    program = cached_program(make_compiled, program_setup(setup))
    put = put_global if jax.process_count() > 1 else jax.device_put
    agents_r, opt_r, data_r, oracle_r = (put(x, repl) if x is not None else None
                                         for x in (agents, opt_states, data, oracle))  # fmt: skip
    shared = Shared(agents_r, opt_r, put(env, repl) if jax.process_count() > 1 else env, data_r, oracle_r)
    n_ep = len(eb)

    def run(idx: np.ndarray) -> dict:
        sub = eb.take(idx % n_ep)
        point_idx = jnp.asarray(idx // n_ep)
        el = Elements(jnp.asarray(sub.seed_idx), sub.reset_keys, sub.ttt_keys, jnp.asarray(sub.task),
                      jax.tree.map(lambda x, p=point_idx: x[p], hps))  # fmt: skip
        out = jax.tree.map(fetch, program(shared, jax.tree.map(lambda x: put(x, batch_sh), el)))
        return dict(success=out.success, steps=out.steps, start=out.start, goal=out.goal,
                    observations=out.observations, rounds=out.rounds)  # fmt: skip

    return run


class _FromStartGoal(eqx.Module):
    """An in-program env whose every reset starts at `init_xy` with the goal at `goal_xy` (goal coordinates)."""

    env: Any
    init_xy: jax.Array
    goal_xy: jax.Array

    def reset(self, key, task):
        return self.env.reset_to(self.init_xy, self.goal_xy)

    def step(self, state, action):
        return self.env.step(state, action)


def run_episode(setup: EvalSetup, agent, data, env, start_xy, goal_xy, *, key=None, opt_state=None):
    """One episode of `setup` (base or GC-TTT) from a start and goal of your own, as the compiled program.

    **Arguments:** `agent`: ONE agent (not seed-stacked: take seed `i` of `load_run`'s agents with
    `jax.tree.map(lambda x: x[i] if eqx.is_array(x) else x, agents)`); `env`: an in-program `Env`; `start_xy`,
    `goal_xy`: GOAL COORDINATES of the start and the goal, shape `(env.goal_dim,)` (the maze xy; the goal
    observation is made by `env.reset_to`); `key`: the episode's GC-TTT key (default `jax.random.key(0)`);
    `opt_state`: with `reuse_adam`, the agent's Adam state.

    **Returns** the `ttt.episode.EpisodeOut` as NumPy arrays: `success`, `steps`, `start`, `goal` (observations),
    `observations` and `actions` (max_steps, ...), `rounds` (name -> (rounds,)).
    """
    spec = setup.spec
    if env is None or not hasattr(env, "reset_to"):
        raise TttError(f"env must be an in-program environment (ttt.envs.Env), got {type(env).__name__}; "
                       f"{spec.env_id} without one runs on the host driver (evaluate, driver='host')")  # fmt: skip
    try:
        check_agents(agent, setup.backbone, setup.cfg, spec.ob_dim, spec.action_dim, stacked=False)
    except TttError:
        try:  # the agents of several seeds (what load_run returns) rather than one: say so, and how to take one
            n = check_agents(agent, setup.backbone, setup.cfg, spec.ob_dim, spec.action_dim, stacked=True)
        except TttError:
            n = None
        if n is None:
            raise
        raise TttError(f"agent is seed-stacked: every array has a leading seed axis of {n} (as ttt.load_run returns "
                       "the agents of every seed); run_episode takes ONE agent: take seed i with "
                       "jax.tree.map(lambda x: x[i] if eqx.is_array(x) else x, agents)") from None  # fmt: skip
    what = f"goal coordinates of {env.env_id} (e.g. the maze xy)"
    start = check_vector("start_xy", start_xy, env.goal_dim, what)
    goal = check_vector("goal_xy", goal_xy, env.goal_dim, what)
    for name, xy in (("start_xy", start), ("goal_xy", goal)):
        if not isinstance(xy, jax.core.Tracer) and not env.contains(xy):
            where = "not finite" if not np.isfinite(np.asarray(xy)).all() else "in a wall or outside the maze"
            cells = "; env.free_cells() lists the free cells' centres, env.sample_free(seed) draws valid positions"
            raise TttError(f"{name} {np.asarray(xy).tolist()} is {where} of {env.env_id}: a start and a goal must be "
                           f"finite and in the free space{cells if hasattr(env, 'free_cells') else ''}")  # fmt: skip
    key = jax.random.key(0) if key is None else key
    if not (hasattr(key, "dtype") and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) and key.shape == ()):
        raise TttError(f"key must be one typed PRNG key (jax.random.key(seed)), got {getattr(key, 'dtype', type(key))} "
                       f"of shape {np.shape(key)}; a raw uint32 jax.random.PRNGKey is not accepted")  # fmt: skip
    oracle = maze_oracle(spec.env_id) if setup.ttt is not None and has_oracle(spec.env_id) else None
    stack = lambda tree: jax.tree.map(lambda x: x[None] if eqx.is_array(x) else x, tree)  # noqa: E731
    _, hp = setup_hparams(setup)
    shared = Shared(stack(agent), None if opt_state is None else stack(opt_state), _FromStartGoal(env, start, goal),
                    data, oracle)  # fmt: skip
    el = Elements(jnp.zeros((1,), jnp.int32), key[None], key[None], jnp.ones((1,), jnp.int32), stack(hp))
    out = cached_program(make_compiled, program_setup(setup))(shared, el)
    return jax.tree.map(lambda x: np.asarray(x[0]), out)
