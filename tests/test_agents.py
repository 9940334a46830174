"""Backbones: whole losses against NumPy re-implementations of OGBench's formulas, stop-gradients, training,
vmap over seeds, target updates, acting, selection values and the registry.

Everything runs on hidden dims (8, 8) and a 6-row hand-built batch. Calls are jitted (one compile per
function rather than one per primitive) to stay fast on a busy CPU.
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import a64, hand_batch, np_mlp

from ttt.agents import BACKBONES, gcbc, gciql, get_backbone, qrl
from ttt.data.batch import Batch
from ttt.errors import TttError

GCBC = get_backbone("gcbc")

OBS, ACT, B = 3, 2, 6
H = (8, 8)
KEY = jax.random.key(0)
TOL = dict(rtol=2e-5, atol=2e-5)

CONFIGS = {
    "gcbc": gcbc.Config(actor_hidden_dims=H),
    "gcbc_critic": gcbc.Config(actor_hidden_dims=H, value_hidden_dims=H, with_critic=True, expectile=0.8),
    "gciql_ddpgbc": gciql.Config(actor_hidden_dims=H, value_hidden_dims=H, alpha=0.5, discount=0.9),
    "gciql_awr": gciql.Config(
        actor_hidden_dims=H, value_hidden_dims=H, actor_loss="awr", alpha=2.0, const_std=False, expectile=0.7
    ),
    "qrl_ddpgbc": qrl.Config(actor_hidden_dims=H, value_hidden_dims=H, latent_dim=16, dim_per_component=4, alpha=0.5),
    "qrl_awr": qrl.Config(
        actor_hidden_dims=H, value_hidden_dims=H, latent_dim=16, dim_per_component=4, actor_loss="awr", alpha=2.0
    ),
}
MODULES = {
    "gcbc": gcbc,
    "gcbc_critic": gcbc,
    "gciql_ddpgbc": gciql,
    "gciql_awr": gciql,
    "qrl_ddpgbc": qrl,
    "qrl_awr": qrl,
}


def make_batch(seed: int = 0) -> Batch:
    """Six rows; row 0 has its value goal at the current state (reward 0, mask 0), as `gc_negative` gives."""
    return hand_batch(np.random.default_rng(seed), B, OBS, ACT)


BATCH = make_batch()


OPT = optax.adam(3e-3)
_AGENTS: dict[str, eqx.Module] = {}


def agent_for(name: str):
    """An agent of the config's structure (``init`` traced, not compiled) with every leaf drawn from NumPy, so
    biases, LayerNorm scales, log-stds and targets all differ from their init values (cached per config)."""
    if name not in _AGENTS:
        shapes = eqx.filter_eval_shape(MODULES[name].init, KEY, OBS, ACT, CONFIGS[name])
        rng = np.random.default_rng(1)
        _AGENTS[name] = jax.tree.map(lambda s: jnp.asarray(0.5 * rng.normal(size=s.shape), s.dtype), shapes)
    return _AGENTS[name]


# Loss terms per config (metric names); their gradients are checked one by one against OGBench's
# stop-gradient placement, and their sum against the whole loss.
TERMS = {
    "gcbc": ("actor/actor_loss",),
    "gcbc_critic": ("actor/actor_loss", "value/value_loss"),
    "gciql_ddpgbc": ("value/value_loss", "critic/critic_loss", "actor/actor_loss"),
    "gciql_awr": ("value/value_loss", "critic/critic_loss", "actor/actor_loss"),
    "qrl_ddpgbc": ("value/total_loss", "dynamics/dynamics_loss", "actor/actor_loss"),
    "qrl_awr": ("value/total_loss", "actor/actor_loss"),
}

# Test programs are compiled with little LLVM optimisation: the same computation, compiled about twice as
# fast, which keeps these tests quick on a busy CPU.
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


@functools.partial(jax.jit, static_argnames=("mod", "cfg", "terms"), compiler_options=FAST_COMPILE)
def _step(agent, opt_state, batch, key, mod, cfg, terms):
    """One compiled program per config, at ``agent``: the loss, metrics, the Jacobian of
    ``[loss, *terms]`` (row 0 is the gradient of the whole loss), one Adam + target update along that
    gradient, and probes of ``target_update``, ``act`` (also with the mean head scaled up so that clipping
    matters) and ``value``."""
    params, static = eqx.partition(agent, eqx.is_inexact_array)

    def f(p):
        loss, info = mod.loss(eqx.combine(p, static), batch, key, cfg)
        out = jnp.stack([loss, *(info[t] for t in terms)])
        return out, (out, info)

    jac, (out, info) = jax.jacrev(f, has_aux=True)(params)
    grads = jax.tree.map(lambda j: j[0], jac)
    updates, opt_state = OPT.update(grads, opt_state, params)
    new_agent = mod.target_update(eqx.apply_updates(agent, updates), cfg)
    wide = eqx.tree_at(lambda a: a.actor.mean_head.weight, agent, agent.actor.mean_head.weight * 50)
    k1, k2 = jax.random.split(jax.random.fold_in(key, 1))
    obs, goal = batch.observations, batch.actor_goals
    probe = {
        "target_update": mod.target_update(agent, cfg),
        "wide": wide,
        "acts": [
            mod.act(a, obs, goal, k, t)
            for a, k, t in ((wide, k1, 0.0), (wide, k2, 0.0), (agent, k1, 1.0), (agent, k2, 1.0))
        ],
        "act_row": mod.act(wide, obs[0], goal[0], k1, 0.0),
        "value": mod.value(agent, obs, batch.value_goals) if mod.has_value(cfg) else None,
    }
    return {
        "agent": new_agent,
        "opt_state": opt_state,
        "loss": out[0],
        "terms": out[1:],
        "info": info,
        "grads": grads,
        "jac": jac,
        "probe": probe,
    }


_STEP0: dict[str, tuple] = {}


def step0(name: str):
    """``_step`` at the NumPy-filled agent (cached per config)."""
    if name not in _STEP0:
        agent = agent_for(name)
        out = _step(
            agent, OPT.init(eqx.filter(agent, eqx.is_array)), BATCH, KEY, MODULES[name], CONFIGS[name], TERMS[name]
        )
        # to NumPy once: eager indexing of device arrays would compile a program per shape
        _STEP0[name] = jax.tree.map(np.asarray, out)
    return _STEP0[name]


# ---------------------------------------------------------------- NumPy reference (float64) -----------------


def np_value(gcv, *inputs):
    x = np.concatenate([a64(i) for i in inputs], -1)
    if gcv.ensemble == 1:
        return np_mlp(gcv.net, x)[:, 0]
    return np.stack([np_mlp(gcv.net, x, i)[:, 0] for i in range(gcv.ensemble)])


def np_actor(actor, obs, goal):
    mean = np_mlp(actor.trunk, np.concatenate([a64(obs), a64(goal)], -1))
    mean = mean @ a64(actor.mean_head.weight) + a64(actor.mean_head.bias)
    log_std = np.zeros(mean.shape[-1]) if actor.log_stds is None else np.clip(a64(actor.log_stds), -5, 2)
    return mean, np.broadcast_to(np.exp(log_std), mean.shape)


def np_log_prob(mean, std, x):
    return (-0.5 * ((a64(x) - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)).sum(-1)


def np_expectile(adv, diff, tau):
    return np.where(adv >= 0, tau, 1 - tau) * diff**2


def np_iqe(zs, zg, alpha, k):
    """OGBench's sorting formulation of IQE, in NumPy (a different algorithm from ttt.nets.iqe_components)."""
    x = zs.reshape(*zs.shape[:-1], -1, k)
    y = zg.reshape(*zg.shape[:-1], -1, k)
    valid = x < y
    xy = np.concatenate([x, y], -1)
    ixy = np.argsort(xy, -1, kind="stable")
    sxy = np.take_along_axis(xy, ixy, -1)
    neg_inc = np.take_along_axis(valid, ixy % k, -1) * np.where(ixy < k, -1, 1)
    neg_f = -1.0 * (np.cumsum(neg_inc, -1) < 0)
    neg_incf = np.concatenate([neg_f[..., :1], neg_f[..., 1:] - neg_f[..., :-1]], -1)
    comps = (sxy * neg_incf).sum(-1)
    return alpha * comps.mean(-1) + (1 - alpha) * comps.max(-1)


