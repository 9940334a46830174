"""The goal-conditioned training batch that samplers produce and backbone losses consume."""

from __future__ import annotations

import equinox as eqx
from jaxtyping import Array, Float, Int


class Batch(eqx.Module):
    """A batch of transitions with relabelled goals (OGBench's GCDataset fields).

    Goals are full observations of goal rows, as in OGBench. `rewards` is 0 where the value goal is the
    current row (index equality) else -1 (`gc_negative`); `masks` is 0 there else 1.
    """

    observations: Float[Array, "batch obs"]
    actions: Float[Array, "batch act"]
    next_observations: Float[Array, "batch obs"]
    value_goals: Float[Array, "batch obs"]
    actor_goals: Float[Array, "batch obs"]
    rewards: Float[Array, " batch"]
    masks: Float[Array, " batch"]
    idxs: Int[Array, " batch"]
    value_goal_idxs: Int[Array, " batch"]
    actor_goal_idxs: Int[Array, " batch"]
