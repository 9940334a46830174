"""Batch evaluation on PointMaze: the compiled program and the host driver (OGBench's gymnasium env stepped from
Python with the same jitted round functions) make the same selections and trajectories; `ttt eval` runs base and
GC-TTT; bad TTT settings are refused before anything compiles."""

from __future__ import annotations

import json

import equinox as eqx
import jax
import numpy as np
import pytest
from helpers import one_line_error, run

from ttt.agents import get_backbone
from ttt.cli import main
from ttt.data import generate as gen
from ttt.data.files import load
from ttt.data.specs import get_spec
from ttt.episode import TTTConfig
from ttt.evaluation import EvalSetup, call_size, evaluate
from ttt.finetune import FinetuneConfig
from ttt.presets import make_configs
from ttt.pretrain import init_state
from ttt.select import SelectConfig

GCBC = get_backbone("gcbc")

STITCH = "pointmaze-medium-stitch-v0"
TINY = ["--set", "actor_hidden_dims=[8,8]", "--set", "value_hidden_dims=[8,8]", "--set", "batch_size=8"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    gen.generate(STITCH, episodes=6, seed=0, directory=d, workers=1)
    return d, load(STITCH, d)


def agents(cfg, n=2):
    keys = jax.random.split(jax.random.key(0), n)
    return eqx.filter_jit(eqx.filter_vmap(lambda k: init_state(k, GCBC, 2, 2, cfg).agent))(keys)  # one compile


@pytest.mark.parametrize("mode", ["critic", "mc", None])
def test_compiled_and_host_driver_agree(tiny, mode):
    _, data = tiny
    spec = get_spec(STITCH)
    cfg, sampler = make_configs("gcbc", spec, "cpu", {"actor_hidden_dims": (16, 16), "value_hidden_dims": (16, 16),
                                                      "batch_size": 16})  # fmt: skip
    ttt = None
    if mode:
        ttt = TTTConfig(K=20, select=SelectConfig(q=0.5, mode=mode, h_min=3, eps_rel=3.0),
                        finetune=FinetuneConfig(steps=3, lr=1e-3))  # fmt: skip
    setup = EvalSetup(GCBC, cfg, sampler, spec, ttt, max_steps=60)
    ag = agents(cfg)
    kw = dict(episodes=2, tasks=(1, 3), seed=4)
    comp = evaluate(setup, ag, data, driver="compiled", batch_size=4, **kw)
    host = evaluate(setup, ag, data, driver="host", batch_size=8, **kw)
    assert comp.observations.shape == (2, 2, 2, 60, 2)
    np.testing.assert_allclose(comp.starts, host.starts, atol=1e-6)
    np.testing.assert_allclose(comp.goals, host.goals, atol=1e-6)
    np.testing.assert_allclose(comp.observations, host.observations, atol=1e-3)
    np.testing.assert_array_equal(comp.success, host.success)
    np.testing.assert_array_equal(comp.steps, host.steps)
    for k in ("active", "empty", "n_rel", "n_selected", "n_train_rows"):
        np.testing.assert_array_equal(comp.rounds[k], host.rounds[k], err_msg=k)
    if mode:
        assert comp.rounds["n_selected"].max() > 0  # real selections were compared
        np.testing.assert_allclose(comp.rounds["loss_last"], host.rounds["loss_last"], rtol=1e-4, atol=1e-5)
    # Every seed faces the same starts and goals.
    assert (comp.starts == comp.starts[:1]).all() and (comp.goals == comp.goals[:1]).all()




@pytest.fixture(scope="module")
def checkpoint(tiny):
    d, _ = tiny
    ck = d / "ck"
    rc = main(["pretrain", "--dataset", STITCH, "--agent", "gcbc", "--steps", "4", "--chunk", "2", "--seeds", "2",
               "--out", str(ck), "--dir", str(d), *TINY])  # fmt: skip
    assert rc == 0
    return d, ck


def test_ttt_eval_runs_base_and_ttt(checkpoint, capsys):
    d, ck = checkpoint
    rc, out, err = run(["eval", str(ck), "--episodes", "1", "--tasks", "2", "--dir", str(d), "--variants",
                        "base,ttt,ttt-mc", "--K", "500", "--N", "2", "--json", str(d / "e.json")], capsys)  # fmt: skip
    assert rc == 0, err
    for v in ("base", "ttt", "ttt-mc"):
        assert f"{v}: gcbc on {STITCH}" in out
    assert out.count("success") == 3, out  # one result line per variant (the summary), not the stage's as well
    doc = json.loads((d / "e.json").read_text())
    assert set(doc["variants"]) == {"base", "ttt", "ttt-mc"}
    ttt = doc["variants"]["ttt"]
    assert np.array(ttt["success"]).shape == (2, 1, 1) and ttt["ttt"]["K"] == 500
    assert np.array(ttt["rounds"]["n_rel"]).shape == (2, 1, 1, 2)  # 2 rounds of K = 500 in 1000 steps
    # `--bucket` is speed only: the same command with another bucket (as on a GPU, whose default it is) keeps them all.
    rc, out, err = run(["eval", str(ck), "--episodes", "1", "--tasks", "2", "--dir", str(d), "--variants",
                        "base,ttt,ttt-mc", "--K", "500", "--N", "2", "--json", str(d / "e.json"), "--bucket", "0"],
                       capsys)  # fmt: skip
    assert rc == 0, err
    assert all(f"{v}: kept from" in out for v in ("base", "ttt", "ttt-mc")), out


@pytest.mark.parametrize(
    "args, expect",
    [
        (["--q", "1.5"], "--q (fraction of relevant sub-trajectories kept) must be in (0, 1], got 1.5"),
        (["--q", "0"], "must be in (0, 1], got 0.0"),
        (["--K", "0"], "--K must be in [1, 1000] (the episode length of pointmaze-medium-v0), got 0"),
        (["--K", "1001"], "--K must be in [1, 1000]"),
        (["--N", "-1"], "--N (fine-tuning steps per round) must be >= 1, got -1"),
        (["--eps", "0"], "--eps (relevance radius) must be a finite number > 0, got 0.0"),
        (["--variants", "ttt,best"], "unknown variant(s) best; valid: base, ttt, ttt-mc"),
        (["--tasks", "9"], "--tasks must be distinct task ids in 1..5, got [9]"),
    ],
)
def test_bad_ttt_settings_are_refused_before_any_work(checkpoint, capsys, args, expect):
    d, ck = checkpoint
    rc, out, err = run(["eval", str(ck), "--dir", str(d), "--variants", "ttt", *args], capsys)
    line = one_line_error(err)
    assert rc == 2 and expect in line, line
    assert "episodes" not in out  # nothing ran


def test_checkpoint_that_does_not_fit_the_environment(checkpoint, capsys):
    d, ck = checkpoint
    rc, _, err = run(["eval", str(ck), "--dir", str(d), "--variants", "ttt", "--dataset", "cube-single-play-v0"],
                     capsys)  # fmt: skip
    line = one_line_error(err)
    assert rc == 2 and "observation size 2" in line and "observation size 28" in line


def test_antmaze_runs_on_both_drivers(tmp_path):
    """antmaze GC-TTT, on a tiny dataset made with an untrained expert: the host driver (OGBench's gymnasium env) and
    the compiled program (OGBench's MjModel in C MuJoCo through a callback, `ttt.envs.antmaze`) face the same
    episodes and make the same selections; the trajectories agree to float error (the policies' actions come from
    different XLA programs)."""
    from ttt.data.expert import save_actor
    from ttt.data.sac import SACConfig, TanhGaussianActor

    name = "antmaze-medium-stitch-v0"
    actor = TanhGaussianActor(jax.random.key(0), 29, 8, (16,), final_init_scale=1.0)
    save_actor(tmp_path / "e.npz", actor, SACConfig(actor_hidden_dims=(16,)), dict(step=0))
    gen.generate(name, episodes=3, seed=0, directory=tmp_path, workers=1, expert=tmp_path / "e.npz")
    data = load(name, tmp_path)
    spec = get_spec(name)
    cfg, sampler = make_configs("gcbc", spec, "cpu", {"actor_hidden_dims": (16,), "value_hidden_dims": (16,),
                                                      "batch_size": 16})  # fmt: skip
    ttt = TTTConfig(K=15, select=SelectConfig(q=0.5, mode="mc", eps_rel=3.0), finetune=FinetuneConfig(steps=2, lr=1e-3))
    setup = EvalSetup(GCBC, cfg, sampler, spec, ttt, max_steps=30)
    keys = jax.random.split(jax.random.key(0), 1)
    ag = eqx.filter_jit(eqx.filter_vmap(lambda k: init_state(k, GCBC, 29, 8, cfg).agent))(keys)
    res = evaluate(setup, ag, data, driver="host", episodes=1, tasks=(1, 2), seed=0)
    assert res.observations.shape == (1, 2, 1, 30, 29) and (res.steps == 30).all()
    assert res.rounds["n_selected"].shape[-1] == 2 and (res.rounds["n_selected"] > 0).any()
    # Starts are the tasks' start cells (OGBench's task list), goals 29-d with the goal xy first.
    assert np.linalg.norm(res.starts[0, 0, 0, :2] - res.starts[0, 1, 0, :2]) > 1.0
    comp = evaluate(setup, ag, data, driver="compiled", episodes=1, tasks=(1, 2), seed=0)
    np.testing.assert_array_equal(comp.starts, res.starts)
    np.testing.assert_array_equal(comp.goals, res.goals)
    np.testing.assert_allclose(comp.observations, res.observations, atol=1e-3)
    np.testing.assert_array_equal(comp.steps, res.steps)
    for k in ("active", "empty", "n_rel", "n_selected", "n_train_rows"):
        np.testing.assert_array_equal(comp.rounds[k], res.rounds[k], err_msg=k)


@pytest.mark.parametrize(
    "total, batch, devices, size",
    [(30, 25, 1, 15), (150, 25, 1, 25), (7, 25, 1, 7), (30, 30, 1, 30), (31, 10, 1, 8), (12, 3, 2, 2), (30, 25, 4, 16),
     (100, 25, 4, 20), (3, 3, 2, 2), (5, 1, 2, 2)],
)
def test_call_size_splits_calls_evenly(total, batch, devices, size):
    """As few calls as the batch bound allows, evenly sized, a multiple of the device count: 30 episodes at chunk 25
    are two calls of 15, not 25 + 25 with 20 repeats."""
    got = call_size(total, batch, devices)
    assert got == size
    calls = -(-total // got)
    assert got % devices == 0 and got * calls >= total and (calls - 1) * got < total  # enough slots, no idle call
    assert got <= max(devices, batch // devices * devices)  # at most the bound (at least one episode per device)
