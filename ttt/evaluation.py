"""Batch evaluation of pre-trained agents, base policy or GC-TTT, on OGBench's evaluation tasks.

`evaluate(setup, agents, data, ...)` runs the (seed, task, episode) grid in batches, either as the compiled
program (`episode.make_episodes`: whole episodes, the environment inside, vmapped over the batch and sharded over
devices) or with the host driver (`run_host`: OGBench's gymnasium environments stepped from Python in lockstep,
with the same jitted per-round `prepare` / `adapt` / `act`). Success is OGBench's: the episode ends when the goal
is reached (`terminate_at_goal`) and counts as a success iff it was reached within the step limit. Starts and
goals depend on (evaluation seed, task, episode) only, so every training seed faces the same draws.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ttt.agents.common import Backbone
from ttt.checks import check_agents, check_tasks, check_vector
from ttt.data.sampler import SamplerConfig
from ttt.data.specs import DatasetSpec
from ttt.envs import has_jax_env
from ttt.envs import make_env as make_jax_env
from ttt.envs.gym import make_gym_env, seed_env
from ttt.envs.oracle import has_oracle, maze_oracle
from ttt.episode import (
    Transforms,
    TTTConfig,
    empty_round_metrics,
    lazy_pass,
    make_act,
    make_episodes,
    make_round_fns,
    n_rounds,
    round_keys,
    ttt_batch,
)
from ttt.errors import TttError
from ttt.graph import TTGSConfig
from ttt.hparams import TRACED, HParams, defaults, make_hparams
from ttt.hparams import stack as stack_hparams
from ttt.select import IGNORED_BY_RULE
from ttt.stats import mean_se
from ttt.storage import check_memory

OGBENCH_TASKS = 5  # evaluation tasks of every OGBench environment this project uses (ids 1..5)


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """What `evaluate` returns: NumPy arrays over the (seeds, tasks, episodes) grid, axis 0 the training seed (the
    agents' leading axis), axis 1 the task in the order of `tasks`, axis 2 the episode; then per-episode axes.

    - `success` (seeds, tasks, episodes), float32 0/1: the goal was reached within the step limit;
    - `steps` (seeds, tasks, episodes), int32: environment steps taken (to success, or the limit);
    - `rounds[name]` (seeds, tasks, episodes, rounds): each GC-TTT round's metrics (`ttt.episode.ROUND_METRICS`:
      `n_rel` relevant rows, `n_selected` kept rows, `threshold` the worst kept score, `empty` nothing kept,
      `n_train_rows`, `reach_frac`, `max_span`, ranking diagnostics, `loss_first` / `loss_last` the fine-tuning
      loss at its first and last step, `value_rows` the rows the lazy value pass computed) and `active` (the
      episode was still running). A round that kept nothing, or that ran after its episode ended, reports NaN
      losses and thresholds: nothing was trained. Base policy:
      one idle round;
    - `observations` (seeds, tasks, episodes, max_steps, obs_dim): the observation after every step (frozen once
      the episode ended); `starts`, `goals` (seeds, tasks, episodes, obs_dim): the first observation and the goal
      OBSERVATION (its goal coordinates are `setup.spec.goal_coords(goal)`, e.g. the maze xy);
    - `tasks`: the task ids of axis 1; `wall_s`: seconds the evaluation took, compilation included;
    - `params`: the traced settings the episodes ran with (`ttt.hparams.TRACED` and your transforms' own), by name.
    """

    success: np.ndarray  # (seeds, tasks, episodes) in {0, 1}
    steps: np.ndarray  # (seeds, tasks, episodes) environment steps taken
    tasks: tuple[int, ...]
    rounds: dict[str, np.ndarray] | None = None  # (seeds, tasks, episodes, rounds) per-round TTT metrics
    observations: np.ndarray | None = None  # (seeds, tasks, episodes, L, obs) observation after each step
    starts: np.ndarray | None = None  # (seeds, tasks, episodes, obs)
    goals: np.ndarray | None = None  # (seeds, tasks, episodes, obs)
    wall_s: float | None = None  # seconds the evaluation took (compile included)
    params: dict[str, float] | None = None  # the traced settings of these episodes (lr, q, eps, ...)

    def per_seed(self) -> np.ndarray:
        """Success rate of each seed over all tasks and episodes."""
        return self.success.mean(axis=(1, 2))

    def mean_and_se(self) -> tuple[float, float]:
        """Mean over seeds of the per-seed success rate, and its standard error over seeds."""
        rates = self.per_seed()
        return float(rates.mean()), mean_se(rates)[1]  # the mean as the records state it (float32 rates)

    def per_task(self) -> np.ndarray:
        return self.success.mean(axis=(0, 2))

    def active_rounds(self, name: str) -> np.ndarray:
        """Round metric `name` as floats with NaN in the rounds that ran after their episode had ended (where
        `rounds[name]` holds an idle 0 for counts such as `n_rel`, `n_selected`, `n_train_rows`): plot this, not the
        raw array, to see no false drops to zero. Shape (seeds, tasks, episodes, rounds)."""
        return active_rounds(self.rounds or {}, name)


def active_rounds(rounds: dict, name: str) -> np.ndarray:
    """`rounds[name]` (any leading axes, rounds last) as floats, NaN where `rounds["active"]` is False (the
    episode had ended before the round): e.g. `active_rounds(ttt.run_episode(...).rounds, "n_selected")`."""
    if name not in rounds or "active" not in rounds:
        have = ", ".join(sorted(rounds)) or "none (a result without GC-TTT rounds)"
        raise TttError(f"active_rounds: no round metric {name!r} with an 'active' mask; the metrics: {have}")
    return np.where(np.asarray(rounds["active"], bool), np.asarray(rounds[name], np.float64), np.nan)


@dataclasses.dataclass(frozen=True)
class GridResult:
    """What `evaluate(..., grid=...)` returns: one `EvalResult` per grid point, all from one program.

    - `points`: the settings of each point (a dict by name), the Cartesian product of the grid's lists in their
      order, the last name varying fastest; `results[i]`: the `EvalResult` of `points[i]` (its `params` hold every
      traced setting it ran with);
    - `base`: with `base=True`, the pre-trained policy on the same episodes (None otherwise);
    - `wall_s`: seconds the whole call took, compilation included.
    """

    points: tuple[dict[str, float], ...]
    results: tuple[EvalResult, ...]
    base: EvalResult | None = None
    wall_s: float | None = None

    def __len__(self) -> int:
        return len(self.points)

    def __iter__(self):
        return iter(zip(self.points, self.results, strict=True))

    def at(self, **settings) -> EvalResult:
        """The result of the point with these settings, e.g. `grid.at(lr=1e-4, q=0.1)`."""
        for point, result in self:
            if all(point.get(k) == v for k, v in settings.items()):
                return result
        raise TttError(f"no grid point has {settings}; the points are {list(self.points)}")


make_env = make_gym_env  # deprecated name of `ttt.envs.gym.make_gym_env` (OGBench's gymnasium env, not an `Env`)


@dataclasses.dataclass(frozen=True)
class EvalSetup:
    """Everything static about one evaluation: the backbone (its `ttt.agents.Backbone` record) and configuration,
    dataset spec, TTT settings (None: base policy), episode length and the environment backend; `ttgs`
    (`ttt.graph.TTGSConfig`, None: off): test-time graph search's subgoals for the policy (variant 'ttgs'; compiled
    driver only). `ttt.make_setup` builds one with every setting checked."""

    backbone: Backbone
    cfg: Any
    sampler: SamplerConfig
    spec: DatasetSpec
    ttt: TTTConfig | None
    max_steps: int
    backend: str = "mujoco"
    transforms: Transforms = Transforms()
    ttgs: TTGSConfig | None = None

    def __post_init__(self):
        if not isinstance(self.backbone, Backbone):
            raise TttError(f"EvalSetup.backbone must be a backbone record (ttt.get_backbone(name), or a checkpoint's "
                           f"ttt.open_checkpoint(dir).backbone), got {self.backbone!r}")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class EpisodeBatch:
    """The (seed, task, episode) grid flattened task-major, seed fastest, with each element's keys.

    The reset key depends on (task, episode) only, so every seed faces the same starts and goals; the TTT key
    also on the seed. Keys come from `fold_in`, so they do not depend on batch size or device count.
    """

    seed_idx: np.ndarray  # (B,) int32
    task: np.ndarray  # (B,) int32, 1-based
    episode: np.ndarray  # (B,) int32
    reset_keys: jax.Array  # (B,) typed keys
    ttt_keys: jax.Array  # (B,) typed keys

    def __len__(self) -> int:
        return len(self.seed_idx)

    def take(self, idx: np.ndarray) -> EpisodeBatch:
        return EpisodeBatch(*(x[idx] for x in dataclasses.astuple(self)))


def episode_batch(seed: int, n_seeds: int, tasks: tuple[int, ...], episodes: int) -> EpisodeBatch:
    grid = np.array([(s, t, e) for t in tasks for e in range(episodes) for s in range(n_seeds)], np.int32)
    root = jax.random.key(seed)
    k_reset, k_ttt = jax.random.split(root)

    def keys(s, t, e):
        r = jax.random.fold_in(jax.random.fold_in(k_reset, t), e)
        k = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(k_ttt, s), t), e)
        return r, k

    reset_keys, ttt_keys = jax.jit(jax.vmap(keys))(grid[:, 0], grid[:, 1], grid[:, 2])
    return EpisodeBatch(grid[:, 0], grid[:, 1], grid[:, 2], reset_keys, ttt_keys)


_PROGRAMS: dict = {}


def _cached(factory, setup: EvalSetup):
    """`factory(setup)`, built once per (factory, setup) in this process, so that repeated evaluations of one
    configuration (e.g. a pipeline's task-by-task evaluation) reuse its compiled programs."""
    key = (factory.__name__, setup)
    if key not in _PROGRAMS:
        _PROGRAMS[key] = factory(setup)
    return _PROGRAMS[key]


def program_setup(setup: EvalSetup) -> EvalSetup:
    """`setup` with its traced settings (lr, q, eps, mix, noise_alpha, the transforms' own parameters) set to fixed
    values: the compiled program reads them from its `params` argument, so setups that differ only in them share
    one program."""
    if setup.ttt is None:
        return setup
    ttt = setup.ttt
    sel = dataclasses.replace(ttt.select, q=0.05, eps_rel=None, mix=0.0, noise_alpha=0.0)
    ft = dataclasses.replace(ttt.finetune, lr=3e-4)
    transforms = dataclasses.replace(setup.transforms, params=tuple((k, 0.0) for k, _ in setup.transforms.params))
    return dataclasses.replace(setup, ttt=dataclasses.replace(ttt, select=sel, finetune=ft), transforms=transforms)


def setup_hparams(setup: EvalSetup, overrides: dict | None = None, adapt: bool = True) -> tuple[dict, HParams]:
    """The traced settings of `setup` with `overrides` by name (each checked: a `TttError` names it), as a dict of
    every name and as `HParams`."""
    user = dict(setup.transforms.params)
    values = defaults(setup.ttt, setup.spec.goal_eps, user)
    for name in overrides or {}:
        if name not in values:
            raise TttError(f"params / grid: {name!r} is not a traced setting; valid: {', '.join(TRACED)}"
                           + (f", and your transforms' {', '.join(user)}" if user else "")
                           + " (K, N, batch and widths change shapes: one setup each)")  # fmt: skip
    values = {**values, **(overrides or {})}
    batch = setup.sampler.batch_size if setup.ttt is None else ttt_batch(setup.ttt, setup.sampler)
    return values, make_hparams(values, batch, adapt)


def grid_points(grid: dict) -> list[dict[str, float]]:
    """The points of a grid `{name: [values]}`: the Cartesian product in the grid's order, the last name fastest."""
    import itertools

    if not isinstance(grid, dict) or not grid:
        raise TttError(f"grid must be a dict of setting name -> list of values, e.g. {{'lr': [1e-4, 3e-4]}}, got "
                       f"{grid!r}")  # fmt: skip
    lists = []
    for name, values in grid.items():
        vals = list(values) if isinstance(values, list | tuple | np.ndarray) else None
        if not vals:
            raise TttError(f"grid: {name} must be a non-empty list of numbers, got {values!r}")
        lists.append(vals)
    return [dict(zip(grid, combo, strict=True)) for combo in itertools.product(*lists)]


def _gather(tree, idx):
    """Element `idx` of a seed-stacked pytree (array leaves only; None stays None)."""
    return jax.tree.map(lambda x: x[idx] if eqx.is_array(x) else x, tree)


def make_compiled(setup: EvalSetup, max_traces: int | None = None):
    """The jitted batch program `(agents, opt_states, env, data, seed_idx, reset_keys, ttt_keys, tasks, oracle,
    params) -> EpisodeOut[B]` (`episode.make_episodes` on each element's seed of the seed-stacked agents; `params`:
    each element's `HParams`, None: the setup's); shard its batch inputs to spread it over devices."""
    episodes = make_episodes(
        setup.backbone, setup.cfg, setup.sampler, setup.spec, setup.ttt, setup.max_steps, setup.transforms, setup.ttgs
    )

    def program(agents, opt_states, env, data, seed_idx, reset_keys, ttt_keys, tasks, oracle=None, params=None):
        opt0 = None if opt_states is None else _gather(opt_states, seed_idx)
        return episodes(_gather(agents, seed_idx), opt0, env, data, reset_keys, ttt_keys, tasks, oracle, params)

    if max_traces is not None:
        program = eqx.debug.assert_max_traces(program, max_traces=max_traces)
    return eqx.filter_jit(program)


def make_host_fns(setup: EvalSetup):
    """Jitted, batch-vmapped `(prepare, adapt, act)` for the host driver: the same pure functions the compiled
    episode uses (`episode.make_round_fns`). With the lazy value pass (`TTTConfig.value_cap`) `adapt` also
    returns the round's tables, for the next round."""
    if setup.ttt is not None:
        prepare, adapt, act = make_round_fns(
            setup.backbone, setup.cfg, setup.sampler, setup.spec, setup.ttt, setup.transforms,
            with_tables=lazy_pass(setup.ttt, setup.transforms),
        )
    else:
        prepare = adapt = None
        act = make_act(setup.backbone)

    def prepare_b(agents, seed_idx, data, goal, oracle):
        return prepare(_gather(agents, seed_idx), data, goal, oracle)

    def adapt_b(agents, opt_states, seed_idx, key, data, tables, obs, goal):
        opt0 = None if opt_states is None else _gather(opt_states, seed_idx)
        return adapt(_gather(agents, seed_idx), opt0, key, data, tables, obs, goal)

    def base_b(agents, seed_idx):
        return _gather(agents, seed_idx)

    jit_vmap = lambda f, axes: eqx.filter_jit(eqx.filter_vmap(f, in_axes=axes))  # noqa: E731
    return (
        jit_vmap(prepare_b, (None, 0, None, 0, None)) if prepare else None,
        jit_vmap(adapt_b, (None, None, 0, 0, None, 0, 0, 0)) if adapt else None,
        jit_vmap(act, (0, 0, 0, 0)),
        jit_vmap(base_b, (None, 0)),
    )


@eqx.filter_jit
def _reset_draws(env, keys, tasks):
    """`env.reset_draws` of a batch of reset keys and tasks (the host driver's episodes)."""
    return jax.vmap(env.reset_draws)(keys, tasks)


def run_host(
    setup: EvalSetup,
    agents,
    opt_states,
    data,
    batch: EpisodeBatch,
    seed: int = 0,
    fns=None,
    gym_kwargs: dict | None = None,
    oracle=None,
) -> dict[str, np.ndarray]:
    """The host driver: OGBench's gymnasium environments stepped from Python, in lockstep over the batch, with
    the jitted batch `prepare` / `adapt` / `act`. Episodes come from the in-program environment's `reset_draws`
    with the same reset keys, imposed on the gymnasium env (`Env.impose`), where one exists (so both paths face the
    same episodes), else from the gymnasium reset seeded per (task, episode)."""
    prepare_b, adapt_b, act_b, base_b = fns or make_host_fns(setup)
    B, L = len(batch), setup.max_steps
    K = L if setup.ttt is None else setup.ttt.K
    R = n_rounds(L, setup.ttt)
    envs, obs, goals = [], [], []
    jax_env = make_jax_env(setup.spec.env_id, backend="mujoco") if has_jax_env(setup.spec.env_id) else None
    if jax_env is not None:  # every number the in-program reset draws from the same keys
        draws = jax.tree.map(np.asarray, _reset_draws(jax_env, batch.reset_keys, jnp.asarray(batch.task)))
    for b in range(B):
        env = make_gym_env(setup.spec.env_id, **(gym_kwargs or {}))
        task = int(batch.task[b])
        ep_seed = int(np.random.SeedSequence([seed, int(batch.task[b]), int(batch.episode[b])]).generate_state(1)[0])
        seed_env(env, ep_seed)
        o, info = env.reset(seed=ep_seed, options=dict(task_id=task))
        g = info["goal"]
        if jax_env is not None:
            o, g = jax_env.impose(env, {k: v[b] for k, v in draws.items()})
        envs.append(env)
        obs.append(np.asarray(o, np.float32))
        goals.append(np.asarray(g, np.float32))
    obs, goals = np.stack(obs), np.stack(goals)
    start = obs.copy()
    seed_idx = jnp.asarray(batch.seed_idx)
    done = np.zeros(B, bool)
    success = np.zeros(B, bool)
    steps = np.zeros(B, np.int32)
    traj = np.zeros((B, L, obs.shape[-1]), np.float32)
    acts = np.zeros((B, L, setup.spec.action_dim), np.float32)
    metrics: dict[str, list] = {}
    tables = prepare_b(agents, seed_idx, data, jnp.asarray(goals), oracle) if prepare_b else None
    reset_after = setup.ttt is not None and setup.ttt.reset_after_horizon
    agent_base = base_b(agents, seed_idx) if reset_after else None
    keys = jax.jit(jax.vmap(round_keys, in_axes=(0, None)))
    fold = jax.jit(jax.vmap(jax.random.fold_in, in_axes=(0, None)))
    for r in range(R):
        k_adapt, k_act = keys(batch.ttt_keys, r)
        if adapt_b is not None and not done.all():
            o, g = jnp.asarray(obs), jnp.asarray(goals)
            out = adapt_b(agents, opt_states, seed_idx, k_adapt, data, tables, o, g)
            agent_r, m = out[:2]
            if len(out) == 3:  # the lazy value pass: the tables now hold the values this round computed
                tables = out[2]
        else:  # base policy, or every episode already ended: nothing left to adapt
            agent_r, m = base_b(agents, seed_idx), _empty_round_metrics_np(B)
        idle = _empty_round_metrics_np(B)
        m = {k: np.where(done, idle[k], np.asarray(v)) for k, v in m.items()}  # ended episodes: idle rounds
        m["active"] = ~done
        for k, v in m.items():
            metrics.setdefault(k, []).append(np.asarray(v))
        for i in range(K):
            t = r * K + i
            if t >= L:
                break
            if done.all():
                traj[:, t:] = obs[:, None]
                break
            a = np.asarray(act_b(agent_r, jnp.asarray(obs), jnp.asarray(goals), fold(k_act, i)))
            if reset_after:  # past the longest kept span: the pre-trained agent acts
                a0 = np.asarray(act_b(agent_base, jnp.asarray(obs), jnp.asarray(goals), fold(k_act, i)))
                a = np.where((i > m["max_span"])[:, None], a0, a)
            for b in np.flatnonzero(~done):
                o, _, terminated, truncated, info = envs[b].step(a[b])
                obs[b] = o
                acts[b, t] = a[b]
                steps[b] += 1
                if info["success"]:
                    success[b] = True
                if terminated or truncated or steps[b] >= L:
                    done[b] = True
            traj[:, t] = obs
    for env in envs:
        env.close()
    rounds = {k: np.stack(v, axis=1) for k, v in metrics.items()}  # (B, R)
    return dict(success=success, steps=steps, start=start, goal=goals, observations=traj, actions=acts, rounds=rounds)


def _empty_round_metrics_np(B: int) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in empty_round_metrics(B).items()}


