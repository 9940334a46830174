"""SAC (ttt.data.sac) and the ant expert's environment and training loop (ttt.data.expert)."""

from __future__ import annotations

import dataclasses
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ttt.data.expert import DirectionalAnt, NumpyExpert, load_actor, save_actor, train_expert
from ttt.data.sac import (
    Replay,
    SACConfig,
    TanhGaussianActor,
    init_sac,
    make_sac_update,
    sac_loss,
    squashed_sample_log_prob,
)

TINY = SACConfig(actor_hidden_dims=(5,), value_hidden_dims=(6,), batch_size=4)


def _np_mlp(mlp, x, activate_final):
    n = len(mlp.layers)
    for i, layer in enumerate(mlp.layers):
        x = x @ np.asarray(layer.weight, np.float64) + np.asarray(layer.bias, np.float64)
        if i + 1 < n or activate_final:
            x = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    return x


def _np_actor(actor, obs):
    h = _np_mlp(actor.trunk, obs, True)
    mean = h @ np.asarray(actor.mean_head.weight, np.float64) + np.asarray(actor.mean_head.bias, np.float64)
    log_std = h @ np.asarray(actor.log_std_head.weight, np.float64) + np.asarray(actor.log_std_head.bias, np.float64)
    return mean, np.clip(log_std, -5, 2)


def _np_q(critic, obs, act):
    x = np.concatenate([obs, act], -1)
    nets = [jax.tree.map(lambda p, i=i: p[i], critic.net) for i in range(2)]
    return np.stack([_np_mlp(net, x, False)[..., 0] for net in nets])


def _np_squash(mean, log_std, eps):
    """tanh-squashed Gaussian sample and log-density, the Jacobian as log(1 - tanh(x)^2) directly."""
    x = mean + np.exp(log_std) * eps
    log_n = np.sum(-0.5 * eps**2 - log_std - 0.5 * np.log(2 * np.pi), -1)
    return np.tanh(x), log_n - np.sum(np.log(1 - np.tanh(x) ** 2), -1)


def _batch(rng, n=4, obs_dim=3, act_dim=2):
    return dict(
        observations=rng.normal(size=(n, obs_dim)).astype(np.float32),
        actions=rng.uniform(-1, 1, (n, act_dim)).astype(np.float32),
        rewards=rng.normal(size=n).astype(np.float32),
        masks=np.array([1, 0, 1, 1], np.float32),
        next_observations=rng.normal(size=(n, obs_dim)).astype(np.float32),
    )