def np_softplus(x):
    return np.logaddexp(0.0, x)


def ref_gcbc(agent, b, cfg):
    mean, std = np_actor(agent.actor, b.observations, b.actor_goals)
    total = -np_log_prob(mean, std, b.actions).mean()
    if cfg.with_critic:
        r, m = a64(b.rewards), a64(b.masks)
        nv1, nv2 = np_value(agent.target_value, b.next_observations, b.value_goals)
        v1t, v2t = np_value(agent.target_value, b.observations, b.value_goals)
        adv = r + cfg.discount * m * np.minimum(nv1, nv2) - (v1t + v2t) / 2
        v1, v2 = np_value(agent.value, b.observations, b.value_goals)
        total += np_expectile(adv, r + cfg.discount * m * nv1 - v1, cfg.expectile).mean()
        total += np_expectile(adv, r + cfg.discount * m * nv2 - v2, cfg.expectile).mean()
    return total


def ref_gciql(agent, b, cfg):
    r, m = a64(b.rewards), a64(b.masks)
    q_t = np_value(agent.target_critic, b.observations, b.value_goals, b.actions).min(0)
    v = np_value(agent.value, b.observations, b.value_goals)
    value_loss = np_expectile(q_t - v, q_t - v, cfg.expectile).mean()
    target = r + cfg.discount * m * np_value(agent.value, b.next_observations, b.value_goals)
    q1, q2 = np_value(agent.critic, b.observations, b.value_goals, b.actions)
    critic_loss = ((q1 - target) ** 2 + (q2 - target) ** 2).mean()
    mean, std = np_actor(agent.actor, b.observations, b.actor_goals)
    logp = np_log_prob(mean, std, b.actions)
    if cfg.actor_loss == "awr":
        adv = np_value(agent.critic, b.observations, b.actor_goals, b.actions).min(0) - np_value(
            agent.value, b.observations, b.actor_goals
        )
        actor_loss = -(np.minimum(np.exp(cfg.alpha * adv), 100.0) * logp).mean()
    else:
        assert cfg.const_std
        q = np_value(agent.critic, b.observations, b.actor_goals, np.clip(mean, -1, 1)).min(0)
        actor_loss = -q.mean() / (np.abs(q).mean() + 1e-6) - cfg.alpha * logp.mean()
    return value_loss + critic_loss + actor_loss


