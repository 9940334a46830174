"""Issue 39: nothing silently wrong. Sizes the machine cannot hold, a full disk, concurrent writers, an interrupted
`ttt eval`, starts in walls, N = 0, settings the selection rule ignores, and the Python frictions a new user meets:
each is refused with one line (CLI: exit 2, no traceback; Python: a `TttError` naming the argument), or handled.

The full disk and the concurrent writers are simulated here (a file system that refuses every write under one
folder; a lock held by the test); `benchmarks/reliability/fault_injection.py --faults` reproduces both for real (a
3 MB tmpfs, two processes at once)."""

from __future__ import annotations

import ast
import builtins
import dataclasses
import errno
import json
import os
import threading
import time
import types
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import one_line_error, pretrain_argv, run

import ttt
from ttt import storage
from ttt.cli import main
from ttt.data import generate as gen
from ttt.evaluation import evaluate

NAV = "pointmaze-medium-navigate-v0"
STITCH = "pointmaze-medium-stitch-v0"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 3-episode navigate dataset and a GC-BC checkpoint (8x8 networks, 2 seeds, 4 steps) under one folder."""
    root = tmp_path_factory.mktemp("faults")
    gen.generate(NAV, episodes=3, seed=0, directory=root / "data", workers=1)
    assert main(pretrain_argv(NAV, 4, root / "ck", root / "data")) == 0
    return root


@pytest.fixture(scope="module")
def loaded(tiny):
    return ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="ttt-mc", K=250, N=2)


# ------------------------------------------------------------------------------------- 1. sizes the machine cannot hold


def test_huge_episode_counts_are_refused_before_allocating(tiny, tmp_path, capsys):
    rc, out, err = run(["eval", str(tiny / "ck"), "--dir", str(tiny / "data"), "--episodes", "99999999999999999999",
                        "--tasks", "1"], capsys)  # fmt: skip
    line = one_line_error(err)
    assert rc == 2 and "of memory" in line and "fewer episodes" in line, line
    rc, out, err = run(["data", "generate", STITCH, "--episodes", "99999999999999999999", "--dir", str(tmp_path)],
                       capsys)  # fmt: skip
    line = one_line_error(err)
    assert rc == 2 and "of memory" in line and "fewer episodes" in line, line
    assert list(tmp_path.iterdir()) == []  # no partial folder, no lock file


def test_huge_episode_counts_from_python(loaded):
    setup, agents, data, env = loaded
    with pytest.raises(ttt.TttError, match=r"^evaluating \d+ episodes .* of memory"):
        evaluate(setup, agents, data, episodes=10**15, tasks=(1,), env=env)


# ------------------------------------------------------------------------------------------------- 2. a full disk


class _Full:
    """A file whose every write fails as on a full disk."""

    def __init__(self, f):
        self.f = f

    def write(self, b):
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


class _FullDiskOS:
    """`os` for ttt.storage, whose files under `root` are on a full disk."""

    def __init__(self, root: Path):
        self.root = str(root)

    def fdopen(self, fd, mode="r"):
        path = os.readlink(f"/proc/self/fd/{fd}")
        f = os.fdopen(fd, mode)
        return _Full(f) if path.startswith(self.root) else f

    def __getattr__(self, name):
        return getattr(os, name)


@pytest.fixture
def full_disk(monkeypatch, tmp_path):
    """A folder `tmp_path / 'full'` where every file storage writes fails with 'no space left on device'."""
    d = tmp_path / "full"
    d.mkdir()
    monkeypatch.setattr(storage, "os", _FullDiskOS(d))
    return d


def test_a_full_disk_is_one_line_naming_the_file_and_the_space_needed(full_disk):
    for write in (lambda p: storage.atomic_write_text(p, "x" * 5000),
                  lambda p: storage.atomic_save_npz(p, {"a": np.zeros(1000)}),
                  lambda p: storage.atomic_write_bytes(p, lambda f: eqx.tree_serialise_leaves(f, {"a": jnp.zeros(9)}))):
        with pytest.raises(ttt.TttError, match=r"^cannot write .*full/f: no space left on device \(it needs \d"):
            write(full_disk / "f")  # equinox wraps the OSError in its TreePathError: still one line
        assert list(full_disk.iterdir()) == []  # no half file


def test_generate_and_pretrain_on_a_full_disk(full_disk, tiny, capsys):
    rc, _, err = run(["data", "generate", STITCH, "--episodes", "2", "--workers", "1", "--dir", str(full_disk)],
                     capsys)  # fmt: skip
    line = one_line_error(err)
    assert rc == 2 and "no space left on device" in line and str(full_disk) in line
    assert not list(full_disk.glob(".*partial*")) and not list(full_disk.glob("*.npz"))
    rc, _, err = run(pretrain_argv(NAV, 2, full_disk / "ck", tiny / "data"), capsys)
    line = one_line_error(err)
    assert rc == 2 and "no space left on device" in line and "state-" in line


def test_eval_json_on_a_full_disk_keeps_the_results_elsewhere(full_disk, tiny, capsys, monkeypatch, tmp_path):
    spare = tmp_path / "spare"
    spare.mkdir()
    monkeypatch.setenv("TMPDIR", str(spare))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again
    out = full_disk / "eval.json"
    rc, stdout, err = run(["eval", str(tiny / "ck"), "--dir", str(tiny / "data"), "--episodes", "1", "--tasks", "1",
                           "--variants", "base", "--json", str(out)], capsys)  # fmt: skip
    line = one_line_error(err.strip().splitlines()[-1])  # (after the progress line)
    assert rc == 2 and "Traceback" not in err and "no space left on device" in line and "base: " in stdout
    kept = list(spare.glob("ttt-eval-*-eval.json"))
    assert len(kept) == 1 and str(kept[0]) in line
    assert json.loads(kept[0].read_text())["variants"]["base"]["success"]  # the results, not lost
    assert not out.exists()


# ------------------------------------------------------------------------------------------ 3. concurrent writers


def test_a_second_generate_into_one_folder_waits_and_finds_it_done(tmp_path, capsys):
    with storage.locked(tmp_path / f".{STITCH}.lock", "the test's dataset"):  # another process is writing
        result = {}
        t = threading.Thread(target=lambda: result.update(paths=gen.generate(STITCH, episodes=2, seed=0,
                                                                             directory=tmp_path, workers=1)))
        t.start()
        time.sleep(1.0)
        assert t.is_alive() and not list(tmp_path.glob("*.npz")) and not list(tmp_path.glob(".*partial*"))
    t.join(timeout=120)
    assert not t.is_alive() and result["paths"][0].exists()
    assert "waiting: another ttt process" in capsys.readouterr().err
    from ttt.data.files import list_datasets

    assert [r["status"] for r in list_datasets(tmp_path)] == ["complete"]  # listed once, complete


def test_a_second_pretrain_into_one_checkpoint_waits(tiny, tmp_path, capsys):
    ck = tmp_path / "ck"
    ck.mkdir()
    rcs = []
    with storage.locked(ck / ".lock", "the test's checkpoint"):
        t = threading.Thread(target=lambda: rcs.append(main(pretrain_argv(NAV, 2, ck, tiny / "data"))))
        t.start()
        time.sleep(1.0)
        assert t.is_alive() and not (ck / "meta.json").exists()
    t.join(timeout=300)
    assert rcs == [0] and json.loads((ck / "meta.json").read_text())["step"] == 2


PIPE = """
name = "two"
[defaults]
dataset = "pointmaze-medium-navigate-v0"
data_episodes = 3
agent = "gcbc"
agent_config = { actor_hidden_dims = [8, 8], value_hidden_dims = [8, 8], batch_size = 8 }
steps = 4
train_chunk = 4
seeds = 2
episodes = 1
tasks = [1]
variant = "base"
[[run]]
name = "a"
[[run]]
name = "b"
eval_seed = 1
"""


def test_two_only_runs_into_one_out_at_once_keep_both_rows(tmp_path, capsys, monkeypatch):
    """`--only a` and `--only b` into one --out at once: b finishes while a evaluates; a's results then hold both,
    and so does pipeline.json."""
    import ttt.pipeline.run as prun

    (tmp_path / "two.toml").write_text(PIPE)
    argv = ["run", str(tmp_path / "two.toml"), "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache")]
    real = prun.evaluate_run

    def a_while_b_runs(plan, *args, **kw):
        if plan.name == "a":
            monkeypatch.setattr(prun, "evaluate_run", real)
            assert main([*argv, "--only", "b"]) == 0  # the other invocation, finishing first
        return real(plan, *args, **kw)

    monkeypatch.setattr(prun, "evaluate_run", a_while_b_runs)
    assert main([*argv, "--only", "a"]) == 0
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert sorted(r["run"]["name"] for r in doc["records"]) == ["a", "b"]
    # pipeline.json describes both rows too, in the pipeline's order (b's invocation kept a's run), and another
    # invocation of one of them keeps the other
    plan_runs = lambda: [r["name"] for r in json.loads((tmp_path / "out" / "pipeline.json").read_text())["runs"]]  # noqa: E731
    assert plan_runs() == ["a", "b"]
    assert main([*argv, "--only", "b"]) == 0 and plan_runs() == ["a", "b"]


def test_one_row_run_twice_at_once_is_evaluated_once(tmp_path, capsys, monkeypatch):
    """`--only a` twice into one --out at once: the second waits on the evaluation's lock, then takes the first's
    record instead of computing the row again."""
    import ttt.pipeline.stages as stages

    (tmp_path / "two.toml").write_text(PIPE)
    argv = ["run", str(tmp_path / "two.toml"), "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"),
            "--only", "a"]  # fmt: skip
    real, calls, started = stages.evaluate, [], threading.Event()

    def slow(*args, **kw):
        calls.append(kw["tasks"])
        started.set()
        time.sleep(2.0)  # the second invocation reaches the lock meanwhile
        return real(*args, **kw)

    monkeypatch.setattr(stages, "evaluate", slow)
    rcs = []
    first = threading.Thread(target=lambda: rcs.append(main(argv)))
    first.start()
    assert started.wait(timeout=300)
    rcs.append(main(argv))
    first.join(timeout=300)
    assert rcs == [0, 0] and calls == [(1,)]  # one evaluation of its one task, not two
    err = capsys.readouterr().err
    assert "waiting: another ttt process" in err and "the evaluation of a" in err
    assert len(list((tmp_path / "out" / "evals").glob("a-*.json"))) == 1


# ---------------------------------------------------------------------------------- 5. Ctrl-C says what is saved


@pytest.mark.parametrize("json_out", [False, True])
def test_interrupted_eval_says_whether_anything_was_saved(tiny, tmp_path, capsys, monkeypatch, json_out):
    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr("ttt.pipeline.stages.evaluate", interrupted)  # `ttt eval` evaluates through the stage
    extra = ["--json", str(tmp_path / "e.json")] if json_out else []
    rc, _, err = run(["eval", str(tiny / "ck"), "--dir", str(tiny / "data"), "--episodes", "1", "--tasks", "1",
                      "--variants", "base", *extra], capsys)  # fmt: skip
    assert rc == 130
    if json_out:
        assert "finished work is saved" in err
    else:
        assert "nothing is saved" in err and "--json" in err and "resume" not in err.split("(")[0]
    rc, _, err = run(["data", "list", "--dir", str(tiny / "data")], capsys)  # the next command: the usual line again
    from ttt.cli.common import SAVED, interrupt_note

    assert rc == 0 and interrupt_note() == SAVED


# ---------------------------------------------------------------------------------- 6. starts and goals that exist


def test_a_start_or_goal_that_is_not_finite_in_a_wall_or_outside_is_refused(loaded):
    setup, agents, data, env = loaded
    agent = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, agents)
    ok = np.asarray(data.goals[0])
    for bad, why in (([np.nan, 0.0], "not finite"), ([np.inf, 0.0], "not finite"),
                     ([-4.0, -4.0], "in a wall or outside"), ([100.0, 100.0], "in a wall or outside"),
                     ([8.0, 0.0], "in a wall or outside")):  # fmt: skip  ((8, 0): cell (1, 3), a wall)
        with pytest.raises(ttt.TttError, match=rf"^start_xy .* is {why}.*free_cells\(\)"):
            ttt.run_episode(setup, agent, data, env, start_xy=bad, goal_xy=ok)
        with pytest.raises(ttt.TttError, match=rf"^goal_xy .* is {why}"):
            ttt.run_episode(setup, agent, data, env, start_xy=ok, goal_xy=bad)
    cells = env.free_cells()
    assert cells.shape == (26, 2) and all(env.contains(c) for c in cells) and env.contains(ok)
    drawn = env.sample_free(0, 200)
    assert drawn.shape == (200, 2) and all(env.contains(p) for p in drawn)
    assert not env.contains([0.0, 4.0 * 7]) and not env.contains([np.nan, np.nan])


# ------------------------------------------------------------------------------------------------------- 7. N = 0


def test_n_zero_is_refused_everywhere(tiny, tmp_path, capsys):
    rc, _, err = run(["eval", str(tiny / "ck"), "--dir", str(tiny / "data"), "--variants", "ttt-mc", "--N", "0"],
                     capsys)  # fmt: skip
    line = one_line_error(err)
    assert rc == 2 and "--N" in line and ">= 1" in line and "variant 'base'" in line
    with pytest.raises(ttt.TttError, match=r"^N \(fine-tuning steps per round\) must be >= 1, got 0"):
        ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="ttt-mc", N=0)
    (tmp_path / "p.toml").write_text('name = "p"\n[[run]]\nvariant = "ttt-mc"\nN = 0\n')
    rc, _, err = run(["run", str(tmp_path / "p.toml"), "--dry-run"], capsys)
    assert rc == 2 and "N (fine-tuning steps per round) must be >= 1" in one_line_error(err)


# ------------------------------------------------------------------------------- 8. settings the rule does not read


def test_settings_the_rule_ignores_are_refused(tiny, tmp_path, capsys):
    setup, agents, data, env = ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="ttt", K=250, N=2)
    assert setup.ttt.select.rule_used == "episodes"
    with pytest.raises(ttt.TttError, match=r"^params / grid over q: rule 'episodes' \(the default of this variant\)"):
        evaluate(setup, agents, data, episodes=1, tasks=(1,), env=env, grid={"q": [0.05, 0.2]})
    with pytest.raises(ttt.TttError, match=r"^params / grid over q"):
        evaluate(setup, agents, data, episodes=1, tasks=(1,), env=env, params={"q": 0.2})
    with pytest.raises(ttt.TttError, match=r"^q: rule 'episodes' .* does not read it"):
        ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="ttt", q=0.2)
    with pytest.raises(ttt.TttError, match=r"^slack: rule 'paper'"):
        ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="ttt-mc", slack=3)
    with pytest.raises(ttt.TttError, match=r"^rule 'mc-episodes' does not apply to variant 'ttt'"):
        ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="ttt", rule="mc-episodes")
    rc, _, err = run(["eval", str(tiny / "ck"), "--dir", str(tiny / "data"), "--variants", "base,ttt", "--q", "0.2"],
                     capsys)  # fmt: skip
    line = one_line_error(err)
    assert rc == 2 and line.startswith("error: --q changes nothing here") and "ttt: rule episodes" in line
    (tmp_path / "g.toml").write_text('name = "g"\n[[run]]\nvariant = "ttt"\ngrid = { q = [0.05, 0.2] }\n')
    rc, _, err = run(["run", str(tmp_path / "g.toml"), "--dry-run"], capsys)
    line = one_line_error(err)
    assert rc == 2 and "grid over q: rule 'episodes' (the default of variant ttt) does not read q" in line
    (tmp_path / "b.toml").write_text('name = "b"\n[[run]]\nvariant = "base"\ngrid = { lr = [1e-4, 3e-4] }\n')
    rc, _, err = run(["run", str(tmp_path / "b.toml"), "--dry-run"], capsys)
    assert rc == 2 and "variant 'base' reads no TTT setting" in one_line_error(err)


# ------------------------------------------------------------------------------------------------ Python frictions


def _undefined_names(code: str) -> set[str]:
    """Names a code block loads that it never binds (imports, assignments, defs, arguments) and Python does not
    define: a block a new user cannot run as written."""
    tree = ast.parse(code)
    bound = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound


def test_help_and_readme_blocks_run_as_written():
    import re

    from ttt import setups

    for fn in (ttt.load_run, ttt.make_setup):  # the docs name the function users call: ttt.evaluate(...)
        assert "from ttt.evaluation import evaluate" not in (fn.__doc__ or ""), fn
    assert "from ttt.evaluation import evaluate" not in setups.__doc__
    readme = (ROOT / "README.md").read_text()
    block = readme.split("### Composing your own variant")[1]
    code = re.findall(r"```python\n(.*?)```", block, flags=re.S)[0]
    assert _undefined_names(code) == set(), code


def test_a_custom_select_transform_needs_rule_paper_at_load_run(tiny):
    def keep_all(ctx):
        return ttt.Selection(ctx.relevant, jnp.float32(0.0))

    with pytest.raises(ttt.TttError, match=r"^transforms\.select: .* rule 'paper' only.*'episodes'.*pass rule='paper'"):
        ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="ttt", transforms=ttt.Transforms(select=keep_all))
    setup, *_ = ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="ttt", rule="paper",
                             transforms=ttt.Transforms(select=keep_all))  # fmt: skip
    assert setup.ttt.select.rule_used == "paper"


def test_an_unknown_load_run_setting_lists_the_valid_ones(tiny):
    with pytest.raises(ttt.TttError, match=r"^load_run: unknown setting\(s\) Q; valid: .*\bK, N, lr, q, eps"):
        ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="ttt", Q=0.1)


def test_training_rows_names_its_mistakes(loaded):
    from ttt.select import training_rows

    _, _, data, _ = loaded
    s, g = data.goals[0], data.goals[20]
    with pytest.raises(ttt.TttError, match=r"^training_rows: unknown parameter\(s\) Q; valid: q, eps_rel"):
        training_rows("paper", data, s, g, goal_eps=1.0, Q=0.1)
    with pytest.raises(ttt.TttError, match=r"^training_rows: state must be goal coordinates .* got shape \(3,\)"):
        training_rows("paper", data, jnp.zeros(3), g, goal_eps=1.0)
    with pytest.raises(ttt.TttError, match=r"^training_rows: values must hold one value per dataset row"):
        training_rows("episodes", data, s, g, jnp.zeros(5), goal_eps=1.0)
    with pytest.raises(ttt.TttError, match=r"^training_rows: SelectConfig.q .* must be in \(0, 1\]"):
        training_rows("paper", data, s, g, goal_eps=1.0, q=2.0)
    with pytest.raises(ttt.TttError, match=r"^training_rows: goal_eps"):
        training_rows("paper", data, s, g, goal_eps=float("nan"))


def test_python_errors_name_the_python_argument(tmp_path):
    with pytest.raises(ttt.TttError, match=r"data_dir"):
        ttt.load_dataset(NAV, tmp_path / "missing")
    with pytest.raises(ttt.TttError, match=r"^episodes \(--episodes\) must be an int >= 1"):
        gen.generate(STITCH, episodes=0, directory=tmp_path)


def test_rounds_after_an_episode_ended_read_nan_through_active_rounds(loaded):
    from ttt.evaluation import active_rounds

    setup, agents, data, env = loaded
    agent = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, agents)
    xy = np.asarray(data.goals[0])
    out = ttt.run_episode(setup, agent, data, env, start_xy=xy, goal_xy=xy)  # ends at step 1, in round 0
    assert out.rounds["n_selected"][1:].tolist() == [0] * (len(out.rounds["n_selected"]) - 1)  # the raw idle zeros
    n = active_rounds(out.rounds, "n_selected")
    assert not np.isnan(n[0]) and np.isnan(n[1:]).all()
    with pytest.raises(ttt.TttError, match=r"no round metric 'nope'"):
        active_rounds(out.rounds, "nope")


def test_dir_ttt_shows_the_public_names_only():
    names = [n for n in dir(ttt) if not n.startswith("_")]
    assert not {"TYPE_CHECKING", "annotations", "exports"} & set(names)
    assert {"load_run", "run_episode", "TttError"} <= set(names)


def test_quickstart_draws_every_gcttt_row_and_a_later_task_fills_the_missing_outcome(tmp_path, monkeypatch):
    from ttt.pipeline import artifacts
    from ttt.pipeline.config import load_pipeline

    pipe = load_pipeline(ROOT / "pipelines" / "quickstart.toml")
    assert all(r["figure"] for r in pipe.runs if r["variant"] != "base")
    calls = []

    def fake(seed, setup, agents, data, res, e, path, max_segments, task):
        calls.append((task, path.name))
        path.write_text("x")

    monkeypatch.setattr(artifacts, "_save_episode_selection", fake)
    ev = types.SimpleNamespace(tasks=(1, 2, 3), seed=0)  # the run's EvalPlan, as far as the figure reads it
    res = lambda s: dataclasses.make_dataclass("R", ["success"])(np.array(s, float).reshape(1, 1, -1))  # noqa: E731
    path = tmp_path / "row.npz"
    artifacts.save_selection_figure(ev, None, None, None, res([0, 0]), path, task=1)  # task 1: failures only
    artifacts.save_selection_figure(ev, None, None, None, res([0, 1]), path, task=2)  # task 2: the success
    artifacts.save_selection_figure(ev, None, None, None, res([1, 0]), path, task=3)  # both there: nothing
    assert calls == [(1, "row.failure.npz"), (2, "row.success.npz")]


# -------------------------------------------------------------- what the probe (benchmarks/reliability/probe.py) found


@pytest.mark.parametrize("kind, needle", [("list", "must be a JSON object"), ("step", "'step' must be int"),
                                          ("nan", "'seeds' must be int"),
                                          ("escape", "'state_file' must be a file name"),
                                          ("config", "'config' is not a valid gcbc config")])  # fmt: skip
def test_hostile_checkpoint_metadata_is_named(tiny, tmp_path, capsys, kind, needle):
    import shutil

    ck = tmp_path / "ck"
    shutil.copytree(tiny / "ck", ck)
    meta = json.loads((ck / "meta.json").read_text())
    text = {"list": "[1, 2]", "step": json.dumps({**meta, "step": "four"}),
            "nan": json.dumps(meta).replace('"seeds": 2', '"seeds": NaN'),
            "escape": json.dumps({**meta, "state_file": "../../../etc/passwd"}),
            "config": json.dumps({**meta, "config": {**meta["config"], "actor_hidden_dims": "abc"}})}[kind]  # fmt: skip
    (ck / "meta.json").write_text(text)
    rc, out, err = run(["eval", str(ck), "--dir", str(tiny / "data"), "--episodes", "1", "--tasks", "1"], capsys)
    assert rc == 2 and needle in one_line_error(err) and "success" not in out


def test_non_finite_and_out_of_range_inputs_are_refused(tiny, loaded, tmp_path, capsys):
    setup, agents, data, env = loaded
    for bad in (dict(lr=float("inf")), dict(eps=float("inf"))):
        with pytest.raises(ttt.TttError, match=r"must be a finite number > 0, got inf"):
            ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="ttt-mc", **bad)
    with pytest.raises(ttt.TttError, match=r"^seed \(the evaluation seed\) must be an int in \[0, 2\^63\)"):
        evaluate(setup, agents, data, episodes=1, tasks=(1,), env=env, seed=-1)
    with pytest.raises(ttt.TttError, match=r"^tasks must be whole task ids"):
        evaluate(setup, agents, data, episodes=1, tasks=[1.5], env=env)
    agent = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, agents)
    with pytest.raises(ttt.TttError, match=r"^key must be one typed PRNG key"):
        ttt.run_episode(setup, agent, data, env, data.goals[0], data.goals[5], key=jax.random.PRNGKey(0))
    with pytest.raises(ttt.TttError, match=r"^unknown env id 'nope'"):
        ttt.make_env("nope")
    (tmp_path / "inf.toml").write_text('name = "i"\n[[run]]\nvariant = "ttt-mc"\nlr = inf\n')
    rc, _, err = run(["run", str(tmp_path / "inf.toml"), "--dry-run"], capsys)
    assert rc == 2 and "lr must be a finite number" in one_line_error(err)
    (tmp_path / "big.toml").write_text('name = "b"\n[[run]]\nepisodes = 100000000000000000000\n')
    rc, _, err = run(["run", str(tmp_path / "big.toml"), "--dry-run"], capsys)
    assert rc == 2 and "of memory" in one_line_error(err)
    rc, _, err = run(["run", "quickstart", "--stages", "foo", "--dry-run"], capsys)
    assert rc == 2 and "--stages: unknown stage(s) foo" in one_line_error(err)
    base = pretrain_argv(NAV, 2, tmp_path / "p", tiny / "data")
    for flag, value, needle in (("--steps", str(2**70), "--steps must be at most"),
                                ("--seeds", str(10**9), "of memory")):  # fmt: skip
        argv = list(base)
        argv[argv.index(flag) + 1] = value
        rc, _, err = run(argv, capsys)
        assert rc == 2 and needle in one_line_error(err), err
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "results.json").write_text('{"rows": 3, "records": "x"}')
    rc, _, err = run(["report", str(tmp_path / "res")], capsys)
    assert rc == 2 and "not a ttt results file" in one_line_error(err)