def test_squashed_log_prob_matches_change_of_variables():
    rng = np.random.default_rng(0)
    mean, log_std, eps = rng.normal(size=(3, 6, 4)) * np.array([1.0, 0.5, 1.0])[:, None, None]
    a, lp = squashed_sample_log_prob(jnp.asarray(mean), jnp.asarray(log_std), jnp.asarray(eps))
    a_ref, lp_ref = _np_squash(mean, log_std, eps)
    np.testing.assert_allclose(a, a_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lp, lp_ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("reduce", ["min", "mean"])  # OGBench's min_q=True (the ant) and False (the humanoid)
def test_sac_loss_matches_numpy_on_a_hand_built_batch(reduce):
    cfg = TINY if reduce == "min" else dataclasses.replace(TINY, min_q=False)
    red = getattr(np, reduce)
    rng = np.random.default_rng(1)
    obs_dim, act_dim = 3, 2
    state = init_sac(jax.random.key(3), obs_dim, act_dim, TINY)
    # Perturb every parameter so the heads (init scale 1e-2) and log-alpha are not near-trivial.
    leaves, tdef = jax.tree.flatten(state.params)
    keys = jax.random.split(jax.random.key(4), len(leaves))
    params = jax.tree.unflatten(
        tdef, [x + 0.3 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
    )
    target = jax.tree.map(lambda x: x + 0.1, params.critic)
    batch = _batch(rng)
    key = jax.random.key(7)
    loss, m = sac_loss(params, target, {k: jnp.asarray(v) for k, v in batch.items()}, key, cfg, act_dim)

    # The same normal draws the loss makes (the RNG is not under test; the arithmetic is).
    k_critic, k_actor = jax.random.split(key)
    eps_next = np.asarray(jax.random.normal(k_critic, (4, act_dim)), np.float64)
    eps_pi = np.asarray(jax.random.normal(k_actor, (4, act_dim)), np.float64)
    alpha = math.exp(float(params.log_alpha))
    b = {k: np.asarray(v, np.float64) for k, v in batch.items()}
    next_a, next_lp = _np_squash(*_np_actor(params.actor, b["next_observations"]), eps_next)
    next_q = red(_np_q(target, b["next_observations"], next_a), 0)
    y = b["rewards"] + 0.99 * b["masks"] * (next_q - alpha * next_lp)
    q = _np_q(params.critic, b["observations"], b["actions"])
    critic_loss = np.mean((q - y[None]) ** 2)
    a, lp = _np_squash(*_np_actor(params.actor, b["observations"]), eps_pi)
    actor_loss = np.mean(alpha * lp - red(_np_q(params.critic, b["observations"], a), 0))
    entropy = -lp.mean()
    alpha_loss = alpha * (entropy - (-0.5 * act_dim))

    np.testing.assert_allclose(float(m["critic_loss"]), critic_loss, rtol=1e-4)
    np.testing.assert_allclose(float(m["actor_loss"]), actor_loss, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(float(m["alpha_loss"]), alpha_loss, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(float(loss), critic_loss + actor_loss + alpha_loss, rtol=1e-4, atol=1e-5)

    # Gradient routing: d/d log_alpha of the total is that of the temperature loss alone, alpha * (H - target);
    # the critics' gradient is that of the critic loss alone (the actor loss holds them fixed).
    grads = jax.grad(lambda p: sac_loss(p, target, {k: jnp.asarray(v) for k, v in batch.items()}, key, cfg, 2)[0])(
        params
    )
    np.testing.assert_allclose(float(grads.log_alpha), alpha * (entropy + 0.5 * act_dim), rtol=1e-4)

    def critic_only(critic):
        qs = critic(jnp.asarray(b["observations"], jnp.float32), jnp.zeros((4, 0)), jnp.asarray(batch["actions"]))
        return jnp.mean((qs - jnp.asarray(y, jnp.float32)[None]) ** 2)

    g_ref = jax.grad(critic_only)(params.critic)
    for g, r in zip(jax.tree.leaves(grads.critic), jax.tree.leaves(g_ref), strict=True):
        np.testing.assert_allclose(g, r, rtol=2e-3, atol=1e-5)


def test_update_moves_targets_by_polyak_and_counts():
    state = init_sac(jax.random.key(0), 3, 2, TINY)
    batch = {k: jnp.asarray(v) for k, v in _batch(np.random.default_rng(2)).items()}
    new, metrics = make_sac_update(TINY, 2)(state, batch, jax.random.key(1))
    assert int(new.updates) == 1 and np.isfinite(float(metrics["critic_loss"]))
    for t_new, c_new, t_old in zip(
        jax.tree.leaves(new.target_critic),
        jax.tree.leaves(new.params.critic),
        jax.tree.leaves(state.target_critic),
        strict=True,
    ):
        np.testing.assert_allclose(t_new, 0.005 * c_new + 0.995 * t_old, rtol=1e-6, atol=1e-7)
    changed = [
        not np.allclose(a, b) for a, b in zip(jax.tree.leaves(new.params), jax.tree.leaves(state.params), strict=True)
    ]
    assert all(changed)  # one Adam over actor, critics and temperature


def test_replay_add_and_sample_stay_in_the_filled_part():
    r = Replay.empty(10, 2, 1)
    for i in range(3):
        r = r.add(jnp.full(2, i), jnp.full(1, i), i, 1.0, jnp.full(2, i + 1))
    b = r.sample(jax.random.key(0), 64)
    assert int(r.size) == 3 and set(np.asarray(b["rewards"]).tolist()) <= {0.0, 1.0, 2.0}
    np.testing.assert_array_equal(b["next_observations"][:, 0], b["observations"][:, 0] + 1)


def test_directional_ant_reward_and_resampling_by_hand():
    env = DirectionalAnt(np.random.default_rng(0), resample_interval=3)
    obs = env.reset()
    assert obs.shape == (29,) and np.isclose(np.linalg.norm(obs[-2:]), 1.0)
    np.testing.assert_allclose(obs[:27], np.concatenate([env.mj.data.qpos[2:], env.mj.data.qvel]))
    rng = np.random.default_rng(1)
    zs = [env.z.copy()]
    for t in range(1, 8):
        z = env.z.copy()
        before = env.mj.data.qpos[:2].copy()
        obs, reward, term, trunc = env.step(rng.uniform(-1, 1, 8))
        after = env.mj.data.qpos[:2].copy()
        assert reward == pytest.approx(float((after - before) @ z))
        assert not term and not trunc
        np.testing.assert_array_equal(obs[-2:], env.z)
        if t % 3 == 0:
            assert not np.allclose(env.z, z)  # redrawn after steps 3 and 6
            zs.append(env.z.copy())
        else:
            np.testing.assert_array_equal(env.z, z)
    assert len(zs) == 3
    # Leaving the healthy height range [0.2, 1.0] terminates (here: torso lifted to 1.5 m).
    qpos = env.mj.data.qpos.copy()
    qpos[2] = 1.5
    env.mj.set_state(qpos, np.zeros_like(env.mj.data.qvel))
    assert env.step(np.zeros(8))[2]


class _Heading:
    """A trivial direction task: observe a unit direction z, reward a . z, 20 steps."""

    obs_dim, action_dim = 2, 2

    def __init__(self, rng):
        self.rng, self.t, self.z = rng, 0, np.zeros(2)

    def _draw(self):
        z = self.rng.standard_normal(2)
        self.z = z / np.linalg.norm(z)

    def reset(self):
        self.t = 0
        self._draw()
        return self.z.copy()

    def step(self, action):
        r = float(np.clip(action, -1, 1) @ self.z)
        self.t += 1
        self._draw()
        return self.z.copy(), r, False, self.t >= 20

    def snapshot(self):
        return dict(rng_state=self.rng.bit_generator.state, z=self.z.copy())

    def restore(self, snap):
        self.rng.bit_generator.state = snap["rng_state"]
        self.t, self.z = 0, np.asarray(snap["z"])
        return self.z.copy()


SMOKE = SACConfig(
    actor_hidden_dims=(32, 32), value_hidden_dims=(32, 32), lr=3e-3, batch_size=64, random_steps=200, init_alpha=0.1
)


def test_training_improves_return_on_a_trivial_task(tmp_path):
    log = train_expert(tmp_path, steps=1590, seed=0, cfg=SMOKE, checkpoint_every=400, env_factory=_Heading)
    rets = np.array([r[1] for r in log.returns])
    early, late = rets[:10].mean(), rets[-10:].mean()  # random actions; the trained policy
    assert abs(early) < 6 and late > 15, (early, late)  # at most sqrt(2) * 20 = 28.3
    actor, cfg, meta = load_actor(tmp_path / "expert.npz")
    assert meta["step"] == 1590 and cfg.actor_hidden_dims == (32, 32)
    # Actors kept: one per checkpoint (at episode ends) and the last, mid-episode.
    kept = [p.name for p in sorted((tmp_path / "actors").glob("*.npz"))]
    assert kept == [f"actor-{s:08d}.npz" for s in (400, 800, 1200, 1590)], kept
    z = np.array([[0.6, 0.8], [-1.0, 0.0]])
    a = np.asarray(actor.mode(jnp.asarray(z, jnp.float32)))
    assert (np.sum(a * z, -1) > 0.7).all()  # heads along z


def test_resumed_training_equals_uninterrupted(tmp_path):
    whole = train_expert(tmp_path / "a", steps=600, seed=1, cfg=SMOKE, checkpoint_every=100, env_factory=_Heading)
    train_expert(tmp_path / "b", steps=300, seed=1, cfg=SMOKE, checkpoint_every=100, env_factory=_Heading)
    resumed = train_expert(tmp_path / "b", steps=600, seed=1, cfg=SMOKE, checkpoint_every=100, env_factory=_Heading)
    assert [r[0] for r in resumed.returns] == [r[0] for r in whole.returns]
    np.testing.assert_allclose([r[1] for r in resumed.returns], [r[1] for r in whole.returns], rtol=1e-4, atol=1e-4)
    a, _, _ = load_actor(tmp_path / "a" / "expert.npz")
    b, _, _ = load_actor(tmp_path / "b" / "expert.npz")
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)
    lines = (tmp_path / "b" / "train.csv").read_text().splitlines()
    assert len(lines) == 1 + 600 // 20  # one line per episode, none twice
    # Every checkpoint leaves its actor to evaluate later; the last one is the expert.
    snaps = sorted((tmp_path / "b" / "actors").glob("actor-*.npz"))
    assert [p.name for p in snaps] == [f"actor-{s:08d}.npz" for s in (100, 200, 300, 400, 500, 600)]
    _, _, meta = load_actor(snaps[2])
    assert meta["step"] == 300 and meta["seed"] == 1
    for x, y in zip(jax.tree.leaves(load_actor(snaps[-1])[0]), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)
    # Asking again for what is done trains nothing and gives the run's log back.
    t = (tmp_path / "b" / "expert.npz").stat().st_mtime_ns
    again = train_expert(tmp_path / "b", steps=600, seed=1, cfg=SMOKE, env_factory=_Heading)
    assert (tmp_path / "b" / "expert.npz").stat().st_mtime_ns == t and again.step == 600
    np.testing.assert_allclose([r[1] for r in again.returns], [r[1] for r in whole.returns], atol=1e-3)
    # Other settings in the same folder are refused.
    with pytest.raises(Exception, match="other settings"):
        train_expert(tmp_path / "b", steps=700, seed=2, cfg=SMOKE, env_factory=_Heading)


def test_numpy_expert_equals_the_actor_mode(tmp_path):
    cfg = SACConfig()
    actor = TanhGaussianActor(jax.random.key(0), 29, 8, cfg.actor_hidden_dims, final_init_scale=1.0)
    obs = np.random.default_rng(0).normal(size=(5, 29))
    np.testing.assert_allclose(NumpyExpert(actor)(obs), actor.mode(jnp.asarray(obs, jnp.float32)), atol=2e-5)
    save_actor(tmp_path / "expert.npz", actor, cfg, dict(step=0))
    again, _, _ = load_actor(tmp_path)
    assert eqx.tree_equal(eqx.filter(again, eqx.is_array), eqx.filter(actor, eqx.is_array))
    assert NumpyExpert(again).digest() == NumpyExpert(actor).digest()
    assert dataclasses.asdict(cfg)["lr"] == 1e-4


@pytest.mark.parametrize(
    "args, expect",
    [
        (["expert", "eval", "NOTES"], "is not a file written by `ttt expert train`"),
        (
            ["expert", "eval", "E", "--episodes", "0", "--maze", "pointmaze-medium-v0"],
            "--maze must be one of the ant mazes",
        ),
        (["expert", "eval", "E", "--episodes", "0", "--noise", "-1"], "--noise must be >= 0, got -1.0"),
        (["expert", "eval", "missing.npz"], "no expert at 'missing.npz'"),
        (["expert", "train", "ant", "--steps", "0"], "--steps must be >= 1, got 0"),
        (["expert", "train", "ant", "--out", "NOTES", "--steps", "10"], "cannot use NOTES as the run directory"),
    ],
)
def test_expert_cli_errors_are_one_line(tmp_path, monkeypatch, capsys, args, expect):
    from ttt.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "NOTES").write_text("not an expert")
    actor = TanhGaussianActor(jax.random.key(0), 29, 8, (4,))
    save_actor(tmp_path / "E", actor, SACConfig(actor_hidden_dims=(4,)), dict(step=0))
    rc = main(args)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and expect in err, err
