"""Issue 62: what a newcomer still tripped on. Names that escape their folder, sizes that end in tracebacks, labels
that lie about a row's checkpoint, a dry run that checks too little, settings that do nothing shown as active, Python
frictions and malformed records: each refused with one line (CLI: exit 2, no traceback, nothing written; Python: a
`TttError` naming the argument), or accepted where a researcher would expect it to be."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import one_line_error, pretrain_argv, run

import ttt
from ttt.cli import main
from ttt.data import generate as gen
from ttt.pipeline.config import load_pipeline
from ttt.storage import file_name

NAV = "pointmaze-medium-navigate-v0"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 3-episode navigate dataset, another copy of it (seed 1) and a GC-BC checkpoint (8x8 networks, 2 seeds, 4
    steps) trained on the first."""
    root = tmp_path_factory.mktemp("newcomer")
    gen.generate(NAV, episodes=3, seed=0, directory=root / "data", workers=1)
    gen.generate(NAV, episodes=3, seed=1, directory=root / "other", workers=1)
    assert main(pretrain_argv(NAV, 4, root / "ck", root / "data")) == 0
    return root


def _files(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


def _dry(capsys, toml: Path, *sets: str) -> tuple[int, str, str]:
    args = ["run", str(toml), "--dry-run"]
    for s in sets:
        args += ["--set", s]
    return run(args, capsys)


# ------------------------------------------------------------------------ 1. names that escape their folder


@pytest.mark.parametrize("name", ["../../evil", "a/b", "a\\b", "/tmp/abs", "..", ".", "", "tab\there", "x" * 201])
def test_a_name_becomes_a_file_name_through_one_function(name):
    with pytest.raises(ttt.TttError, match=r"^run name"):
        file_name(name, "run name")


@pytest.mark.parametrize("where, value", [("run", "../../evil"), ("run", "a/b"), ("run", "a\\\\b"),
                                          ("run", "\\u0001ctl"), ("run", ".."), ("pipeline", "../../evil"),
                                          ("pipeline", "/tmp/abs"), ("pipeline", "")])  # fmt: skip
def test_run_and_pipeline_names_that_would_escape_are_refused(tmp_path, capsys, monkeypatch, where, value):
    monkeypatch.chdir(tmp_path)
    top = f'name = "{value}"\n' if where == "pipeline" else 'name = "p"\n'
    row = f'name = "{value}"\n' if where == "run" else ""
    (tmp_path / "p.toml").write_text(f"{top}[[run]]\n{row}")
    before = _files(tmp_path)
    for extra in ([], ["--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache")]):
        rc, _, err = run(["run", str(tmp_path / "p.toml"), "--dry-run", *extra], capsys)
        line = one_line_error(err)
        assert rc == 2 and f"{where} name" in line, line
    assert _files(tmp_path) == before  # nothing written, in the folder or beside it


def test_a_grid_that_puts_a_separator_into_generated_names_is_refused(tmp_path, capsys):
    (tmp_path / "g.toml").write_text('name = "g"\n[[run]]\nname = "r"\ngrid = { data_dir = ["x/y", "z"] }\n')
    rc, _, err = _dry(capsys, tmp_path / "g.toml")
    assert rc == 2 and "run name 'r-data_dirx/y' holds a path separator" in one_line_error(err)


# ------------------------------------------------------------------------------- 2. huge sizes, bounded early