def _put_global(tree, sharding):
    """Multi-process `device_put`: every process holds the same host value of each leaf and contributes the
    shards its own devices hold (typed PRNG keys travel as their key data)."""
    from jax.experimental import multihost_utils  # noqa: F401  (initialises the multi-host helpers)

    def one(x):
        if not eqx.is_array(x):
            return x
        is_key = jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
        host = np.asarray(jax.random.key_data(x) if is_key else x)
        g = jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])
        return jax.random.wrap_key_data(g, impl=jax.random.key_impl(x)) if is_key else g

    return jax.tree.map(one, tree)


def _fetch(x) -> np.ndarray:
    """A program output as a host array; across processes, the global array gathered from every process."""
    if jax.process_count() > 1 and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def batch_sharding(n_devices: int | None = None):
    """`(batch, replicated)` NamedShardings over a 1-d mesh of the first `n_devices` devices (default: all)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = jax.devices()
    n = len(devices) if n_devices is None else n_devices
    if not 1 <= n <= len(devices):
        raise TttError(f"devices must be in [1, {len(devices)}] (the devices JAX sees), got {n}")
    mesh = Mesh(np.array(devices[:n]), ("batch",))
    return NamedSharding(mesh, PartitionSpec("batch")), NamedSharding(mesh, PartitionSpec())


def call_size(total: int, batch_size: int, n_devices: int = 1) -> int:
    """Episodes per compiled call: at most `batch_size` rounded down to a multiple of the device count (at least one
    episode per device), as few calls as that allows, split evenly, each a multiple of the device count. The last
    call is padded with repeats to the same shape, so 30 episodes at `batch_size` 25 run as two calls of 15, not
    25 + 25 (20 of them repeats)."""
    limit = max(n_devices, batch_size // n_devices * n_devices)
    calls = -(-total // min(limit, total))  # ceil division throughout
    per_call = -(-total // calls)
    return -(-per_call // n_devices) * n_devices


def evaluate(
    setup: EvalSetup,
    agents,
    data,
    *,
    episodes: int,
    tasks: tuple[int, ...] = (1, 2, 3, 4, 5),
    seed: int = 0,
    opt_states=None,
    driver: str = "compiled",
    batch_size: int | None = None,
    n_devices: int | None = None,
    progress: Callable[[int, int], None] | bool | None = None,
    env=None,
    params: dict[str, float] | None = None,
    grid: dict[str, list[float]] | None = None,
    base: bool = False,
) -> EvalResult | GridResult:
    """Evaluate seed-stacked `agents` (base if `setup.ttt` is None, else GC-TTT) on `tasks` x `episodes` per seed.

    Traced settings (`ttt.hparams.TRACED`: lr, q, eps, mix, noise_alpha, temperature, and your transforms' own
    parameters; driver 'compiled'): `params={name: value}` overrides the setup's values without compiling again;
    `grid={name: [values], ...}` evaluates every point of the Cartesian product on the same episodes in ONE program
    (the points are more elements of the vmapped batch) and returns a `GridResult`; `base=True` adds the pre-trained
    policy on the same episodes to a GC-TTT call (`GridResult.base`; its episodes skip selection and fine-tuning).
    Settings that change shapes (K, N, batch, widths, the rule) need one setup each.

    driver 'compiled': whole episodes as one jitted program vmapped over a batch of at most `batch_size` (default:
    all; rounded down to a multiple of the device count) (seed, task, episode) elements, the calls split evenly
    (`call_size`), sharded over `n_devices` devices (a batch is padded to a multiple of the device count, the last one
    with repeats that are dropped); the in-program env (`setup.backend`).
    driver 'host': OGBench's gymnasium env stepped from Python with the same jitted round functions.
    `progress(done, total)` is called after every compiled call; None (the default) prints one line on stderr when
    stderr is a terminal (episodes done, elapsed, the compile included), False prints nothing.
    Several processes (`jax.distributed.initialize` before any JAX work; on CPU with gloo collectives): every
    process calls `evaluate` with the same arguments, the batch is sharded over all processes' devices, and each
    process returns the complete result.

    By role: `_validate` (the arguments), `_batches` (the episode grid and the call sizes), the driver (`_run_calls`
    of `_compiled_calls` or `_host_calls`) and `_assemble` (the `EvalResult` / `GridResult`).
    """
    progress = _progress_fn(progress)
    env, tasks, n_seeds = _validate(setup, agents, data, episodes, seed, driver, env, tasks)
    points, hps, point_values = _grid_params(setup, params, grid, base, driver)
    n_total = n_seeds * len(tasks) * episodes * len(point_values)
    check_eval_memory(setup, n_total, n_total if batch_size is None else batch_size)
    oracle = _eval_oracle(setup)
    batch_sh, repl = batch_sharding(n_devices if driver == "compiled" else 1)
    eb, total, bs = _batches(seed, n_seeds, tasks, episodes, len(point_values), batch_size, batch_sh.mesh.size)
    t0 = time.perf_counter()
    if driver == "compiled":
        run = _compiled_calls(setup, agents, opt_states, data, env, oracle, eb, hps, batch_sh, repl)
    else:
        run = _host_calls(setup, agents, opt_states, data, oracle, eb, seed)
    outs = _run_calls(run, total, bs, progress)
    wall = time.perf_counter() - t0
    return _assemble(outs, tasks, episodes, n_seeds, points, point_values, grid, base, wall)


def _progress_fn(progress) -> Callable[[int, int], None] | None:
    """`evaluate`'s `progress` as a callback or None: None or True, the terminal line (None: only when stderr is a
    terminal); False, none."""
    if progress is None or progress is True:
        return _terminal_progress() if progress or _stderr_is_terminal() else None
    if progress is False:
        return None
    return progress


def _validate(setup: EvalSetup, agents, data, episodes, seed, driver: str, env, tasks):
    """`evaluate`'s checks of its arguments against each other and the setup, in order, each a one-line `TttError`.
    Returns the env (the compiled driver's in-program env made where none was given), the task ids and the number
    of seeds of `agents`."""
    if driver not in ("compiled", "host"):
        raise TttError(f"driver must be 'compiled' or 'host', got {driver!r}")
    if driver == "host" and setup.ttgs is not None:
        raise TttError("test-time graph search (setup.ttgs) runs in the compiled episode only: use driver 'compiled'")
    if isinstance(episodes, bool) or not isinstance(episodes, int | np.integer) or episodes < 1:
        raise TttError(f"episodes (per task and seed) must be an int >= 1, got {episodes!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= seed < 2**63:
        raise TttError(f"seed (the evaluation seed) must be an int in [0, 2^63), got {seed!r}")
    spec = setup.spec
    if setup.ttgs is not None and setup.ttgs.n_vertices > data.n_rows:
        raise TttError(f"ttgs: n_vertices ({setup.ttgs.n_vertices}) exceeds the dataset's {data.n_rows} rows; ask for "
                       f"at most {data.n_rows}")  # fmt: skip
    if (data.obs_dim, data.action_dim) != (spec.ob_dim, spec.action_dim):
        raise TttError(f"data: observations of {data.obs_dim} and actions of {data.action_dim}, but the setup's "
                       f"dataset {spec.name} has {spec.ob_dim} and {spec.action_dim}; load that dataset")  # fmt: skip
    if driver == "compiled" and env is None:
        env = make_jax_env(spec.env_id, backend=setup.backend)
    if env is not None and (env.obs_dim, env.action_dim) != (spec.ob_dim, spec.action_dim):
        raise TttError(f"env: {env.env_id} has observations of {env.obs_dim} and actions of {env.action_dim}, but the "
                       f"setup's dataset {spec.name} has {spec.ob_dim} and {spec.action_dim}")  # fmt: skip
    tasks = check_tasks(tasks, OGBENCH_TASKS if env is None else env.num_tasks, spec.env_id)
    n_seeds = check_agents(agents, setup.backbone, setup.cfg, spec.ob_dim, spec.action_dim)
    return env, tasks, n_seeds


def _eval_oracle(setup: EvalSetup):
    """The maze oracle of a GC-TTT evaluation on a point maze (selection with critic='oracle', the ranking
    diagnostics otherwise), else None; critic 'oracle' elsewhere is a `TttError`."""
    if setup.ttt is not None and has_oracle(setup.spec.env_id):
        return maze_oracle(setup.spec.env_id)
    if setup.ttt is not None and setup.ttt.critic == "oracle":
        raise TttError(
            f"critic 'oracle' needs a maze oracle, which {setup.spec.env_id} lacks (point mazes without teleports)"
        )
    return None


def _batches(seed: int, n_seeds: int, tasks, episodes: int, n_points: int, batch_size: int | None, n_dev: int):
    """The (seed, task, episode) grid (`episode_batch`), the elements of all calls (every grid point, and the base
    row, on the same episodes: the grid once per point, point-major) and the elements per call (`call_size`)."""
    eb = episode_batch(seed, n_seeds, tuple(tasks), episodes)
    total = len(eb) * n_points
    bs = total if batch_size is None else batch_size
    if bs < 1:
        raise TttError(f"batch size must be >= 1 episodes, got {bs}")
    return eb, total, call_size(total, bs, n_dev)


def _compiled_calls(setup: EvalSetup, agents, opt_states, data, env, oracle, eb: EpisodeBatch, hps, batch_sh, repl):
    """`run(idx)` for the compiled driver: the elements `idx` of the point-major grid (each its episode of `eb` and
    its point's settings of the stacked `hps`) as one call of the cached compiled program, the batch sharded over
    `batch_sh`'s devices and the rest replicated (`repl`); the outputs as host arrays."""
    program = _cached(make_compiled, program_setup(setup))
    put = _put_global if jax.process_count() > 1 else jax.device_put
    agents_r, opt_r, data_r = (put(x, repl) if x is not None else None for x in (agents, opt_states, data))
    if jax.process_count() > 1:
        env = put(env, repl)
    n_ep = len(eb)

    def run(idx: np.ndarray) -> dict:
        sub = eb.take(idx % n_ep)
        point_idx = jnp.asarray(idx // n_ep)
        sub_params = jax.tree.map(lambda x, p=point_idx: x[p], hps)
        out = program(
            agents_r,
            opt_r,
            env,
            data_r,
            put(jnp.asarray(sub.seed_idx), batch_sh),
            put(sub.reset_keys, batch_sh),
            put(sub.ttt_keys, batch_sh),
            put(jnp.asarray(sub.task), batch_sh),
            None if oracle is None else put(oracle, repl),
            jax.tree.map(lambda x: put(x, batch_sh), sub_params),
        )
        out = jax.tree.map(_fetch, out)
        return dict(success=out.success, steps=out.steps, start=out.start, goal=out.goal,
                    observations=out.observations, rounds=out.rounds)  # fmt: skip

    return run


def _host_calls(setup: EvalSetup, agents, opt_states, data, oracle, eb: EpisodeBatch, seed: int):
    """`run(idx)` for the host driver: the episodes `idx` of `eb` stepped from Python (`run_host`) with the cached
    jitted round functions."""
    fns = _cached(make_host_fns, setup)

    def run(idx: np.ndarray) -> dict:
        return run_host(setup, agents, opt_states, data, eb.take(idx % len(eb)), seed=seed, fns=fns, oracle=oracle)

    return run


def _run_calls(run, total: int, bs: int, progress) -> list[dict]:
    """The `total` elements in calls of `bs` (`run(idx)`), the last padded with repeats of its last element, which
    are dropped; `progress(done, total)` before the first and after every call."""
    outs = []
    if progress:
        progress(0, total)
    for start in range(0, total, bs):
        idx = np.minimum(np.arange(start, start + bs), total - 1)  # pad the last batch with repeats of its last element
        out = run(idx)
        n_real = min(bs, total - start)
        outs.append(jax.tree.map(lambda x, n=n_real: x[:n], out))
        if progress:
            progress(start + n_real, total)
    return outs


def _assemble(outs: list[dict], tasks, episodes: int, n_seeds: int, points, point_values, grid, base: bool,
              wall: float) -> EvalResult | GridResult:  # fmt: skip
    """The calls' outputs joined and reshaped: one `EvalResult` per grid point (the base row last, with `base`), each
    array (seeds, tasks, episodes, ...); a `GridResult` of them with a grid or `base`, else the one result."""
    cat = jax.tree.map(lambda *xs: np.concatenate(xs), *outs)
    shape = (len(tasks), episodes, n_seeds)
    n_ep = n_seeds * len(tasks) * episodes

    def grid_of(x):  # (B, ...) task-major, seed fastest -> (seeds, tasks, episodes, ...)
        x = x.reshape(shape + x.shape[1:])
        return np.moveaxis(x, 2, 0)

    results = []
    for i, values in enumerate(point_values):
        part = jax.tree.map(lambda x, i=i: x[i * n_ep : (i + 1) * n_ep], cat)
        results.append(EvalResult(
            success=grid_of(part["success"]).astype(np.float32),
            steps=grid_of(part["steps"]),
            tasks=tuple(tasks),
            rounds={k: grid_of(v) for k, v in part["rounds"].items()},
            observations=grid_of(part["observations"]),
            starts=grid_of(part["start"]),
            goals=grid_of(part["goal"]),
            wall_s=wall,
            params=values,
        ))  # fmt: skip
    if grid is None and not base:
        return results[0]
    return GridResult(points=tuple(points), results=tuple(results[: len(points)]),
                      base=results[-1] if base else None, wall_s=wall)  # fmt: skip


def _stderr_is_terminal() -> bool:
    import sys

    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _terminal_progress() -> Callable[[int, int], None]:
    """`evaluate`'s default progress on a terminal: one line on stderr, rewritten in place (the first update comes
    after the first call, compilation included: 20-40 s on a CPU)."""
    import sys

    t0 = time.perf_counter()

    def show(done: int, total: int) -> None:
        s = time.perf_counter() - t0
        tail = "\n" if done >= total else ""
        first = " (compiling and running the first call)" if done == 0 else ""
        sys.stderr.write(f"\revaluate: {done}/{total} episodes, {s:.0f} s{first}{' ' * 8}{tail}")
        sys.stderr.flush()

    return show


def eval_bytes(setup: EvalSetup, n_episodes: int) -> int:
    """A lower bound on the host memory the results of `n_episodes` episodes take: the observation after every step
    of each (`EvalResult.observations`), held twice while the batches are joined."""
    return 2 * n_episodes * setup.max_steps * setup.spec.ob_dim * 4


def call_bytes(setup: EvalSetup, per_call: int) -> tuple[int, str, str]:
    """A lower bound on the device memory one compiled call of `per_call` episodes needs beyond the dataset, with
    what dominates it and what to change: the fine-tuning batches of the episodes that fine-tune together (their
    inputs and each network's activations and gradients), or TTGS's vertex distance matrices (one per episode)."""
    out, what, hint = 0, "", ""
    if setup.ttt is not None:
        batch = ttt_batch(setup.ttt, setup.sampler)
        together = per_call if setup.ttt.bucket is None else min(setup.ttt.bucket, per_call)
        widths = sum(sum(getattr(setup.cfg, f, ()) or ()) for f in ("actor_hidden_dims", "value_hidden_dims"))
        row = 5 * setup.spec.ob_dim + setup.spec.action_dim + 4 * widths  # floats per batch row, at least
        out = 4 * batch * together * row
        what = f"fine-tuning batches of {batch} rows ({together} episode(s) at once)"
        hint = "ask for a smaller batch (--batch / batch)"
    if setup.ttgs is not None:
        graph = 3 * 4 * setup.ttgs.n_vertices**2 * per_call  # distances, weights and a working copy, float32
        if graph > out:
            out = graph
            what = f"TTGS graphs of {setup.ttgs.n_vertices} vertices ({per_call} episode(s) per call)"
            hint = "ask for fewer vertices (ttgs n_vertices) or fewer episodes per call (--chunk / chunk)"
    return out, what, hint


def check_eval_memory(setup: EvalSetup, n_episodes: int, per_call: int | None = None) -> None:
    """Refuse, before anything runs, an evaluation whose results the machine's memory cannot hold, or one compiled
    call of `per_call` episodes (default: all of them) whose fine-tuning batches or TTGS graphs it cannot hold
    (`call_bytes`)."""
    check_memory(eval_bytes(setup, n_episodes), f"evaluating {n_episodes} episodes ({setup.max_steps} steps each)",
                 "ask for fewer episodes or tasks (episodes are per task and seed), or evaluate in parts")  # fmt: skip
    per_call = n_episodes if per_call is None else max(1, min(per_call, n_episodes))
    nbytes, what, hint = call_bytes(setup, per_call)
    if nbytes:
        check_memory(nbytes, what, hint)


def ttgs_cost_note(setup: EvalSetup, n_episodes: int) -> str | None:
    """One line saying what a TTGS evaluation will cost on a CPU before it starts (None elsewhere, or when small):
    its all-pairs graph grows as the square of `n_vertices`; on this project's 2-core CPU the published 4,000
    vertices took about 4 minutes an episode (12 minutes, 6 GB for 3), 500 vertices about 10 s."""
    if setup.ttgs is None or jax.default_backend() != "cpu" or setup.ttgs.n_vertices < 1000:
        return None
    per = 15.0 * (setup.ttgs.n_vertices / 1000) ** 2  # seconds an episode on a 2-core CPU, about
    total = per * n_episodes
    when = f"{total / 60:.0f} min" if total >= 120 else f"{total:.0f} s"
    return (f"ttgs: {setup.ttgs.n_vertices} vertices on a CPU cost about {per:.0f} s an episode on 2 cores (about "
            f"{when} for these {n_episodes}); --ttgs n_vertices=500 (pipelines: ttgs = {{ n_vertices = 500 }}) is "
            "~60x cheaper for a first look")  # fmt: skip


def _grid_params(setup: EvalSetup, params, grid, base: bool, driver: str):
    """The grid's points, their stacked `HParams` (the base row last, with `base`) and every point's settings by
    name; a mistake in them is a one-line `TttError`."""
    if params is not None and not isinstance(params, dict):
        raise TttError(f"params must be a dict of setting name -> number, e.g. {{'lr': 1e-4}}, got {params!r}")
    overrides = dict(params or {})
    points = grid_points(grid) if grid is not None else [{}]
    named = set(overrides) | (set(grid) if grid is not None else set())
    if (named or base) and driver != "compiled":
        raise TttError("params / grid / base need driver 'compiled' (the host driver runs the setup's own values)")
    if base and setup.ttt is None:
        raise TttError("base=True adds the pre-trained policy to a GC-TTT setup; this setup is the base policy already")
    if setup.ttt is None and named - {"temperature"}:
        raise TttError(f"params / grid: {', '.join(sorted(named - {'temperature'}))} need a GC-TTT setup (variant ttt "
                       "or ttt-mc); the base policy has only temperature")  # fmt: skip
    if setup.ttt is not None:
        rule = setup.ttt.select.rule_used
        ignored = sorted(named & set(IGNORED_BY_RULE[rule]))
        if ignored:
            why = "" if setup.ttt.select.rule is not None else " (the default of this variant)"
            raise TttError(f"params / grid over {', '.join(ignored)}: rule {rule!r}{why} does not read "
                           f"{'it' if len(ignored) == 1 else 'them'}, so every point would be the same; vary a setting "
                           "the rule reads, or choose the rule that reads it (make_setup(..., rule=...))")  # fmt: skip
    values, hps = [], []
    for point in points:
        v, hp = setup_hparams(setup, {**overrides, **point})
        values.append(v)
        hps.append(hp)
    if base:
        v, hp = setup_hparams(setup, overrides, adapt=False)
        values.append(v)
        hps.append(hp)
    return points, stack_hparams(hps), values


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
    out = _cached(make_compiled, program_setup(setup))(
        stack(agent),
        None if opt_state is None else stack(opt_state),
        _FromStartGoal(env, start, goal),
        data,
        jnp.zeros((1,), jnp.int32),
        key[None],
        key[None],
        jnp.ones((1,), jnp.int32),
        oracle,
        stack(hp),
    )
    return jax.tree.map(lambda x: np.asarray(x[0]), out)
