"""Goal-conditioned batch sampling with OGBench's `GCDataset` semantics, as pure JAX functions.

Follows OGBench `impls/utils/datasets.py` (`GCDataset.sample` / `sample_goals`) on the compact layout: for a
row `j`, OGBench's `final_state_idx` (the first compact terminal at or after `j`) is the last valid row of
`j`'s episode, `ep_end[j] - 1` (or `j` itself for an episode's final observation row). All functions take the
`Dataset` as an argument, typed PRNG keys, and a static (hashable) config; they jit and vmap.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, Key

from ttt.data.batch import Batch
from ttt.data.dataset import Dataset


@dataclasses.dataclass(frozen=True)
class GoalMix:
    """Goal relabelling mixture: current row, same-trajectory future row, uniformly random valid row.

    `geom`: trajectory goals at a Geometric(1 - discount) offset (else uniform over the episode's future).
    """

    p_cur: float
    p_traj: float
    p_rand: float
    geom: bool

    def __post_init__(self):
        for name in ("p_cur", "p_traj", "p_rand"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"GoalMix.{name} must be in [0, 1], got {p}")
        total = self.p_cur + self.p_traj + self.p_rand
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ValueError(
                f"GoalMix probabilities must sum to 1, got p_cur + p_traj + p_rand = {total:g} "
                f"({self.p_cur:g} + {self.p_traj:g} + {self.p_rand:g})"
            )


@dataclasses.dataclass(frozen=True)
class SamplerConfig:
    """Static batch-sampling configuration; defaults are OGBench's GCIQL/GCBC defaults."""

    batch_size: int = 1024
    discount: float = 0.99
    value: GoalMix = GoalMix(0.2, 0.5, 0.3, True)
    actor: GoalMix = GoalMix(0.0, 1.0, 0.0, False)
    gc_negative: bool = True

    def __post_init__(self):
        if not (isinstance(self.batch_size, int) and self.batch_size >= 1):
            raise ValueError(f"SamplerConfig.batch_size must be a positive int, got {self.batch_size!r}")
        if not 0.0 <= self.discount < 1.0:
            raise ValueError(f"SamplerConfig.discount must be in [0, 1), got {self.discount}")


def sample_rows(key: Key[Array, ""], data: Dataset, n: int) -> Int[Array, " n"]:
    """`n` rows drawn uniformly (with replacement) from the valid rows (OGBench's `get_random_idxs`)."""
    pos = jax.random.randint(key, (n,), 0, data.valid_rows.shape[0])
    return data.valid_rows[pos]


def traj_final(data: Dataset, idxs: Int[Array, " n"]) -> Int[Array, " n"]:
    """OGBench's `final_state_idxs`: the last valid row of each row's episode (a final row maps to itself)."""
    return jnp.maximum(data.ep_end[idxs] - 1, idxs)


def sample_goals(
    key: Key[Array, ""],
    data: Dataset,
    idxs: Int[Array, " n"],
    mix: GoalMix,
    discount: float | Float[Array, ""],
) -> Int[Array, " n"]:
    """Goal row for each of `idxs`, exactly as OGBench's `GCDataset.sample_goals`.

    Random goals are uniform valid rows; trajectory goals are `min(idx + Geometric(1 - discount), final)`
    (`geom`) or `round(min(idx + 1, final) * u + final * (1 - u))`, `u ~ U[0, 1)`; the trajectory/random
    choice uses `U < p_traj / (1 - p_cur)`, then an independent `U' < p_cur` picks the current row.
    """
    n = idxs.shape[0]
    k_rand, k_traj, k_choice, k_cur = jax.random.split(key, 4)
    idxs = idxs.astype(jnp.int32)
    if mix.p_cur == 1.0:
        return idxs
    random_goals = sample_rows(k_rand, data, n)
    final = traj_final(data, idxs)
    if mix.geom:
        offsets = jax.random.geometric(k_traj, 1.0 - discount, (n,), dtype=jnp.int32)  # in [1, inf)
        # == min(idx + offset, final); written so a huge offset cannot overflow int32.
        traj_goals = idxs + jnp.minimum(jnp.maximum(offsets, 1), final - idxs)
    else:
        u = jax.random.uniform(k_traj, (n,))  # in [0, 1)
        lo = jnp.minimum(idxs + 1, final)
        # round(lo * u + final * (1 - u)) == round(final - (final - lo) * u); relative form keeps float32 exact
        # for large row indices (differs from OGBench only at exact .5 ties).
        traj_goals = final - jnp.round((final - lo).astype(jnp.float32) * u).astype(jnp.int32)
    p_traj_given_not_cur = mix.p_traj / (1.0 - mix.p_cur)
    goals = jnp.where(jax.random.uniform(k_choice, (n,)) < p_traj_given_not_cur, traj_goals, random_goals)
    return jnp.where(jax.random.uniform(k_cur, (n,)) < mix.p_cur, idxs, goals)


def make_batch(key: Key[Array, ""], data: Dataset, idxs: Int[Array, " batch"], cfg: SamplerConfig) -> Batch:
    """The goal-conditioned batch for given rows (OGBench's `GCDataset.sample(batch_size, idxs)`)."""
    k_value, k_actor = jax.random.split(key)
    idxs = idxs.astype(jnp.int32)
    value_goal_idxs = sample_goals(k_value, data, idxs, cfg.value, cfg.discount)
    actor_goal_idxs = sample_goals(k_actor, data, idxs, cfg.actor, cfg.discount)
    successes = (idxs == value_goal_idxs).astype(jnp.float32)
    return Batch(
        observations=data.observations[idxs],
        actions=data.actions[idxs],
        next_observations=data.observations[data.next_idx[idxs]],
        value_goals=data.observations[value_goal_idxs],
        actor_goals=data.observations[actor_goal_idxs],
        rewards=successes - 1.0 if cfg.gc_negative else successes,
        masks=1.0 - successes,
        idxs=idxs,
        value_goal_idxs=value_goal_idxs,
        actor_goal_idxs=actor_goal_idxs,
    )


def sample_batch(key: Key[Array, ""], data: Dataset, cfg: SamplerConfig) -> Batch:
    """`cfg.batch_size` uniform valid rows and their goal-conditioned batch."""
    k_rows, k_goals = jax.random.split(key)
    return make_batch(k_goals, data, sample_rows(k_rows, data, cfg.batch_size), cfg)