@pytest.mark.parametrize("args, needle", [
    (["--variants", "ttt-mc", "--N", "3000000000"], "--N = 3000000000 is too large"),
    (["--variants", "ttt-mc", "--K", "100", "--batch", "1000000000"], "fine-tuning batches of 1000000000 rows"),
    (["--variants", "ttt-mc", "--h-min", "99999999999"], "--h-min = 99999999999 is too large"),
    (["--variants", "ttgs", "--ttgs", "n_vertices=100000000"], "TTGS graphs of 100000000 vertices"),
])  # fmt: skip
def test_huge_evaluation_sizes_are_refused_before_allocating(tiny, tmp_path, capsys, args, needle):
    argv = ["eval", str(tiny / "ck"), "--dir", str(tiny / "data"), "--episodes", "1", "--tasks", "1",
            "--json", str(tmp_path / "r.json"), *args]  # fmt: skip
    rc, _, err = run(argv, capsys)
    line = one_line_error(err)
    assert rc == 2 and needle in line, line
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("sets, needle", [
    (["batch=1000000000"], "fine-tuning batches of 1000000000 rows"),
    (["N=3000000000"], "N = 3000000000 is too large"),
    (["n_episodes=99999999999"], "n_episodes = 99999999999 is too large"),
    (["variant=ttgs", "ttgs={ n_vertices = 100000000 }"], "TTGS graphs of 100000000 vertices"),
])  # fmt: skip
def test_huge_pipeline_sizes_are_refused_by_the_dry_run(tmp_path, capsys, sets, needle):
    (tmp_path / "p.toml").write_text('name = "p"\n[[run]]\nname = "r"\nvariant = "ttt"\n')
    rc, _, err = _dry(capsys, tmp_path / "p.toml", *sets)
    line = one_line_error(err)
    assert rc == 2 and "run r: " in line and needle in line, line


def test_huge_sizes_from_python_load_run(tiny):
    with pytest.raises(ttt.TttError, match="fine-tuning batches of 1000000000 rows .* of memory"):
        ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="ttt-mc", K=250, N=2, batch=10**9)
    with pytest.raises(ttt.TttError, match=r"^N = 3000000000 is too large"):
        ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="ttt-mc", N=3 * 10**9)


# ---------------------------------------------------------------- 3. a row's labels come from its checkpoint


def test_a_rows_agent_dataset_profile_steps_and_seeds_come_from_its_checkpoint(tiny, tmp_path):
    (tmp_path / "p.toml").write_text(f'name = "p"\n[defaults]\nagent = "gcbc"\nsteps = 4\n[[run]]\n'
                                     f'name = "r"\ncheckpoint = "{tiny / "ck"}"\n')  # fmt: skip
    r = load_pipeline(tmp_path / "p.toml").runs[0]
    assert (r["agent"], r["dataset"], r["steps"], r["seeds"], r["profile"]) == ("gcbc", NAV, 4, 2, "cpu")
    assert r["name"] == "r"


@pytest.mark.parametrize("key, value", [("agent", '"gciql"'), ("steps", "50000"), ("seeds", "5"),
                                        ("dataset", '"pointmaze-large-navigate-v0"')])  # fmt: skip
def test_defaults_that_contradict_a_checkpoint_are_refused_not_replaced(tiny, tmp_path, capsys, key, value):
    """Issue 75: a value the user wrote in [defaults] is a setting too; the checkpoint's never silently replaces it
    (the dry run and the real run read the pipeline the same way)."""
    (tmp_path / "p.toml").write_text(f'name = "p"\n[defaults]\n{key} = {value}\n[[run]]\nname = "r"\n'
                                     f'checkpoint = "{tiny / "ck"}"\n')  # fmt: skip
    for argv in (["run", str(tmp_path / "p.toml"), "--dry-run"], ["run", str(tmp_path / "p.toml"), "--out",
                                                                   str(tmp_path / "out")]):  # fmt: skip
        rc, _, err = run(argv, capsys)
        line = one_line_error(err)
        assert rc == 2 and f"{key} = {value}, but checkpoint" in line, line
        assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.parametrize("key, value", [("agent", '"gciql"'), ("steps", "10"), ("seeds", "3"),
                                        ("dataset", '"pointmaze-medium-stitch-v0"')])  # fmt: skip
