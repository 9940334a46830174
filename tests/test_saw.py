"""SAW backbone: each loss term against a float64 NumPy re-implementation of the reference formulas, stop-gradients,
training, vmap over seeds, Polyak targets, acting, selection values, and waypoint rows on a hand-built dataset.

Tiny networks (hidden (8,), rep_dim 4) and a 6-row hand-built batch; every call is jitted, few programs compile.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import a64, hand_batch, np_mlp

from ttt.agents import get_backbone, saw
from ttt.data.dataset import Dataset
from ttt.data.sampler import GoalMix, SamplerConfig, make_batch, sample_rows

OBS, ACT, B = 3, 2, 6
H = (8,)  # one hidden layer: the MLPs' depth is tested in test_nets; small programs compile fast


def key(seed: int) -> jax.Array:
    """A typed key with the "rbg" implementation: its bits compile far faster on CPU than threefry's unrolled
    rounds (the networks' many initialisers dominated this file's run time); nothing here depends on the stream."""
    return jax.random.key(seed, impl="rbg")


KEY = key(0)
TOL = dict(rtol=1e-4, atol=1e-4)
CFG = saw.Config(
    low_actor_hidden_dims=H,
    actor_hidden_dims=H,
    value_hidden_dims=H,
    rep_dim=4,
    discount=0.9,
    expectile=0.7,
    low_alpha=2.0,
    awr_alpha=1.5,
    kl_alpha=0.5,
    subgoal_steps=2,
)
CFG_STD = dataclasses.replace(CFG, const_std=False)


def make_saw_batch_by_hand(seed: int = 0) -> saw.SawBatch:
    """Six rows; row 0 has its value goal at the current state (reward 0, mask 0)."""
    rng = np.random.default_rng(seed)
    base = hand_batch(rng, B, OBS, ACT)
    f = lambda *shape: rng.normal(size=shape).astype(np.float32)  # noqa: E731  (after the base batch's draws)
    obs = np.asarray(base.observations)
    return saw.SawBatch(
        base=base,
        low_goals=jnp.asarray(obs + f(B, OBS)),
        waypoints=jnp.asarray(obs + 0.5 * f(B, OBS)),
        low_goal_idxs=jnp.arange(B) + 2,
        waypoint_idxs=jnp.arange(B) + 2,
    )


BATCH = make_saw_batch_by_hand()


def perturb(tree, seed=1, scale=0.3):
    """NumPy noise on every leaf: biases, LayerNorm scales, log-stds and the target all leave their init values."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: jnp.asarray(np.asarray(x) + scale * rng.normal(size=x.shape), x.dtype), tree)


# Both fresh agents from one compiled program (same key: the shared initialisers compile once).
FRESH, FRESH_STD = eqx.filter_jit(lambda k: (saw.init(k, OBS, ACT, CFG), saw.init(k, OBS, ACT, CFG_STD)))(KEY)
AGENT = perturb(FRESH)
AGENT_STD = perturb(FRESH_STD)


# ---------------------------------------------------------------------------------------------------------------
# NumPy forwards (float64)


def np_goal_rep(rep, s, g):
    z = np_mlp(rep.net, np.concatenate([s, g], -1))
    return z / np.linalg.norm(z, axis=-1, keepdims=True) * math.sqrt(z.shape[-1])


def np_v2(net, s, g):
    """Both heads, shape (2, batch)."""
    x = np.concatenate([s, np_goal_rep(net.goal_rep, s, g)], -1)
    return np.stack([np_mlp(net.heads.net, x, i)[..., 0] for i in range(2)])


def np_gauss(actor, s, g):
    mean = np_mlp(actor.trunk, np.concatenate([s, g], -1)) @ a64(actor.mean_head.weight) + a64(actor.mean_head.bias)
    log_std = np.zeros_like(mean) if actor.log_stds is None else np.broadcast_to(a64(actor.log_stds), mean.shape)
    return mean, np.exp(np.clip(log_std, -5.0, 2.0))


def np_flat(agent, s, g):
    return np_gauss(agent.actor.policy, s, np_goal_rep(agent.actor.goal_rep, s, g))


def np_log_prob(mean, std, x):
    return np.sum(-0.5 * ((x - mean) / std) ** 2 - np.log(std) - 0.5 * math.log(2 * math.pi), -1)


def np_expectile(adv, diff, tau):
    return np.where(adv >= 0, tau, 1 - tau) * diff**2


