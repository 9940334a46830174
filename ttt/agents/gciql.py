"""Goal-conditioned implicit Q-learning (OGBench ``impls/agents/gciql.py``).

Networks: V(s, g) (one head), twin Q(s, g, a) with a Polyak target, Gaussian actor. The whole loss is
``value + critic + actor``:

- value: expectile regression of V towards ``min(Q_target1, Q_target2)`` (target under stop-gradient);
- critic: ``sum_i (Q_i - (r + gamma * m * sg(V(s', g))))^2``, mean over the batch;
- actor ``'ddpgbc'``: ``-mean(Q(s, g, a_pi)) / sg(mean|Q| + 1e-6) - alpha * mean(log pi(a | s, g))`` with
  ``a_pi`` the clipped mean (``const_std``) or a clipped reparameterised sample, Q the min of the online
  twin Q under stop-gradient (the gradient reaches only the actor through ``a_pi``);
- actor ``'awr'``: ``-mean(min(exp(alpha * (Q - V)), 100) * log pi(a | s, g))`` with Q, V stopped.
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
    expectile_loss,
    make_backbone,
    polyak,
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
from ttt.nets import GaussianActor, GCValue, gaussian_log_prob

NAME = "gciql"


@dataclasses.dataclass(frozen=True)
class Config:
    """GC-IQL hyper-parameters (OGBench ``get_config`` defaults).

    OGBench's per-environment alpha for DDPG+BC: pointmaze 0.003, cube 1.0; AWR uses alpha 10 (the
    pipelines set these; the default here is OGBench's generic 0.3).
    """

    lr: float = 3e-4
    batch_size: int = 1024
    actor_hidden_dims: tuple[int, ...] = (512, 512, 512)
    value_hidden_dims: tuple[int, ...] = (512, 512, 512)
    layer_norm: bool = True
    discount: float = 0.99
    tau: float = 0.005
    expectile: float = 0.9
    actor_loss: str = "ddpgbc"
    alpha: float = 0.3
    const_std: bool = True

    def __post_init__(self):
        tuple_field(self, "actor_hidden_dims", "value_hidden_dims")
        check_actor_loss(self.actor_loss)


class Agent(eqx.Module):
    """GC-IQL networks: ``value`` V(s, g), twin ``critic`` Q(s, g, a), its Polyak ``target_critic``, ``actor``."""

    actor: GaussianActor
    value: GCValue
    critic: GCValue
    target_critic: GCValue


def init(key: PRNGKeyArray, obs_dim: int, action_dim: int, cfg: Config) -> Agent:
    """Build all networks; the target critic starts as an exact copy of the critic."""
    k_actor, k_value, k_critic = jax.random.split(key, 3)
    actor = GaussianActor(k_actor, obs_dim, obs_dim, action_dim, cfg.actor_hidden_dims, const_std=cfg.const_std)
    value = GCValue(k_value, 2 * obs_dim, cfg.value_hidden_dims, layer_norm=cfg.layer_norm, ensemble=1)
    critic = GCValue(k_critic, 2 * obs_dim + action_dim, cfg.value_hidden_dims, layer_norm=cfg.layer_norm, ensemble=2)
    return Agent(actor=actor, value=value, critic=critic, target_critic=critic)


def value_loss(agent: Agent, batch: Batch, cfg: Config) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """Expectile regression of V(s, g) on the min of the target Q's."""
    q1, q2 = jax.lax.stop_gradient(agent.target_critic)(batch.observations, batch.value_goals, batch.actions)
    q = jnp.minimum(q1, q2)
    v = agent.value(batch.observations, batch.value_goals)
    loss = expectile_loss(q - v, q - v, cfg.expectile).mean()
    return loss, {"value_loss": loss, "v_mean": v.mean(), "v_max": v.max(), "v_min": v.min()}


def critic_loss(agent: Agent, batch: Batch, cfg: Config) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """TD regression of both Q heads on ``r + gamma * m * sg(V(s', g))``."""
    next_v = jax.lax.stop_gradient(agent.value)(batch.next_observations, batch.value_goals)
    q = batch.rewards + cfg.discount * batch.masks * next_v
    q1, q2 = agent.critic(batch.observations, batch.value_goals, batch.actions)
    loss = ((q1 - q) ** 2 + (q2 - q) ** 2).mean()
    return loss, {"critic_loss": loss, "q_mean": q.mean(), "q_max": q.max(), "q_min": q.min()}


