"""The humanoid expert (ttt.data.expert with ROBOTS["humanoid"]): OGBench's direction-following humanoid, the
recipe's SAC settings, the non-pickle expert files and their checkpoints."""

from __future__ import annotations

import dataclasses
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ttt.data.expert import (
    ROBOTS,
    DirectionalRobot,
    NumpyExpert,
    TrainLog,
    _read_npz,
    _restore_carry,
    _write_checkpoint,
    humanoid_up,
    load_actor,
    save_actor,
)
from ttt.data.sac import Replay, SACConfig, TanhGaussianActor, TrainCarry, init_sac, make_train_step
from ttt.errors import TttError


def test_directional_humanoid_equals_ogbench_wrapper():
    """Observation and reward equal OGBench's DMCHumanoidXYWrapper's for the same start, direction and actions."""
    import gymnasium
    from ogbench.online_locomotion.wrappers import DMCHumanoidXYWrapper

    ours = DirectionalRobot("humanoid", np.random.default_rng(0))
    ref = DMCHumanoidXYWrapper(gymnasium.make("online-humanoid-v0"), resample_interval=200)
    obs = ours.reset()
    ref_obs, _ = ref.reset(seed=0)
    ref.unwrapped.set_state(ours.mj.data.qpos.copy(), ours.mj.data.qvel.copy())
    ref.z = ours.z.copy()
    ref_obs = np.concatenate([ref.unwrapped._get_obs(), ref.z])
    assert obs.shape == (69,) and ours.action_dim == 21
    np.testing.assert_allclose(obs, ref_obs, rtol=0, atol=1e-12)
    rng = np.random.default_rng(1)
    rewards = []
    for _ in range(60):
        a = rng.uniform(-1, 1, 21)
        o, r, term, trunc = ours.step(a)
        ro, rr, rterm, rtrunc, _ = ref.step(a)
        np.testing.assert_allclose(o, ro, rtol=0, atol=1e-9)
        assert r == pytest.approx(rr, abs=1e-9) and (term, trunc) == (rterm, rtrunc) == (False, False)
        rewards.append(r)
    assert np.ptp(rewards) > 0  # the stand term moves as the humanoid drops: the comparison is not vacuous


def test_humanoid_up_and_falls_by_hand():
    # Nothing counts while the humanoid drops from its spawn pose.
    assert humanoid_up(False, 1.6, 40) == (False, False)
    assert humanoid_up(False, 1.3, 41) == (True, False)  # up from 1.2 m
    assert humanoid_up(True, 1.0, 42) == (True, False)  # stumbling, still up
    assert humanoid_up(True, 0.7, 43) == (False, True)  # a fall: under 0.8 m after being up
    assert humanoid_up(False, 0.5, 44) == (False, False)  # lying: no second fall
    assert humanoid_up(False, 1.0, 45) == (False, False)  # not up again until 1.2 m


def test_train_step_updates_every_train_interval():
    cfg = SACConfig(actor_hidden_dims=(4,), value_hidden_dims=(4,), batch_size=2, random_steps=3, train_interval=4)
    carry = TrainCarry(init_sac(jax.random.key(0), 3, 2, cfg), Replay.empty(32, 3, 2), jax.random.key(1))
    step = jax.jit(make_train_step(cfg, 2))
    o, a = jnp.zeros(3), jnp.zeros(2)
    learned = []
    for _ in range(12):
        carry, _, _, did = step(carry, o, a, 1.0, 1.0, o, o, False)
        learned.append(bool(did))
    # OGBench: after transition i is stored, an update when i >= seed steps and i % train_interval == 0.
    assert [i + 1 for i, d in enumerate(learned) if d] == [4, 8, 12]
    assert int(carry.sac.updates) == 3


def test_checkpoint_of_a_wrapped_replay_round_trips(tmp_path):
    cfg = SACConfig(actor_hidden_dims=(4,), value_hidden_dims=(4,), layer_norm=True, min_q=False)
    replay = Replay.empty(5, 3, 2)
    for i in range(8):  # wraps: rows 0-2 hold transitions 5-7
        replay = replay.add(jnp.full(3, i), jnp.full(2, i), float(i), 1.0, jnp.full(3, i + 1))
    carry = TrainCarry(init_sac(jax.random.key(0), 3, 2, cfg), replay, jax.random.key(2))
    log = TrainLog(step=8, episodes=1, falls=0, returns=[(8, 1.5, 8, 0, 0.25, 1.0)], wall=3.0)
    host = dict(seed=0, rng_state=np.random.default_rng(3).bit_generator.state, qpos=np.arange(3.0), action=np.ones(2))
    _write_checkpoint(tmp_path / "c.npz", carry, cfg, log, host)
    doc, arrays = _read_npz(tmp_path / "c.npz", ("expert-checkpoint",), 2**30)
    back = _restore_carry(doc, arrays, cfg, 5, 3, 2)
    assert int(back.replay.size) == 8
    np.testing.assert_array_equal(back.replay.rewards, [5, 6, 7, 3, 4])
    for x, y in zip(jax.tree.leaves(back.sac), jax.tree.leaves(carry.sac), strict=True):
        np.testing.assert_array_equal(x, y)
    assert TrainLog.from_json(doc["log"]) == log
    assert doc["host"]["rng_state"] == host["rng_state"] and doc["host"]["qpos"] == [0.0, 1.0, 2.0]


