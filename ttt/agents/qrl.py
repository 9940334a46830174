"""Quasimetric RL with an IQE value (OGBench ``impls/agents/qrl.py``, ``quasimetric_type='iqe'``).

The whole loss is ``value + dynamics + actor`` (no dynamics with ``actor_loss='awr'``):

- value: ``mean(100 * softplus(5 - d(s, g_value) / 100)) + sg(lam) * mean(relu(d(s, s') - 1)^2)`` plus the
  dual term ``lam * (eps - sg(mean(relu(d(s, s') - 1)^2)))`` with ``lam = exp(log_lam)``;
- dynamics (DDPG+BC only): a latent model ``z' = z + f([z, a])`` trained with
  ``(d(z_s', z_hat) + d(z_hat, z_s')) / 2`` (gradients reach both ``f`` and ``phi``);
- actor ``'ddpgbc'``: ``Q = -d(z_s + f([z_s, a_pi]), z_g)`` with the value and dynamics nets under
  stop-gradient, normalised by ``sg(mean|Q| + 1e-6)``, plus ``-alpha * mean(log pi(a | s, g))``;
- actor ``'awr'``: weights ``min(exp(alpha * (d(s, g) - d(s', g))), 100)``.

No target networks. For selection, ``value = -(1 - gamma^d) / (1 - gamma)``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from ttt.agents.common import (
    act_actor,
    actor_metrics,
    always_has_value,
    awr_weights,
    check_actor_loss,
    ddpgbc_actor_loss,
    make_backbone,
    prefixed,
    tuple_field,
)
from ttt.agents.ogbench_layout import (
    FlaxTree,
    Leaf,
    OgbenchLayout,
    actor_leaves,
    get_path,
    mlp_leaves,
    obs_from_actor,
    widths,
)
from ttt.data.batch import Batch
from ttt.errors import TttError
from ttt.nets import MLP, GaussianActor, IQEValue, gaussian_log_prob

NAME = "qrl"


@dataclasses.dataclass(frozen=True)
class Config:
    """QRL hyper-parameters (OGBench ``get_config`` defaults).

    OGBench's per-environment DDPG+BC alpha: pointmaze 0.0003, cube 0.3 (the default here is OGBench's
    generic 0.003). ``discount`` is used only by ``value`` (the selection value; stored on the agent).
    """

    lr: float = 3e-4
    batch_size: int = 1024
    actor_hidden_dims: tuple[int, ...] = (512, 512, 512)
    value_hidden_dims: tuple[int, ...] = (512, 512, 512)
    latent_dim: int = 512
    dim_per_component: int = 8
    layer_norm: bool = True
    discount: float = 0.99
    eps: float = 0.05
    actor_loss: str = "ddpgbc"
    alpha: float = 0.003
    const_std: bool = True

    def __post_init__(self):
        tuple_field(self, "actor_hidden_dims", "value_hidden_dims")
        check_actor_loss(self.actor_loss)


class Agent(eqx.Module):
    """QRL networks: IQE ``value`` d(s, g), dual ``log_lam``, latent ``dynamics`` (None for AWR), ``actor``.

    ``discount`` (static, from the config) is kept only for the selection ``value``."""

    actor: GaussianActor
    value: IQEValue
    log_lam: Float[Array, ""]
    dynamics: MLP | None
    discount: float = eqx.field(static=True)


def init(key: PRNGKeyArray, obs_dim: int, action_dim: int, cfg: Config) -> Agent:
    """Build all networks; ``lam`` starts at 1."""
    k_actor, k_value, k_dyn = jax.random.split(key, 3)
    actor = GaussianActor(k_actor, obs_dim, obs_dim, action_dim, cfg.actor_hidden_dims, const_std=cfg.const_std)
    value = IQEValue(
        k_value,
        obs_dim,
        cfg.value_hidden_dims,
        latent_dim=cfg.latent_dim,
        dim_per_component=cfg.dim_per_component,
        layer_norm=cfg.layer_norm,
    )
    dynamics = None
    if cfg.actor_loss == "ddpgbc":
        dynamics = MLP(
            k_dyn,
            cfg.latent_dim + action_dim,
            (*cfg.value_hidden_dims, cfg.latent_dim),
            activate_final=False,
            layer_norm=cfg.layer_norm,
        )
    return Agent(actor=actor, value=value, log_lam=jnp.zeros(()), dynamics=dynamics, discount=cfg.discount)


def value_loss(agent: Agent, batch: Batch, cfg: Config) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """QRL's shaped constrained objective: push d(s, g) up, keep d(s, s') <= 1 via the dual ``lam``."""
    d_neg = agent.value(batch.observations, batch.value_goals)
    d_pos = agent.value(batch.observations, batch.next_observations)
    lam = jnp.exp(agent.log_lam)
    d_neg_loss = (100.0 * jax.nn.softplus(5.0 - d_neg / 100.0)).mean()
    d_pos_loss = (jax.nn.relu(d_pos - 1.0) ** 2).mean()
    v_loss = d_neg_loss + d_pos_loss * jax.lax.stop_gradient(lam)
    lam_loss = lam * (cfg.eps - jax.lax.stop_gradient(d_pos_loss))
    total = v_loss + lam_loss
    return total, {
        "total_loss": total,
        "value_loss": v_loss,
        "lam_loss": lam_loss,
        "d_neg_loss": d_neg_loss,
        "d_neg_mean": d_neg.mean(),
        "d_neg_max": d_neg.max(),
        "d_neg_min": d_neg.min(),
        "d_pos_loss": d_pos_loss,
        "d_pos_mean": d_pos.mean(),
        "d_pos_max": d_pos.max(),
        "d_pos_min": d_pos.min(),
        "lam": lam,
    }


def _predict_next(dynamics: MLP, z: Float[Array, "batch latent"], a: Float[Array, "batch act"]) -> Array:
    """Latent dynamics: ``z + f([z, a])``."""
    return z + dynamics(jnp.concatenate([z, a], axis=-1))


def dynamics_loss(agent: Agent, batch: Batch) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """Symmetrised quasimetric between predicted and encoded next latents."""
    z = agent.value.encode(batch.observations)
    z_next = agent.value.encode(batch.next_observations)
    z_pred = _predict_next(agent.dynamics, z, batch.actions)
    d1 = agent.value.latent_distance(z_next, z_pred)
    d2 = agent.value.latent_distance(z_pred, z_next)
    loss = (d1 + d2).mean() / 2
    return loss, {"dynamics_loss": loss}


def actor_loss(
    agent: Agent, batch: Batch, key: PRNGKeyArray, cfg: Config
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """Latent-dynamics DDPG+BC or AWR on ``d(s, g) - d(s', g)`` (see the module docstring)."""
    obs, goals = batch.observations, batch.actor_goals
    qv = jax.lax.stop_gradient(agent.value)
    mean, std = agent.actor(obs, goals)
    log_prob = gaussian_log_prob(mean, std, batch.actions)
    if cfg.actor_loss == "awr":
        adv = qv(obs, goals) - qv(batch.next_observations, goals)
        loss = -(awr_weights(adv, cfg.alpha) * log_prob).mean()
        return loss, {"actor_loss": loss, "adv": adv.mean(), **actor_metrics(mean, std, batch.actions, log_prob)}
    z, z_goal = qv.encode(obs), qv.encode(goals)
    dynamics = jax.lax.stop_gradient(agent.dynamics)

    def q_fn(q_actions):
        return -qv.latent_distance(_predict_next(dynamics, z, q_actions), z_goal)

    return ddpgbc_actor_loss(q_fn, mean, std, batch.actions, log_prob, key, cfg.alpha, cfg.const_std)


def loss(
    agent: Agent, batch: Batch, key: PRNGKeyArray, cfg: Config
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """``value + dynamics + actor``; ``key`` drives the DDPG+BC action sample when the std is learned.

    ``batch.rewards``/``masks`` are unused: QRL learns from (s, s') pairs and random value goals.
    """
    total, v_info = value_loss(agent, batch, cfg)
    info = prefixed("value", v_info)
    if cfg.actor_loss == "ddpgbc":
        d_loss, d_info = dynamics_loss(agent, batch)
        total = total + d_loss
        info.update(prefixed("dynamics", d_info))
    a_loss, a_info = actor_loss(agent, batch, key, cfg)
    info.update(prefixed("actor", a_info))
    return total + a_loss, info


def target_update(agent: Agent, cfg: Config) -> Agent:
    """QRL has no target networks: identity."""
    del cfg
    return agent


act = act_actor


def distance(agent: Agent, obs: Float[Array, "*batch obs"], goal: Float[Array, "*batch obs"]) -> Float[Array, "*batch"]:
    """The learned quasimetric ``d(s, g)``."""
    return agent.value(obs, goal)


def value_from_distance(d: Float[Array, "*batch"], discount: float) -> Float[Array, "*batch"]:
    """``-(1 - gamma^d) / (1 - gamma)``: the discounted return of reaching the goal in ``d`` steps."""
    return -(1.0 - discount**d) / (1.0 - discount)


def value(agent: Agent, obs: Float[Array, "*batch obs"], goal: Float[Array, "*batch obs"]) -> Float[Array, "*batch"]:
    """Selection value ``-(1 - gamma^d) / (1 - gamma)`` with the ``discount`` the agent was built with."""
    return value_from_distance(distance(agent, obs, goal), agent.discount)


has_value = always_has_value  # QRL always has its quasimetric value


BACKBONE = make_backbone(globals())


def ogbench_leaves(agent: Agent) -> list[Leaf]:
    """OGBench's QRL: `modules_actor`, the IQE value's `phi` MLP and `alpha` (`modules_value`), the dual
    `modules_lam`, and the latent `modules_dynamics` (DDPG+BC only)."""
    out = [
        *actor_leaves(agent.actor, ("modules_actor",), lambda a: a.actor),
        *mlp_leaves(agent.value.phi, ("modules_value", "phi"), lambda a: a.value.phi),
        (("modules_value", "alpha", "value"), lambda a: a.value.alpha_logit),
        (("modules_lam", "log_value"), lambda a: a.log_lam),
    ]
    if agent.dynamics is not None:
        out += mlp_leaves(agent.dynamics, ("modules_dynamics",), lambda a: a.dynamics)
    return out


def ogbench_sizes(params: FlaxTree, where: str, actor_in: int, action_dim: int) -> dict[str, Any]:
    """The observation size, `value_hidden_dims` / `latent_dim` / `layer_norm` from `phi` (the dynamics must
    agree), and `actor_loss` from whether a dynamics network is there (DDPG+BC) or not (AWR)."""
    del action_dim
    out: dict[str, Any] = dict(obs_dim=obs_from_actor(actor_in, where))
    p_dims, p_in, p_ln = widths(get_path(params, ("modules_value", "phi")), where, "modules_value/phi")
    out.update(value_hidden_dims=p_dims[:-1], latent_dim=p_dims[-1], layer_norm=p_ln)
    if p_in != out["obs_dim"]:
        raise TttError(f"{where}: the value's input width {p_in} is not the observation size {out['obs_dim']}")
    dyn = params.get("modules_dynamics")
    if dyn is not None:
        d_dims, _, d_ln = widths(dyn, where, "modules_dynamics")
        if d_dims != p_dims or d_ln != p_ln:
            raise TttError(f"{where}: the dynamics widths {d_dims} and the value's {p_dims} disagree; the "
                           "reference builds both from value_hidden_dims and latent_dim")  # fmt: skip
    out["actor_loss"] = "ddpgbc" if dyn is not None else "awr"
    return out


OGBENCH = OgbenchLayout(
    name=NAME,
    networks=frozenset({"actor", "value", "lam", "dynamics"}),
    optional=frozenset({"dynamics"}),
    leaves=ogbench_leaves,
    sizes=ogbench_sizes,
    config=dict(lr=3e-4, batch_size=1024, discount=0.99, eps=0.05, actor_loss="ddpgbc", alpha=0.003, const_std=True,
                dim_per_component=8),
)  # fmt: skip
"""QRL (IQE) in OGBench's checkpoint format (`impls/agents/qrl.py`; `ttt.interop`)."""
