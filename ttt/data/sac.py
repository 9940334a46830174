"""Soft actor-critic (SAC), as OGBench trains its locomotion experts (``impls/agents/sac.py``).

Pure functions over Equinox modules, in the optax style: ``init_sac(key, obs_dim, action_dim, cfg)`` builds
the agent and the optimiser state, ``sac_loss`` is the summed critic + actor + temperature loss, and
``make_sac_update(cfg)`` returns the pure ``update(state, batch, key) -> (state, metrics)`` that one Adam
applies to all three (OGBench uses one optimiser over every parameter), followed by the Polyak update of
the target critics. ``make_train_step`` fuses replay insertion, one update and the next action into one
jitted call per environment step, for the host loop in ``ttt.data.expert``; ``jax.lax.scan`` over ``update``
runs many updates at once (the smoke test does).

What OGBench's agent does and this reproduces:
- actor: ``MLP(256, 256, GELU, activate_final)`` then a mean head and a state-dependent log-std head (both
  initialised at scale 1e-2), log-std clipped to [-5, 2], a Gaussian squashed by tanh;
- critic: two independent ``MLP(256, 256, 1)`` on ``[obs, action]`` (LayerNorm as ``layer_norm``), the target uses the
  minimum of the two target critics, ``r + gamma * mask * (min Q'(s', a') - alpha * log pi(a'|s'))`` with
  ``a' ~ pi(s')``;
- actor loss ``mean(alpha * log pi(a|s) - min Q(s, a))`` with ``a ~ pi(s)`` reparameterised;
- temperature ``alpha = exp(log_alpha)`` (from 1.0), loss ``alpha * (H - target_entropy)`` with the
  entropy estimate ``H = -mean(log pi)`` held fixed, target entropy ``-0.5 * action_dim``;
- gradients: the critic loss reaches only the critics, the actor loss only the actor, the temperature loss
  only ``log_alpha`` (OGBench evaluates the other networks at the parameters before the step);
- Adam (lr 1e-4) over all of it, then ``target = tau * online + (1 - tau) * target`` with tau 0.005.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, PyTree

from ttt.nets import LOG_STD_MAX, LOG_STD_MIN, MLP, GCValue, Linear, make_linear


@dataclasses.dataclass(frozen=True)
class SACConfig:
    """OGBench's SAC settings (``impls/agents/sac.py`` and ``data_gen_scripts/commands.sh`` for the ant)."""

    lr: float = 1e-4
    batch_size: int = 256
    actor_hidden_dims: tuple[int, ...] = (256, 256)
    value_hidden_dims: tuple[int, ...] = (256, 256)
    discount: float = 0.99
    tau: float = 0.005
    target_entropy_multiplier: float = 0.5  # target entropy = -multiplier * action_dim
    actor_fc_scale: float = 0.01  # init scale of the actor's mean and log-std heads
    init_alpha: float = 1.0
    replay_size: int = 1_000_000
    random_steps: int = 10_000  # uniform random actions before the first update
    total_steps: int = 400_000  # environment steps
    layer_norm: bool = False  # LayerNorm after every hidden activation of the critics (OGBench's humanoid: True)
    min_q: bool = True  # the minimum of the two critics (True) or their mean (OGBench's humanoid: False)
    train_interval: int = 1  # one update every this many environment steps (OGBench's humanoid: 4)

    def __post_init__(self):
        object.__setattr__(self, "actor_hidden_dims", tuple(self.actor_hidden_dims))
        object.__setattr__(self, "value_hidden_dims", tuple(self.value_hidden_dims))