def ref_qrl(agent, b, cfg):
    k = cfg.dim_per_component
    alpha = 1.0 / (1.0 + np.exp(-float(agent.value.alpha_logit)))
    phi = lambda x: np_mlp(agent.value.phi, a64(x))  # noqa: E731
    d = lambda zs, zg: np_iqe(zs, zg, alpha, k)  # noqa: E731
    z, z_next = phi(b.observations), phi(b.next_observations)
    d_neg, d_pos = d(z, phi(b.value_goals)), d(z, z_next)
    lam = np.exp(float(agent.log_lam))
    d_neg_loss = (100 * np_softplus(5 - d_neg / 100)).mean()
    d_pos_loss = (np.maximum(d_pos - 1, 0) ** 2).mean()
    total = d_neg_loss + d_pos_loss * lam + lam * (cfg.eps - d_pos_loss)
    mean, std = np_actor(agent.actor, b.observations, b.actor_goals)
    logp = np_log_prob(mean, std, b.actions)
    if cfg.actor_loss == "awr":
        z_goal = phi(b.actor_goals)
        adv = d(z, z_goal) - d(z_next, z_goal)
        return total - (np.minimum(np.exp(cfg.alpha * adv), 100.0) * logp).mean()
    dyn = lambda zz, a: zz + np_mlp(agent.dynamics, np.concatenate([zz, a64(a)], -1))  # noqa: E731
    z_pred = dyn(z, b.actions)
    total += (d(z_next, z_pred) + d(z_pred, z_next)).mean() / 2
    q = -d(dyn(z, np.clip(mean, -1, 1)), phi(b.actor_goals))
    return total - q.mean() / (np.abs(q).mean() + 1e-6) - cfg.alpha * logp.mean()


