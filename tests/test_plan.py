"""One plan per run: a pipeline row is resolved once into a checked, immutable `RunPlan` holding values (the spec, the
`Backbone` record, the validated `EvalSetup`), and `ttt eval` / `ttt.load_run` build the same `EvalSetup` from a
checkpoint (`ttt.setups.checkpoint_setup`). No training, no compiled program: the checkpoints are metadata and a state
file written here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ttt.agents import get_backbone
from ttt.data.specs import get_spec
from ttt.errors import TttError
from ttt.pipeline import load_pipeline, plan_run, select_random_rank
from ttt.pipeline.keys import BASE_EVAL_KEYS
from ttt.pipeline.plan import RunPlan
from ttt.presets import make_configs
from ttt.pretrain import config_dict
from ttt.setups import checkpoint_setup, make_setup

GCBC = get_backbone("gcbc")

PIPE = """
[defaults]
dataset = "pointmaze-medium-navigate-v0"
data_episodes = 4
agent = "gcbc"
agent_config = { actor_hidden_dims = [8, 8], value_hidden_dims = [8, 8] }
steps = 7
seeds = 2
tasks = [2, 3]
[[run]]
name = "base"
variant = "base"
[[run]]
name = "ttt"
variant = "ttt"
K = 250
N = 20
[[run]]
name = "control"
variant = "ttt-mc"
selection = "random-rank"
rule = "paper"
H = 50
"""


def _runs(tmp_path: Path, text: str = PIPE, **sets) -> dict:
    (tmp_path / "p.toml").write_text(text)
    return {r["name"]: r for r in load_pipeline(tmp_path / "p.toml", sets).runs}


def _meta(plan: RunPlan) -> dict:
    """The metadata a checkpoint of `plan`'s pre-training would carry (what the setup resolver reads)."""
    spec = plan.data.spec
    return dict(agent=plan.train.agent, backbone=plan.train.backbone.name, config=config_dict(plan.train.cfg),
                sampler=config_dict(plan.train.sampler), dataset=spec.name, dataset_hash="h", obs_dim=spec.ob_dim,
                action_dim=spec.action_dim, seeds=plan.train.seeds, step=plan.train.steps,
                state_file="state-000000007.eqx")  # fmt: skip


def _checkpoint(tmp_path: Path, plan: RunPlan) -> Path:
    """A checkpoint directory of `plan`'s pre-training: its metadata and a (placeholder) state file."""
    import json

    d = tmp_path / "ck"
    d.mkdir(exist_ok=True)
    meta = _meta(plan)
    (d / meta["state_file"]).write_bytes(b"state")
    (d / "meta.json").write_text(json.dumps(meta))
    return d


def test_a_row_is_resolved_once_into_an_immutable_plan(tmp_path):
    runs = _runs(tmp_path)
    plan = plan_run(runs["ttt"], tmp_path / "cache")
    spec = get_spec("pointmaze-medium-navigate-v0")
    assert plan.data.spec == spec and plan.data.episodes == 4 and plan.data.cached
    assert plan.data.directory == tmp_path / "cache" / "data" / "pointmaze-medium-navigate-v0-e4-s0"
    cfg, sampler = make_configs("gcbc", spec, "cpu", {"actor_hidden_dims": [8, 8], "value_hidden_dims": [8, 8]})
    assert (plan.train.cfg, plan.train.sampler, plan.train.steps, plan.train.seeds) == (cfg, sampler, 7, 2)
    assert plan.train.checkpoint is None and plan.train.root == tmp_path / "cache" / "ckpt" / spec.name
    assert plan.eval.driver == "compiled" and plan.eval.tasks == (2, 3)  # 'auto' resolved
    assert plan.train.backbone is GCBC and plan.eval.setup.backbone is plan.train.backbone  # values, not names
    assert plan.eval.setup.ttt.K == 250 and plan.eval.setup.ttt.select.rule_used == "episodes"  # the rule in force
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.train.steps = 8  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.eval.key["K"] = 1  # type: ignore[index]
    base = plan_run(runs["base"], tmp_path / "cache")
    assert set(base.eval.key) == set(BASE_EVAL_KEYS)  # a base row's evaluation ignores the TTT settings
    assert base.eval.setup.ttt is None and base.eval.setup.backend == "mujoco"
    full = plan_run({**runs["base"], "data_episodes": None}, tmp_path / "cache")
    assert full.data.episodes == spec.episodes and not full.data.cached  # OGBench's directory: the user's


def test_the_pipeline_ttt_eval_and_load_run_build_one_setup(tmp_path):
    from ttt.checkpoint import open_checkpoint

    runs = _runs(tmp_path)
    for name, settings in (("ttt", dict(K=250, N=20, rule="episodes")),
                           ("control", dict(H=50, rule="paper", transforms=None))):  # fmt: skip
        plan = plan_run(runs[name], tmp_path / "cache")
        pipeline = plan.eval.setup
        if name == "control":  # the selection control is a transform the plan swaps in
            assert pipeline.transforms.select is select_random_rank
            settings["transforms"] = pipeline.transforms
        ck = open_checkpoint(_checkpoint(tmp_path, plan))
        ttt_eval = checkpoint_setup(ck, plan.eval.variant, where="ck", **settings)  # what `ttt eval` / load_run do
        assert pipeline == ttt_eval
        spec = plan.data.spec
        assert pipeline == make_setup(plan.eval.variant, GCBC, plan.train.cfg, plan.train.sampler, spec, 1000,
                                      **settings)  # fmt: skip
    assert pipeline.ttt.select.mode == "fixed" and pipeline.ttt.select.H == 50


