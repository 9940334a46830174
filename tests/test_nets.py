"""Networks against independent NumPy forwards (float64), plus shapes, init and IQE properties."""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import a64, np_mlp

from ttt.nets import MLP, GaussianActor, GCValue, IQEValue, iqe_distance, make_linear


def perturb(tree, seed=0, scale=0.3):
    """Add NumPy noise to every array leaf so that biases, LayerNorm scales etc. leave their init values."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: jnp.asarray(np.asarray(x) + scale * rng.normal(size=x.shape), x.dtype), tree)


# Jitted calls (one compile per function rather than one per primitive and shape), compiled with little
# LLVM optimisation: the same computation, compiled about twice as fast, which keeps these tests quick.
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def jcall(f, *args):
    """``f(*args)`` under jit; a module ``f`` is passed as an argument (a pytree), not closed over."""
    if isinstance(f, eqx.Module):
        f, args = (lambda m, *a: m(*a)), (f, *args)
    return jax.jit(f, compiler_options=FAST_COMPILE)(*args)


def build(make, *args, **kw):
    """``make(KEY, *args, **kw)`` under jit (key first, as every module constructor takes it)."""
    key, *rest = args
    return jcall(lambda k: make(k, *rest, **kw), key)


def np_iqe_bruteforce(x, y):
    """IQE component = length of the union of intervals [x_i, y_i] (x_i < y_i), merged with Python loops."""
    intervals = sorted((a, b) for a, b in zip(x, y, strict=True) if a < b)
    total, cur_s, cur_e = 0.0, None, None
    for s, e in intervals:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def np_iqe_distance(zs, zg, alpha, k):
    out = []
    for a, b in zip(zs, zg, strict=True):
        comps = np.array([np_iqe_bruteforce(a[i : i + k], b[i : i + k]) for i in range(0, len(a), k)])
        out.append(alpha * comps.mean() + (1 - alpha) * comps.max())
    return np.array(out)


KEY = jax.random.key(0, impl="rbg")
RNG = np.random.default_rng(0)


def test_linear_init_is_flax_variance_scaling():
    lin = build(make_linear, KEY, 30, 10)
    limit = math.sqrt(3.0 / 20.0)
    w = np.asarray(lin.weight)
    assert w.shape == (30, 10) and np.all(np.abs(w) <= limit) and np.abs(w).max() > 0.8 * limit
    np.testing.assert_array_equal(np.asarray(lin.bias), 0.0)
    small = build(make_linear, KEY, 30, 10, init_scale=1e-2)
    np.testing.assert_allclose(np.asarray(small.weight), w * 0.1, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("layer_norm, activate_final", [(False, False), (True, False), (True, True)])
def test_mlp_matches_numpy(layer_norm, activate_final):
    mlp = perturb(build(MLP, KEY, 5, (8, 8, 3), activate_final=activate_final, layer_norm=layer_norm))
    assert len(mlp.norms) == ((3 if activate_final else 2) if layer_norm else 0)
    x = RNG.normal(size=(2, 4, 5)).astype(np.float32)
    out = np.asarray(jcall(mlp, x))  # extra leading axes go through the same code
    assert out.shape == (2, 4, 3)
    np.testing.assert_allclose(out, np_mlp(mlp, a64(x)), rtol=1e-5, atol=1e-5)


def test_gcvalue_ensemble_matches_numpy():
    q = perturb(build(GCValue, KEY, 5 + 5 + 2, (8, 8), layer_norm=True, ensemble=2))
    obs, goal, act = (RNG.normal(size=(4, d)).astype(np.float32) for d in (5, 5, 2))
    out = jcall(q, obs, goal, act)
    assert out.shape == (2, 4)
    x = a64(np.concatenate([obs, goal, act], -1))
    for i in range(2):
        np.testing.assert_allclose(np.asarray(out[i]), np_mlp(q.net, x, i)[:, 0], rtol=1e-5, atol=1e-5)
    assert not np.allclose(np.asarray(out[0]), np.asarray(out[1]))  # independently initialised heads
    v = build(GCValue, KEY, 10, (8, 8), ensemble=1)
    assert jcall(v, obs, goal).shape == (4,)
    assert len(v.net.norms) == 2  # LayerNorm after each hidden layer, not after the output


@pytest.mark.parametrize("const_std", [True, False])
def test_gaussian_actor_matches_numpy(const_std):
    actor = perturb(build(GaussianActor, KEY, 5, 5, 2, (8, 8), const_std=const_std))
    assert (actor.log_stds is None) == const_std
    obs, goal, act = (RNG.normal(size=(4, d)).astype(np.float32) for d in (5, 5, 2))
    assert actor.trunk.activate_final and not actor.trunk.layer_norm
    h = np_mlp(actor.trunk, a64(np.concatenate([obs, goal], -1)))
    mean = h @ a64(actor.mean_head.weight) + a64(actor.mean_head.bias)
    log_std = np.zeros(2) if const_std else np.clip(a64(actor.log_stds), -5, 2)
    std = np.broadcast_to(np.exp(log_std), mean.shape)
    logp = (-0.5 * ((a64(act) - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)).sum(-1)
    (m, s), lp, a0 = jcall(lambda a: (a(obs, goal), a.log_prob(obs, goal, act), a.sample(obs, goal, KEY, 0.0)), actor)
    np.testing.assert_allclose(np.asarray(m), mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(s), std, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(lp), logp, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(a0), mean, rtol=1e-5, atol=1e-5)


def test_mlp_init_and_actor_mean_head_scale():
    mlp = build(MLP, KEY, 30, (10, 6), final_init_scale=1e-2)
    w0, w1 = np.asarray(mlp.layers[0].weight), np.asarray(mlp.layers[1].weight)
    lim0, lim1 = math.sqrt(3.0 / 20.0), math.sqrt(3.0 * 1e-2 / 8.0)
    assert np.all(np.abs(w0) <= lim0) and np.abs(w0).max() > 0.8 * lim0
    assert np.all(np.abs(w1) <= lim1) and np.abs(w1).max() > 0.5 * lim1
    np.testing.assert_array_equal(np.asarray(mlp.layers[1].bias), 0.0)
    actor = build(GaussianActor, KEY, 5, 5, 2, (8, 8))
    w = np.asarray(actor.mean_head.weight)
    assert w.shape == (8, 2) and np.abs(w).max() <= math.sqrt(3.0 * 1e-2 / 5.0)


def test_iqe_matches_bruteforce_and_is_a_quasimetric():
    rng = RNG
    zs = rng.normal(size=(16, 12)).astype(np.float32)
    zg = rng.normal(size=(16, 12)).astype(np.float32)
    zg[:4, :6] = zs[:4, :6]  # some ties / empty components
    dist = jax.jit(iqe_distance, static_argnums=3, compiler_options=FAST_COMPILE)
    for alpha in (0.0, 0.3, 1.0):
        got = np.asarray(dist(zs, zg, np.float32(alpha), 4))
        np.testing.assert_allclose(got, np_iqe_distance(a64(zs), a64(zg), alpha, 4), rtol=1e-5, atol=1e-5)
    d = lambda a, b: np.asarray(dist(a, b, np.float32(0.5), 4))  # noqa: E731
    z3 = rng.normal(size=(16, 12)).astype(np.float32)
    np.testing.assert_allclose(d(zs, zs), 0.0, atol=1e-6)
    assert np.all(d(zs, zg) >= 0)
    assert np.all(d(zs, z3) <= d(zs, zg) + d(zg, z3) + 1e-5)  # triangle inequality
    assert not np.allclose(d(zs, zg), d(zg, zs))  # asymmetric


def test_iqe_value_head_and_gradients():
    head = build(IQEValue, KEY, 5, (8, 8), latent_dim=16, dim_per_component=4)
    assert float(head.alpha_logit) == 0.0 and len(head.phi.norms) == 2
    obs, goal = RNG.normal(size=(2, 6, 5)).astype(np.float32)
    d, zs, zg, grads = jcall(
        lambda h: (h(obs, goal), h.encode(obs), h.encode(goal), eqx.filter_grad(lambda m: m(obs, goal).sum())(h)),
        head,
    )
    np.testing.assert_allclose(np.asarray(d), np_iqe_distance(a64(zs), a64(zg), 0.5, 4), rtol=1e-5, atol=1e-5)
    leaves = jax.tree.leaves(grads)
    assert all(np.isfinite(np.asarray(g)).all() for g in leaves)
    assert any(np.abs(np.asarray(g)).max() > 0 for g in leaves)
    with pytest.raises(ValueError):
        IQEValue(KEY, 5, (8,), latent_dim=10, dim_per_component=4)


def test_dense_gradients_equal_autodiffs_of_the_plain_expression():
    """`nets.dense`'s hand-written backward pass (kernel gradient as a standard-form matmul) gives autodiff's
    gradients of `x @ w + b`, for a batch with two leading axes and under vmap (the value ensembles)."""
    from ttt.nets import dense

    kx, kw, kb, kg = jax.random.split(jax.random.key(0), 4)
    x = jax.random.normal(kx, (3, 5, 4))
    w = jax.random.normal(kw, (4, 6))
    b = jax.random.normal(kb, (6,))
    probe = jax.random.normal(kg, (3, 5, 6))

    def loss(f):
        return lambda x, w, b: jnp.sum(jnp.tanh(f(x, w, b)) * probe)

    plain = lambda x, w, b: x @ w + b  # noqa: E731
    got = jax.grad(loss(dense), argnums=(0, 1, 2))(x, w, b)
    want = jax.grad(loss(plain), argnums=(0, 1, 2))(x, w, b)
    for g, h in zip(got, want, strict=True):
        assert g.shape == h.shape
        np.testing.assert_allclose(g, h, rtol=1e-5, atol=1e-5)
    ws = jnp.stack([w, 2 * w])  # two heads, as GCValue's ensemble applies them
    got_v = jax.grad(lambda ws: jnp.sum(jax.vmap(lambda w: loss(dense)(x, w, b))(ws)))(ws)
    want_v = jax.grad(lambda ws: jnp.sum(jax.vmap(lambda w: loss(plain)(x, w, b))(ws)))(ws)
    np.testing.assert_allclose(got_v, want_v, rtol=1e-5, atol=1e-5)