def np_batch(sb):
    return {k: a64(v) for k, v in dataclasses.asdict(sb.base).items()} | {
        "low_goals": a64(sb.low_goals),
        "waypoints": a64(sb.waypoints),
    }


def np_target_v2(agent, s, g):
    """The target heads on the ONLINE goal representation (the reference shares it), shape (2, batch)."""
    x = np.concatenate([s, np_goal_rep(agent.value.goal_rep, s, g)], -1)
    return np.stack([np_mlp(agent.target_value.net, x, i)[..., 0] for i in range(2)])


def np_value_loss(agent, b, cfg):
    nv1, nv2 = np_target_v2(agent, b["next_observations"], b["value_goals"])
    v1t, v2t = np_target_v2(agent, b["observations"], b["value_goals"])
    gm = cfg.discount * b["masks"]
    adv = b["rewards"] + gm * np.minimum(nv1, nv2) - (v1t + v2t) / 2
    v1, v2 = np_v2(agent.value, b["observations"], b["value_goals"])
    return (
        np_expectile(adv, b["rewards"] + gm * nv1 - v1, cfg.expectile).mean()
        + np_expectile(adv, b["rewards"] + gm * nv2 - v2, cfg.expectile).mean()
    )


def np_v(agent, s, g):
    return np_v2(agent.value, s, g).mean(0)


def np_low_actor_loss(agent, b, cfg):
    w = b["low_goals"]
    adv = np_v(agent, b["next_observations"], w) - np_v(agent, b["observations"], w)
    mean, std = np_gauss(agent.low_actor, b["observations"], w)
    return -(np.minimum(np.exp(cfg.low_alpha * adv), 100.0) * np_log_prob(mean, std, b["actions"])).mean()


def np_actor_loss(agent, b, cfg):
    g = b["actor_goals"]
    adv = np_v(agent, b["next_observations"], g) - np_v(agent, b["observations"], g)
    mean, std = np_flat(agent, b["observations"], g)
    return -(np.minimum(np.exp(cfg.awr_alpha * adv), 100.0) * np_log_prob(mean, std, b["actions"])).mean()


def np_waypoint_loss(agent, b, cfg):
    g, w, s = b["actor_goals"], b["waypoints"], b["observations"]
    wadv = np_v(agent, w, g) - np_v(agent, s, g)
    mean, std = np_flat(agent, s, g)
    w_mean, w_std = np_gauss(agent.low_actor, s, w)
    if cfg.const_std:
        d = np.sum((mean - w_mean) ** 2, -1)
    else:  # KL(N(w_mean, w_std) || N(mean, std))
        d = np.sum(np.log(std / w_std) + (w_std**2 + (w_mean - mean) ** 2) / (2 * std**2) - 0.5, -1)
    return (np.minimum(np.exp(cfg.kl_alpha * wadv), 100.0) * d).mean()


# ---------------------------------------------------------------------------------------------------------------
# Losses


TERMS = ("value/value_loss", "low_actor/actor_loss", "actor/awr_loss", "waypoint/waypoint_loss")


def _term_values(agent, batch, cfg):
    info = saw.loss(agent, batch, KEY, cfg)[1]
    return jnp.stack([info[k] for k in TERMS])


@eqx.filter_jit
def _terms_and_grad(agent, batch, weights, cfg):
    """The four terms, the whole loss with its metrics, and the gradient of ``weights @ terms``: one compile serves
    every term's gradient (one-hot weights) and the whole loss's (all ones)."""
    total, info = saw.loss(agent, batch, KEY, cfg)
    grad = eqx.filter_grad(lambda a: weights @ _term_values(a, batch, cfg))(agent)
    return jnp.stack([info[k] for k in TERMS]), (total, info), grad


ONES = jnp.ones(4)


@pytest.mark.parametrize("std", [False, True])
def test_each_loss_term_matches_numpy(std):
    agent, cfg = (AGENT_STD, CFG_STD) if std else (AGENT, CFG)
    b = np_batch(BATCH)
    terms, (total, info), grad = _terms_and_grad(agent, BATCH, ONES, cfg)
    expected = [
        np_value_loss(agent, b, cfg),
        np_low_actor_loss(agent, b, cfg),
        np_actor_loss(agent, b, cfg),
        np_waypoint_loss(agent, b, cfg),
    ]
    np.testing.assert_allclose(np.asarray(terms), expected, **TOL)
    np.testing.assert_allclose(float(total), sum(expected), **TOL)
    assert all(abs(e) > 1e-3 for e in expected)  # no term is trivially zero
    assert all(np.isfinite(float(v)) for v in info.values()) and "waypoint/kld" in info
    # the gradient of the whole loss (= of the sum of the terms, all-ones weights) is finite
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(grad))
    assert any(np.any(np.asarray(x) != 0) for x in jax.tree.leaves(grad))