def test_a_plan_refuses_a_row_before_any_stage(tmp_path):
    runs = _runs(tmp_path)
    with pytest.raises(TttError, match=r"^run ttt: K must be in \[1, 1000\] \(the episode length of pointmaze"):
        plan_run({**runs["ttt"], "K": 1001})
    with pytest.raises(TttError, match=r"^run ttt: ft_alpha .* gcbc has none"):
        plan_run({**runs["ttt"], "ft_alpha": 0.3})
    with pytest.raises(TttError, match=r"^run base: agent_config: "):
        plan_run({**runs["base"], "agent_config": {"no_such_field": 1}})
    critic_free = plan_run({**runs["ttt"], "variant": "ttt-mc", "agent_config": {"with_critic": False}})
    named = {**runs["ttt"], "checkpoint": str(_checkpoint(tmp_path, critic_free))}
    with pytest.raises(TttError, match=r"^run ttt: variant ttt needs a value function"):
        plan_run(named)  # a checkpoint the row names may lack what the row needs: its configs are read into the plan
    with pytest.raises(TttError, match=r"^run ttt: backend = 'mjx' is the physics of the compiled driver"):
        plan_run({**runs["ttt"], "backend": "mjx", "driver": "host"})
    ant = {**runs["base"], "dataset": "antmaze-medium-navigate-v0", "agent_config": {}, "backend": "mjx"}
    with pytest.raises(TttError, match=r"^run base: backend = 'mjx': antmaze-medium-v0 runs on C MuJoCo only"):
        plan_run(ant)


def test_bucket_changes_the_setup_but_not_the_evaluation_key(tmp_path, monkeypatch):
    """`bucket` (episodes fine-tuned together each round) is speed only: a row asking for the whole batch (0) gets
    `TTTConfig.bucket = None` and keeps the evaluation key (and so the cached records) of the default row."""
    import jax

    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")  # the default row's bucket follows the backend
    default = plan_run(_runs(tmp_path)["ttt"], tmp_path / "cache")
    whole = plan_run(_runs(tmp_path, bucket=0)["ttt"], tmp_path / "cache")
    three = plan_run(_runs(tmp_path, bucket=3)["ttt"], tmp_path / "cache")
    assert default.eval.setup.ttt.bucket == 1
    assert whole.eval.setup.ttt.bucket is None
    assert three.eval.setup.ttt.bucket == 3
    assert dict(default.eval.key) == dict(whole.eval.key) == dict(three.eval.key)
    with pytest.raises(TttError, match=r"bucket must be >= 1 episodes, or 0 for the whole call at once, got -1"):
        _runs(tmp_path, bucket=-1)
    spec = default.data.spec
    with pytest.raises(TttError, match=r"bucket must be an int >= 1, None \(the whole batch\) or 'auto', got 0"):
        make_setup("ttt", GCBC, default.train.cfg, default.train.sampler, spec, 1000, bucket=0)


def test_default_bucket_follows_the_backend(tmp_path, monkeypatch):
    """A row without `bucket` (and `make_setup`'s 'auto') fine-tunes episodes one after another on a CPU and a call's
    live episodes together on any other backend, where one update leaves the device idle."""
    import jax

    from ttt.setups import default_bucket

    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    default = plan_run(_runs(tmp_path)["ttt"], tmp_path / "cache")
    assert default_bucket() == 1 and default.eval.setup.ttt.bucket == 1
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert default_bucket() is None
    assert plan_run(_runs(tmp_path)["ttt"], tmp_path / "cache").eval.setup.ttt.bucket is None
    three = plan_run(_runs(tmp_path, bucket=3)["ttt"], tmp_path / "cache")
    assert three.eval.setup.ttt.bucket == 3  # an explicit bucket wins


def test_the_core_takes_the_backbone_record_and_a_name_is_refused_in_one_line(tmp_path):
    """Values, not names: `EvalSetup` / `make_setup` take the `Backbone` record; a name is one line saying how to get
    the record, before anything is built."""
    from ttt.evaluation import EvalSetup

    plan = plan_run(_runs(tmp_path)["ttt"], tmp_path / "cache")
    t, spec = plan.train, plan.data.spec
    assert EvalSetup(t.backbone, t.cfg, t.sampler, spec, None, 1000).backbone is GCBC
    with pytest.raises(TttError, match=r"^EvalSetup\.backbone must be a backbone record \(ttt\.get_backbone\(name\)"):
        EvalSetup("gcbc", t.cfg, t.sampler, spec, None, 1000)
    with pytest.raises(TttError, match=r"backbone must be a backbone record"):
        make_setup("base", "gcbc", t.cfg, t.sampler, spec, 1000)