REFS = {
    "gcbc": ref_gcbc,
    "gcbc_critic": ref_gcbc,
    "gciql_ddpgbc": ref_gciql,
    "gciql_awr": ref_gciql,
    "qrl_ddpgbc": ref_qrl,
    "qrl_awr": ref_qrl,
}


# ---------------------------------------------------------------- tests ------------------------------------


@pytest.mark.parametrize("name", list(CONFIGS))
def test_loss_matches_numpy_and_gradients_finite(name):
    cfg = CONFIGS[name]
    agent = agent_for(name)
    out = step0(name)
    np.testing.assert_allclose(float(out["loss"]), REFS[name](agent, BATCH, cfg), **TOL)
    np.testing.assert_allclose(float(out["terms"].sum()), float(out["loss"]), rtol=1e-5, atol=1e-5)
    assert all(np.isfinite(np.asarray(v)).all() for v in out["info"].values())
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(out["jac"]))


# Which networks each loss term (in TERMS order) moves; targets never move. This is OGBench's stop-gradient
# placement (which networks see grad_params in each term).
MOVES = {
    "gcbc": {"actor": [True]},
    "gcbc_critic": {"actor": [True, False], "value": [False, True], "target_value": [False, False]},
    "gciql_ddpgbc": {
        "value": [True, False, False],
        "critic": [False, True, False],
        "actor": [False, False, True],
        "target_critic": [False, False, False],
    },
    "qrl_ddpgbc": {
        "value": [True, True, False],
        "dynamics": [False, True, False],
        "log_lam": [True, False, False],
        "actor": [False, False, True],
    },
    "qrl_awr": {"value": [True, False], "log_lam": [True, False], "actor": [False, True]},
}
MOVES["gciql_awr"] = MOVES["gciql_ddpgbc"]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_stop_gradients_as_in_ogbench(name):
    """Each network is trained only by its own term(s); the term gradients add up to the loss gradient."""
    jac = step0(name)["jac"]
    n = len(TERMS[name])
    for field, want in MOVES[name].items():
        leaves = jax.tree.leaves(getattr(jac, field))
        assert leaves, field
        got = [any(np.abs(np.asarray(j[1 + r])).max() > 0 for j in leaves) for r in range(n)]
        assert got == want, (field, got)
    for j in jax.tree.leaves(jac):
        np.testing.assert_allclose(np.asarray(j[1:]).sum(0), np.asarray(j[0]), rtol=1e-4, atol=1e-5)


WITH_CONFIGS = [n for n in CONFIGS if n != "gcbc"]  # plain GC-BC's loss is GC-BC-with-critic's actor term


@pytest.mark.parametrize("name", ["gcbc_critic", "gciql_ddpgbc", "qrl_ddpgbc"])
def test_adam_drives_loss_down(name):
    """A few hundred Adam steps (with target updates) on the fixed toy batch."""
    mod, cfg = MODULES[name], CONFIGS[name]
    agent = agent_for(name)
    opt_state = OPT.init(eqx.filter(agent, eqx.is_array))
    losses = []
    for k in jax.random.split(jax.random.key(5), 300):
        out = _step(agent, opt_state, BATCH, k, mod, cfg, TERMS[name])
        agent, opt_state = out["agent"], out["opt_state"]
        losses.append(float(out["loss"]))
    losses = np.asarray(losses)
    assert np.isfinite(losses).all()
    assert losses[-10:].mean() < losses[:10].mean() - 0.5, (losses[:3], losses[-3:])


VMAP_CONFIGS = ("gcbc_critic", "gciql_ddpgbc", "qrl_ddpgbc")


def _init_and_loss(key):
    """init + loss of every backbone from one seed key (one program for all three)."""
    out = {}
    for name in VMAP_CONFIGS:
        mod, cfg = MODULES[name], CONFIGS[name]
        k_init, k_loss = jax.random.split(jax.random.fold_in(key, len(out)))
        agent = mod.init(k_init, OBS, ACT, cfg)
        out[name] = (*mod.loss(agent, BATCH, k_loss, cfg), agent)
    return out