def actor_loss(
    agent: Agent, batch: Batch, key: PRNGKeyArray, cfg: Config
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """DDPG+BC or AWR policy extraction (see the module docstring)."""
    obs, goals = batch.observations, batch.actor_goals
    critic = jax.lax.stop_gradient(agent.critic)
    mean, std = agent.actor(obs, goals)
    log_prob = gaussian_log_prob(mean, std, batch.actions)
    if cfg.actor_loss == "awr":
        v = jax.lax.stop_gradient(agent.value)(obs, goals)
        q1, q2 = critic(obs, goals, batch.actions)
        adv = jnp.minimum(q1, q2) - v
        loss = -(awr_weights(adv, cfg.alpha) * log_prob).mean()
        return loss, {"actor_loss": loss, "adv": adv.mean(), **actor_metrics(mean, std, batch.actions, log_prob)}

    def q_fn(q_actions):
        q1, q2 = critic(obs, goals, q_actions)
        return jnp.minimum(q1, q2)

    return ddpgbc_actor_loss(q_fn, mean, std, batch.actions, log_prob, key, cfg.alpha, cfg.const_std)


def loss(
    agent: Agent, batch: Batch, key: PRNGKeyArray, cfg: Config
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """``value + critic + actor``; ``key`` drives the DDPG+BC action sample when the std is learned."""
    v_loss, v_info = value_loss(agent, batch, cfg)
    c_loss, c_info = critic_loss(agent, batch, cfg)
    a_loss, a_info = actor_loss(agent, batch, key, cfg)
    info = {**prefixed("value", v_info), **prefixed("critic", c_info), **prefixed("actor", a_info)}
    return v_loss + c_loss + a_loss, info


def target_update(agent: Agent, cfg: Config) -> Agent:
    """``target_critic <- tau * critic + (1 - tau) * target_critic``."""
    return eqx.tree_at(lambda a: a.target_critic, agent, polyak(agent.critic, agent.target_critic, cfg.tau))


act = act_actor


def value(agent: Agent, obs: Float[Array, "*batch obs"], goal: Float[Array, "*batch obs"]) -> Float[Array, "*batch"]:
    """``V(s, g)``."""
    return agent.value(obs, goal)


has_value = always_has_value


def frozen(cfg: Config) -> tuple[str, ...]:
    """Fields without a gradient under ``loss``: the target network (moved by ``target_update`` only)."""
    return ("target_critic",)


BACKBONE = make_backbone(globals())


def ogbench_leaves(agent: Agent) -> list[Leaf]:
    """OGBench's GC-IQL: `modules_actor`, and `value_net` MLPs under `modules_value` / `_critic` / `_target_critic`."""
    return [
        *actor_leaves(agent.actor, ("modules_actor",), lambda a: a.actor),
        *mlp_leaves(agent.value.net, ("modules_value", "value_net"), lambda a: a.value.net),
        *mlp_leaves(agent.critic.net, ("modules_critic", "value_net"), lambda a: a.critic.net),
        *mlp_leaves(agent.target_critic.net, ("modules_target_critic", "value_net"), lambda a: a.target_critic.net),
    ]


def ogbench_sizes(params: FlaxTree, where: str, actor_in: int, action_dim: int) -> dict[str, Any]:
    """The observation size, and `value_hidden_dims` / `layer_norm`, which the value and the critic must share."""
    obs_dim = obs_from_actor(actor_in, where)
    v_dims, v_in, v_ln = widths(get_path(params, ("modules_value", "value_net")), where, "modules_value")
    q_dims, q_in, q_ln = widths(get_path(params, ("modules_critic", "value_net")), where, "modules_critic")
    if v_dims != q_dims or v_ln != q_ln:
        raise TttError(f"{where}: the value's hidden widths {v_dims[:-1]} (layer norm {v_ln}) and the critic's "
                       f"{q_dims[:-1]} (layer norm {q_ln}) disagree; the reference builds both from "
                       "value_hidden_dims")  # fmt: skip
    if v_in != 2 * obs_dim or q_in != v_in + action_dim:
        raise TttError(f"{where}: the value's input width {v_in} / critic's {q_in} do not fit observation "
                       f"{obs_dim} and action {action_dim}")  # fmt: skip
    return dict(obs_dim=obs_dim, value_hidden_dims=v_dims[:-1], layer_norm=v_ln)


def ogbench_preset(cfg: Config) -> str:
    """`gciql-awr` for the AWR actor, else `gciql`."""
    return "gciql-awr" if cfg.actor_loss == "awr" else NAME


OGBENCH = OgbenchLayout(
    name=NAME,
    networks=frozenset({"actor", "value", "critic", "target_critic"}),
    leaves=ogbench_leaves,
    sizes=ogbench_sizes,
    config=dict(lr=3e-4, batch_size=1024, discount=0.99, tau=0.005, expectile=0.9, actor_loss="ddpgbc", alpha=0.3,
                const_std=True),
    preset=ogbench_preset,
)  # fmt: skip
"""GC-IQL in OGBench's checkpoint format (`impls/agents/gciql.py`; `ttt.interop`)."""