def test_a_row_that_contradicts_its_checkpoint_is_refused(tiny, tmp_path, capsys, key, value):
    (tmp_path / "p.toml").write_text(f'name = "p"\n[[run]]\nname = "r"\ncheckpoint = "{tiny / "ck"}"\n'
                                     f"{key} = {value}\n")  # fmt: skip
    rc, _, err = _dry(capsys, tmp_path / "p.toml")
    line = one_line_error(err)
    assert rc == 2 and f"{key} = {value}, but checkpoint" in line and "leave " + key in line, line


# ------------------------------------------------------------------- 4. the dry run resolves every checkpoint


def test_the_dry_run_resolves_checkpoints_and_their_data(tiny, tmp_path, capsys):
    rc, _, err = run(["run", "quickstart", "--dry-run", "--set", "checkpoint=/nonexistent/ck"], capsys)
    assert rc == 2 and "checkpoint: /nonexistent/ck: no checkpoint here" in one_line_error(err)
    rc, _, err = run(["run", "quickstart", "--dry-run", "--set", "checkpoint="], capsys)
    assert rc == 2 and "checkpoint is empty" in one_line_error(err)
    row = f'name = "p"\n[[run]]\nname = "r"\ncheckpoint = "{tiny / "ck"}"\ndata_episodes = 3\n'
    (tmp_path / "ok.toml").write_text(row + f'data_dir = "{tiny / "data"}"\n')
    rc, out, err = _dry(capsys, tmp_path / "ok.toml")
    assert rc == 0 and "matches its data" in out, err
    (tmp_path / "other.toml").write_text(row + f'data_dir = "{tiny / "other"}"\n')
    before = _files(tiny)
    rc, _, err = _dry(capsys, tmp_path / "other.toml")
    assert rc == 2 and "different copy" in one_line_error(err)
    out = tmp_path / "out"  # the run itself refuses it before any stage: nothing generated, trained or written
    rc, _, err = run(["run", str(tmp_path / "other.toml"), "--out", str(out), "--cache", str(tmp_path / "c")], capsys)
    assert rc == 2 and "different copy" in one_line_error(err)
    assert _files(tiny) == before and not out.exists()


# ---------------------------------------------------------------------------- 5. settings a rule ignores


@pytest.mark.parametrize("text, sets, needle", [
    ('[defaults]\nq = 0.2\n[[run]]\nname = "mc"\nvariant = "ttt-mc"\n[[run]]\nname = "c"\nvariant = "ttt"\n', [],
     "run 2 (c): q = 0.2 changes nothing: rule 'episodes' (the default of variant ttt) does not read it; remove it "
     "from [defaults]"),
    ('[[run]]\nname = "c"\nvariant = "ttt"\nq = 0.2\n', [], "remove it from this row"),
    ('[[run]]\nname = "c"\nvariant = "ttt"\nrule = "paper"\nn_episodes = 5\n', [], "n_episodes = 5 changes nothing"),
    ('[[run]]\nname = "c"\nvariant = "ttt-mc"\nrule = "mc-episodes"\nn_episodes = 5\n', [], "n_episodes"),
    ('[[run]]\nname = "c"\nvariant = "ttt"\n', ["q=0.2"], "--set q: no row of"),
    ('[[run]]\nname = "c"\nvariant = "ttt"\n', ["slack=3"], "--set slack: no row of"),
])  # fmt: skip
def test_pipelines_refuse_settings_their_rule_ignores(tmp_path, capsys, text, sets, needle):
    (tmp_path / "p.toml").write_text('name = "p"\n' + text)
    rc, _, err = _dry(capsys, tmp_path / "p.toml", *sets)
    line = one_line_error(err)
    assert rc == 2 and needle in line, line


def test_set_q_is_kept_where_some_row_reads_it_and_every_shipped_pipeline_loads(capsys):
    rc, out, err = run(["run", "quickstart", "--dry-run", "--set", "q=0.2"], capsys)
    assert rc == 0, err
    ttt_row = next(line for line in out.splitlines() if line.strip().startswith("ttt:"))
    assert "q 0.2" not in ttt_row  # the critic row (rule episodes) does not show a q it never reads
    for path in sorted((ROOT / "pipelines").glob("*.toml")):
        load_pipeline(path)


