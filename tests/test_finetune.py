"""Test-time fine-tuning: the whole loss on selected rows with the actor goal fixed to g*, fresh or reused Adam."""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import toy_dataset

from ttt.agents import get_backbone, saw
from ttt.agents.common import set_actor_goal
from ttt.data.dataset import Dataset
from ttt.data.sampler import make_batch
from ttt.data.specs import get_spec
from ttt.finetune import FinetuneConfig, make_finetune
from ttt.presets import make_configs
from ttt.pretrain import init_state

GCBC = get_backbone("gcbc")
GCIQL = get_backbone("gciql")

NAV = "pointmaze-medium-navigate-v0"


TOY_LENGTHS = [15] * 6  # six straight-line point episodes of 15 rows (toy_dataset), starting in [-2, 2]^2


def tiny(agent="gcbc", **over):
    small = {"actor_hidden_dims": (16, 16), "value_hidden_dims": (16, 16), "batch_size": 16}
    return make_configs(agent, get_spec(NAV), "cpu", {**small, **over})


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]


def same(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(leaves(a), leaves(b), strict=True))


def episode_weights(data: Dataset, ep: int) -> jnp.ndarray:
    return jnp.asarray((np.asarray(data.ep_id) == ep) & np.asarray(data.valid), jnp.int32)


def test_config_errors():
    with pytest.raises(ValueError, match="N must be an int >= 0"):
        FinetuneConfig(steps=-1)
    with pytest.raises(ValueError, match="lr must be a number > 0"):
        FinetuneConfig(lr=0.0)
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        FinetuneConfig(batch_size=0)


def test_set_actor_goal_by_hand():
    data = toy_dataset(TOY_LENGTHS, spread=2)
    cfg, sampler = tiny()
    batch = make_batch(jax.random.key(0), data, jnp.arange(8), sampler)
    g = jnp.array([7.0, -3.0])
    rows = jnp.arange(8) < 5
    out = set_actor_goal(batch, g, rows)
    np.testing.assert_array_equal(np.asarray(out.actor_goals[:5]), np.tile([7.0, -3.0], (5, 1)))
    np.testing.assert_array_equal(np.asarray(out.actor_goals[5:]), np.asarray(batch.actor_goals[5:]))
    expect = [-1] * 5 + list(np.asarray(batch.actor_goal_idxs[5:]))
    np.testing.assert_array_equal(np.asarray(out.actor_goal_idxs), expect)
    # Everything else is untouched.
    for name in ("observations", "actions", "value_goals", "rewards", "masks", "value_goal_idxs"):
        np.testing.assert_array_equal(np.asarray(getattr(out, name)), np.asarray(getattr(batch, name)))


def test_saw_with_actor_goal_masks_rows():
    data = toy_dataset(TOY_LENGTHS, spread=2)
    sb = saw.make_saw_batch(jax.random.key(1), data, jnp.arange(6), tiny("saw")[1], 3)
    g = jnp.array([1.0, 2.0])
    out = saw.with_actor_goal(sb, g, jnp.array([True, False, True, False, True, False]))
    for r in range(6):
        if r % 2 == 0:
            assert np.allclose(out.base.actor_goals[r], g) and int(out.waypoint_idxs[r]) == int(sb.low_goal_idxs[r])
        else:
            assert np.allclose(out.base.actor_goals[r], sb.base.actor_goals[r])
            assert int(out.waypoint_idxs[r]) == int(sb.waypoint_idxs[r])


def test_zero_steps_keep_the_agent():
    data = toy_dataset(TOY_LENGTHS, spread=2)
    cfg, sampler = tiny()
    agent = init_state(jax.random.key(0), GCBC, 2, 2, cfg).agent
    ft = make_finetune(GCBC, cfg, sampler, FinetuneConfig(steps=0))
    out, m = ft(agent, None, jax.random.key(1), data, episode_weights(data, 0), jnp.zeros(2))
    assert same(out, agent) and np.isnan(m["loss_first"])