class TanhGaussianActor(eqx.Module):
    """OGBench's ``GCActor(tanh_squash=True, state_dependent_std=True)`` without a goal: a diagonal
    Gaussian with state-dependent std, squashed by tanh."""

    trunk: MLP
    mean_head: Linear
    log_std_head: Linear

    def __init__(self, key: PRNGKeyArray, obs_dim: int, action_dim: int, hidden_dims, *, final_init_scale=1e-2):
        k_trunk, k_mean, k_std = jax.random.split(key, 3)
        self.trunk = MLP(k_trunk, obs_dim, hidden_dims, activate_final=True, layer_norm=False)
        width = tuple(hidden_dims)[-1]
        self.mean_head = make_linear(k_mean, width, action_dim, init_scale=final_init_scale)
        self.log_std_head = make_linear(k_std, width, action_dim, init_scale=final_init_scale)

    def __call__(
        self, obs: Float[Array, "*batch obs"]
    ) -> tuple[Float[Array, "*batch act"], Float[Array, "*batch act"]]:
        """Mean and log-std (clipped to [-5, 2]) of the pre-tanh Gaussian."""
        h = self.trunk(obs)
        return self.mean_head(h), jnp.clip(self.log_std_head(h), LOG_STD_MIN, LOG_STD_MAX)

    def mode(self, obs: Float[Array, "*batch obs"]) -> Float[Array, "*batch act"]:
        """The deterministic action ``tanh(mean)`` (OGBench's ``temperature=0``)."""
        return jnp.tanh(self(obs)[0])

    def sample_and_log_prob(
        self, obs: Float[Array, "*batch obs"], key: PRNGKeyArray
    ) -> tuple[Float[Array, "*batch act"], Float[Array, "*batch"]]:
        """A reparameterised squashed sample and its log-density (tanh change of variables)."""
        mean, log_std = self(obs)
        return squashed_sample_log_prob(mean, log_std, jax.random.normal(key, mean.shape, mean.dtype))


def squashed_sample_log_prob(
    mean: Float[Array, "*batch act"], log_std: Float[Array, "*batch act"], eps: Float[Array, "*batch act"]
) -> tuple[Float[Array, "*batch act"], Float[Array, "*batch"]]:
    """``a = tanh(mean + std * eps)`` and ``log N(x; mean, std) - sum log(1 - tanh(x)^2)``, the Jacobian
    term in distrax's stable form ``2 (log 2 - x - softplus(-2x))``."""
    x = mean + jnp.exp(log_std) * eps
    log_n = jnp.sum(-0.5 * eps**2 - log_std - 0.5 * math.log(2.0 * math.pi), axis=-1)
    log_det = jnp.sum(2.0 * (math.log(2.0) - x - jax.nn.softplus(-2.0 * x)), axis=-1)
    return jnp.tanh(x), log_n - log_det


class SACParams(eqx.Module):
    """What the optimiser trains: actor, twin critics, log-temperature."""

    actor: TanhGaussianActor
    critic: GCValue  # ensemble of 2 on [obs, action]
    log_alpha: Float[Array, ""]


class SACState(eqx.Module):
    """Agent and optimiser state: trained parameters, target critics, Adam state, update count."""

    params: SACParams
    target_critic: GCValue
    opt_state: PyTree
    updates: Int[Array, ""]


def _q(critic: GCValue, obs: Float[Array, "batch obs"], actions: Float[Array, "batch act"]) -> Float[Array, "2 batch"]:
    empty = jnp.zeros((*obs.shape[:-1], 0), obs.dtype)
    return critic(obs, empty, actions)


def init_sac(key: PRNGKeyArray, obs_dim: int, action_dim: int, cfg: SACConfig) -> SACState:
    """A fresh agent (OGBench's initialisation: variance-scaling kernels, zero biases, alpha = 1), target
    critics equal to the critics, and a fresh Adam state."""
    k_actor, k_critic = jax.random.split(key)
    params = SACParams(
        actor=TanhGaussianActor(
            k_actor, obs_dim, action_dim, cfg.actor_hidden_dims, final_init_scale=cfg.actor_fc_scale
        ),
        critic=GCValue(k_critic, obs_dim + action_dim, cfg.value_hidden_dims, layer_norm=cfg.layer_norm, ensemble=2),
        log_alpha=jnp.asarray(math.log(cfg.init_alpha), jnp.float32),
    )
    opt_state = optax.adam(cfg.lr).init(eqx.filter(params, eqx.is_array))
    target = jax.tree.map(jnp.copy, params.critic)  # own buffers: the training step donates its inputs
    opt_state = jax.tree.map(jnp.copy, opt_state)
    return SACState(params, target, opt_state, jnp.zeros((), jnp.int32))