# ----------------------------------------------------------------------------------- 6. Python frictions


def test_load_run_numbers_of_every_kind_and_strings_named(tiny):
    with pytest.raises(ttt.TttError, match=r"^lr must be a number, got '3e-4' \(str\); write the number itself"):
        ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="ttt-mc", lr="3e-4")
    with pytest.raises(ttt.TttError, match=r"^K must be an integer, got 2.5"):
        ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="ttt-mc", K=2.5)
    plain = ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="ttt-mc", K=250, N=2, lr=1e-3)[0]
    for kinds in (dict(K=np.int64(250), N=np.int32(2), lr=np.float64(1e-3)),
                  dict(K=jnp.asarray(250), N=jnp.asarray(2, jnp.int32), lr=jnp.asarray(1e-3, jnp.float32).item()),
                  dict(K=250, N=2, lr=np.float32(1e-3).item())):  # fmt: skip
        setup = ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="ttt-mc", **kinds)[0]
        assert setup.ttt.K == plain.ttt.K and setup.ttt.finetune.steps == plain.ttt.finetune.steps
        assert isinstance(setup.ttt.K, int) and isinstance(setup.ttt.finetune.lr, float)


def test_a_seed_stacked_agent_in_run_episode_is_named_as_such(tiny):
    setup, agents, data, env = ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="base")
    with pytest.raises(ttt.TttError, match=r"^agent is seed-stacked: every array has a leading seed axis of 2 .*"
                                           r"jax.tree.map\(lambda x: x\[i\] if eqx.is_array\(x\) else x, agents\)"):
        ttt.run_episode(setup, agents, data, env, data.goals[0], data.goals[5])
    one = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, agents)
    bad = jax.tree.map(lambda x: x[..., :1] if eqx.is_array(x) and x.ndim == 2 else x, one)
    with pytest.raises(ttt.TttError, match="another dataset or config"):  # not stacked: the old diagnosis stays
        ttt.run_episode(setup, bad, data, env, data.goals[0], data.goals[5])


# ------------------------------------------------------------------------------- 7. malformed records, a BOM


def _record(**edits) -> dict:
    rec = dict(run=dict(name="base", group="main", dataset=NAV, agent="gcbc", variant="base", tasks=[1], episodes=1,
                        eval_seed=0), checkpoint="ck", seeds=2, n_episodes=2, per_seed=[0.0, 1.0], mean=0.5, se=0.5,
               wall_s=1.0, profile="cpu")  # fmt: skip
    rec.update(edits)
    return rec


@pytest.mark.parametrize("text, needle", [
    (json.dumps(dict(rows=[], records=[_record(per_seed=None)])), "per_seed must be a non-empty list of numbers"),
    (json.dumps(dict(rows=[], records=[_record(mean="oops")])), 'mean must be a number (the mean success over seeds), '
                                                                'got "oops"'),
    (json.dumps(dict(rows=[], records=[_record(seeds=None)])), "seeds must be an integer >= 1"),
    (json.dumps(dict(rows=[], records=[_record(run=dict(name="x"))])), "run.variant must be a string"),
    (json.dumps(dict(rows=[], records=[_record()]))[:50], "not valid JSON (truncated or edited"),
    ("[1, 2]", "expected a JSON object with keys rows, records"),
])  # fmt: skip
def test_report_on_a_malformed_record_is_one_line(tmp_path, capsys, text, needle):
    (tmp_path / "results.json").write_text(text)
    rc, _, err = run(["report", str(tmp_path)], capsys)
    line = one_line_error(err)
    assert rc == 2 and needle in line and "--from-evals" in line, line
    assert _files(tmp_path) == {"results.json"}  # no report, no plots folder


