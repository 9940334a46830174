"""The device-resident, fixed-shape dataset pytree in OGBench's compact layout.

Every observation row of every episode is kept, including each episode's final observation row (which carries
no usable action: OGBench's `valids == 0`). Rows are in file order; episodes are contiguous.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from ttt.errors import TttError

GoalFn = Callable[[np.ndarray], np.ndarray]


def episode_bounds(final: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Episode id, first row and last row of every row, from a mask that is True at each episode's last row.

    Host-side, vectorised. The mask's last entry must be True (checked by the callers).
    """
    final = np.asarray(final, dtype=bool)
    ends = np.flatnonzero(final)
    ep_id = np.concatenate([[0], np.cumsum(final[:-1])]).astype(np.int64)
    starts = np.concatenate([[0], ends[:-1] + 1])
    return ep_id, starts[ep_id], ends[ep_id]


class Dataset(eqx.Module):
    """OGBench dataset in the compact layout, as device arrays (pass it to jitted code as an argument).

    Row `j` carries an action iff `valid[j]`; its transition is `(observations[j], actions[j],
    observations[next_idx[j]])`. `ep_end[j]` is the final observation row of `j`'s episode (not valid), so the
    last valid row of the episode is `ep_end[j] - 1`. `goals` are goal coordinates of every row (e.g.
    `spec.goal_coords`); `valid_rows` lists the valid rows in ascending order.
    """

    observations: Float[Array, "rows obs"]
    actions: Float[Array, "rows act"]
    next_idx: Int[Array, " rows"]
    ep_id: Int[Array, " rows"]
    ep_end: Int[Array, " rows"]
    valid: Bool[Array, " rows"]
    goals: Float[Array, "rows goal"]
    valid_rows: Int[Array, " n_valid"]

    @property
    def n_rows(self) -> int:
        return self.observations.shape[0]

    @property
    def obs_dim(self) -> int:
        return self.observations.shape[1]

    @property
    def action_dim(self) -> int:
        return self.actions.shape[1]

    @property
    def goal_dim(self) -> int:
        return self.goals.shape[1]

    @property
    def n_valid(self) -> int:
        return self.valid_rows.shape[0]

    @property
    def n_episodes(self) -> int:
        """Each episode has exactly one row without an action, so this is a function of shapes only."""
        return self.n_rows - self.n_valid

    @classmethod
    def from_arrays(
        cls,
        observations: np.ndarray,
        actions: np.ndarray,
        terminals: np.ndarray,
        goal_fn: GoalFn | None = None,
    ) -> Dataset:
        """Build from the raw file layout OGBench's generation writes.

        Every row including each episode's final observation; `terminals` is True exactly at each episode's
        last row. `goal_fn` maps observations (numpy, `(rows, obs)`) to goal coordinates; default: the full
        observation.
        """
        terminals = np.asarray(terminals)
        if terminals.ndim != 1:
            raise TttError(f"terminals must be 1-D, got shape {terminals.shape}")
        return _build(observations, actions, terminals.astype(bool), goal_fn)

    @classmethod
    def from_ogbench(cls, d: Mapping[str, np.ndarray], goal_fn: GoalFn | None = None) -> Dataset:
        """Build from `ogbench.load_dataset(path, compact_dataset=True)`'s dict; episodes come from `valids`."""
        missing = [k for k in ("observations", "actions", "valids") if k not in d]
        if missing:
            raise TttError(
                f"OGBench dataset dict lacks {', '.join(missing)}; load it with "
                "ogbench.load_dataset(path, compact_dataset=True)"
            )
        valids = np.asarray(d["valids"])
        if valids.ndim != 1:
            raise TttError(f"valids must be 1-D, got shape {valids.shape}")
        return _build(d["observations"], d["actions"], valids == 0, goal_fn)


def _check_finite(name: str, x: np.ndarray) -> None:
    bad = ~np.isfinite(x)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        raise TttError(f"{name} has {int(bad.sum())} non-finite values (first at row {row})")


def _build(observations, actions, final: np.ndarray, goal_fn: GoalFn | None) -> Dataset:
    obs = np.asarray(observations, dtype=np.float32)
    act = np.asarray(actions, dtype=np.float32)
    if obs.ndim != 2 or act.ndim != 2:
        raise TttError(f"observations and actions must be 2-D, got shapes {obs.shape} and {act.shape}")
    n = obs.shape[0]
    if n == 0:
        raise TttError("dataset has no rows")
    if act.shape[0] != n or final.shape[0] != n:
        raise TttError(
            f"mismatched lengths: observations {n}, actions {act.shape[0]}, terminals/valids {final.shape[0]}"
        )
    if not final[-1]:
        raise TttError(f"the last row ({n - 1}) must end an episode (terminal), but it does not")
    ends = np.flatnonzero(final)
    lengths = np.diff(np.concatenate([[-1], ends]))
    if (lengths < 2).any():
        e = int(np.argmax(lengths < 2))
        raise TttError(
            f"episode {e} (ending at row {int(ends[e])}) has {int(lengths[e])} row; every episode needs >= 2 rows"
        )
    _check_finite("observations", obs)
    _check_finite("actions", act)
    goals = obs if goal_fn is None else np.asarray(goal_fn(obs), dtype=np.float32)
    if goals.ndim != 2 or goals.shape[0] != n:
        raise TttError(f"goal_fn must return shape ({n}, goal_dim), got {goals.shape}")
    _check_finite("goals", goals)

    ep_id, _, ep_end = episode_bounds(final)
    valid = ~final
    rows = np.arange(n)
    next_idx = np.where(valid, rows + 1, rows)
    return Dataset(
        observations=jnp.asarray(obs),
        actions=jnp.asarray(act),
        next_idx=jnp.asarray(next_idx, dtype=jnp.int32),
        ep_id=jnp.asarray(ep_id, dtype=jnp.int32),
        ep_end=jnp.asarray(ep_end, dtype=jnp.int32),
        valid=jnp.asarray(valid),
        goals=jnp.asarray(goals),
        valid_rows=jnp.asarray(np.flatnonzero(valid), dtype=jnp.int32),
    )
