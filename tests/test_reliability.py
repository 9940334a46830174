"""Issue 19: bad input and damaged files give one line (exit 2, no traceback) before any work, nothing computed
is lost, caches are keyed by content and a corrupt entry is reported and rebuilt. One test (or more) per row of the
issue's table; the tiny dataset, checkpoint and pipeline are made here."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helpers import STITCH, one_line_error, pretrain_argv, run

from ttt.cli import main
from ttt.data import generate as gen


def strict_json(path):
    """Parse as a strict reader does: bare NaN / Infinity are errors."""

    def refuse(name):
        raise ValueError(f"bare {name} in {path}")

    return json.loads(path.read_text(), parse_constant=refuse)


def pretrain_args(d, out, steps=4, *extra):
    return [*pretrain_argv(STITCH, steps, out, d), *extra]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    gen.generate(STITCH, episodes=4, seed=0, directory=d, workers=1)
    ck = d / "ck"
    assert main(pretrain_args(d, ck)) == 0
    return d, ck


# ------------------------------------------------------------------------------------------ row 1, smaller items


def test_eval_json_to_a_bad_path_fails_before_evaluating(trained, capsys):
    d, ck = trained
    (d / "a-file").write_text("x")
    rc, out, err = run(["eval", str(ck), "--dir", str(d), "--episodes", "1", "--tasks", "2", "--variants", "base",
                        "--json", str(d / "a-file" / "out.json")], capsys)  # fmt: skip
    line = one_line_error(err)
    assert rc == 2 and "--json" in line and "a-file" in line and "success" not in out
    rc, out, err = run(["eval", str(ck), "--dir", str(d), "--episodes", "1", "--tasks", "2", "--variants", "base",
                        "--json", str(d)], capsys)  # fmt: skip
    assert rc == 2 and "is a directory" in one_line_error(err)


def test_eval_json_creates_its_directory_is_strict_and_keeps_finished_variants(trained, capsys):
    d, ck = trained
    path = d / "new" / "dir" / "eval.json"
    args = ["eval", str(ck), "--dir", str(d), "--episodes", "1", "--tasks", "2", "--variants", "base,ttt-mc",
            "--N", "1", "--K", "500", "--json", str(path)]  # fmt: skip
    rc, out, err = run(args, capsys)
    assert rc == 0, err
    doc = strict_json(path)
    assert set(doc["variants"]) == {"base", "ttt-mc"}
    # A rerun with the same settings keeps both variants; a changed TTT setting evaluates ttt-mc alone again.
    rc, out, err = run(args, capsys)
    assert rc == 0 and out.count("kept from") == 2, out
    rc, out, err = run([*args[:-2], "--N", "2", "--json", str(path)], capsys)
    assert rc == 0 and "base: kept from" in out and "ttt-mc: kept from" not in out, out
    assert strict_json(path)["variants"]["ttt-mc"]["ttt"]["finetune"]["steps"] == 2


def test_eval_single_seed_writes_null_not_nan(tmp_path, trained, capsys):
    d, _ = trained
    ck = tmp_path / "one-seed"
    argv = pretrain_args(d, ck)
    argv[argv.index("--seeds") + 1] = "1"
    assert main(argv) == 0
    rc, _, err = run(["eval", str(ck), "--dir", str(d), "--episodes", "1", "--tasks", "2", "--variants", "base",
                      "--json", str(tmp_path / "e.json")], capsys)  # fmt: skip
    assert rc == 0, err
    doc = strict_json(tmp_path / "e.json")
    assert doc["se"] is None and doc["variants"]["base"]["se"] is None


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--tasks", "1,1"], "--tasks must be distinct task ids in 1..5"),
        (["--driver", "host", "--backend", "mjx"], "--backend mjx is the physics of the compiled driver"),
        (["--seed", "-1"], "--seed must be in [0, 2^63)"),
    ],
)
def test_eval_bad_options(trained, capsys, args, needle):
    d, ck = trained
    rc, _, err = run(["eval", str(ck), "--dir", str(d), *args], capsys)
    assert rc == 2 and needle in one_line_error(err)


# --------------------------------------------------------------------------------------------- rows 5, 7, 10, 11


def test_pretrain_out_naming_a_file_or_unwritable(trained, tmp_path, capsys):
    d, _ = trained
    f = tmp_path / "file"
    f.write_text("x")
    rc, _, err = run(pretrain_args(d, f), capsys)
    assert rc == 2 and "is a file, not a directory" in one_line_error(err)
    rc, _, err = run(pretrain_args(d, f / "sub"), capsys)
    assert rc == 2 and "--out" in one_line_error(err) and "not writable" in err


@pytest.mark.parametrize(
    "sets, needle",
    [
        (["lr=abc"], "gcbc config key lr must be a finite number, got 'abc'"),
        (["lr=-1"], "gcbc config key lr must be > 0, got -1.0"),
        (["batch_size=0"], "gcbc config key batch_size must be >= 1, got 0"),
        (["batch_size=1.5"], "gcbc config key batch_size must be an integer, got 1.5"),
        (["actor_hidden_dims=abc"], "actor_hidden_dims must be a non-empty list of layer widths"),
        (["discount=1.5"], "discount must be in (0, 1)"),
    ],
)
def test_pretrain_bad_config_values(trained, tmp_path, capsys, sets, needle):
    d, _ = trained
    rc, _, err = run(pretrain_args(d, tmp_path / "ck", 4, *[x for s in sets for x in ("--set", s)]), capsys)
    assert rc == 2 and needle in one_line_error(err)


def test_pretrain_steps_below_the_checkpoint_and_resume_message(trained, tmp_path, capsys):
    d, ck0 = trained
    ck = tmp_path / "ck"
    shutil.copytree(ck0, ck)
    rc, _, err = run(pretrain_args(d, ck, 2), capsys)
    line = one_line_error(err)
    assert rc == 2 and "step 4" in line and "past the 2 steps asked for" in line
    rc, out, err = run(pretrain_args(d, ck, 4), capsys)
    assert rc == 0 and "already at step 4: nothing to train" in out and "nan" not in out, out
    rc, out, err = run(pretrain_args(d, ck, 6), capsys)
    assert rc == 0 and "resuming at step 4 of 6" in out and "nan" not in out, out


def test_non_finite_loss_names_terms_and_no_phantom_checkpoint(trained, tmp_path, capsys):
    d, _ = trained
    rc, _, err = run(pretrain_args(d, tmp_path / "ck", 4, "--set", "lr=1e30"), capsys)
    line = one_line_error(err)
    assert rc == 2 and "non-finite" in line and "_loss" in line and "try a lower lr" in line, line
    assert "no checkpoint was saved" in line and "(step 0)" not in line


# ---------------------------------------------------------------------------------------------- rows 6, 8, 9


def test_generate_negative_seed_leaves_nothing(tmp_path, capsys):
    rc, _, err = run(["data", "generate", STITCH, "--episodes", "1", "--seed", "-1", "--dir", str(tmp_path)], capsys)
    assert rc == 2 and "seed (--seed) must be an int in [0, 2^32), got -1" in one_line_error(err)
    assert list(tmp_path.iterdir()) == []


def test_generate_creates_a_missing_dir(tmp_path, capsys):
    d = tmp_path / "new" / "data"
    rc, _, err = run(["data", "generate", STITCH, "--episodes", "1", "--dir", str(d), "--workers", "1"], capsys)
    assert rc == 0 and (d / f"{STITCH}.npz").exists(), err


def test_corrupt_generation_block_is_rebuilt_and_force_clears_the_cache(tmp_path, capsys, monkeypatch):
    # Interrupt after the first block; then truncate it: the rerun reports it and makes it again.
    calls = []

    def stop_after_first(done, total):
        calls.append(done)
        if len(calls) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        gen.generate(STITCH, episodes=30, seed=0, directory=tmp_path, workers=1, progress=stop_after_first)
    (block,) = tmp_path.glob(f".{STITCH}.partial-*/split0-0000000.npz")
    block.write_bytes(block.read_bytes()[:100])
    gen.generate(STITCH, episodes=30, seed=0, directory=tmp_path, workers=1)
    assert "corrupt cached block" in capsys.readouterr().err
    ref = tmp_path / "ref"
    ref.mkdir()
    gen.generate(STITCH, episodes=30, seed=0, directory=ref, workers=1)
    for name in (f"{STITCH}.npz", f"{STITCH}-val.npz"):
        a, b = np.load(tmp_path / name), np.load(ref / name)
        assert all(np.array_equal(a[k], b[k]) for k in a.files)
    # --force starts over: a partial folder of the same plan is removed first, not read.
    spec = gen.get_spec(STITCH)
    stale = tmp_path / f".{STITCH}.partial-{gen.GenerationPlan(spec, 30, 0, spec.noise).fingerprint()}"
    stale.mkdir(exist_ok=True)
    (stale / "split0-0000000.npz").write_bytes(b"garbage")
    capsys.readouterr()
    gen.generate(STITCH, episodes=30, seed=0, directory=tmp_path, workers=1, force=True)
    assert "corrupt" not in capsys.readouterr().err and not stale.exists()
    a, b = np.load(tmp_path / f"{STITCH}.npz"), np.load(ref / f"{STITCH}.npz")
    assert all(np.array_equal(a[k], b[k]) for k in a.files)


def test_data_check_compares_the_stored_sha256(tmp_path, capsys):
    gen.generate(STITCH, episodes=1, seed=0, directory=tmp_path, workers=1)
    rc, _, err = run(["data", "check", STITCH, "--dir", str(tmp_path)], capsys)
    assert rc == 0, err
    p = tmp_path / f"{STITCH}.npz"
    arrays = dict(np.load(p))
    arrays["actions"][5] *= 0.5  # a valid file with other contents
    np.savez_compressed(p, **arrays)
    rc, _, err = run(["data", "check", STITCH, "--dir", str(tmp_path)], capsys)
    line = one_line_error(err)
    assert rc == 2 and "contents changed since generation" in line and "sha256" in line and "--force" in line


def test_truncated_checkpoint_is_reported(trained, tmp_path, capsys):
    d, ck0 = trained
    ck = tmp_path / "ck"
    shutil.copytree(ck0, ck)
    (state,) = ck.glob("state-*.eqx")
    state.write_bytes(state.read_bytes()[:-7])
    rc, _, err = run(["eval", str(ck), "--dir", str(d), "--variants", "base"], capsys)
    line = one_line_error(err)
    assert rc == 2 and "corrupt checkpoint state" in line and "sha256" in line


# ------------------------------------------------------------------------------------------------ row 13


def test_pipeline_that_is_a_directory_or_binary(tmp_path, capsys):
    rc, _, err = run(["run", str(tmp_path)], capsys)
    assert rc == 2 and "is a directory; give a .toml file or a name" in one_line_error(err)
    b = tmp_path / "bin.toml"
    b.write_bytes(bytes(range(256)))
    rc, _, err = run(["run", str(b)], capsys)
    assert rc == 2 and "not a text file" in one_line_error(err)


def test_config_type_messages_read_well(tmp_path, capsys):
    p = tmp_path / "p.toml"
    p.write_text("[[run]]\nK = 'ten'\n")
    rc, _, err = run(["run", str(p), "--dry-run"], capsys)
    assert rc == 2 and "K must be an integer" in one_line_error(err) and "a int" not in err


# ---------------------------------------------------------------------------------------------------- row 3

PIPE = """
name = "tiny"
[defaults]
dataset = "pointmaze-medium-stitch-v0"
data_episodes = 4
agent = "gcbc"
agent_config = { actor_hidden_dims = [8, 8], value_hidden_dims = [8, 8], batch_size = 8 }
steps = 4
train_chunk = 2
seeds = 2
episodes = 1
tasks = [2]
K = 500
N = 1
q = 0.5
eps = 3.0
h_min = 3
[[run]]
name = "base"
variant = "base"
[[run]]
name = "mc"
variant = "ttt-mc"
"""


@pytest.mark.parametrize(
    "sets, needle",
    [
        (["K=2000"], "run mc: K must be in [1, 1000] (the episode length of pointmaze-medium-v0), got 2000"),
        (["agent_config={ lr_max = 1 }"], "run base: agent_config: unknown gcbc config key(s) lr_max"),
        (["agent_config={ lr = 'abc' }"], "run base: agent_config: gcbc config key lr must be a finite number"),
        (["agent_config={ actor_hidden_dims = 'x' }"], "actor_hidden_dims must be a non-empty list"),
        (["backend='mjx'", "driver='host'"], "backend = 'mjx' is the physics of the compiled driver"),
        (["eval_seed=-1"], "eval_seed must be in [0, 2^63)"),
    ],
)
def test_dry_run_catches_what_the_real_run_would_die_on(tmp_path, capsys, sets, needle):
    p = tmp_path / "tiny.toml"
    p.write_text(PIPE)
    argv = ["run", str(p), "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache")]
    argv += [x for s in sets for x in ("--set", s)]
    rc, _, err = run([*argv, "--dry-run"], capsys)
    assert rc == 2 and needle in one_line_error(err)
    rc, out, err = run(argv, capsys)  # the real run stops on it before any data or training
    assert rc == 2 and needle in one_line_error(err) and not (tmp_path / "cache" / "data").exists()


# ----------------------------------------------------------------------------------------- rows 4, 5, 8, 12


@pytest.fixture(scope="module")
def piped(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pipe")
    p = tmp / "tiny.toml"
    p.write_text(PIPE)
    args = ["run", str(p), "--out", str(tmp / "out"), "--cache", str(tmp / "cache")]
    assert main(args) == 0
    return tmp, args


def _rows(out):
    return {r["name"]: r for r in strict_json(out / "results.json")["rows"]}


def test_only_keeps_the_other_rows(piped, capsys):
    tmp, args = piped
    before = _rows(tmp / "out")
    rc, out, err = run([*args, "--only", "mc", "--set", "N=2"], capsys)
    assert rc == 0, err
    after = _rows(tmp / "out")
    assert list(after) == ["base", "mc"] and after["base"] == before["base"]
    assert "| base |" in (tmp / "out" / "report.md").read_text()


def test_a_ttt_setting_does_not_reevaluate_base_rows(piped, capsys):
    tmp, args = piped
    rc, out, err = run([*args, "--set", "N=3"], capsys)
    assert rc == 0, err
    # The base row comes from the cache (said per row) and nothing is pre-trained again; only mc is evaluated.
    lines = [ln.strip() for ln in out.splitlines()]
    assert any(ln.startswith("eval: mc") and "from the cache" not in ln for ln in lines), out
    assert [ln for ln in lines if ln.startswith("eval: base")] and all(
        "from the cache" in ln for ln in lines if ln.startswith("eval: base")), out
    assert all("from the cache" in ln for ln in lines if ln.startswith("pretrain:")), out


def test_moved_cache_keeps_evaluations(piped, capsys):
    tmp, args = piped
    moved = tmp / "moved-cache"
    shutil.copytree(tmp / "cache", moved)
    rc, out, err = run([*args[:-1], str(moved)], capsys)
    assert rc == 0, err
    worked = [ln for ln in out.splitlines() if ln.strip().startswith(("eval:", "pretrain:", "data:"))
              and "from the cache" not in ln]  # fmt: skip
    assert not worked, out


def test_corrupt_cache_entries_are_reported_and_rebuilt(piped, capsys):
    tmp, args = piped
    out_dir, cache = tmp / "out", tmp / "cache"
    assert main(args) == 0
    before = _rows(out_dir)
    for rec in (out_dir / "evals").glob("mc-*.json"):
        rec.write_text(rec.read_text()[:50])
    for part in (out_dir / "evals").glob(".partial-*/task2.npz"):
        part.write_bytes(part.read_bytes()[:60])
    rc, out, err = run(args, capsys)
    assert rc == 0, err
    assert "is corrupt" in out and _rows(out_dir)["mc"]["per_seed"] == before["mc"]["per_seed"]
    # A truncated cached dataset is generated again; a truncated checkpoint is trained again; same results.
    (npz,) = (cache / "data").glob(f"*/{STITCH}.npz")
    npz.write_bytes(npz.read_bytes()[:1000])
    (state,) = (cache / "ckpt").rglob("state-*.eqx")
    state.write_bytes(state.read_bytes()[:-9])
    shutil.rmtree(out_dir / "evals")
    rc, out, err = run(args, capsys)
    assert rc == 0, err
    assert "cached dataset is corrupt" in out and "cached checkpoint is corrupt" in out, out
    assert {k: v["per_seed"] for k, v in _rows(out_dir).items()} == {k: v["per_seed"] for k, v in before.items()}


def test_resumed_evaluation_counts_finished_tasks_before_timing(piped, capsys, monkeypatch):
    """A rerun reads the tasks a stopped process finished before the bar starts timing: its first update already
    counts them, so the rate and time left are those of the episodes still to run, not inflated by reused ones."""
    from ttt.cli import run as cli_run

    calls = []

    class Recorder:
        def __init__(self, desc, unit="episodes"):
            self.desc = desc

        def __call__(self, done, total, **fields):
            calls.append((self.desc, done, total))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    tmp, args = piped
    out_dir = tmp / "out-resume"
    two = [*args[:3], str(out_dir), *args[4:], "--only", "mc", "--set", "tasks=[1, 2]"]
    assert main(two) == 0
    (rec,) = (out_dir / "evals").glob("mc-*.json")
    key = rec.stem.split("-")[-1]
    for copy in (rec, tmp / "cache" / "evals" / f"{key}.json"):  # the record and its copy in the shared cache
        copy.unlink()
    (task2,) = (out_dir / "evals").glob(".partial-*/task2.npz")
    task2.unlink()
    capsys.readouterr()
    monkeypatch.setattr(cli_run, "ProgressBar", Recorder)
    assert main(two) == 0
    assert "eval: mc resuming at 2 of 4 episodes (1 of 2 tasks kept in" in capsys.readouterr().out
    evals = [(done, total) for desc, done, total in calls if desc.startswith("eval mc")]
    assert evals[0] == (2, 4) and evals[-1] == (4, 4), calls  # 2 seeds x 1 episode per task; task 1 was kept
    assert all(done >= 2 for done, _ in evals), evals


def test_unwritable_out_cache_and_report_out(piped, capsys):
    tmp, args = piped
    f = tmp / "a-file"
    f.write_text("x")
    pipe = args[1]
    rc, _, err = run(["run", pipe, "--out", str(f / "out"), "--cache", str(tmp / "cache")], capsys)
    assert rc == 2 and "--out" in one_line_error(err) and "not writable" in err
    rc, _, err = run(["run", pipe, "--out", str(tmp / "out"), "--cache", str(f)], capsys)
    assert rc == 2 and "--cache" in one_line_error(err) and "is a file" in err
    rc, _, err = run(["report", str(tmp / "out"), str(tmp / "out"), "--out", str(f / "r")], capsys)
    assert rc == 2 and "--out" in one_line_error(err)


# ---------------------------------------------------------------------------------------------------- row 2


def _cli(*args):
    import subprocess
    import sys
    from pathlib import Path

    code = "import sys; from ttt.cli import main; sys.exit(main(sys.argv[1:]))"
    repo = Path(__file__).resolve().parent.parent
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=repo, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_stops_pretraining_at_once_and_a_rerun_resumes(trained, tmp_path, sig, code):
    import signal
    import time

    d, _ = trained
    ck = tmp_path / "ck"
    # 256x2 networks: a chunk of 80 steps runs ~7 s under the suite's compile flags (tests/conftest.py), so a stop
    # within 3 s of the signal did not wait for the chunk to end.
    p = _cli(*pretrain_args(d, ck, 10**7)[:-6], "--chunk", "80")
    t0 = time.time()
    while not (ck / "meta.json").exists():
        assert p.poll() is None and time.time() - t0 < 120, p.communicate()
        time.sleep(0.2)
    time.sleep(1.0)
    p.send_signal(getattr(signal, sig))
    t1 = time.time()
    out, err = p.communicate(timeout=30)
    assert p.returncode == code and time.time() - t1 < 3, (p.returncode, time.time() - t1, err)
    assert f"interrupted ({sig}): finished work is saved" in err and "Traceback" not in err, err
    step = json.loads((ck / "meta.json").read_text())["step"]
    rc = main([*pretrain_args(d, ck, step + 2)[:-6], "--chunk", "2"])
    assert rc == 0 and json.loads((ck / "meta.json").read_text())["step"] == step + 2


# ------------------------------------------------------------------------------------------- small user items


def test_figure_two_shows_a_success_and_a_failure_side_by_side(tmp_path):
    from ttt.pipeline.report import plot_selection, selection_figures

    figs = tmp_path / "figures"
    figs.mkdir()
    for kind, ok, ep in (("failure", 0.0, 3), ("success", 1.0, 0)):
        np.savez(figs / f"mc.{kind}.npz", traj=np.zeros((5, 2)), goal=np.ones(2), success=np.float32(ok),
                 episode=np.int32(ep), K=np.int32(100), round_start=np.zeros((2, 2)), n_selected=np.array([3, 4]),
                 n_selected_recorded=np.array([3, 4]), seg_xy=np.zeros((4, 2)), seg_len=np.array([2, 2]),
                 seg_round=np.array([0, 1]), walls=np.array([[4.0, 4.0]]), maze_unit=np.float32(4.0),
                 bg_xy=np.zeros((3, 2)), bg_len=np.array([3]))  # fmt: skip
    groups = selection_figures(figs)
    assert list(groups) == ["mc"] and [p.name for p in groups["mc"]] == ["mc.success.npz", "mc.failure.npz"]
    import matplotlib.image as mpimg

    plot_selection(groups["mc"], tmp_path / "two.png", "mc")
    plot_selection(groups["mc"][:1], tmp_path / "one.png", "mc")
    w2, w1 = mpimg.imread(tmp_path / "two.png").shape[1], mpimg.imread(tmp_path / "one.png").shape[1]
    assert w2 > 1.8 * w1  # two panels


def test_generate_rerun_after_the_files_were_written(tmp_path, monkeypatch):
    # Killed between writing the training file and the validation file: the rerun finishes the job.
    real = gen.atomic_save_npz

    def die_at_val(path, arrays, compress=True):
        if path.name.endswith("-val.npz"):
            raise KeyboardInterrupt
        real(path, arrays, compress)

    monkeypatch.setattr(gen, "atomic_save_npz", die_at_val)
    with pytest.raises(KeyboardInterrupt):
        gen.generate(STITCH, episodes=2, seed=0, directory=tmp_path, workers=1)
    monkeypatch.setattr(gen, "atomic_save_npz", real)
    assert (tmp_path / f"{STITCH}.npz").exists() and not (tmp_path / f"{STITCH}-val.npz").exists()
    gen.generate(STITCH, episodes=2, seed=0, directory=tmp_path, workers=1)
    # And a rerun of the finished command does nothing (same plan); another plan still refuses to overwrite.
    mtime = (tmp_path / f"{STITCH}.npz").stat().st_mtime_ns
    gen.generate(STITCH, episodes=2, seed=0, directory=tmp_path, workers=1)
    assert (tmp_path / f"{STITCH}.npz").stat().st_mtime_ns == mtime
    from ttt.errors import TttError

    with pytest.raises(TttError, match="already exists; pass --force"):
        gen.generate(STITCH, episodes=2, seed=1, directory=tmp_path, workers=1)