def test_goal_rep_is_length_normalised_and_value_is_head_mean():
    s, g = BATCH.base.observations, BATCH.base.actor_goals
    rep = eqx.filter_jit(lambda a: a.value.goal_rep(s, g))(AGENT)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(rep), axis=-1), 2.0, rtol=1e-5)  # sqrt(rep_dim = 4)
    got = eqx.filter_jit(saw.value)(AGENT, s, g)
    np.testing.assert_allclose(np.asarray(got), np_v(AGENT, a64(s), a64(g)), **TOL)
    assert saw.has_value(CFG)


def test_stop_gradients_as_in_reference():
    gv, gl, ga, gw = (_terms_and_grad(AGENT_STD, BATCH, w, CFG_STD)[2] for w in jnp.eye(4))

    def zero(tree):
        return all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves(tree))

    def nonzero(tree):
        return any(np.any(np.asarray(x) != 0) for x in jax.tree.leaves(tree))

    # value loss: only the online value (goal representation included); the target is stopped.
    assert nonzero(gv.value.goal_rep) and nonzero(gv.value.heads)
    assert zero(gv.target_value) and zero(gv.actor) and zero(gv.low_actor)
    # low actor / flat actor AWR: only their own actor; V is stopped.
    assert nonzero(gl.low_actor) and zero(gl.value) and zero(gl.actor) and zero(gl.target_value)
    assert nonzero(ga.actor.goal_rep) and nonzero(ga.actor.policy) and zero(ga.value) and zero(ga.low_actor)
    # waypoint: only the flat actor (log-stds included: KL); the low actor (bootstrap target) and V are stopped.
    assert nonzero(gw.actor.goal_rep) and nonzero(gw.actor.policy.log_stds)
    assert zero(gw.low_actor) and zero(gw.value) and zero(gw.target_value)


def test_adam_drives_loss_down():
    opt = optax.adam(3e-3)
    agent = FRESH
    opt_state = opt.init(eqx.filter(agent, eqx.is_array))

    @eqx.filter_jit
    def train(agent, opt_state, rng):
        def step(carry, k):
            agent, opt_state = carry
            (loss, _), grads = eqx.filter_value_and_grad(saw.loss, has_aux=True)(agent, BATCH, k, CFG)
            updates, opt_state = opt.update(grads, opt_state, eqx.filter(agent, eqx.is_array))
            agent = saw.target_update(eqx.apply_updates(agent, updates), CFG)
            return (agent, opt_state), loss

        return jax.lax.scan(step, (agent, opt_state), jax.random.split(rng, 300))[1]

    losses = np.asarray(train(agent, opt_state, KEY))
    assert np.isfinite(losses).all()
    assert losses[-10:].mean() < losses[:10].mean() - 0.5, (losses[:3], losses[-3:])


def test_vmap_over_seeds_equals_loop():
    def run(key):
        k_init, k_loss = jax.random.split(key)
        agent = saw.init(k_init, OBS, ACT, CFG)
        loss, info = saw.loss(agent, BATCH, k_loss, CFG)
        return loss, info, agent

    keys = jax.random.split(jax.random.key(7), 3)  # threefry: rbg bits are not vmap-invariant
    v_loss, v_info, v_agent = eqx.filter_jit(eqx.filter_vmap(run))(keys)
    single = eqx.filter_jit(run)
    v_loss, v_info, v_leaves = np.asarray(v_loss), jax.tree.map(np.asarray, v_info), jax.tree.leaves(v_agent)
    v_leaves = [np.asarray(x) for x in v_leaves]  # index on the host: eager device indexing compiles per shape
    for i in range(3):
        loss, info, agent = single(keys[i])
        np.testing.assert_allclose(v_loss[i], float(loss), rtol=1e-5, atol=1e-5)
        for k in info:
            np.testing.assert_allclose(v_info[k][i], float(info[k]), rtol=1e-5, atol=1e-5)
        for x, y in zip(v_leaves, jax.tree.leaves(agent), strict=True):
            np.testing.assert_allclose(x[i], np.asarray(y), rtol=1e-6, atol=1e-7)
    assert not np.allclose(float(v_loss[0]), float(v_loss[1]))


