"""Goal-conditioned behaviour cloning (OGBench ``impls/agents/gcbc.py``), optionally with a selection critic.

The actor maximises ``log pi(a | s, g_actor)``. With ``Config(with_critic=True)`` a goal-conditioned
IQL-style value is trained beside it, exactly as OGBench's GCIVL value: twin V heads with a Polyak target,
expectile regression of ``r + gamma * m * V_target(s', g)`` (the advantage from the target heads, as GCIVL
does). It never touches the actor; it exists only for GC-TTT's data selection (``value``).
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from ttt.agents.common import act_actor, actor_metrics, expectile_loss, make_backbone, polyak, prefixed, tuple_field
from ttt.agents.ogbench_layout import Leaf, OgbenchLayout, actor_leaves, actor_only_sizes
from ttt.data.batch import Batch
from ttt.errors import TttError
from ttt.nets import GaussianActor, GCValue, gaussian_log_prob

NAME = "gcbc"


@dataclasses.dataclass(frozen=True)
class Config:
    """GC-BC hyper-parameters (OGBench defaults); the value fields only matter with ``with_critic``."""

    lr: float = 3e-4
    batch_size: int = 1024
    actor_hidden_dims: tuple[int, ...] = (512, 512, 512)
    discount: float = 0.99
    const_std: bool = True
    with_critic: bool = False
    value_hidden_dims: tuple[int, ...] = (512, 512, 512)
    layer_norm: bool = True
    tau: float = 0.005
    expectile: float = 0.9

    def __post_init__(self):
        tuple_field(self, "actor_hidden_dims", "value_hidden_dims")


class Agent(eqx.Module):
    """GC-BC networks; ``value``/``target_value`` are twin-head ``GCValue``s or None without a critic."""

    actor: GaussianActor
    value: GCValue | None
    target_value: GCValue | None


def init(key: PRNGKeyArray, obs_dim: int, action_dim: int, cfg: Config) -> Agent:
    """Build the actor (and, with ``with_critic``, the value with its target as an exact copy)."""
    k_actor, k_value = jax.random.split(key)
    actor = GaussianActor(k_actor, obs_dim, obs_dim, action_dim, cfg.actor_hidden_dims, const_std=cfg.const_std)
    value = None
    if cfg.with_critic:
        value = GCValue(k_value, 2 * obs_dim, cfg.value_hidden_dims, layer_norm=cfg.layer_norm, ensemble=2)
    return Agent(actor=actor, value=value, target_value=value)


def actor_loss(agent: Agent, batch: Batch) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """Negative mean log-likelihood of the dataset actions."""
    mean, std = agent.actor(batch.observations, batch.actor_goals)
    log_prob = gaussian_log_prob(mean, std, batch.actions)
    loss = -log_prob.mean()
    return loss, {"actor_loss": loss, **actor_metrics(mean, std, batch.actions, log_prob)}


def value_loss(agent: Agent, batch: Batch, cfg: Config) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """OGBench's GCIVL value loss on the twin value heads (target heads under stop-gradient)."""
    target = jax.lax.stop_gradient(agent.target_value)
    next_v1_t, next_v2_t = target(batch.next_observations, batch.value_goals)
    not_done = cfg.discount * batch.masks
    q = batch.rewards + not_done * jnp.minimum(next_v1_t, next_v2_t)
    v1_t, v2_t = target(batch.observations, batch.value_goals)
    adv = q - (v1_t + v2_t) / 2
    q1 = batch.rewards + not_done * next_v1_t
    q2 = batch.rewards + not_done * next_v2_t
    v1, v2 = agent.value(batch.observations, batch.value_goals)
    v = (v1 + v2) / 2
    loss = expectile_loss(adv, q1 - v1, cfg.expectile).mean() + expectile_loss(adv, q2 - v2, cfg.expectile).mean()
    return loss, {"value_loss": loss, "v_mean": v.mean(), "v_max": v.max(), "v_min": v.min()}


def loss(
    agent: Agent, batch: Batch, key: PRNGKeyArray, cfg: Config
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """BC actor loss, plus the GCIVL value loss when ``with_critic``. ``key`` is unused (deterministic)."""
    del key
    total, a_info = actor_loss(agent, batch)
    info = prefixed("actor", a_info)
    if cfg.with_critic:
        v_loss, v_info = value_loss(agent, batch, cfg)
        total = total + v_loss
        info.update(prefixed("value", v_info))
    return total, info


def target_update(agent: Agent, cfg: Config) -> Agent:
    """Polyak-average the value target (identity without a critic)."""
    if not cfg.with_critic:
        return agent
    return eqx.tree_at(lambda a: a.target_value, agent, polyak(agent.value, agent.target_value, cfg.tau))


act = act_actor


def ttt_config(cfg: Config) -> Config:
    """Test-time training's config: the actor loss only. The critic serves data selection, which happens once
    per round BEFORE fine-tuning (and the next round resets), and the BC actor's gradient never involves it, so
    fine-tuning it would change no action; dropping it leaves the fine-tuned actor identical."""
    return dataclasses.replace(cfg, with_critic=False)


TTT_CONFIG = ttt_config


def frozen(cfg: Config) -> tuple[str, ...]:
    """Fields without a gradient under ``loss(cfg)``: the target heads, and the whole critic without ``with_critic``."""
    return ("target_value",) if cfg.with_critic else ("value", "target_value")


def value(agent: Agent, obs: Float[Array, "*batch obs"], goal: Float[Array, "*batch obs"]) -> Float[Array, "*batch"]:
    """Mean of the two value heads ``V(s, g)`` (as GCIVL's actor uses them); needs ``with_critic``."""
    if agent.value is None:
        raise TttError("gcbc has no value function: build it with Config(with_critic=True) or select critic-free")
    v1, v2 = agent.value(obs, goal)
    return (v1 + v2) / 2


def has_value(cfg: Config) -> bool:
    """Whether ``value`` is available."""
    return cfg.with_critic


BACKBONE = make_backbone(globals())


def ogbench_leaves(agent: Agent) -> list[Leaf]:
    """OGBench's GC-BC saves the actor alone (`modules_actor`); the selection critic has no place there."""
    return actor_leaves(agent.actor, ("modules_actor",), lambda a: a.actor)


OGBENCH = OgbenchLayout(
    name=NAME,
    networks=frozenset({"actor"}),
    leaves=ogbench_leaves,
    sizes=actor_only_sizes,
    config=dict(lr=3e-4, batch_size=1024, discount=0.99, const_std=True, with_critic=False),
)
"""GC-BC in OGBench's checkpoint format (`impls/agents/gcbc.py`; `ttt.interop`): imported without a critic."""
