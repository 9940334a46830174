"""OGBench-format checkpoints in and out (`ttt import ogbench`, `ttt export ogbench`, `ttt.load_policy`), and the
restricted unpickler that reads them: bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import json
import os
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import STITCH, one_line_error, run

from ttt import safe_pickle
from ttt.checkpoint import init_state, load_policy, open_checkpoint, save_checkpoint
from ttt.data import generate as gen
from ttt.errors import TttError
from ttt.interop import export_checkpoint, import_checkpoint
from ttt.presets import make_configs


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("interop")
    gen.generate(STITCH, episodes=2, seed=0, directory=d, workers=1)
    return d


def _checkpoint(path, agent, seeds=2, **overrides):
    """A fresh (untrained) ttt checkpoint of `agent` with small, uneven networks."""
    from ttt.data.specs import get_spec

    sizes = dict(actor_hidden_dims=(8, 6), value_hidden_dims=(7, 5), batch_size=8)
    if agent == "qrl":
        sizes["latent_dim"] = 16
    if agent == "saw":
        sizes["low_actor_hidden_dims"] = (6, 4)
    cfg, sampler = make_configs(agent, get_spec(STITCH), "cpu", {**sizes, **overrides})
    from ttt.checkpoint import config_dict
    from ttt.presets import agent_backbone

    backbone = agent_backbone(agent)
    keys = jax.random.split(jax.random.key(3), seeds)
    states = jax.vmap(lambda k: init_state(k, backbone, 2, 2, cfg))(keys)
    # Move the parameters and Adam moments off their initial values so that every leaf is distinct.
    states = jax.tree.map(lambda x: x + 0.01 * jnp.arange(x.size, dtype=x.dtype).reshape(x.shape)
                          if jnp.issubdtype(x.dtype, jnp.floating) else x, states)  # fmt: skip
    meta = dict(agent=agent, backbone=backbone.name, config=config_dict(cfg), sampler=config_dict(sampler),
                dataset=STITCH, dataset_hash="0" * 16, obs_dim=2, action_dim=2, seeds=seeds, seed=0,
                profile="test")  # fmt: skip
    save_checkpoint(path, states, meta)
    return open_checkpoint(path)


@pytest.mark.parametrize("agent", ["gciql", "gciql-awr", "qrl", "gcbc", "saw"])
def test_export_then_import_gives_the_same_arrays(agent, data_dir, tmp_path):
    ck = _checkpoint(tmp_path / "ck", agent)
    pkl = export_checkpoint(ck, tmp_path / "params_7.pkl", seed=1)
    settings = {k: getattr(ck.cfg, k) for k in ("alpha", "actor_loss") if hasattr(ck.cfg, k)}
    backbone = ck.backbone.name
    if backbone == "qrl":
        settings.pop("actor_loss")
    imp = import_checkpoint(pkl, backbone, STITCH, tmp_path / "imported", settings=settings, data_dir=data_dir)
    assert imp.meta["agent"] == agent and imp.seeds == 1 and imp.meta["profile"] == "imported"
    assert imp.meta["source"]["files"][0]["sha256"] == __import__("hashlib").sha256(pkl.read_bytes()).hexdigest()
    a = jax.tree.map(lambda x: x[1], ck.load())
    b = jax.tree.map(lambda x: x[0], imp.load())
    mine = a.agent.actor if backbone == "gcbc" else a.agent  # OGBench's GC-BC has no selection critic
    theirs = b.agent.actor if backbone == "gcbc" else b.agent
    for x, y in zip(jax.tree.leaves(mine), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    if backbone != "gcbc":  # the Adam state too (GC-BC's covers the critic that OGBench's lacks)
        for x, y in zip(jax.tree.leaves(a.opt_state), jax.tree.leaves(b.opt_state), strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # Sizes were read from the shapes, not from any setting.
    assert imp.cfg.actor_hidden_dims == (8, 6)
    # The exported step is the reference's count (updates + 1); the import gives back the updates done.
    assert int(np.asarray(b.step)) == int(np.asarray(a.step))


def test_load_policy_is_the_deterministic_clipped_mean(data_dir, tmp_path):
    ck = _checkpoint(tmp_path / "ck", "gciql")
    act = load_policy(ck.path, seed=1)
    obs = np.random.default_rng(0).normal(size=(4, 3, 2)).astype(np.float32) * 10
    goals = obs[::-1].copy()
    agent = jax.tree.map(lambda x: x[1], ck.load().agent)
    mean, _ = agent.actor(jnp.asarray(obs), jnp.asarray(goals))
    got = np.asarray(act(obs, goals))
    assert got.shape == (4, 3, 2)
    np.testing.assert_allclose(got, np.clip(np.asarray(mean), -1, 1), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got, np.asarray(act(obs, goals)))  # deterministic
    np.testing.assert_allclose(np.asarray(act(obs[0, 0], goals[0, 0])), got[0, 0], rtol=1e-6, atol=1e-6)
    with pytest.raises(TttError, match="observation size 2"):
        act(np.zeros((3, 5)), np.zeros((3, 5)))
    with pytest.raises(TttError, match=r"seed must be in \[0, 2\)"):
        load_policy(ck.path, seed=2)


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_safe_loader_refuses_other_classes_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    data = pickle.dumps({"agent": {"network": {"params": _Evil(marker)}}})
    with pytest.raises(TttError, match=r"refused: the pickle names (posix|os|nt)\.system"):
        safe_pickle.loads(data, "evil.pkl")
    assert not marker.exists()
    with pytest.raises(TttError, match="names builtins.eval"):
        safe_pickle.loads(pickle.dumps(eval), "x")
    with pytest.raises(TttError, match="array of Python objects"):
        safe_pickle.loads(pickle.dumps({"a": np.array([1, "x"], dtype=object)}), "x")


def test_safe_loader_rebuilds_jax_and_numpy_arrays_as_numpy():
    tree = {"k": jnp.arange(6.0).reshape(2, 3), "n": np.int32(4), "u": np.array([1, 2], np.uint32), "s": 1}
    got = safe_pickle.loads(pickle.dumps(tree))
    assert isinstance(got["k"], np.ndarray) and got["k"].shape == (2, 3) and got["k"].dtype == np.float32
    np.testing.assert_array_equal(got["k"], np.arange(6.0).reshape(2, 3))
    assert got["n"] == 4 and got["u"].dtype == np.uint32 and got["s"] == 1


def _state(params):
    return {"agent": {"rng": np.zeros(2, np.uint32), "network": {"step": 1, "params": params, "opt_state": {}}}}


def _bad_inputs(tmp_path, good: bytes) -> dict[str, tuple[bytes, list[str], str]]:
    params = pickle.loads(good)["agent"]["network"]["params"]
    no_value = {k: v for k, v in params.items() if k != "modules_value"}
    narrow = dict(params)
    narrow["modules_critic"] = {"value_net": {"Dense_0": {"kernel": np.zeros((2, 6, 9), np.float32),
                                                          "bias": np.zeros((2, 9), np.float32)}}}  # fmt: skip
    marker = tmp_path / "pwned"
    return {
        "truncated": (good[: len(good) // 2], [], "truncated"),
        "not a pickle": (b"PK\x03\x04 this is a zip file", [], "not a pickle (it starts with"),
        "another agent": (good, ["--agent", "qrl"], "holds a gciql agent"),
        "missing network": (pickle.dumps(_state(no_value)), [], "lacks network(s) value"),
        "widths disagree": (pickle.dumps(_state(narrow)), [], "disagree"),
        "observation size": (good, ["--dataset", "antmaze-medium-navigate-v0"], "observations of size 2"),
        "malicious": (pickle.dumps({"agent": _Evil(marker)}), [], "refused: the pickle names"),
    }


def test_bad_input_is_one_line_exit_2_and_nothing_written(data_dir, tmp_path, capsys):
    ck = _checkpoint(tmp_path / "ck", "gciql", seeds=1)
    good = export_checkpoint(ck, tmp_path / "good.pkl").read_bytes()
    for name, (blob, extra, expect) in _bad_inputs(tmp_path, good).items():
        pkl = tmp_path / f"{name.replace(' ', '_')}.pkl"
        pkl.write_bytes(blob)
        out = tmp_path / f"out-{name.replace(' ', '_')}"
        argv = ["import", "ogbench", str(pkl), "--agent", "gciql", "--dataset", STITCH, "--out", str(out), "--dir",
                str(data_dir)]  # fmt: skip
        for i in range(0, len(extra), 2):  # later options override earlier ones
            argv[argv.index(extra[i]) + 1] = extra[i + 1]
        rc, _, err = run(argv, capsys)
        assert rc == 2, (name, err)
        assert expect in one_line_error(err), (name, err)
        assert not out.exists(), name
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(f".out-{name.replace(' ', '_')}")], name
    assert not (tmp_path / "pwned").exists()


def test_cli_import_eval_and_export(data_dir, tmp_path, capsys):
    ck = _checkpoint(tmp_path / "ck", "gciql", seeds=1)
    pkl = export_checkpoint(ck, tmp_path / "params_1.pkl")
    flags = tmp_path / "flags.json"
    flags.write_text(json.dumps({"agent": {"agent_name": "gciql", "alpha": 0.003, "discrete": False, "encoder": None,
                                           "actor_hidden_dims": [8, 6], "value_p_curgoal": 0.2}}))  # fmt: skip
    out = tmp_path / "imported"
    argv = ["import", "ogbench", str(pkl), str(pkl), "--agent", "gciql", "--dataset", STITCH, "--out", str(out),
            "--dir", str(data_dir), "--flags", str(flags), "--set", "expectile=0.8"]  # fmt: skip
    rc, so, err = run(argv, capsys)
    assert rc == 0, err
    assert "imported 2 seed(s) of gciql" in so
    meta = json.loads((out / "meta.json").read_text())
    assert meta["seeds"] == 2 and meta["config"]["alpha"] == 0.003 and meta["config"]["expectile"] == 0.8
    assert meta["source"]["settings"]["expectile"] == 0.8
    rc, so, err = run(["eval", str(out), "--episodes", "1", "--tasks", "1", "--dir", str(data_dir), "--variants",
                       "base"], capsys)  # fmt: skip
    assert rc == 0, err
    back = tmp_path / "back.pkl"
    rc, so, err = run(["export", "ogbench", str(out), "--out", str(back), "--seed", "0"], capsys)
    assert rc == 0, err
    assert back.read_bytes() == pkl.read_bytes()  # import then export gives the same file back
    flags.write_text(json.dumps({"env_name": "pointmaze-large-navigate-v0", "agent": {"alpha": 0.003}}))
    argv[argv.index("--out") + 1] = str(tmp_path / "other")
    rc, _, err = run(argv, capsys)
    assert rc == 2 and "env_name 'pointmaze-large-navigate-v0'" in one_line_error(err)
    assert not (tmp_path / "other").exists()
    rc, _, err = run(["export", "ogbench", str(out), "--out", str(back), "--seed", "2"], capsys)
    assert rc == 2 and "--seed must be in [0, 2)" in one_line_error(err)
    rc, _, err = run(["import", "ogbench", str(pkl), "--agent", "gciql", "--dataset", STITCH, "--out", str(out),
                      "--dir", str(data_dir)], capsys)  # fmt: skip
    assert rc == 2 and "is not an empty directory" in one_line_error(err)


def test_each_agent_declares_its_ogbench_layout_beside_it():
    """Each agent module holds its own OGBench mapping (`OGBENCH`); interop.py reads all of them alike and names
    none (docs/extending.md, "A backbone")."""
    from pathlib import Path

    from ttt import agents, interop

    assert set(agents.OGBENCH_LAYOUTS) == set(agents.BACKBONES) == set(interop.AGENTS_SUPPORTED)
    for name, layout in agents.OGBENCH_LAYOUTS.items():
        assert getattr(agents, name).OGBENCH is layout and layout.name == name
    source = Path(interop.__file__).read_text()
    assert not [n for n in agents.BACKBONES if f'"{n}"' in source or f"'{n}'" in source]
