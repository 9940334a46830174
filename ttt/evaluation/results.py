"""What an evaluation returns: `EvalResult` (NumPy arrays over the (seeds, tasks, episodes) grid), `GridResult` (one
`EvalResult` per point of a grid of traced settings) and `assemble`, which makes them from the drivers' outputs."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from ttt.errors import TttError
from ttt.stats import mean_se


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


def assemble(outs: list[dict], tasks, episodes: int, n_seeds: int, points, point_values, grid, base: bool,
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
