"""Pre-training: seed vmap, chunked scan without retrace, bit-exact checkpoints, resume, non-finite stops."""

from __future__ import annotations

import json

import equinox as eqx
import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ttt.agents import get_backbone
from ttt.checkpoint import compute_info
from ttt.data.dataset import Dataset
from ttt.data.specs import get_spec
from ttt.errors import TttError
from ttt.presets import make_configs
from ttt.pretrain import (
    init_state,
    load_checkpoint,
    make_chunk,
    make_update,
    pretrain,
    read_meta,
    save_checkpoint,
)

GCIQL = get_backbone("gciql")

NAV = "pointmaze-medium-navigate-v0"


def toy_dataset(episodes=4, length=12, seed=0) -> Dataset:
    """Point-like episodes: obs = xy walking in a straight line with the action as its step."""
    return helpers.toy_dataset([length] * episodes, spread=1, seed=seed, step=0.1)


def tiny(agent="gciql", **over):
    small = {"actor_hidden_dims": (8, 8), "value_hidden_dims": (8, 8), "batch_size": 8}
    return make_configs(agent, get_spec(NAV), "cpu", {**small, **over})


def stacked(backbone, data, cfg, seeds):
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(seeds))
    states = eqx.filter_vmap(lambda k: init_state(k, backbone, data.obs_dim, data.action_dim, cfg))(keys)
    return states, keys


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]


def test_vmap_over_seeds_equals_loop():
    data = toy_dataset()
    cfg, sampler = tiny()
    states, keys = stacked(GCIQL, data, cfg, 3)
    chunk = make_chunk(GCIQL, cfg, sampler, 5)
    out, _ = chunk(states, keys, data)
    update = eqx.filter_jit(make_update(GCIQL, cfg, sampler))

    def seed_slice(tree, s):
        return jax.tree.map(lambda x: x[s] if eqx.is_array(x) else x, tree)

    for s in range(3):
        st = seed_slice(states, s)
        for _ in range(5):
            st, _, _ = update(st, keys[s], data)
        mine = seed_slice(out, s)
        for a, b in zip(leaves(st), leaves(mine), strict=True):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)


def test_interrupted_chunked_run_matches_uninterrupted(tmp_path):
    data = toy_dataset()
    cfg, sampler = tiny()
    whole = pretrain("gciql", NAV, data, cfg, sampler, steps=12, seeds=2, out=tmp_path / "a", chunk_steps=12)
    # Same run in chunks of 4, interrupted after 8 steps: step keys are fold_in(seed, step), so it matches.
    pretrain("gciql", NAV, data, cfg, sampler, steps=8, seeds=2, out=tmp_path / "b", chunk_steps=4)
    assert read_meta(tmp_path / "b")["step"] == 8
    rest = pretrain("gciql", NAV, data, cfg, sampler, steps=12, seeds=2, out=tmp_path / "b", chunk_steps=4)
    for a, b in zip(leaves(whole.states), leaves(rest.states), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # The result's metadata is what meta.json holds; asked again, nothing is left to train and the checkpoint found
    # is the result.
    assert rest.meta == read_meta(tmp_path / "b") and rest.meta["step"] == 12
    again = pretrain("gciql", NAV, data, cfg, sampler, steps=12, seeds=2, out=tmp_path / "b", chunk_steps=4)
    assert again.meta == rest.meta and again.history == [] and again.start_step == 12


def test_checkpoint_records_which_compute_trained_which_steps(tmp_path, monkeypatch):
    # CPU arithmetic depends on the cores and XLA flags, so the metadata keeps one segment per change of them
    data = toy_dataset()
    cfg, sampler = tiny()
    first = pretrain("gciql", NAV, data, cfg, sampler, steps=4, seeds=1, out=tmp_path, chunk_steps=4).meta
    assert first["compute"] == [{"from_step": 0, **compute_info()}]
    assert first["compute"][0]["cpus"] >= 1 and first["compute"][0]["device"] == "cpu"
    same = pretrain("gciql", NAV, data, cfg, sampler, steps=8, seeds=1, out=tmp_path, chunk_steps=4).meta
    assert same["compute"] == first["compute"]  # resumed on the same compute: still one segment
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
    other = pretrain("gciql", NAV, data, cfg, sampler, steps=12, seeds=1, out=tmp_path, chunk_steps=4).meta
    assert [c["from_step"] for c in other["compute"]] == [0, 8]
    assert other["compute"][1]["xla_flags"] == "--xla_cpu_multi_thread_eigen=false"


def test_no_retrace_between_chunks():
    data = toy_dataset()
    cfg, sampler = tiny()
    states, keys = stacked(GCIQL, data, cfg, 2)
    chunk = make_chunk(GCIQL, cfg, sampler, 3, max_traces=1)
    for _ in range(3):
        states, _ = chunk(states, keys, data)
    assert int(states.step[0]) == 9
    # A dataset of the same shapes reuses the program too.
    chunk(states, keys, toy_dataset(seed=1))


def test_checkpoint_round_trips_bit_exactly(tmp_path):
    data = toy_dataset()
    cfg, sampler = tiny("gcbc")
    res = pretrain("gcbc", NAV, data, cfg, sampler, steps=3, seeds=2, out=tmp_path, chunk_steps=3)
    loaded, meta = load_checkpoint(tmp_path)
    for a, b in zip(leaves(res.states), leaves(loaded), strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert meta["agent"] == "gcbc" and meta["dataset"] == NAV and meta["step"] == 3 and meta["seeds"] == 2
    assert meta["obs_dim"] == 2 and "jax" in meta["versions"] and len(meta["dataset_hash"]) == 16
    assert len(list(tmp_path.glob("state-*.eqx"))) == 1
    # Save twice more: older state files are removed, meta.json always names an existing one.
    save_checkpoint(tmp_path, loaded, {k: v for k, v in meta.items() if k not in ("step", "state_file")})
    assert (tmp_path / read_meta(tmp_path)["state_file"]).exists()


def test_resume_refuses_other_dataset_or_config(tmp_path):
    data = toy_dataset()
    cfg, sampler = tiny()
    pretrain("gciql", NAV, data, cfg, sampler, steps=2, seeds=1, out=tmp_path, chunk_steps=2)
    with pytest.raises(TttError, match="different copy of"):
        pretrain("gciql", NAV, toy_dataset(seed=5), cfg, sampler, steps=4, seeds=1, out=tmp_path, chunk_steps=2)
    cfg2, _ = tiny(lr=1e-3)
    with pytest.raises(TttError, match="another config"):
        pretrain("gciql", NAV, data, cfg2, sampler, steps=4, seeds=1, out=tmp_path, chunk_steps=2)
    with pytest.raises(TttError, match="another seeds"):
        pretrain("gciql", NAV, data, cfg, sampler, steps=4, seeds=2, out=tmp_path, chunk_steps=2)


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    data = toy_dataset()
    cfg, sampler = tiny(lr=1e15)  # Adam moves every weight by ~lr per step: overflow within a few steps
    with pytest.raises(TttError, match=r"non-finite (\S+) at step (\d+)") as info:
        pretrain("gciql", NAV, data, cfg, sampler, steps=50, seeds=1, out=tmp_path, chunk_steps=1)
    msg = str(info.value)
    bad_step = int(msg.split(" at step ")[1].split()[0])
    saved = read_meta(tmp_path)["step"]
    assert saved == bad_step - 1 and f"last good checkpoint (step {saved})" in msg
    states, _ = load_checkpoint(tmp_path)
    assert all(np.isfinite(x).all() for x in leaves(states.agent))
    json.loads((tmp_path / "meta.json").read_text())
