"""What one evaluation is before it runs: its static `EvalSetup`, the (seed, task, episode) grid with each
element's keys (`EpisodeBatch`), the traced settings of each grid point (`setup_hparams`, `grid_params`), the host
and device memory it needs (`check_eval_memory`), and the cache of the drivers' compiled programs
(`cached_program`: one per setup whose traced settings are set aside, `program_setup`)."""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import numpy as np

from ttt.agents.common import Backbone
from ttt.data.sampler import SamplerConfig
from ttt.data.specs import DatasetSpec
from ttt.episode import TTTConfig, ttt_batch
from ttt.errors import TttError
from ttt.graph import TTGSConfig
from ttt.hparams import TRACED, HParams, defaults, make_hparams
from ttt.hparams import stack as stack_hparams
from ttt.select import IGNORED_BY_RULE, Transforms
from ttt.storage import check_memory

PROGRAM_CACHE = 32  # compiled programs kept per process (`cached_program`), the most recently used
OGBENCH_TASKS = 5  # evaluation tasks of every OGBench environment this project uses (ids 1..5)


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


@functools.lru_cache(maxsize=PROGRAM_CACHE)
def cached_program(factory: Callable, setup: EvalSetup):
    """`factory(setup)` (a driver's jitted program or round functions), built once per (factory, setup) while it is
    among the `PROGRAM_CACHE` most recently used, so that repeated evaluations of one configuration (a pipeline's
    task-by-task evaluation, a grid of setups) reuse its compiled programs and a long process does not keep every
    program it ever built; `cached_program.cache_clear()` drops them all."""
    return factory(setup)


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


def gather(tree, idx):
    """Element `idx` of a seed-stacked pytree (array leaves only; None stays None)."""
    return jax.tree.map(lambda x: x[idx] if eqx.is_array(x) else x, tree)


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
    """One line saying, before a large TTGS evaluation on a CPU starts, how its cost grows (None elsewhere, or below
    1,000 vertices): the all-pairs graph is built once per episode and its work grows as the square of
    `n_vertices`. Measured times are in docs/reference.md ("GC-TTT evaluation"): they depend on the machine."""
    if setup.ttgs is None or jax.default_backend() != "cpu" or setup.ttgs.n_vertices < 1000:
        return None
    n = setup.ttgs.n_vertices
    return (f"ttgs: {n} vertices on a CPU: each of these {n_episodes} episodes builds an all-pairs graph, "
            f"{(n / 500) ** 2:.0f}x the work of 500 vertices (docs/reference.md gives measured times); --ttgs "
            "n_vertices=500 (pipelines: ttgs = { n_vertices = 500 }) for a first look")  # fmt: skip


def grid_params(setup: EvalSetup, params, grid, base: bool, driver: str):
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