def test_init_vmap_over_seeds_equals_loop():
    """vmap over 3 seed keys of init + loss equals a Python loop; init follows OGBench's."""
    keys = jax.random.split(jax.random.key(7), 3)
    batched = jax.tree.map(np.asarray, jax.jit(jax.vmap(_init_and_loss), compiler_options=FAST_COMPILE)(keys))
    single = jax.jit(_init_and_loss, compiler_options=FAST_COMPILE)
    for i, key in enumerate(jax.random.split(jax.random.key(7), 3)):
        one = jax.tree.map(np.asarray, single(key))
        for name in VMAP_CONFIGS:
            (v_loss, v_info, v_agent), (loss, info, agent) = batched[name], one[name]
            np.testing.assert_allclose(float(v_loss[i]), float(loss), rtol=1e-5, atol=1e-5)
            for k in info:
                np.testing.assert_allclose(float(v_info[k][i]), float(info[k]), rtol=1e-5, atol=1e-5)
            for x, y in zip(jax.tree.leaves(v_agent), jax.tree.leaves(agent), strict=True):
                np.testing.assert_allclose(np.asarray(x[i]), np.asarray(y), rtol=1e-6, atol=1e-7)
    for name in VMAP_CONFIGS:
        assert not np.allclose(float(batched[name][0][0]), float(batched[name][0][1]))  # seeds differ
    # OGBench's init: targets start as exact copies, lam = 1, IQE mixing logit 0, small actor mean head
    for online, target, name in (("value", "target_value", "gcbc_critic"), ("critic", "target_critic", "gciql_ddpgbc")):
        agent = one[name][2]
        for x, y in zip(jax.tree.leaves(getattr(agent, online)), jax.tree.leaves(getattr(agent, target)), strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    agent = one["qrl_ddpgbc"][2]
    assert float(agent.log_lam) == 0.0 and float(agent.value.alpha_logit) == 0.0
    assert np.abs(np.asarray(agent.actor.mean_head.weight)).max() <= math.sqrt(3.0 * 1e-2 / ((H[-1] + ACT) / 2))


@pytest.mark.parametrize("name", WITH_CONFIGS)
def test_target_update_is_polyak(name):
    cfg = CONFIGS[name]
    agent = agent_for(name)
    new = step0(name)["probe"]["target_update"]
    online_target = {
        "gcbc_critic": ("value", "target_value"),
        "gciql_ddpgbc": ("critic", "target_critic"),
        "gciql_awr": ("critic", "target_critic"),
    }
    if name not in online_target:
        for x, y in zip(jax.tree.leaves(new), jax.tree.leaves(agent), strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        return
    online, target = online_target[name]
    tau = cfg.tau
    for p, tp, new_tp in zip(
        jax.tree.leaves(getattr(agent, online)),
        jax.tree.leaves(getattr(agent, target)),
        jax.tree.leaves(getattr(new, target)),
        strict=True,
    ):
        np.testing.assert_allclose(np.asarray(new_tp), tau * a64(p) + (1 - tau) * a64(tp), rtol=1e-6, atol=1e-7)
    # everything else is untouched
    rest = lambda a: eqx.tree_at(lambda t: getattr(t, target), a, None)  # noqa: E731
    for x, y in zip(jax.tree.leaves(rest(new)), jax.tree.leaves(rest(agent)), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("name", WITH_CONFIGS)
def test_act_and_value(name):
    mod, cfg = MODULES[name], CONFIGS[name]
    agent = agent_for(name)
    probe = step0(name)["probe"]
    a0, a0b, a1, a1b = (np.asarray(a) for a in probe["acts"])
    mean, _ = np_actor(probe["wide"].actor, BATCH.observations, BATCH.actor_goals)
    assert np.abs(mean).max() > 1  # clipping matters
    np.testing.assert_array_equal(a0, a0b)  # temperature 0: deterministic, the clipped mean
    np.testing.assert_allclose(a0, np.clip(mean, -1, 1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(probe["act_row"]), a0[0], rtol=1e-6, atol=1e-6)  # unbatched row
    for a in (a0, a1, a1b):
        assert a.shape == (B, ACT) and np.all(np.abs(a) <= 1)
    assert not np.array_equal(a1, a1b)

    obs, goals = BATCH.observations, BATCH.value_goals
    v = np.asarray(probe["value"])
    assert mod.has_value(cfg) and v.shape == (B,)
    if mod is gcbc:
        want = np_value(agent.value, obs, goals).mean(0)
    elif mod is gciql:
        want = np_value(agent.value, obs, goals)
    else:
        alpha = 1.0 / (1.0 + np.exp(-float(agent.value.alpha_logit)))
        dist = np_iqe(
            np_mlp(agent.value.phi, a64(obs)), np_mlp(agent.value.phi, a64(goals)), alpha, cfg.dim_per_component
        )
        want = -(1 - cfg.discount**dist) / (1 - cfg.discount)
    np.testing.assert_allclose(v, want, rtol=1e-5, atol=1e-5)


def test_gcbc_without_critic():
    cfg = CONFIGS["gcbc"]
    agent = agent_for("gcbc")
    assert not gcbc.has_value(cfg) and agent.value is None and agent.target_value is None
    assert gcbc.target_update(agent, cfg) is agent
    with pytest.raises(TttError, match="with_critic"):
        gcbc.value(agent, BATCH.observations, BATCH.value_goals)


def test_registry_and_configs():
    assert {"gcbc", "gciql", "qrl"} <= set(BACKBONES)
    for name in ("gcbc", "gciql", "qrl"):
        bb = BACKBONES[name]
        assert get_backbone(name) is bb and bb.name == name
        cfg = bb.Config()
        assert hash(cfg) == hash(bb.Config()) and cfg.lr == 3e-4 and cfg.actor_hidden_dims == (512, 512, 512)
    with pytest.raises(TttError) as err:
        get_backbone("nope")
    assert all(n in str(err.value) for n in ("'nope'", "gcbc", "gciql", "qrl"))
    with pytest.raises(TttError, match="ddpgbc"):
        gciql.Config(actor_loss="dpg")
    assert gciql.Config(actor_hidden_dims=[4, 4]).actor_hidden_dims == (4, 4)  # coerced: stays hashable
    d = gciql.Config()
    assert (d.expectile, d.discount, d.tau, d.alpha, d.actor_loss, d.const_std) == (
        0.9,
        0.99,
        0.005,
        0.3,
        "ddpgbc",
        True,
    )
    q = qrl.Config()
    assert (q.latent_dim, q.dim_per_component, q.eps, q.alpha) == (512, 8, 0.05, 0.003)


def test_giant_mazes_train_and_select_with_ogbench_discount():
    """OGBench's tuned commands use discount 0.995 on the giant mazes; GC-TTT's selection reads values with the
    discount the backbone was trained with (predicted steps on the wrong scale would mis-rank the data)."""
    from ttt.data.specs import get_spec
    from ttt.presets import GIANT_DISCOUNT, make_configs
    from ttt.setups import make_setup

    giant, medium = get_spec("pointmaze-giant-navigate-v0"), get_spec("pointmaze-medium-navigate-v0")
    for agent in ("gcbc", "gciql", "qrl", "saw"):
        cfg, sampler = make_configs(agent, giant, "cpu")
        assert cfg.discount == GIANT_DISCOUNT == 0.995 and sampler.discount == 0.995, agent
        assert make_configs(agent, medium, "cpu")[0].discount == 0.99, agent
    assert make_configs("gciql", get_spec("antmaze-giant-stitch-v0"), "cpu")[0].discount == 0.995
    assert make_configs("gciql", giant, "cpu", {"discount": 0.98})[0].discount == 0.98  # the user's value wins
    cfg, sampler = make_configs("gcbc", giant, "cpu")
    for c, gamma in ((cfg, 0.995), (make_configs("gcbc", medium, "cpu")[0], 0.99)):
        setup = make_setup("ttt", GCBC, c, sampler, giant, 1000)
        assert setup.ttt.select.gamma == gamma