def test_finetune_fits_the_selected_rows_with_goal_g_star():
    """GC-BC fine-tuned on one episode's rows moves the action at those states, for goal g*, towards that
    episode's action; the loss falls."""
    data = toy_dataset(TOY_LENGTHS, spread=2)
    cfg, sampler = tiny(lr=3e-3)
    agent = init_state(jax.random.key(0), GCBC, 2, 2, cfg).agent
    ep = 3
    rows = np.flatnonzero((np.asarray(data.ep_id) == ep) & np.asarray(data.valid))
    target = np.asarray(data.actions[rows[0]])
    g_star = jnp.array([5.0, 5.0])
    ft = eqx.filter_jit(make_finetune(GCBC, cfg, sampler, FinetuneConfig(steps=150, lr=3e-3)))
    tuned, m = ft(agent, None, jax.random.key(2), data, episode_weights(data, ep), g_star)
    backbone = GCBC
    obs = data.observations[rows]
    goals = jnp.broadcast_to(g_star, obs.shape)
    before = np.abs(np.asarray(backbone.act(agent, obs, goals, jax.random.key(0), 0.0)) - target).mean()
    after = np.abs(np.asarray(backbone.act(tuned, obs, goals, jax.random.key(0), 0.0)) - target).mean()
    assert after < 0.1 < before, (before, after)
    assert float(m["loss_last"]) < float(m["loss_first"])
    assert same(tuned.value, agent.value)  # GC-BC's selection-only critic is not fine-tuned by default
    assert same(agent, init_state(jax.random.key(0), GCBC, 2, 2, cfg).agent)  # the input is never mutated


def test_fresh_optimiser_ignores_the_state_and_reuse_uses_it():
    data = toy_dataset(TOY_LENGTHS, spread=2)
    cfg, sampler = tiny()
    state = init_state(jax.random.key(0), GCBC, 2, 2, cfg)
    w = episode_weights(data, 1)
    g = jnp.array([1.0, 1.0])
    fresh = eqx.filter_jit(make_finetune(GCBC, cfg, sampler, FinetuneConfig(steps=3)))
    a1, _ = fresh(state.agent, None, jax.random.key(5), data, w, g)
    a2, _ = fresh(state.agent, state.opt_state, jax.random.key(5), data, w, g)
    assert same(a1, a2)
    # A pre-training Adam state with large moments changes the reused-state result.
    warm = jax.tree.map(lambda x: x + 1.0 if eqx.is_array(x) and x.dtype == jnp.float32 else x, state.opt_state)
    reuse = eqx.filter_jit(make_finetune(GCBC, cfg, sampler, FinetuneConfig(steps=3, reuse_opt_state=True)))
    a3, _ = reuse(state.agent, state.opt_state, jax.random.key(5), data, w, g)
    a4, _ = reuse(state.agent, warm, jax.random.key(5), data, w, g)
    assert not same(a3, a4)


@pytest.mark.parametrize("agent", ["gcbc", "gciql", "gciql-awr", "qrl", "saw"])
def test_every_backbone_finetunes_with_one_trace(agent):
    data = toy_dataset(TOY_LENGTHS, spread=2)
    cfg, sampler = tiny(agent)
    name = get_backbone({"gciql-awr": "gciql"}.get(agent, agent))
    a0 = init_state(jax.random.key(0), name, 2, 2, cfg).agent
    ft = eqx.filter_jit(
        eqx.debug.assert_max_traces(make_finetune(name, cfg, sampler, FinetuneConfig(steps=2), mix=0.5), max_traces=1)
    )
    for ep, g in ((0, jnp.array([1.0, 0.0])), (2, jnp.array([0.0, -1.0]))):
        tuned, m = ft(a0, None, jax.random.key(ep), data, episode_weights(data, ep), g)
        assert np.isfinite(float(m["loss_last"])) and not same(tuned, a0)


