"""A longer pre-training run of a cached configuration continues the cached shorter checkpoint instead of starting
over, and ends bit for bit where training from scratch ends (a learning curve pays for its longest point only)."""

from __future__ import annotations

import json

import equinox as eqx
import jax
import numpy as np
import pytest
from helpers import pretrain_argv, run

from ttt.errors import TttError

PIPE = """
name = "curve"
[defaults]
dataset = "pointmaze-medium-stitch-v0"
data_episodes = 4
agent = "gcbc"
agent_config = { actor_hidden_dims = [8, 8], value_hidden_dims = [8, 8], batch_size = 8 }
steps = 4
train_chunk = 2
seeds = 2
variant = "base"
[[run]]
name = "base"
"""


def _leaves(ckpt):
    from ttt.pretrain import load_checkpoint

    states, _ = load_checkpoint(ckpt)
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(eqx.filter(states, eqx.is_array))]


@pytest.mark.slow
def test_a_longer_run_continues_the_shorter_checkpoint(tmp_path, capsys):
    pipe = tmp_path / "curve.toml"
    pipe.write_text(PIPE)
    cache = tmp_path / "cache"
    args = ["run", str(pipe), "--out", str(tmp_path / "out"), "--cache", str(cache), "--stages", "data,pretrain"]
    rc, stdout, err = run(args, capsys)
    assert rc == 0, err
    assert "continuing" not in stdout
    (short,) = (cache / "ckpt").rglob("meta.json")

    rc, stdout, err = run([*args, "--set", "steps=8"], capsys)
    assert rc == 0, err
    assert f"continuing the 4-step checkpoint {short.parent}" in stdout and "resuming at step 4" in stdout
    long = next(p.parent for p in (cache / "ckpt").rglob("meta.json") if p.parent != short.parent)
    assert json.loads((long / "meta.json").read_text())["step"] == 8
    assert json.loads(short.read_text())["step"] == 4  # the shorter checkpoint is left as it was

    # `ttt pretrain` of 8 steps from scratch on the same data gives the same arrays, bit for bit.
    (data_dir,) = {p.parent for p in (cache / "data").rglob("*.npz")}
    argv = pretrain_argv("pointmaze-medium-stitch-v0", 8, tmp_path / "scratch", data_dir, seeds=2, chunk=8)
    rc, _, err = run(argv, capsys)
    assert rc == 0, err
    a, b = _leaves(long), _leaves(tmp_path / "scratch")
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))

    # Another configuration (one seed instead of two, or other data) is never continued from it.
    from ttt.pipeline import load_pipeline, plan_run
    from ttt.pipeline.stages import shorter_checkpoint

    (r,) = load_pipeline(pipe, {"steps": 8}).runs
    data_hash = json.loads(short.read_text())["dataset_hash"]
    train = lambda **kw: plan_run({**r, **kw}, cache).train  # noqa: E731
    found = shorter_checkpoint(train(), long.parent / "new", data_hash)
    assert found.path == short.parent and found.meta["step"] == json.loads(short.read_text())["step"] == 4
    assert shorter_checkpoint(train(steps=4), long.parent / "new", data_hash) is None  # nothing shorter than 4 steps
    assert shorter_checkpoint(train(seeds=1), long.parent / "new", data_hash) is None
    assert shorter_checkpoint(train(), long.parent / "new", "another-hash") is None

    # Evaluations are cached by content as well: a row with another name but the same settings reuses the
    # record, in the same output and, through the cache, in another pipeline's output.
    pipe.write_text(PIPE.replace("[[run]]", "episodes = 1\ntasks = [1]\n[[run]]") + '[[run]]\nname = "again"\n')
    out = tmp_path / "out"
    rc, stdout, err = run(["run", str(pipe), "--out", str(out), "--cache", str(cache)], capsys)
    assert rc == 0, err
    assert stdout.count("  eval: ") == 1 and "reused: again is the same evaluation as base" in stdout
    rows = {r["name"]: r for r in json.loads((out / "results.json").read_text())["rows"]}
    assert rows["again"]["per_seed"] == rows["base"]["per_seed"]
    rc, stdout, err = run(["run", str(pipe), "--out", str(tmp_path / "other"), "--cache", str(cache)], capsys)
    assert rc == 0, err
    assert "  eval: " not in stdout and "reused: base is the same evaluation as base" in stdout


