"""Pieces shared by the backbones: the backbone record, expectile loss, Polyak averaging, acting."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, PRNGKeyArray, PyTree

from ttt.data.sampler import make_batch
from ttt.errors import TttError
from ttt.nets import GaussianActor

ACTOR_LOSSES = ("ddpgbc", "awr")


@dataclasses.dataclass(frozen=True)
class Backbone:
    """One backbone's pure functions, all with the same signatures across backbones.

    - ``Config``: frozen, hashable dataclass of static hyper-parameters (OGBench defaults).
    - ``init(key, obs_dim, action_dim, cfg) -> agent``: every network, target networks included.
    - ``loss(agent, batch, key, cfg) -> (scalar, metrics)``: the backbone's whole loss.
    - ``target_update(agent, cfg) -> agent``: Polyak averaging (identity without targets).
    - ``act(agent, obs, goal, key, temperature) -> action`` in ``[-1, 1]`` (temperature 0: the mean).
    - ``value(agent, obs, goal) -> values``: the goal-conditioned value used for data selection.
    - ``has_value(cfg) -> bool``: whether ``value`` is available under ``cfg``.
    - ``batch_fn(key, data, idxs, sampler_cfg, cfg) -> batch``: the batch ``loss`` consumes for rows ``idxs``
      (default: the goal-conditioned ``Batch``; SAW adds waypoints).
    - ``with_actor_goal(batch, goal, rows) -> batch``: the batch with the actor goal of the rows where ``rows`` is
      True replaced by ``goal`` (test-time training's fixed ``g*``).
    - ``ttt_config(cfg) -> cfg``: the config whose loss test-time training needs to optimise: parts of the loss
      that cannot change any action after selection may be dropped (GC-BC's selection-only critic); identity
      by default.
    - ``frozen(cfg) -> tuple[str, ...]``: the agent's fields that ``loss(cfg)`` never differentiates (target
      networks, a critic the config leaves out of the loss); their Adam updates are exactly zero, so fine-tuning
      leaves them out of the optimiser. None by default.
    - ``actors``: the agent's fields that act (the policy networks); fine-tuning with ``FinetuneConfig.train =
      'actor'`` moves only these. ``("actor",)`` by default.
    """

    name: str
    Config: type
    init: Callable[..., Any]
    loss: Callable[..., tuple[Float[Array, ""], dict[str, Float[Array, ""]]]]
    target_update: Callable[..., Any]
    act: Callable[..., Float[Array, "*batch act"]]
    value: Callable[..., Float[Array, "*batch"]]
    has_value: Callable[[Any], bool]
    batch_fn: Callable[..., Any]
    with_actor_goal: Callable[..., Any]
    ttt_config: Callable[[Any], Any]
    frozen: Callable[[Any], tuple[str, ...]] = lambda cfg: ()  # noqa: E731
    actors: tuple[str, ...] = ("actor",)


def default_batch_fn(key: PRNGKeyArray, data: Any, idxs: Any, sampler_cfg: Any, cfg: Any) -> Any:
    """The plain goal-conditioned batch (OGBench's ``GCDataset.sample``) for rows ``idxs``."""
    del cfg
    return make_batch(key, data, idxs, sampler_cfg)


def set_actor_goal(batch: Any, goal: Float[Array, " obs"], rows: Bool[Array, " batch"] | None = None) -> Any:
    """``batch`` (a ``Batch``) with ``actor_goals`` set to ``goal`` where ``rows`` (default: every row) and
    ``actor_goal_idxs`` set to -1 there (``g*`` is no dataset row)."""
    n = batch.observations.shape[0]
    rows = jnp.ones((n,), bool) if rows is None else rows
    goals = jnp.where(rows[:, None], jnp.broadcast_to(goal, batch.actor_goals.shape), batch.actor_goals)
    idxs = jnp.where(rows, -1, batch.actor_goal_idxs).astype(batch.actor_goal_idxs.dtype)
    return eqx.tree_at(lambda b: (b.actor_goals, b.actor_goal_idxs), batch, (goals, idxs))


def same_config(cfg: Any) -> Any:
    """The default ``ttt_config``: test-time training optimises the whole loss."""
    return cfg


def act_actor(
    agent: Any,
    obs: Float[Array, "*batch obs"],
    goal: Float[Array, "*batch obs"],
    key: PRNGKeyArray,
    temperature: float | Float[Array, ""] = 0.0,
) -> Float[Array, "*batch act"]:
    """Action of ``agent.actor`` in ``[-1, 1]``; temperature 0 gives the mean action."""
    return act_gaussian(agent.actor, obs, goal, key, temperature)


def always_has_value(cfg: Any) -> bool:
    """For backbones whose value function always exists."""
    del cfg
    return True


def make_backbone(namespace: dict[str, Any]) -> Backbone:
    """The ``Backbone`` record of a backbone module from its globals (``make_backbone(globals())``).

    Required: ``NAME, Config, init, loss, target_update, value``; optional with defaults: ``act``
    (``act_actor``), ``has_value`` (``always_has_value``), ``BATCH_FN`` (``default_batch_fn``), ``WITH_ACTOR_GOAL``
    (``set_actor_goal``), ``TTT_CONFIG`` (``same_config``), ``frozen`` (``no_frozen_fields``), ``ACTORS``
    (``("actor",)``).
    """
    return Backbone(
        name=namespace["NAME"],
        Config=namespace["Config"],
        init=namespace["init"],
        loss=namespace["loss"],
        target_update=namespace["target_update"],
        act=namespace.get("act", act_actor),
        value=namespace["value"],
        has_value=namespace.get("has_value", always_has_value),
        batch_fn=namespace.get("BATCH_FN", default_batch_fn),
        with_actor_goal=namespace.get("WITH_ACTOR_GOAL", set_actor_goal),
        ttt_config=namespace.get("TTT_CONFIG", same_config),
        frozen=namespace.get("frozen", no_frozen_fields),
        actors=tuple(namespace.get("ACTORS", ("actor",))),
    )


def step_targets(backbone: Backbone, cfg: Any, before: Any, after: Any) -> Any:
    """``after`` (the agent after a gradient step) with its target networks Polyak-moved from the online networks
    of ``before`` (the agent before that step), as OGBench does: its ``target_update`` reads ``self.network.params``,
    the parameters the step started from, and averages them into the target (``impls/agents/gciql.py``,
    ``update``). The ``frozen`` fields (targets, and networks the loss leaves out) never move by the gradient step,
    so they are all taken from ``target_update(before)``."""
    names = [n for n in backbone.frozen(cfg) if getattr(after, n, None) is not None]
    if not names:
        return after
    moved = backbone.target_update(before, cfg)
    return eqx.tree_at(lambda a: [getattr(a, n) for n in names], after, [getattr(moved, n) for n in names])


def no_frozen_fields(cfg: Any) -> tuple[str, ...]:
    """Every field of the agent may receive a gradient."""
    return ()


def tuple_field(obj: Any, *names: str) -> None:
    """Coerce list-valued fields of a frozen dataclass to tuples so the config stays hashable."""
    for name in names:
        object.__setattr__(obj, name, tuple(int(d) for d in getattr(obj, name)))


def check_actor_loss(actor_loss: str) -> None:
    """Raise TttError on an unknown policy-extraction name."""
    if actor_loss not in ACTOR_LOSSES:
        raise TttError(f"unknown actor_loss {actor_loss!r}; valid: {', '.join(ACTOR_LOSSES)}")


def expectile_loss(
    adv: Float[Array, "*batch"], diff: Float[Array, "*batch"], expectile: float
) -> Float[Array, "*batch"]:
    """IQL's asymmetric square: ``|expectile - 1[adv < 0]| * diff**2``."""
    weight = jnp.where(adv >= 0, expectile, 1.0 - expectile)
    return weight * diff**2


def polyak(online: PyTree, target: PyTree, tau: float) -> PyTree:
    """``tau * online + (1 - tau) * target`` leaf by leaf."""
    return jax.tree.map(lambda p, tp: p * tau + tp * (1.0 - tau), online, target)


def act_gaussian(
    actor: GaussianActor,
    obs: Float[Array, "*batch obs"],
    goal: Float[Array, "*batch obs"],
    key: PRNGKeyArray,
    temperature: float | Float[Array, ""] = 0.0,
) -> Float[Array, "*batch act"]:
    """Sample with the std scaled by ``temperature`` (0: the mean action), clipped to ``[-1, 1]``."""
    return jnp.clip(actor.sample(obs, goal, key, temperature), -1.0, 1.0)


def actor_metrics(
    mean: Float[Array, "batch act"],
    std: Float[Array, "batch act"],
    actions: Float[Array, "batch act"],
    log_prob: Float[Array, " batch"],
) -> dict[str, Float[Array, ""]]:
    """OGBench's common actor diagnostics."""
    return {
        "bc_log_prob": log_prob.mean(),
        "mse": jnp.mean((mean - actions) ** 2),
        "std": jnp.mean(std),
    }


def prefixed(prefix: str, metrics: dict[str, Float[Array, ""]]) -> dict[str, Float[Array, ""]]:
    """``{prefix/name: value}``, OGBench's metric naming."""
    return {f"{prefix}/{k}": v for k, v in metrics.items()}


def ddpgbc_q_loss(q: Float[Array, " batch"]) -> Float[Array, ""]:
    """DDPG term normalised by the (stopped) mean |Q|, as OGBench does."""
    return -q.mean() / jax.lax.stop_gradient(jnp.abs(q).mean() + 1e-6)


def awr_weights(adv: Float[Array, " batch"], alpha: float) -> Float[Array, " batch"]:
    """``min(exp(alpha * adv), 100)``."""
    return jnp.minimum(jnp.exp(adv * alpha), 100.0)


def ddpgbc_actor_loss(
    q_fn: Callable[[Float[Array, "batch act"]], Float[Array, " batch"]],
    mean: Float[Array, "batch act"],
    std: Float[Array, "batch act"],
    actions: Float[Array, "batch act"],
    log_prob: Float[Array, " batch"],
    key: PRNGKeyArray,
    alpha: float,
    const_std: bool,
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """DDPG+BC: ``-mean(Q(s, g, a_pi)) / sg(mean|Q|) - alpha * mean(log pi(a | s, g))``.

    ``a_pi`` is the clipped mean (``const_std``) or a clipped reparameterised sample; ``q_fn`` maps it to Q
    (the critic under stop-gradient, so the gradient reaches the actor only through ``a_pi``).
    """
    if const_std:
        q_actions = jnp.clip(mean, -1.0, 1.0)
    else:
        q_actions = jnp.clip(mean + std * jax.random.normal(key, mean.shape, mean.dtype), -1.0, 1.0)
    q = q_fn(q_actions)
    q_loss = ddpgbc_q_loss(q)
    bc_loss = -(alpha * log_prob).mean()
    loss = q_loss + bc_loss
    return loss, {
        "actor_loss": loss,
        "q_loss": q_loss,
        "bc_loss": bc_loss,
        "q_mean": q.mean(),
        "q_abs_mean": jnp.abs(q).mean(),
        **actor_metrics(mean, std, actions, log_prob),
    }