def test_init_target_is_copy_and_target_update_is_polyak():
    fresh = FRESH
    # The target holds the heads only; the goal representation is the online one (shared, as the reference's).
    for x, y in zip(jax.tree.leaves(fresh.value.heads), jax.tree.leaves(fresh.target_value), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    cfg = dataclasses.replace(CFG, tau=0.25)
    new = eqx.filter_jit(saw.target_update)(AGENT, cfg)
    heads = AGENT.value.heads
    for x, t, n in zip(*(jax.tree.leaves(m) for m in (heads, AGENT.target_value, new.target_value)), strict=True):
        np.testing.assert_allclose(np.asarray(n), 0.25 * a64(x) + 0.75 * a64(t), rtol=1e-6, atol=1e-6)
    for part in ("value", "actor", "low_actor"):
        for x, y in zip(jax.tree.leaves(getattr(AGENT, part)), jax.tree.leaves(getattr(new, part)), strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_act_deterministic_at_zero_temperature_and_clipped():
    big = perturb(AGENT, seed=3, scale=2.0)  # large means, so clipping matters
    s, g = BATCH.base.observations, BATCH.base.actor_goals
    act = eqx.filter_jit(saw.act)
    t0, t1 = jnp.asarray(0.0), jnp.asarray(1.0)  # arrays, so both temperatures share one compile
    a1 = np.asarray(act(big, s, g, key(1), t0))
    a2 = np.asarray(act(big, s, g, key(2), t0))
    np.testing.assert_array_equal(a1, a2)
    assert a1.shape == (B, ACT) and np.all(np.abs(a1) <= 1.0)
    mean, _ = np_flat(big, a64(s), a64(g))
    np.testing.assert_allclose(a1, np.clip(mean, -1, 1), **TOL)
    assert np.any(np.abs(mean) > 1.0)
    a3 = np.asarray(act(AGENT, s, g, key(1), t1))  # AGENT's means are small: the noise shows
    assert np.all(np.abs(a3) <= 1.0) and not np.array_equal(np.asarray(act(AGENT, s, g, key(1), t0)), a3)
    np.testing.assert_allclose(np.asarray(act(big, s[0], g[0], key(1), t0)), a1[0], **TOL)  # one unbatched row


# ---------------------------------------------------------------------------------------------------------------
# Waypoint batches


def tiny_dataset(lengths=(4, 6, 3)) -> Dataset:
    """Observation of row r = (r, -r); valid rows 0,1,2 | 4..8 | 10,11; last valid rows 2, 8, 11."""
    n = sum(lengths)
    rows = np.arange(n, dtype=np.float32)
    term = np.zeros(n, dtype=bool)
    term[np.cumsum(lengths) - 1] = True
    return Dataset.from_arrays(np.stack([rows, -rows], 1), np.stack([rows + 0.5, 2 * rows], 1), term)


DATA = tiny_dataset()
VALID = jnp.asarray([0, 1, 2, 4, 5, 6, 7, 8, 10, 11])
CUR = SamplerConfig(batch_size=10, actor=GoalMix(1.0, 0.0, 0.0, False))  # actor goal = the row itself
SCFG = SamplerConfig(batch_size=16)


@functools.cache
def _batches():
    """Every sampled batch the tests below need, from one compiled program."""

    @eqx.filter_jit
    def run(k):
        k_rows, k_goals = jax.random.split(k)
        return (
            saw.make_saw_batch(k, DATA, VALID, CUR, 2),
            make_batch(k, DATA, VALID, CUR),
            saw.make_saw_batch(k, DATA, jnp.tile(VALID, 20), SamplerConfig(batch_size=200), 3),
            saw.sample_saw_batch(k, DATA, SCFG, 25),
            # sample_saw_batch = uniform rows, then BATCH_FN on them (the common subprogram compiles once)
            saw.BATCH_FN(
                k_goals, DATA, sample_rows(k_rows, DATA, 16), SCFG, dataclasses.replace(CFG, subgoal_steps=25)
            ),
        )

    return run(key(0))


def test_waypoint_rows_by_hand():
    # Rows: episode 0 = 0..3 (last valid 2), episode 1 = 4..9 (last valid 8), episode 2 = 10..12 (last valid 11).
    idxs = jnp.asarray([0, 0, 0, 0, 1, 4, 5, 6, 8, 10, 11])
    goals = jnp.asarray([0, 1, 2, 7, 5, 8, 6, 5, 8, 11, 0])
    low, way = eqx.filter_jit(saw.waypoint_rows)(DATA, idxs, goals, 3)
    #         idx+3 clipped at the episode's last valid row
    np.testing.assert_array_equal(np.asarray(low), [2, 2, 2, 2, 2, 7, 8, 8, 8, 11, 11])
    # goal ahead in the same episode: min(idx + 3, goal); otherwise (other episode, or behind): the low goal row
    np.testing.assert_array_equal(np.asarray(way), [0, 1, 2, 2, 2, 7, 6, 8, 8, 11, 11])


def test_make_saw_batch_waypoints():
    sb, base, sb_traj, _, _ = _batches()
    # Actor goal = the current row: the waypoint cannot pass the goal, so it is the row itself.
    np.testing.assert_array_equal(np.asarray(sb.low_goal_idxs), [2, 2, 2, 6, 7, 8, 8, 8, 11, 11])
    np.testing.assert_array_equal(np.asarray(sb.low_goals)[:, 0], [2, 2, 2, 6, 7, 8, 8, 8, 11, 11])
    np.testing.assert_array_equal(np.asarray(sb.waypoint_idxs), np.asarray(VALID))
    np.testing.assert_array_equal(np.asarray(sb.waypoints), np.asarray(DATA.observations[VALID]))
    # The base batch is exactly make_batch's for the same key.
    for x, y in zip(jax.tree.leaves(base), jax.tree.leaves(sb.base), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # Default actor goals (uniform future in the trajectory): waypoint = min(idx + k, goal), k = 3.
    i, gidx = np.tile(np.asarray(VALID), 20), np.asarray(sb_traj.base.actor_goal_idxs)
    np.testing.assert_array_equal(np.asarray(sb_traj.waypoint_idxs), np.minimum(i + 3, gidx))
    np.testing.assert_array_equal(np.asarray(sb_traj.waypoints)[:, 0], np.minimum(i + 3, gidx).astype(np.float32))
    np.testing.assert_array_equal(np.asarray(sb_traj.low_goal_idxs), np.minimum(i + 3, np.asarray(DATA.ep_end)[i] - 1))
    assert np.any(gidx < i + 3) and np.any(gidx > i + 3)  # both sides of the min are exercised


def test_sample_saw_batch_and_batch_fn():
    _, _, _, sb, via_fn = _batches()
    assert sb.waypoints.shape == (16, 2) and sb.low_goals.shape == (16, 2)
    i = np.asarray(sb.base.idxs)
    assert np.asarray(DATA.valid)[i].all()
    np.testing.assert_array_equal(np.asarray(sb.low_goal_idxs), np.asarray(DATA.ep_end)[i] - 1)  # k = 25 > episodes
    for x, y in zip(jax.tree.leaves(via_fn), jax.tree.leaves(sb), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_with_actor_goal_falls_back_to_low_goals():
    sb = _batches()[2]
    goal = jnp.asarray([3.5, -3.5])
    fixed = eqx.filter_jit(saw.with_actor_goal)(sb, goal)
    np.testing.assert_array_equal(np.asarray(fixed.base.actor_goals), np.broadcast_to([3.5, -3.5], (200, 2)))
    np.testing.assert_array_equal(np.asarray(fixed.base.actor_goal_idxs), -1)
    np.testing.assert_array_equal(np.asarray(fixed.waypoint_idxs), np.asarray(sb.low_goal_idxs))
    np.testing.assert_array_equal(np.asarray(fixed.waypoints), np.asarray(sb.low_goals))
    for name in ("observations", "actions", "value_goals", "rewards", "masks"):
        np.testing.assert_array_equal(np.asarray(getattr(fixed.base, name)), np.asarray(getattr(sb.base, name)))


def test_registry_and_reference_defaults():
    bb = get_backbone("saw")
    assert bb is saw.BACKBONE and bb.name == saw.NAME == "saw"
    cfg = saw.Config()
    assert (cfg.expectile, cfg.low_alpha, cfg.awr_alpha, cfg.kl_alpha) == (0.7, 3.0, 3.0, 3.0)
    assert (cfg.subgoal_steps, cfg.rep_dim, cfg.const_std, cfg.tau, cfg.discount) == (25, 10, True, 0.005, 0.99)
    assert cfg.value_hidden_dims == cfg.actor_hidden_dims == cfg.low_actor_hidden_dims == (512, 512, 512)
    hash(saw.Config(value_hidden_dims=[4, 4]))