def sac_loss(
    params: SACParams,
    target_critic: GCValue,
    batch: dict[str, Array],
    key: PRNGKeyArray,
    cfg: SACConfig,
    action_dim: int,
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """Critic + actor + temperature loss of OGBench's SAC on one batch (``observations``, ``actions``,
    ``rewards``, ``masks``, ``next_observations``); the gradient of each term reaches only its own network."""
    k_critic, k_actor = jax.random.split(key)
    fixed = jax.lax.stop_gradient(params)
    alpha_fixed = jnp.exp(fixed.log_alpha)

    reduce = jnp.min if cfg.min_q else jnp.mean

    # Critic: soft Bellman target with the min (or mean) of the target critics; the actor is held fixed.
    next_a, next_logp = fixed.actor.sample_and_log_prob(batch["next_observations"], k_critic)
    next_q = reduce(_q(jax.lax.stop_gradient(target_critic), batch["next_observations"], next_a), axis=0)
    target = batch["rewards"] + cfg.discount * batch["masks"] * (next_q - alpha_fixed * next_logp)
    q = _q(params.critic, batch["observations"], batch["actions"])
    critic_loss = jnp.mean((q - target[None]) ** 2)

    # Actor: reparameterised, against the min (or mean) of the (fixed) critics.
    a, logp = params.actor.sample_and_log_prob(batch["observations"], k_actor)
    q_pi = reduce(_q(fixed.critic, batch["observations"], a), axis=0)
    actor_loss = jnp.mean(alpha_fixed * logp - q_pi)

    # Temperature: the entropy estimate is held fixed.
    entropy = -jnp.mean(jax.lax.stop_gradient(logp))
    target_entropy = -cfg.target_entropy_multiplier * action_dim
    alpha = jnp.exp(params.log_alpha)
    alpha_loss = alpha * (entropy - target_entropy)

    total = critic_loss + actor_loss + alpha_loss
    metrics = dict(
        critic_loss=critic_loss,
        q_mean=q.mean(),
        actor_loss=actor_loss,
        alpha_loss=alpha_loss,
        alpha=alpha,
        entropy=entropy,
    )
    return total, metrics


def make_sac_update(cfg: SACConfig, action_dim: int) -> Callable:
    """``update(state, batch, key) -> (state, metrics)``: one Adam step on ``sac_loss`` and the Polyak
    update of the target critics."""
    opt = optax.adam(cfg.lr)

    def update(state: SACState, batch: dict[str, Array], key: PRNGKeyArray):
        grad_fn = eqx.filter_value_and_grad(sac_loss, has_aux=True)
        (_, metrics), grads = grad_fn(state.params, state.target_critic, batch, key, cfg, action_dim)
        updates, opt_state = opt.update(grads, state.opt_state, eqx.filter(state.params, eqx.is_array))
        params = eqx.apply_updates(state.params, updates)
        tau = cfg.tau  # Polyak averaging, as `ttt.agents.common.polyak` (the expert does not depend on the backbones)
        target = jax.tree.map(lambda p, tp: p * tau + tp * (1.0 - tau), params.critic, state.target_critic)
        return SACState(params, target, opt_state, state.updates + 1), metrics

    return update


class Replay(eqx.Module):
    """A fixed-capacity replay buffer held as arrays, written in order and then round (as OGBench's: row
    ``size mod capacity``); ``size`` counts every transition ever added."""

    observations: Float[Array, "cap obs"]
    actions: Float[Array, "cap act"]
    rewards: Float[Array, " cap"]
    masks: Float[Array, " cap"]
    next_observations: Float[Array, "cap obs"]
    size: Int[Array, ""]

    @staticmethod
    def empty(capacity: int, obs_dim: int, action_dim: int) -> Replay:
        z = jnp.zeros
        return Replay(
            z((capacity, obs_dim)),
            z((capacity, action_dim)),
            z((capacity,)),
            z((capacity,)),
            z((capacity, obs_dim)),
            jnp.zeros((), jnp.int32),
        )

    def add(self, obs, action, reward, mask, next_obs) -> Replay:
        """Append one transition (at ``size mod capacity``)."""
        i = self.size % self.observations.shape[0]
        return Replay(
            self.observations.at[i].set(obs),
            self.actions.at[i].set(action),
            self.rewards.at[i].set(reward),
            self.masks.at[i].set(mask),
            self.next_observations.at[i].set(next_obs),
            self.size + 1,
        )

    def sample(self, key: PRNGKeyArray, batch_size: int) -> dict[str, Array]:
        """``batch_size`` rows drawn uniformly with replacement from the filled part."""
        n = jnp.minimum(self.size, self.observations.shape[0])
        idx = jax.random.randint(key, (batch_size,), 0, jnp.maximum(n, 1))
        return dict(
            observations=self.observations[idx],
            actions=self.actions[idx],
            rewards=self.rewards[idx],
            masks=self.masks[idx],
            next_observations=self.next_observations[idx],
        )


class TrainCarry(eqx.Module):
    """Everything the training program carries between environment steps."""

    sac: SACState
    replay: Replay
    key: PRNGKeyArray


def make_train_step(cfg: SACConfig, action_dim: int) -> Callable:
    """``step(carry, obs, action, reward, mask, next_obs, reset_obs, done) -> (carry, next_action, metrics,
    did_update)``: stores the transition, runs one update once ``random_steps`` transitions are stored (on every
    ``train_interval``-th environment step, as ``main_sac.py``'s ``i % train_interval == 0``), and
    returns the action for the next observation (``reset_obs`` when the episode ended): uniform in [-1, 1]
    while fewer than ``random_steps`` transitions are stored, else a sample of the (just updated) policy.
    This is OGBench's ``main_sac.py`` step order: act, step, store, update."""
    update = make_sac_update(cfg, action_dim)

    def step(
        carry: TrainCarry,
        obs: Float[Array, " obs"],
        action: Float[Array, " act"],
        reward: Float[Array, ""],
        mask: Float[Array, ""],
        next_obs: Float[Array, " obs"],
        reset_obs: Float[Array, " obs"],
        done: Bool[Array, ""],
    ):
        key, k_batch, k_update, k_act, k_random = jax.random.split(carry.key, 5)
        replay = carry.replay.add(obs, action, reward, mask, next_obs)
        learn = (replay.size >= cfg.random_steps) & (replay.size % cfg.train_interval == 0)

        def do_update(sac):
            return update(sac, replay.sample(k_batch, cfg.batch_size), k_update)

        def skip(sac):
            zero = jnp.zeros((), jnp.float32)
            return sac, dict.fromkeys(("critic_loss", "q_mean", "actor_loss", "alpha_loss", "alpha", "entropy"), zero)

        sac, metrics = jax.lax.cond(learn, do_update, skip, carry.sac)
        ob = jnp.where(done, reset_obs, next_obs)
        policy_a, _ = sac.params.actor.sample_and_log_prob(ob, k_act)
        random_a = jax.random.uniform(k_random, (action_dim,), minval=-1.0, maxval=1.0)
        # The next step is step number replay.size + 1; OGBench acts randomly while i < seed_steps.
        next_action = jnp.where(replay.size + 1 < cfg.random_steps, random_a, jnp.clip(policy_a, -1.0, 1.0))
        return TrainCarry(sac, replay, key), next_action, metrics, learn

    return step