def test_gcbc_full_loss_trains_the_critic_and_leaves_the_actor_identical():
    """`full_loss` also fine-tunes GC-BC's critic (and moves its target), which changes no actor parameter."""
    data = toy_dataset(TOY_LENGTHS, spread=2)
    cfg, sampler = tiny()
    agent = init_state(jax.random.key(0), GCBC, 2, 2, cfg).agent
    args = (agent, None, jax.random.key(3), data, episode_weights(data, 2), jnp.array([2.0, -1.0]))
    short, _ = make_finetune(GCBC, cfg, sampler, FinetuneConfig(steps=20))(*args)
    full, _ = make_finetune(GCBC, cfg, sampler, FinetuneConfig(steps=20, full_loss=True))(*args)
    assert not same(full.value, agent.value) and not same(full.target_value, agent.target_value)
    for x, y in zip(leaves(short.actor), leaves(full.actor), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
    assert not same(short.actor, agent.actor)


@pytest.mark.parametrize("agent, reuse", [("gcbc", False), ("gcbc", True), ("gciql", True)])
def test_leaving_frozen_fields_out_of_adam_changes_nothing(agent, reuse):
    """Adam over the differentiated arrays only (`Backbone.frozen`) gives the agent an Adam step over every array
    gives (written out here), fresh or from a pre-training state with non-zero moments on the trained arrays."""
    import optax

    from ttt.finetune import make_ttt_step

    data = toy_dataset(TOY_LENGTHS, spread=2)
    cfg, sampler = tiny(agent)
    backbone = get_backbone(agent)
    state = init_state(jax.random.key(0), backbone, 2, 2, cfg)
    tcfg = backbone.ttt_config(cfg)
    assert backbone.frozen(tcfg)  # this backbone has fields to leave out
    ft = FinetuneConfig(steps=1, reuse_opt_state=reuse)
    ts = make_ttt_step(backbone, cfg, sampler, ft)
    k = jax.random.key(4)
    batch = ts.draw(k, jax.random.key(5), data, ts.table(episode_weights(data, 1)), jnp.array([1.0, 0.5]))
    full_state = state.opt_state if reuse else optax.adam(ft.lr).init(eqx.filter(state.agent, eqx.is_array))
    if reuse:  # moments as after pre-training: non-zero where gradients flowed, zero on the frozen fields (below)
        full_state = jax.tree.map(lambda x: x + 0.01 if eqx.is_array(x) and x.dtype == jnp.float32 else x, full_state)
    (_, _), grads = eqx.filter_value_and_grad(backbone.loss, has_aux=True)(state.agent, batch, k, tcfg)
    zero = {name: jax.tree.map(jnp.zeros_like, getattr(grads, name)) for name in backbone.frozen(tcfg)
            if getattr(grads, name, None) is not None}  # fmt: skip
    for name, z in zero.items():  # the frozen fields' gradients are exactly zero ...
        assert all(not np.asarray(x).any() for x in jax.tree.leaves(getattr(grads, name)))
        if reuse:  # ... and so are their pre-training moments
            full_state = eqx.tree_at(
                lambda s, name=name: [getattr(s[0].mu, name), getattr(s[0].nu, name)], full_state, [z, z]
            )
    updates, _ = optax.adam(ft.lr).update(grads, full_state, eqx.filter(state.agent, eqx.is_array))
    # The targets move from the online networks before the step (OGBench's order), the rest by Adam's step.
    stepped, moved = eqx.apply_updates(state.agent, updates), backbone.target_update(state.agent, tcfg)
    names = [n for n in backbone.frozen(tcfg) if getattr(stepped, n) is not None]
    expected = eqx.tree_at(lambda a: [getattr(a, n) for n in names], stepped, [getattr(moved, n) for n in names])
    got, _, _ = ts.update(state.agent, ts.restrict(state.agent, full_state) if reuse else ts.init(state.agent),
                          batch, k)  # fmt: skip
    for x, y in zip(leaves(expected), leaves(got), strict=True):
        np.testing.assert_array_equal(x, y)


def _perturbed(agent, scale=0.05, seed=9):
    """`agent` with every float array moved by noise: the target networks then differ from the online ones."""
    leaves_, treedef = jax.tree.flatten(agent)
    keys = jax.random.split(jax.random.key(seed), len(leaves_))
    out = [x + scale * jax.random.normal(k, x.shape, x.dtype) if eqx.is_inexact_array(x) else x
           for x, k in zip(leaves_, keys, strict=True)]  # fmt: skip
    return jax.tree.unflatten(treedef, out)


@pytest.mark.parametrize("agent, actors", [("gciql", ("actor",)), ("saw", ("actor", "low_actor")),
                                           ("qrl", ("actor",))])  # fmt: skip
def test_actor_only_moves_the_policy_networks_and_nothing_else(agent, actors):
    """`train = 'actor'`: the policy networks move, every other field (critic, value, targets, QRL's lambda) keeps
    its pre-trained arrays bit for bit, even where a target differs from its online network; `train = 'all'`
    moves the critic too."""
    data = toy_dataset(TOY_LENGTHS, spread=2)
    cfg, sampler = tiny(agent)
    backbone = get_backbone(agent)
    a0 = _perturbed(init_state(jax.random.key(0), backbone, 2, 2, cfg).agent)
    assert backbone.actors == actors
    args = (a0, None, jax.random.key(3), data, episode_weights(data, 2), jnp.array([2.0, -1.0]))
    only, _ = make_finetune(backbone, cfg, sampler, FinetuneConfig(steps=5, train="actor"))(*args)
    full, _ = make_finetune(backbone, cfg, sampler, FinetuneConfig(steps=5))(*args)
    for f in dataclasses.fields(a0):
        if f.metadata.get("static", False) or getattr(a0, f.name) is None:
            continue
        moved = not same(getattr(only, f.name), getattr(a0, f.name))
        assert moved == (f.name in actors), f.name
    assert not same(full.value, a0.value)


def test_actor_only_step_is_adam_on_the_actor_loss_alone():
    """One GC-IQL step with `train = 'actor'` equals Adam (written out) on the gradient of the DDPG+BC actor loss
    alone with respect to the actor: the value and critic losses contribute nothing."""
    import optax

    from ttt.agents import gciql
    from ttt.finetune import make_ttt_step

    data = toy_dataset(TOY_LENGTHS, spread=2)
    cfg, sampler = tiny("gciql")
    a0 = _perturbed(init_state(jax.random.key(0), GCIQL, 2, 2, cfg).agent)
    ft = FinetuneConfig(steps=1, lr=1e-2, train="actor")
    ts = make_ttt_step(GCIQL, cfg, sampler, ft)
    k = jax.random.key(4)
    batch = ts.draw(k, jax.random.key(5), data, ts.table(episode_weights(data, 1)), jnp.array([1.0, 0.5]))
    got, _, _ = ts.update(a0, ts.init(a0), batch, k)

    def actor_only(actor):
        return gciql.actor_loss(eqx.tree_at(lambda a: a.actor, a0, actor), batch, k, cfg)[0]

    grads = eqx.filter_grad(actor_only)(a0.actor)
    opt = optax.adam(ft.lr)
    updates, _ = opt.update(grads, opt.init(eqx.filter(a0.actor, eqx.is_array)), a0.actor)
    want = eqx.apply_updates(a0.actor, updates)
    for x, y in zip(leaves(got.actor), leaves(want), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)
    assert same(got.critic, a0.critic) and same(got.value, a0.value) and same(got.target_critic, a0.target_critic)


def test_finetune_alpha_replaces_the_bc_weight():
    """`alpha` during fine-tuning: the actor's gradient is that of ``q_loss + alpha * bc`` with the given alpha
    (hand-computed from the two terms at a tiny batch); `alpha` equal to the checkpoint's changes nothing; a
    backbone without alpha refuses it."""
    from ttt.agents import gciql
    from ttt.finetune import finetune_backbone_config, make_ttt_step

    data = toy_dataset(TOY_LENGTHS, spread=2)
    cfg, sampler = tiny("gciql", alpha=0.003)
    a0 = init_state(jax.random.key(0), GCIQL, 2, 2, cfg).agent
    k = jax.random.key(4)
    ts0 = make_ttt_step(GCIQL, cfg, sampler, FinetuneConfig(steps=1, train="actor"))
    batch = ts0.draw(k, jax.random.key(5), data, ts0.table(episode_weights(data, 1)), jnp.array([1.0, 0.5]))

    def term(actor, name, c):
        return gciql.actor_loss(eqx.tree_at(lambda a: a.actor, a0, actor), batch, k, c)[1][name]

    def grad_at(alpha):
        c = finetune_backbone_config(GCIQL, cfg, FinetuneConfig(train="actor", alpha=alpha))
        assert c.alpha == (cfg.alpha if alpha is None else alpha)
        return eqx.filter_grad(lambda actor: gciql.actor_loss(eqx.tree_at(lambda a: a.actor, a0, actor), batch, k,
                                                              c)[0])(a0.actor)  # fmt: skip

    g_q = eqx.filter_grad(lambda actor: term(actor, "q_loss", cfg))(a0.actor)
    g_bc1 = eqx.filter_grad(lambda actor: term(actor, "bc_loss", dataclasses.replace(cfg, alpha=1.0)))(a0.actor)
    for alpha in (0.0, 0.3, 2.5):
        for x, q, b in zip(leaves(grad_at(alpha)), leaves(g_q), leaves(g_bc1), strict=True):
            np.testing.assert_allclose(x, q + alpha * b, rtol=1e-5, atol=1e-6)
    # Through the fine-tuning step itself: alpha 0.003 (the checkpoint's) equals None; a large alpha differs.
    args = (a0, None, jax.random.key(3), data, episode_weights(data, 2), jnp.array([2.0, -1.0]))
    run = lambda **kw: make_finetune(GCIQL, cfg, sampler, FinetuneConfig(steps=3, **kw))(*args)[0]  # noqa: E731
    assert same(run(alpha=0.003), run()) and not same(run(alpha=3.0).actor, run().actor)
    gcfg, _ = tiny("gcbc")
    with pytest.raises(ValueError, match="gcbc has none"):
        finetune_backbone_config(GCBC, gcfg, FinetuneConfig(alpha=0.1))


def test_finetune_train_and_alpha_errors():
    with pytest.raises(ValueError, match="train must be one of all, actor"):
        FinetuneConfig(train="critic")
    with pytest.raises(ValueError, match="alpha must be a number >= 0"):
        FinetuneConfig(alpha=-1.0)
    with pytest.raises(ValueError, match="alpha must be a number >= 0"):
        FinetuneConfig(alpha=float("nan"))


def test_make_setup_names_the_fine_tuning_options_in_its_errors():
    from ttt.errors import TttError
    from ttt.setups import make_setup

    cfg, sampler = tiny("gciql")
    spec = get_spec(NAV)
    with pytest.raises(TttError, match=r"--ft-alpha must be a finite number >= 0, got -1"):
        make_setup("ttt", GCIQL, cfg, sampler, spec, 1000, ft_alpha=-1.0, label=lambda n: "--" + n.replace("_", "-"))
    with pytest.raises(TttError, match=r"ft_train must be one of all, actor, got 'critic'"):
        make_setup("ttt", GCIQL, cfg, sampler, spec, 1000, ft_train="critic")
    with pytest.raises(TttError, match="gcbc has none"):
        make_setup("ttt", GCBC, *tiny("gcbc"), spec, 1000, ft_alpha=0.3)
    assert make_setup("ttt", GCIQL, cfg, sampler, spec, 1000, ft_alpha=0.3).ttt.finetune.alpha == 0.3
