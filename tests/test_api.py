"""`ttt` from Python: the public names, `load_run`, the README's script and examples (run as written on a tiny
checkpoint), and the checks at the public boundary (each raises `TttError` naming the argument)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import pretrain_argv

import ttt
from ttt.agents import get_backbone
from ttt.cli import main
from ttt.data import generate as gen
from ttt.evaluation import evaluate

GCBC = get_backbone("gcbc")
QRL = get_backbone("qrl")

NAV = "pointmaze-medium-navigate-v0"
README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """`runs/gcbc` (GC-BC, 8x8 networks, 2 seeds, 4 steps) and `data/` (3 navigate episodes) under one folder."""
    root = tmp_path_factory.mktemp("api")
    gen.generate(NAV, episodes=3, seed=0, directory=root / "data", workers=1)
    assert main(pretrain_argv(NAV, 4, root / "runs" / "gcbc", root / "data")) in (0, None)
    return root


@pytest.fixture(scope="module")
def loaded(tiny_run):
    return ttt.load_run(tiny_run / "runs" / "gcbc", data_dir=tiny_run / "data", variant="ttt-mc", K=250, N=2)


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_public_names_resolve_and_import_ttt_starts_no_jax():
    import ttt.data
    import ttt.envs

    for face in (ttt, ttt.data, ttt.envs):
        for name in face.__all__:
            assert getattr(face, name) is not None, f"{face.__name__}.{name}"
    assert ttt.evaluate is evaluate and callable(ttt.evaluate) and ttt.TttError is ttt.errors.TttError
    code = ("import sys, ttt, ttt.data, ttt.envs.gym, ttt.cli; ttt.TttError; ttt.data.get_spec\n"
            "assert 'jax' not in sys.modules, 'imported JAX'")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], check=True, cwd=README.parent)


def test_readme_script_and_every_readme_example_run_as_written(tiny_run, monkeypatch, capsys):
    """The README's script (under 10 lines: a checkpoint, base and GC-TTT on two tasks, mean +- s.e.), then every
    other Python block of the README, in order, as one script (the later blocks use the first one's names)."""
    text = README.read_text()
    script = text.split("<!-- api-script:start -->")[1].split("<!-- api-script:end -->")[0]
    (code,) = _python_blocks(script)
    assert len([ln for ln in code.splitlines() if ln.strip()]) < 10
    blocks = _python_blocks(text)
    assert blocks[0] == code and len(blocks) >= 5
    monkeypatch.chdir(tiny_run)
    ns = {"__name__": "readme"}
    exec(compile(code, "README.md", "exec"), ns)  # noqa: S102
    lines = capsys.readouterr().out.strip().splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["base", "ttt"]
    for ln in lines:
        assert re.fullmatch(r"(base|ttt): success \d\.\d\d \+- \d\.\d\d", ln), ln
    exec(compile("\n".join(blocks[1:]), "README.md", "exec"), ns)  # noqa: S102
    assert ns["w"].shape == (ns["data"].n_rows,) and int(ns["w"].sum()) > 0
    assert ns["result"].success.shape == (2, 1, 2)
    assert capsys.readouterr().out.startswith("success")


def test_the_one_function_rule_of_extending_md_runs_as_written(tiny_run, monkeypatch, capsys):
    """docs/extending.md's rule of one function of the Context (the current state, a parameter of its own), swept with
    lr as one program: every point keeps exactly its k rows in the first round."""
    text = (README.parent / "docs" / "extending.md").read_text()
    (code,) = _python_blocks(text.split("<!-- context-rule:start -->")[1].split("<!-- context-rule:end -->")[0])
    monkeypatch.chdir(tiny_run)
    ns = {"__name__": "extending"}
    exec(compile(code, "extending.md", "exec"), ns)  # noqa: S102
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4
    for point, result in ns["grid"]:
        n0 = result.rounds["n_selected"][..., 0]
        assert (n0 == np.minimum(point["k"], result.rounds["n_rel"][..., 0])).all()


def test_the_graph_search_example_of_extending_md_runs_as_written(tiny_run, monkeypatch, capsys):
    """docs/extending.md's test-time graph search block: `load_run(..., variant="ttgs")` evaluates, and the pure
    functions give a path from the vertex nearest the state that ends at the goal's vertex, and a subgoal that is
    the goal or a vertex of the graph."""
    text = (README.parent / "docs" / "extending.md").read_text()
    (code,) = _python_blocks(text.split("<!-- graph-search:start -->")[1].split("<!-- graph-search:end -->")[0])
    monkeypatch.chdir(tiny_run)
    ns = {"__name__": "extending"}
    exec(compile(code, "extending.md", "exec"), ns)  # noqa: S102
    assert len(capsys.readouterr().out.strip().splitlines()) == 2
    setup, graph, path, target = ns["setup"], ns["graph"], ns["path"], ns["target"]
    assert setup.ttt is None and setup.ttgs.n_vertices == 256 and setup.ttgs.distance == "value"
    assert ns["result"].rounds["ttgs_plans"].min() >= 1
    n = int(path.n_points)
    steps_from_state = ns["distance"](ns["agent"], graph.scale, ns["state"][None], graph.vertices)
    assert int(path.path[0]) == int(np.argmin(np.asarray(steps_from_state)))
    if bool(path.reachable) and not int(path.truncated):
        assert int(path.path[n - 1]) == int(graph.target)
    is_vertex = (np.asarray(graph.vertices) == np.asarray(target)).all(axis=1).any()
    assert is_vertex or np.array_equal(np.asarray(target), np.asarray(ns["goal"]))
    with pytest.raises(ttt.TttError, match="ttgs: unknown field"):
        ttt.load_run(tiny_run / "runs" / "gcbc", data_dir=tiny_run / "data", variant="ttgs", ttgs={"taus": 3})
    big = dataclasses.replace(setup, ttgs=dataclasses.replace(setup.ttgs, n_vertices=10**6))
    with pytest.raises(ttt.TttError, match=r"^ttgs: n_vertices \(1000000\) exceeds the dataset's 3003 rows"):
        evaluate(big, ns["agents"], ns["data"], episodes=1, tasks=(1,), env=ns["env"])
    with pytest.raises(ttt.TttError, match="runs in the compiled episode only"):
        evaluate(setup, ns["agents"], ns["data"], episodes=1, tasks=(1,), driver="host")


def test_load_run_returns_setup_agents_data_env(loaded):
    setup, agents, data, env = loaded
    assert setup.backbone.name == "gcbc" and setup.ttt.K == 250 and setup.ttt.finetune.steps == 2
    assert setup.ttt.select.mode == "mc"
    assert all(x.shape[0] == 2 for x in jax.tree.leaves(eqx.filter(agents, eqx.is_array)))  # 2 seeds, stacked
    assert data.obs_dim == env.obs_dim == 2 and env.env_id == "pointmaze-medium-v0"


@pytest.mark.parametrize("tasks", [(0,), (6,), (1, 1), ()])
def test_task_ids_outside_1_to_5_are_refused(loaded, tasks):
    setup, agents, data, env = loaded
    base = dataclasses.replace(setup, ttt=None)
    with pytest.raises(ttt.TttError, match=r"^tasks.*1\.\.5"):
        evaluate(base, agents, data, episodes=1, tasks=tasks, env=env)


def test_agents_of_another_backbone_are_refused(loaded):
    setup, agents, data, env = loaded
    qrl = QRL
    other = ttt.make_setup("base", QRL, qrl.Config(), setup.sampler, setup.spec, setup.max_steps)
    with pytest.raises(ttt.TttError, match=r"^agents: got ttt\.agents\.gcbc\.Agent, but the setup's backbone is qrl"):
        evaluate(other, agents, data, episodes=1, tasks=(1,), env=env)
    wider = dataclasses.replace(setup, cfg=dataclasses.replace(setup.cfg, actor_hidden_dims=(16, 16)))
    with pytest.raises(ttt.TttError, match=r"^agents: an array of shape .* per seed"):
        evaluate(wider, agents, data, episodes=1, tasks=(1,), env=env)


def test_a_dataset_of_other_dimensions_is_refused(loaded):
    setup, agents, data, env = loaded
    wide = ttt.Dataset.from_arrays(np.zeros((20, 3), np.float32), np.zeros((20, 2), np.float32),
                                   np.arange(20) % 10 == 9, goal_fn=lambda o: o[..., :2])  # fmt: skip
    with pytest.raises(ttt.TttError, match=r"^data: observations of 3 and actions of 2, but the setup's dataset"):
        evaluate(setup, agents, wide, episodes=1, tasks=(1,), env=env)


def test_a_transform_returning_the_wrong_type_is_named(loaded):
    setup, agents, data, env = loaded

    def keep_relevant(ctx):  # returns the mask itself, not a Selection
        return ctx.relevant

    bad = dataclasses.replace(setup, transforms=dataclasses.replace(ttt.Transforms(), select=keep_relevant))
    with pytest.raises(ttt.TttError, match=r"transform select \(.*keep_relevant\) returned .*must return a ttt\.sel"):
        evaluate(bad, agents, data, episodes=1, tasks=(1,), env=env)

    def everywhere(ctx):  # a float array, not bool
        return jnp.ones(ctx.data.observations.shape[0])

    bad = dataclasses.replace(setup, transforms=dataclasses.replace(ttt.Transforms(), relevance=everywhere))
    with pytest.raises(ttt.TttError, match=r"transform relevance .* dtype float32; it must return a bool array"):
        evaluate(bad, agents, data, episodes=1, tasks=(1,), env=env)


def test_rounds_that_keep_nothing_report_nan_losses(tiny_run, loaded):
    _, agents, data, env = loaded
    setup, *_ = ttt.load_run(
        tiny_run / "runs" / "gcbc", data_dir=tiny_run / "data", variant="ttt-mc", K=500, N=2, eps=1e-6
    )  # fmt: skip  (no row that near: every round keeps nothing)
    res = evaluate(setup, agents, data, episodes=1, tasks=(1,), env=env)
    active = res.rounds["active"]
    assert active.any() and res.rounds["empty"][active].all()
    assert np.isnan(res.rounds["loss_first"]).all() and np.isnan(res.rounds["loss_last"]).all()


def test_an_episode_from_a_start_and_goal_of_ones_own(loaded):
    setup, agents, data, env = loaded
    agent = jax.tree.map(lambda x: x[1] if eqx.is_array(x) else x, agents)
    xy = np.asarray(data.goals[0])
    out = ttt.run_episode(setup, agent, data, env, start_xy=xy, goal_xy=xy)  # at the goal: success at step 1
    np.testing.assert_allclose(out.start, xy) and np.testing.assert_allclose(out.goal, xy)
    assert bool(out.success) and int(out.steps) == 1
    for bad in (np.zeros(3), np.zeros((1, 2))):  # a 3-d start, a batch of one: refused, not broadcast
        with pytest.raises(ttt.TttError, match=r"^start_xy must be goal coordinates of pointmaze-medium-v0 .* \(2,\)"):
            ttt.run_episode(setup, agent, data, env, start_xy=bad, goal_xy=xy)
        with pytest.raises(ttt.TttError, match=r"^reset_to: init_xy must be the maze's xy coordinates, shape \(2,\)"):
            env.reset_to(bad, xy)
    with pytest.raises(ttt.TttError, match=r"^agent is seed-stacked: every array has a leading seed axis"):
        ttt.run_episode(setup, agents, data, env, start_xy=xy, goal_xy=xy)  # the seed-stacked agents (issue 62)


def test_act_needs_no_key_at_temperature_zero(loaded):
    _, agents, data, _ = loaded
    agent = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, agents)
    act = ttt.make_act(GCBC)
    obs, goal = data.observations[0], data.observations[5]
    np.testing.assert_array_equal(act(agent, obs, goal), act(agent, obs, goal, jax.random.key(3)))


def test_make_setup_names_a_bad_setting(loaded):
    setup, *_ = loaded
    args = ("ttt-mc", GCBC, setup.cfg, setup.sampler, setup.spec, 1000)
    with pytest.raises(ttt.TttError, match=r"^q \(fraction of relevant sub-trajectories kept\) must be in \(0, 1\]"):
        ttt.make_setup(*args, q=0.0)
    with pytest.raises(ttt.TttError, match=r"^K must be in \[1, 1000\]"):
        ttt.make_setup(*args, K=0)
    with pytest.raises(ttt.TttError, match=r"^variant must be one of base, ttt, ttt-mc"):
        ttt.make_setup("ttt-critic", *args[1:])