def _keyed_run(tmp_path, variant: str) -> tuple[dict, dict]:
    """The one-row pipeline's run as `variant`, and a checkpoint's metadata in `tmp_path`, for evaluation keys."""
    from ttt.pipeline import load_pipeline

    meta = dict(agent="gcbc", backbone="gcbc", config={}, dataset="d", dataset_hash="h", obs_dim=2, action_dim=2,
                seeds=1, state_file="s.eqx", state_sha256="0" * 64, step=1)  # fmt: skip
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    pipe = tmp_path / "p.toml"
    pipe.write_text(PIPE.replace('variant = "base"', f'variant = "{variant}"'))
    (r,) = load_pipeline(pipe).runs
    return r, meta


def test_the_eval_key_names_the_rule_in_force(tmp_path):
    # A row left at the default rule and a row naming that rule are one evaluation; a changed default is another.
    from ttt.pipeline import plan_run
    from ttt.pipeline.keys import eval_key

    r, meta = _keyed_run(tmp_path, "ttt")
    assert r["rule"] is None
    key = lambda **kw: eval_key(plan_run({**r, **kw}), tmp_path, meta)  # noqa: E731
    assert key() == key(rule="episodes") != key(rule="paper")
    assert key(variant="ttt-mc") == key(variant="ttt-mc", rule="paper") != key(variant="ttt-mc", rule="episodes")


def test_the_eval_key_names_the_ttgs_path_in_force(tmp_path):
    # Graph-search rows hash what follows a long path's last held vertex: the default 'slide' (since 14febb1) is
    # another evaluation than the 'cut' ones made before, whose keys held no such field; GC-TTT rows are unchanged.
    from ttt.pipeline import plan_run
    from ttt.pipeline.keys import BASE_EVAL_KEYS, checkpoint_identity, digest, eval_key

    r, meta = _keyed_run(tmp_path, "ttgs")
    key = lambda **kw: eval_key(plan_run({**r, **kw}), tmp_path, meta)  # noqa: E731
    before = digest(dict(checkpoint=checkpoint_identity(tmp_path, meta), variant="ttgs", dataset=r["dataset"],
                         **{k: r[k] for k in BASE_EVAL_KEYS}))  # fmt: skip
    assert len({before, key(), key(ttgs={"path": "cut"})}) == 3
    assert key(variant="ttt+ttgs") != key(variant="ttt+ttgs", ttgs={"path": "cut"})  # the combined rows too


def test_late_eval_keys_enter_the_key_only_when_set(tmp_path):
    # ft_train / ft_alpha at their defaults leave a row's evaluation key as it was before they existed (the records
    # already made keep their keys); set, they make another evaluation; gcbc (no BC weight) refuses ft_alpha.
    from ttt.pipeline import plan_run, validate_run
    from ttt.pipeline.config import LATE_EVAL_KEYS
    from ttt.pipeline.keys import digest, eval_key

    r, meta = _keyed_run(tmp_path, "ttt")
    key = lambda **kw: eval_key(plan_run({**r, **kw}), tmp_path, meta)  # noqa: E731
    from ttt.pipeline.config import EVAL_KEYS, effective_rule
    from ttt.pipeline.keys import checkpoint_identity

    old = {k: r[k] for k in EVAL_KEYS if k not in LATE_EVAL_KEYS}  # the key as it was computed before
    old["rule"] = effective_rule(r)
    ck = checkpoint_identity(tmp_path, meta)
    assert key() == digest(dict(checkpoint=ck, variant="ttt", dataset=r["dataset"], **old))
    ft_alpha = lambda a: key(agent="gciql", ft_alpha=a)  # noqa: E731  (gcbc has no BC weight; the agent is not in the key)
    assert len({key(), key(ft_train="actor"), ft_alpha(0.3), ft_alpha(1.0)}) == 4
    # Antmaze and cube episodes are drawn from the keys since they run in the compiled program: their evaluations
    # made before (the gym env's seeded resets) are other evaluations.
    ant = {**r, "dataset": "antmaze-medium-navigate-v0"}
    old_ant = digest(dict(checkpoint=ck, variant="ttt", dataset=ant["dataset"], **old))
    assert eval_key(plan_run(ant), tmp_path, meta) != old_ant
    with pytest.raises(TttError, match="ft_alpha .*BC weight alpha"):
        validate_run({**r, "ft_alpha": 0.3})
    validate_run({**r, "agent": "gciql", "ft_alpha": 0.3, "ft_train": "actor"})