class _Payload:
    def __reduce__(self):
        import os

        return (os.system, ("touch PWNED",))


@pytest.mark.parametrize(
    "args",
    [
        ["expert", "eval", "E.pkl"],
        ["expert", "eval", "E.npz"],  # the same pickle under the new suffix
        ["data", "generate", "antmaze-medium-navigate-v0", "--episodes", "1", "--dir", "d", "--expert", "E.pkl"],
    ],
)
def test_a_pickled_expert_is_refused_and_never_run(tmp_path, monkeypatch, capsys, args):
    from ttt.cli import main

    monkeypatch.chdir(tmp_path)
    for name in ("E.pkl", "E.npz"):
        (tmp_path / name).write_bytes(pickle.dumps({"kind": "ant-expert", "x": _Payload()}, protocol=4))
    rc = main(args)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "is not a file written by `ttt expert train`" in err, err
    assert not (tmp_path / "PWNED").exists()
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").glob("*.npz"))


def test_expert_files_refuse_what_they_do_not_hold(tmp_path):
    cfg = SACConfig(actor_hidden_dims=(8,))
    actor = TanhGaussianActor(jax.random.key(0), 69, 21, (8,))
    save_actor(tmp_path / "h.npz", actor, cfg, dict(step=0), robot="humanoid")
    back, cfg2, meta = load_actor(tmp_path / "h.npz")
    assert meta["robot"] == "humanoid" and cfg2 == cfg
    assert NumpyExpert(back).digest() == NumpyExpert(actor).digest()
    raw = (tmp_path / "h.npz").read_bytes()
    for i, bad in enumerate([raw[: len(raw) // 2], raw[:100], b"", b"PK\x03\x04" + raw[4:60]]):
        (tmp_path / f"bad{i}.npz").write_bytes(bad)
        with pytest.raises(TttError, match="is not a file written by `ttt expert train`"):
            load_actor(tmp_path / f"bad{i}.npz")
    (tmp_path / "dir.npz").mkdir()
    with pytest.raises(TttError, match="no expert at"):
        load_actor(tmp_path / "dir.npz")  # a folder without an expert


def test_humanoid_recipe_is_ogbench_with_narrower_critics():
    r = ROBOTS["humanoid"].recipe
    ogbench_humanoid = dict(layer_norm=True, min_q=False, train_interval=4, lr=1e-4, batch_size=256, tau=0.005)
    assert {k: getattr(r, k) for k in ogbench_humanoid} == ogbench_humanoid
    assert r.value_hidden_dims == (256, 256) and r.actor_hidden_dims == (256, 256)
    assert dataclasses.asdict(ROBOTS["ant"].recipe) == dataclasses.asdict(SACConfig())


def test_expert_eval_runs_a_humanoid(tmp_path, monkeypatch, capsys):
    from ttt.cli import main

    monkeypatch.chdir(tmp_path)
    actor = TanhGaussianActor(jax.random.key(0), 69, 21, (8,))
    save_actor(tmp_path / "h.npz", actor, SACConfig(actor_hidden_dims=(8,)), dict(step=0), robot="humanoid")
    rc = main(["expert", "eval", "h.npz", "--episodes", "2", "--maze", "", "--json", "out.json"])
    out = capsys.readouterr().out
    assert rc in (0, None) and "progress along z" in out and "falls" in out, out
    import json

    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["robot"] == "humanoid" and doc["direction"]["episodes"] == 2
    assert doc["direction"]["mean_length"] == 1000  # the humanoid never terminates


def test_an_expert_saved_by_ttt_0_1_converts_with_its_weights(tmp_path, monkeypatch, capsys):
    from ttt.cli import main

    monkeypatch.chdir(tmp_path)
    cfg = SACConfig(actor_hidden_dims=(8,))
    actor = TanhGaussianActor(jax.random.key(3), 29, 8, (8,), final_init_scale=1.0)
    leaves = [np.asarray(x) for x in jax.tree.leaves(actor)]
    old = dict(kind="ant-expert", cfg=dataclasses.asdict(cfg), leaves=leaves, meta=dict(step=7, seed=0))
    (tmp_path / "old.pkl").write_bytes(pickle.dumps(old, protocol=4))  # what ttt 0.1's save_actor wrote
    assert main(["expert", "convert", "old.pkl", "new.npz"]) in (0, None)
    back, _, meta = load_actor(tmp_path / "new.npz")
    assert NumpyExpert(back).digest() == NumpyExpert(actor).digest() and meta["step"] == 7
    assert "weights sha256 " + NumpyExpert(actor).digest()[:16] in capsys.readouterr().out
    # A pickle that would run code is refused by the conversion too, in one line, and nothing is written.
    (tmp_path / "bad.pkl").write_bytes(pickle.dumps(dict(old, x=_Payload()), protocol=4))
    assert main(["expert", "convert", "bad.pkl", "bad.npz"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "bad.npz").exists()