def test_from_evals_names_a_malformed_record(tmp_path, capsys):
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "base-abc.json").write_text(json.dumps(_record(per_seed=None)))
    rc, _, err = run(["report", str(tmp_path), "--from-evals"], capsys)
    assert rc == 2 and "base-abc.json (run 'base'): per_seed must be" in one_line_error(err)
    (tmp_path / "evals" / "base-abc.json").write_text('{"run": {"na')
    rc, _, err = run(["report", str(tmp_path), "--from-evals"], capsys)
    assert rc == 2 and "not valid JSON" in one_line_error(err)


def test_a_pipeline_with_a_utf8_bom_loads(tmp_path, capsys):
    shutil.copy(ROOT / "pipelines" / "quickstart.toml", tmp_path / "q.toml")
    (tmp_path / "q.toml").write_bytes(b"\xef\xbb\xbf" + (tmp_path / "q.toml").read_bytes())
    rc, out, err = run(["run", str(tmp_path / "q.toml"), "--dry-run"], capsys)
    assert rc == 0 and "pipeline quickstart: 3 runs" in out, err


# ----------------------------------------------------------------------------------------- the frictions


def test_a_checkpoint_finds_its_data_in_the_run_cache(tiny, tmp_path, monkeypatch):
    from ttt.data import files

    monkeypatch.setattr(files, "default_dir", lambda: tmp_path / "no-ogbench")  # OGBench's folder holds nothing
    monkeypatch.setenv("TTT_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ttt.TttError, match="default dataset directory"):
        ttt.load_run(tiny / "ck")
    shutil.copytree(tiny / "other", tmp_path / "cache" / "data" / f"{NAV}-e3-s1")  # another copy: not this one's
    shutil.copytree(tiny / "data", tmp_path / "cache" / "data" / f"{NAV}-e3-s0")
    setup, agents, data, env = ttt.load_run(tiny / "ck")
    assert data.n_episodes == 3


def test_numbers_that_agree_with_each_other():
    from ttt.cli.evaluate import _ttgs_line, episode_rate
    from ttt.pipeline.run import cache_label

    assert episode_rate(3, 720.0) == "240.0 s per episode" and episode_rate(30, 10.0) == "3.00 episodes/s"
    rounds = dict(ttgs_goal_frac=[[[[1.0, 0.5]]]], active=[[[[True, False]]]])
    assert _ttgs_line(dict(rounds=rounds)) == "; ttgs_goal_frac 1.00 (1.00: no waypoint used, the base policy)"
    assert cache_label("x") == "--cache"
    import os

    old = os.environ.pop("TTT_CACHE", None)
    try:
        assert "--cache or $TTT_CACHE" in cache_label(None)
        os.environ["TTT_CACHE"] = "/somewhere"
        assert cache_label(None) == "the cache ($TTT_CACHE)"
    finally:
        os.environ.pop("TTT_CACHE", None)
        if old is not None:
            os.environ["TTT_CACHE"] = old


def test_ttgs_says_its_cost_before_it_starts(tiny):
    from ttt.evaluation import ttgs_cost_note

    setup = ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="ttgs")[0]
    note = ttgs_cost_note(setup, 3)
    assert note.startswith("ttgs: 4000 vertices on a CPU") and "64x the work of 500" in note
    assert "n_vertices=500" in note
    small = ttt.load_run(tiny / "ck", data_dir=tiny / "data", variant="ttgs", ttgs={"n_vertices": 50})[0]
    assert ttgs_cost_note(small, 3) is None


def test_python_evaluate_progress_line(capsys):
    from ttt.evaluation.run import _terminal_progress

    show = _terminal_progress()
    show(0, 4)
    show(4, 4)
    err = capsys.readouterr().err
    assert "evaluate: 0/4 episodes" in err and "evaluate: 4/4 episodes" in err and err.endswith("\n")
