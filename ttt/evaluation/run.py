"""`evaluate`: the (seed, task, episode) grid of seed-stacked agents, base policy or GC-TTT, on OGBench's evaluation
tasks, run in calls of the compiled driver (`ttt.evaluation.compiled`) or the host driver (`ttt.evaluation.host`).
Success is OGBench's: the episode ends when the goal is reached (`terminate_at_goal`) and counts as a success iff it
was reached within the step limit. Starts and goals depend on (evaluation seed, task, episode) only, so every
training seed faces the same draws."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import jax
import numpy as np

from ttt.checks import check_agents, check_tasks
from ttt.envs import make_env
from ttt.envs.oracle import has_oracle, maze_oracle
from ttt.errors import TttError
from ttt.evaluation.compiled import compiled_calls
from ttt.evaluation.host import host_calls
from ttt.evaluation.results import EvalResult, GridResult, assemble
from ttt.evaluation.setup import OGBENCH_TASKS, EvalSetup, check_eval_memory, episode_batch, grid_params
from ttt.evaluation.sharding import batch_sharding, call_size


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
    of `compiled_calls` or `host_calls`) and `assemble` (the `EvalResult` / `GridResult`).
    """
    progress = _progress_fn(progress)
    env, tasks, n_seeds = _validate(setup, agents, data, episodes, seed, driver, env, tasks)
    points, hps, point_values = grid_params(setup, params, grid, base, driver)
    n_total = n_seeds * len(tasks) * episodes * len(point_values)
    check_eval_memory(setup, n_total, n_total if batch_size is None else batch_size)
    oracle = _eval_oracle(setup)
    batch_sh, repl = batch_sharding(n_devices if driver == "compiled" else 1)
    eb, total, bs = _batches(seed, n_seeds, tasks, episodes, len(point_values), batch_size, batch_sh.mesh.size)
    t0 = time.perf_counter()
    if driver == "compiled":
        run = compiled_calls(setup, agents, opt_states, data, env, oracle, eb, hps, batch_sh, repl)
    else:
        run = host_calls(setup, agents, opt_states, data, oracle, eb, seed)
    outs = _run_calls(run, total, bs, progress)
    wall = time.perf_counter() - t0
    return assemble(outs, tasks, episodes, n_seeds, points, point_values, grid, base, wall)


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
        env = make_env(spec.env_id, backend=setup.backend)
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


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _terminal_progress() -> Callable[[int, int], None]:
    """`evaluate`'s default progress on a terminal: one line on stderr, rewritten in place (the first update comes
    after the first call, compilation included: 20-40 s on a CPU)."""
    t0 = time.perf_counter()

    def show(done: int, total: int) -> None:
        s = time.perf_counter() - t0
        tail = "\n" if done >= total else ""
        first = " (compiling and running the first call)" if done == 0 else ""
        sys.stderr.write(f"\revaluate: {done}/{total} episodes, {s:.0f} s{first}{' ' * 8}{tail}")
        sys.stderr.flush()

    return show
