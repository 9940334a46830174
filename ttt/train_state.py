"""The training state: one seed's agent, its optimiser state and step (`TrainState`), the optimiser that makes it
(`make_optimizer`) and a fresh one (`init_state`). Pre-training (`ttt.pretrain`) steps it; the checkpoint format
(`ttt.checkpoint`) writes and reads it; GC-TTT's fine-tuning (`ttt.finetune`) starts from its agent."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import optax
from jaxtyping import Array, Int, PRNGKeyArray

from ttt.agents.common import Backbone


class TrainState(eqx.Module):
    """One seed's agent, optimiser state and step (stacked along a leading seed axis when vmapped)."""

    agent: Any
    opt_state: Any
    step: Int[Array, ""]


def make_optimizer(cfg) -> optax.GradientTransformation:
    """Pre-training's optimiser: Adam at the backbone config's `lr` (OGBench's)."""
    return optax.adam(cfg.lr)


def init_state(key: PRNGKeyArray, backbone: Backbone, obs_dim: int, action_dim: int, cfg) -> TrainState:
    """A fresh TrainState (vmap it over seed keys for several seeds)."""
    agent = backbone.init(key, obs_dim, action_dim, cfg)
    opt_state = make_optimizer(cfg).init(eqx.filter(agent, eqx.is_array))
    return TrainState(agent, opt_state, jnp.zeros((), jnp.int32))
