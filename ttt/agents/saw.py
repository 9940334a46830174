"""Subgoal advantage-weighted policy bootstrapping (SAW; Zhou & Kao 2025, "Flattening Hierarchies with Policy
Bootstrapping"), following the authors' reference ``impls/agents/saw.py`` (a fork of OGBench).

Networks (state-based, ``share_goal_rep=False`` as in the reference's state-based runs):

- ``value``: twin V heads on ``[s, phi_v([s, g])]`` where ``phi_v`` is HIQL's goal representation, an MLP
  ``value_hidden_dims -> rep_dim`` (LayerNorm) whose output is length-normalised to norm ``sqrt(rep_dim)``;
  ``target_value`` is the Polyak copy of the twin heads only: the target value reads the ONLINE goal representation
  (under stop-gradient), as the reference does (one ``goal_rep`` module serves ``value`` and ``target_value``;
  ``target_update`` averages ``modules_value``, which holds the heads);
- ``low_actor``: Gaussian ``pi_low(a | s, w)`` on the raw ``[s, w]``;
- ``actor``: the flat Gaussian ``pi(a | s, g)`` on ``[s, phi_a([s, g])]`` with its own goal representation.

The whole loss is ``value + low_actor + actor + waypoint`` (V is the mean of the twin heads under stop-gradient
in every advantage):

- value (GCIVL): ``sum_i expectile(adv, q_i - V_i)`` with ``q_i = r + gamma * m * V_target_i(s', g)`` and
  ``adv = r + gamma * m * min_i V_target_i(s', g) - mean_i V_target_i(s, g)``;
- low actor: ``-mean(min(exp(low_alpha * (V(s', w_low) - V(s, w_low))), 100) * log pi_low(a | s, w_low))``
  with ``w_low = s_{min(t + k, final)}``;
- actor: ``-mean(min(exp(awr_alpha * (V(s', g) - V(s, g))), 100) * log pi(a | s, g))``;
- waypoint: ``mean(min(exp(kl_alpha * (V(w, g) - V(s, g))), 100) * D)`` with ``w`` the waypoint (the row
  ``k`` steps ahead, never past the actor goal when that lies ahead in the same trajectory) and ``D`` =
  ``||mu(s, g) - sg(mu_low(s, w))||^2`` (``const_std``) else ``KL(sg(pi_low(. | s, w)) || pi(. | s, g))``.

SAW's loss needs the waypoints, so it takes a ``SawBatch`` (a ``Batch`` plus waypoint observations); build one
with ``make_saw_batch`` / ``sample_saw_batch`` or the generic ``BATCH_FN``; ``with_actor_goal`` fixes the actor goal
for test-time training.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, Key, PRNGKeyArray

from ttt.agents.common import (
    act_actor,
    actor_metrics,
    always_has_value,
    awr_weights,
    expectile_loss,
    make_backbone,
    polyak,
    prefixed,
    set_actor_goal,
    tuple_field,
)
from ttt.agents.ogbench_layout import (
    FlaxTree,
    Leaf,
    OgbenchLayout,
    actor_leaves,
    get_path,
    mlp_leaves,
    widths,
)
from ttt.data.batch import Batch
from ttt.data.dataset import Dataset
from ttt.data.sampler import SamplerConfig, make_batch, sample_rows, traj_final
from ttt.errors import TttError
from ttt.nets import MLP, GaussianActor, GCValue, gaussian_log_prob

NAME = "saw"

Metrics = dict[str, Float[Array, ""]]


@dataclasses.dataclass(frozen=True)
class Config:
    """SAW hyper-parameters (the reference's ``get_config`` defaults).

    Per-environment settings from the reference's ``hyperparameters.sh``: cube-single ``kl_alpha=0.3,
    subgoal_steps=10, expectile=0.9``; cube-double/triple and scene ``kl_alpha=1.0, subgoal_steps=10``;
    humanoidmaze ``discount=0.995, subgoal_steps=100``; giant mazes ``discount=0.995``.
    """

    lr: float = 3e-4
    batch_size: int = 1024
    low_actor_hidden_dims: tuple[int, ...] = (512, 512, 512)
    actor_hidden_dims: tuple[int, ...] = (512, 512, 512)
    value_hidden_dims: tuple[int, ...] = (512, 512, 512)
    layer_norm: bool = True
    discount: float = 0.99
    tau: float = 0.005
    expectile: float = 0.7
    low_alpha: float = 3.0
    awr_alpha: float = 3.0
    kl_alpha: float = 3.0
    subgoal_steps: int = 25
    const_std: bool = True
    rep_dim: int = 10

    def __post_init__(self):
        tuple_field(self, "low_actor_hidden_dims", "actor_hidden_dims", "value_hidden_dims")
        if self.subgoal_steps < 1:
            raise ValueError(f"Config.subgoal_steps must be >= 1, got {self.subgoal_steps}")


# ----------------------------------------------------------------------------------------------------------------
# Batches


class SawBatch(eqx.Module):
    """A goal-conditioned ``Batch`` plus SAW's waypoints (HIQL's ``HGCDataset`` fields).

    ``low_goals`` (``low_actor_goals``): the row ``min(idx + k, final)``, the low actor's goal;
    ``waypoints`` (``high_actor_targets``): the flat actor's waypoint ``w`` for its goal ``actor_goals``:
    ``min(idx + k, actor_goal_idx)`` when the actor goal lies ahead in the same episode, else ``min(idx + k, final)``.
    ``final`` is the last valid row of the episode (OGBench's ``final_state_idx``).
    """

    base: Batch
    low_goals: Float[Array, "batch obs"]
    waypoints: Float[Array, "batch obs"]
    low_goal_idxs: Int[Array, " batch"]
    waypoint_idxs: Int[Array, " batch"]


def waypoint_rows(
    data: Dataset, idxs: Int[Array, " batch"], actor_goal_idxs: Int[Array, " batch"], subgoal_steps: int
) -> tuple[Int[Array, " batch"], Int[Array, " batch"]]:
    """``(low_goal_idxs, waypoint_idxs)`` for rows ``idxs`` (see ``SawBatch``)."""
    idxs = idxs.astype(jnp.int32)
    goals = actor_goal_idxs.astype(jnp.int32)
    final = traj_final(data, idxs)
    low = idxs + jnp.minimum(subgoal_steps, final - idxs)  # == min(idx + k, final)
    ahead = (data.ep_id[goals] == data.ep_id[idxs]) & (goals >= idxs)
    way = jnp.where(ahead, idxs + jnp.minimum(subgoal_steps, goals - idxs), low)
    return low, way


def make_saw_batch(
    key: Key[Array, ""], data: Dataset, idxs: Int[Array, " batch"], sampler_cfg: SamplerConfig, subgoal_steps: int
) -> SawBatch:
    """``make_batch`` for the rows ``idxs`` plus their waypoints (HIQL's ``HGCDataset.sample`` for given rows)."""
    base = make_batch(key, data, idxs, sampler_cfg)
    low, way = waypoint_rows(data, base.idxs, base.actor_goal_idxs, subgoal_steps)
    return SawBatch(
        base=base,
        low_goals=data.observations[low],
        waypoints=data.observations[way],
        low_goal_idxs=low,
        waypoint_idxs=way,
    )


def sample_saw_batch(key: Key[Array, ""], data: Dataset, sampler_cfg: SamplerConfig, subgoal_steps: int) -> SawBatch:
    """``sampler_cfg.batch_size`` uniform valid rows and their SAW batch."""
    k_rows, k_goals = jax.random.split(key)
    return make_saw_batch(k_goals, data, sample_rows(k_rows, data, sampler_cfg.batch_size), sampler_cfg, subgoal_steps)


def batch_fn(
    key: Key[Array, ""], data: Dataset, idxs: Int[Array, " batch"], sampler_cfg: SamplerConfig, cfg: Config
) -> SawBatch:
    """The generic trainer's batch builder: ``make_saw_batch`` with ``cfg.subgoal_steps``."""
    return make_saw_batch(key, data, idxs, sampler_cfg, cfg.subgoal_steps)


BATCH_FN = batch_fn


def with_actor_goal(batch: SawBatch, goal: Float[Array, " obs"], rows: Bool[Array, " batch"] | None = None) -> SawBatch:
    """The batch with the actor goal of ``rows`` (default: every row) replaced by ``goal`` (TTT's fixed ``g*``).

    ``g*`` is no row of the rows' trajectories, so their waypoint falls back to the low goal ``min(idx + k, final)``,
    as the reference does for random actor goals; their ``actor_goal_idxs`` becomes -1 (no row).
    """
    n = batch.base.observations.shape[0]
    rows = jnp.ones((n,), bool) if rows is None else rows
    base = set_actor_goal(batch.base, goal, rows)
    return SawBatch(
        base=base,
        low_goals=batch.low_goals,
        waypoints=jnp.where(rows[:, None], batch.low_goals, batch.waypoints),
        low_goal_idxs=batch.low_goal_idxs,
        waypoint_idxs=jnp.where(rows, batch.low_goal_idxs, batch.waypoint_idxs),
    )


WITH_ACTOR_GOAL = with_actor_goal


# ----------------------------------------------------------------------------------------------------------------
# Networks


def length_normalize(x: Float[Array, "*batch d"]) -> Float[Array, "*batch d"]:
    """``x / ||x|| * sqrt(d)`` over the last axis (the reference's ``LengthNormalize``)."""
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True) * math.sqrt(x.shape[-1])


class GoalRep(eqx.Module):
    """HIQL's goal representation ``phi([s, g])``: an MLP (LayerNorm in hidden layers), length-normalised."""

    net: MLP

    def __init__(self, key: PRNGKeyArray, obs_dim: int, hidden_dims: Sequence[int], rep_dim: int, layer_norm: bool):
        self.net = MLP(key, 2 * obs_dim, (*tuple(hidden_dims), rep_dim), activate_final=False, layer_norm=layer_norm)

    def __call__(self, obs: Float[Array, "*batch obs"], goal: Float[Array, "*batch obs"]) -> Float[Array, "*batch rep"]:
        return length_normalize(self.net(jnp.concatenate([obs, goal], axis=-1)))


class SawValue(eqx.Module):
    """Twin ``V(s, g)`` heads on ``[s, phi([s, g])]``; returns ``(2, *batch)``."""

    goal_rep: GoalRep
    heads: GCValue

    def __init__(self, key: PRNGKeyArray, obs_dim: int, hidden_dims: Sequence[int], rep_dim: int, layer_norm: bool):
        k_rep, k_heads = jax.random.split(key)
        self.goal_rep = GoalRep(k_rep, obs_dim, hidden_dims, rep_dim, layer_norm)
        self.heads = GCValue(k_heads, obs_dim + rep_dim, hidden_dims, layer_norm=layer_norm, ensemble=2)

    def __call__(self, obs: Float[Array, "*batch obs"], goal: Float[Array, "*batch obs"]) -> Float[Array, "ens ..."]:
        return self.heads(obs, self.goal_rep(obs, goal))


class SawActor(eqx.Module):
    """The flat actor: a Gaussian on ``[s, phi_a([s, g])]`` (own goal representation)."""

    goal_rep: GoalRep
    policy: GaussianActor

    def __init__(
        self,
        key: PRNGKeyArray,
        obs_dim: int,
        action_dim: int,
        hidden_dims: Sequence[int],
        rep_hidden_dims: Sequence[int],
        rep_dim: int,
        layer_norm: bool,
        const_std: bool,
    ):
        k_rep, k_pol = jax.random.split(key)
        self.goal_rep = GoalRep(k_rep, obs_dim, rep_hidden_dims, rep_dim, layer_norm)
        self.policy = GaussianActor(k_pol, obs_dim, rep_dim, action_dim, hidden_dims, const_std=const_std)

    def __call__(
        self, obs: Float[Array, "*batch obs"], goal: Float[Array, "*batch obs"]
    ) -> tuple[Float[Array, "*batch act"], Float[Array, "*batch act"]]:
        """Mean and standard deviation."""
        return self.policy(obs, self.goal_rep(obs, goal))

    def sample(
        self,
        obs: Float[Array, "*batch obs"],
        goal: Float[Array, "*batch obs"],
        key: PRNGKeyArray,
        temperature: float | Float[Array, ""] = 1.0,
    ) -> Float[Array, "*batch act"]:
        """Reparameterised sample, std scaled by ``temperature``; not clipped."""
        return self.policy.sample(obs, self.goal_rep(obs, goal), key, temperature)


class Agent(eqx.Module):
    """SAW networks: twin ``value``, the Polyak ``target_value`` of its heads (on the online goal representation),
    the flat ``actor``, the ``low_actor``."""

    value: SawValue
    target_value: GCValue
    actor: SawActor
    low_actor: GaussianActor


def init(key: PRNGKeyArray, obs_dim: int, action_dim: int, cfg: Config) -> Agent:
    """Build all networks; the target value starts as an exact copy of the value."""
    k_value, k_actor, k_low = jax.random.split(key, 3)
    value_net = SawValue(k_value, obs_dim, cfg.value_hidden_dims, cfg.rep_dim, cfg.layer_norm)
    actor = SawActor(
        k_actor,
        obs_dim,
        action_dim,
        cfg.actor_hidden_dims,
        cfg.value_hidden_dims,
        cfg.rep_dim,
        cfg.layer_norm,
        cfg.const_std,
    )
    low_actor = GaussianActor(k_low, obs_dim, obs_dim, action_dim, cfg.low_actor_hidden_dims, const_std=cfg.const_std)
    return Agent(value=value_net, target_value=value_net.heads, actor=actor, low_actor=low_actor)


def target_values(agent: Agent, obs: Float[Array, "*batch obs"], goal: Float[Array, "*batch obs"]) -> Array:
    """The target value's twin heads ``(2, *batch)`` on ``[s, phi_v([s, g])]`` with the online goal representation,
    all under stop-gradient (the reference's ``network.select('target_value')`` without ``grad_params``)."""
    rep = jax.lax.stop_gradient(agent.value.goal_rep)(obs, goal)
    return jax.lax.stop_gradient(agent.target_value)(obs, rep)


# ----------------------------------------------------------------------------------------------------------------
# Losses


def value_loss(agent: Agent, batch: Batch, cfg: Config) -> tuple[Float[Array, ""], Metrics]:
    """GCIVL's value loss: advantage from the target heads, differences from each online head."""
    n = batch.observations.shape[0]
    obs2 = jnp.concatenate([batch.next_observations, batch.observations])
    v_t = target_values(agent, obs2, jnp.concatenate([batch.value_goals, batch.value_goals]))
    (next_v1_t, next_v2_t), (v1_t, v2_t) = v_t[:, :n], v_t[:, n:]
    not_done = cfg.discount * batch.masks
    q = batch.rewards + not_done * jnp.minimum(next_v1_t, next_v2_t)
    adv = q - (v1_t + v2_t) / 2
    q1 = batch.rewards + not_done * next_v1_t
    q2 = batch.rewards + not_done * next_v2_t
    v1, v2 = agent.value(batch.observations, batch.value_goals)
    v = (v1 + v2) / 2
    loss = expectile_loss(adv, q1 - v1, cfg.expectile).mean() + expectile_loss(adv, q2 - v2, cfg.expectile).mean()
    return loss, {"value_loss": loss, "v_mean": v.mean(), "v_max": v.max(), "v_min": v.min()}


def gaussian_kl(
    mean_p: Float[Array, "*batch act"],
    std_p: Float[Array, "*batch act"],
    mean_q: Float[Array, "*batch act"],
    std_q: Float[Array, "*batch act"],
) -> Float[Array, "*batch"]:
    """``KL(N(mean_p, std_p) || N(mean_q, std_q))`` for diagonal Gaussians, summed over the last axis."""
    var_ratio = (std_p / std_q) ** 2
    return 0.5 * jnp.sum(var_ratio + ((mean_p - mean_q) / std_q) ** 2 - 1.0 - jnp.log(var_ratio), axis=-1)


def actor_losses(agent: Agent, batch: SawBatch, cfg: Config) -> dict[str, tuple[Float[Array, ""], Metrics]]:
    """The three policy terms ``{"low_actor", "actor", "waypoint": (loss, metrics)}`` (module docstring).

    Every V they need comes from one stacked pass of the (stopped) twin heads, and both low-actor inputs from one
    pass of ``low_actor`` (the waypoint half stopped): fewer, larger matmuls and a smaller program.
    """
    b, w_low, w = batch.base, batch.low_goals, batch.waypoints
    s, s_next, g, a = b.observations, b.next_observations, b.actor_goals, b.actions
    n = s.shape[0]
    v = jax.lax.stop_gradient(agent.value)(
        jnp.concatenate([s, s_next, s, s_next, w]), jnp.concatenate([w_low, w_low, g, g, g])
    ).mean(axis=0)
    v_s_low, v_next_low, v_s, v_next, v_w = (v[i * n : (i + 1) * n] for i in range(5))

    # Low actor: AWR on V(s', w_low) - V(s, w_low).
    low_mean, low_std = agent.low_actor(jnp.concatenate([s, s]), jnp.concatenate([w_low, w]))
    l_mean, l_std = low_mean[:n], low_std[:n]
    w_mean, w_std = jax.lax.stop_gradient((low_mean[n:], low_std[n:]))
    adv_low = v_next_low - v_s_low
    l_log_prob = gaussian_log_prob(l_mean, l_std, a)
    l_loss = -(awr_weights(adv_low, cfg.low_alpha) * l_log_prob).mean()

    # Flat actor: one-step AWR on V(s', g) - V(s, g).
    mean, std = agent.actor(s, g)
    adv = v_next - v_s
    log_prob = gaussian_log_prob(mean, std, a)
    a_loss = -(awr_weights(adv, cfg.awr_alpha) * log_prob).mean()

    # Waypoint bootstrapping, weighted by V(w, g) - V(s, g).
    wadv = v_w - v_s
    kld = jnp.sum((mean - w_mean) ** 2, axis=-1) if cfg.const_std else gaussian_kl(w_mean, w_std, mean, std)
    w_loss = (awr_weights(wadv, cfg.kl_alpha) * kld).mean()

    return {
        "low_actor": (
            l_loss,
            {"actor_loss": l_loss, "adv": adv_low.mean(), **actor_metrics(l_mean, l_std, a, l_log_prob)},
        ),
        "actor": (a_loss, {"awr_loss": a_loss, "adv": adv.mean(), **actor_metrics(mean, std, a, log_prob)}),
        "waypoint": (w_loss, {"waypoint_loss": w_loss, "kld": kld.mean(), "wadv": wadv.mean()}),
    }


def loss(agent: Agent, batch: SawBatch, key: PRNGKeyArray, cfg: Config) -> tuple[Float[Array, ""], Metrics]:
    """``value + low_actor + actor + waypoint`` (deterministic: ``key`` is unused)."""
    del key
    v_loss, v_info = value_loss(agent, batch.base, cfg)
    terms = actor_losses(agent, batch, cfg)
    info = prefixed("value", v_info)
    for name, (_, term_info) in terms.items():
        info.update(prefixed(name, term_info))
    return v_loss + sum(t[0] for t in terms.values()), info


def target_update(agent: Agent, cfg: Config) -> Agent:
    """``target_value <- tau * value.heads + (1 - tau) * target_value`` (the heads; the goal representation is
    shared, as the reference's)."""
    return eqx.tree_at(lambda a: a.target_value, agent, polyak(agent.value.heads, agent.target_value, cfg.tau))


act = act_actor  # the flat actor


def value(agent: Agent, obs: Float[Array, "*batch obs"], goal: Float[Array, "*batch obs"]) -> Float[Array, "*batch"]:
    """``V(s, g)``: the mean of the online twin heads (as in every SAW advantage)."""
    return agent.value(obs, goal).mean(axis=0)


has_value = always_has_value


def frozen(cfg: Config) -> tuple[str, ...]:
    """Fields without a gradient under ``loss``: the target network (moved by ``target_update`` only)."""
    return ("target_value",)


ACTORS = ("actor", "low_actor")  # the high-level (subgoal) actor and the low-level actor that acts

BACKBONE = make_backbone(globals())


def ogbench_leaves(agent: Agent) -> list[Leaf]:
    """The authors' SAW (`agents/saw.py`, `share_goal_rep=False`): the value's goal representation `phi_v` is one
    module, `modules_goal_rep` (an `nn.Sequential` whose MLP is `layers_0`), that the value and the target value
    both read; `modules_value` / `modules_target_value` hold the twin heads; the flat actor's own representation is
    `modules_actor_goal_rep_def`; the low actor is a plain `GCActor`."""
    return [
        *mlp_leaves(agent.value.goal_rep.net, ("modules_goal_rep", "layers_0"), lambda a: a.value.goal_rep.net),
        *mlp_leaves(agent.value.heads.net, ("modules_value", "value_net"), lambda a: a.value.heads.net),
        *mlp_leaves(agent.target_value.net, ("modules_target_value", "value_net"), lambda a: a.target_value.net),
        *mlp_leaves(agent.actor.goal_rep.net, ("modules_actor_goal_rep_def", "layers_0"),
                    lambda a: a.actor.goal_rep.net),
        *actor_leaves(agent.actor.policy, ("modules_actor",), lambda a: a.actor.policy),
        *actor_leaves(agent.low_actor, ("modules_low_actor",), lambda a: a.low_actor),
    ]  # fmt: skip


def ogbench_sizes(params: FlaxTree, where: str, actor_in: int, action_dim: int) -> dict[str, Any]:
    """The observation size and `rep_dim` / `layer_norm` from the goal representation on `[s, g]` (whose hidden
    widths the value heads share), `value_hidden_dims`, and `low_actor_hidden_dims`."""
    del actor_in, action_dim
    rep = get_path(params, ("modules_goal_rep", "layers_0"))
    r_dims, r_in, r_ln = widths(rep, where, "modules_goal_rep")
    v_dims, _, _ = widths(get_path(params, ("modules_value", "value_net")), where, "modules_value")
    low = get_path(params, ("modules_low_actor", "actor_net"))
    low_dims, _, _ = widths(low, where, "modules_low_actor/actor_net")
    if r_dims[:-1] != v_dims[:-1]:
        raise TttError(f"{where}: the goal representation's widths {r_dims[:-1]} and the value's {v_dims[:-1]} "
                       "disagree; the reference builds both from value_hidden_dims")  # fmt: skip
    if r_in % 2:
        raise TttError(f"{where}: the goal representation's input width {r_in} is not observation + goal")
    return dict(obs_dim=r_in // 2, value_hidden_dims=v_dims[:-1], rep_dim=r_dims[-1], layer_norm=r_ln,
                low_actor_hidden_dims=low_dims)  # fmt: skip


OGBENCH = OgbenchLayout(
    name=NAME,
    networks=frozenset({"actor", "low_actor", "value", "target_value", "goal_rep", "actor_goal_rep_def"}),
    leaves=ogbench_leaves,
    sizes=ogbench_sizes,
    config=dict(lr=3e-4, batch_size=1024, discount=0.99, tau=0.005, expectile=0.7, low_alpha=3.0, awr_alpha=3.0,
                kl_alpha=3.0, subgoal_steps=25, const_std=True),
    dropped={"actor_loss": "default"},  # the reference SAW's only actor loss
)  # fmt: skip
"""SAW in the authors' checkpoint format (their `agents/saw.py`, a fork of OGBench; `ttt.interop`)."""
