"""`ttt pretrain` and `ttt eval` end to end on a tiny dataset, and their one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import STITCH, one_line_error, pretrain_argv, run

from ttt.cli import main
from ttt.data import generate as gen


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    gen.generate(STITCH, episodes=4, seed=0, directory=d, workers=1)
    ck = d / "ck"
    rc = main(pretrain_argv(STITCH, 4, ck, d, seeds=2, chunk=2))
    assert rc == 0
    return d, ck


def test_pretrain_then_eval(trained, capsys):
    d, ck = trained
    meta = json.loads((ck / "meta.json").read_text())
    assert meta["step"] == 4 and meta["seeds"] == 2 and meta["agent"] == "gcbc" and meta["profile"] == "cpu"
    assert meta["config"]["actor_hidden_dims"] == [8, 8] and meta["config"]["with_critic"] is True
    rc, out, err = run(
        [
            "eval",
            str(ck),
            "--episodes",
            "1",
            "--tasks",
            "2",
            "--dir",
            str(d),
            "--variants",
            "base",
            "--json",
            str(d / "eval.json"),
        ],
        capsys,
    )
    assert rc == 0, err
    assert "2 seeds x 1 tasks x 1 episodes" in out
    doc = json.loads((d / "eval.json").read_text())
    assert np.array(doc["success"]).shape == (2, 1, 1) and doc["tasks"] == [2]
    # A rerun with more steps resumes from step 4.
    rc, out, err = run(
        pretrain_argv(STITCH, 6, ck, d, seeds=2, chunk=2),
        capsys,
    )
    assert rc == 0, err
    assert json.loads((ck / "meta.json").read_text())["step"] == 6
    # Not a terminal: progress is plain lines on stderr (here only the last: the run is shorter than 30 s).
    progress = [ln for ln in err.splitlines() if ln.startswith("pretrain gcbc ")]
    assert len(progress) == 1 and progress[0].startswith("pretrain gcbc 6/6 steps") and "loss=" in progress[0], err


def test_progress_without_a_terminal_prints_lines(capsys, monkeypatch):
    from ttt.cli import common

    clock = iter([0.0, 10.0, 40.0, 50.0, 60.0, 61.0, 70.0, 71.0, 72.0])
    monkeypatch.setattr(common.time, "perf_counter", lambda: next(clock))
    with common.ProgressBar("train", unit="steps") as bar:  # lines every 30 s
        for done in (0, 100, 400, 500, 600):  # at 0, 10, 40, 50, 60 s
            bar(done, 1000, rate="10")
    with common.ProgressBar("eval", unit="episodes") as bar:
        for done in (1, 2, 2):  # at 70, 71, 72 s: done, then told again
            bar(done, 2)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "train 400/1000 steps  rate 10  0:00:40 elapsed  eta 0:01:00",  # 400 steps in 40 s: 600 left at 10/s
        "train 600/1000 steps  rate 10  0:01:01 elapsed  eta 0:00:41",  # the last update, when the work stops
        "eval 2/2 episodes  0:00:01 elapsed",  # once
    ]


def test_unknown_agent_and_profile_list_valid_ones(capsys):
    rc, _, err = run(["pretrain", "--dataset", STITCH, "--agent", "ppo", "--out", "x"], capsys)
    line = one_line_error(err)
    assert rc == 2 and "unknown agent 'ppo'" in line and "gcbc, gciql, gciql-awr, saw, qrl" in line
    rc, _, err = run(["pretrain", "--dataset", STITCH, "--agent", "gcbc", "--profile", "tpu", "--out", "x"], capsys)
    line = one_line_error(err)
    assert rc == 2 and "unknown profile 'tpu'" in line and "paper" in line and "cpu" in line


def test_unknown_config_key_lists_valid_ones(capsys):
    rc, _, err = run(["pretrain", "--dataset", STITCH, "--agent", "gciql", "--out", "x", "--set", "lr_max=1"], capsys)
    line = one_line_error(err)
    assert rc == 2 and "unknown gciql config key(s) lr_max" in line and "expectile" in line


def test_checkpoint_of_another_dataset_is_refused(trained, capsys):
    d, ck = trained
    rc, _, err = run(["eval", str(ck), "--dataset", "cube-single-play-v0", "--dir", str(d)], capsys)
    line = one_line_error(err)
    assert rc == 2 and STITCH in line and "cube-single-play-v0" in line and "observation size 2" in line
    assert "observation size 28" in line
    rc, _, err = run(["eval", str(ck), "--dataset", "pointmaze-medium-navigate-v0", "--dir", str(d)], capsys)
    line = one_line_error(err)
    assert rc == 2 and f"trained on {STITCH}, not on pointmaze-medium-navigate-v0" in line
    # Resuming into a checkpoint of another dataset names both too.
    gen.generate("pointmaze-large-stitch-v0", episodes=1, seed=0, directory=d, workers=1)
    rc, _, err = run(
        pretrain_argv("pointmaze-large-stitch-v0", 6, ck, d, seeds=2, chunk=2),
        capsys,
    )
    line = one_line_error(err)
    assert rc == 2 and f"trained on {STITCH}, not on pointmaze-large-stitch-v0" in line


def test_missing_checkpoint(tmp_path, capsys):
    rc, _, err = run(["eval", str(tmp_path)], capsys)
    assert rc == 2 and "no checkpoint here" in one_line_error(err)


def test_eval_with_the_published_rules_and_the_oracle(trained, capsys):
    d, ck = trained
    out_json = d / "rules.json"
    rc, out, err = run(["eval", str(ck), "--episodes", "1", "--tasks", "2", "--dir", str(d), "--variants", "ttt,ttt-mc",
                        "--rule", "episodes", "--critic", "oracle", "--N", "2", "--K", "500", "--reset-after-horizon",
                        "--reuse-adam", "--json", str(out_json)], capsys)  # fmt: skip
    assert rc == 0, err
    doc = json.loads(out_json.read_text())
    ttt, mc = doc["variants"]["ttt"], doc["variants"]["ttt-mc"]
    assert ttt["ttt"]["select"]["rule"] == "episodes" and ttt["ttt"]["critic"] == "oracle"
    assert ttt["ttt"]["reset_after_horizon"] is True and ttt["ttt"]["finetune"]["reuse_opt_state"] is True
    assert mc["ttt"]["select"]["rule_used"] == "paper" and mc["ttt"]["critic"] == "learned"  # the critic rule is ttt's
    assert np.array(ttt["rounds"]["spearman"]).shape == (2, 1, 1, 2)  # diagnostics recorded per round


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--variants", "ttt-mc", "--critic", "oracle"], "--critic changes nothing here: only variant(s) ttt"),
        (["--variants", "ttt", "--n-episodes", "0"], "--n-episodes must be >= 1"),
        (["--variants", "ttt-mc", "--rule", "mc-episodes", "--slack", "-1"], "--slack must be >= 0"),
        (["--variants", "ttt", "--bucket", "-1"], "--bucket must be >= 1 episodes, or 0 for the whole call at once"),
    ],
)
def test_eval_rule_options_are_checked(trained, capsys, args, needle):
    d, ck = trained
    rc, _, err = run(["eval", str(ck), "--dir", str(d), *args], capsys)
    assert rc == 2 and needle in one_line_error(err)


def test_eval_ttgs_settings_from_the_command_line(trained, capsys):
    d, ck = trained
    out_json = d / "ttgs.json"
    rc, _, err = run(["eval", str(ck), "--episodes", "1", "--tasks", "2", "--dir", str(d), "--variants", "ttgs",
                      "--ttgs", "n_vertices=8", "--ttgs", "distance=l2", "--ttgs", "tau=12", "--json", str(out_json)],
                     capsys)  # fmt: skip
    assert rc == 0, err
    cfg = json.loads(out_json.read_text())["variants"]["ttgs"]["ttgs"]
    assert (cfg["n_vertices"], cfg["distance"], cfg["tau"], cfg["threshold"]) == (8, "l2", 12.0, 48.0)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--variants", "ttt", "--ttgs", "n_vertices=8"], "--ttgs changes nothing here"),
        (["--variants", "ttgs", "--ttgs", "vertices=8"], "--ttgs: unknown key 'vertices'; valid: n_vertices, tau"),
        (["--variants", "ttgs", "--ttgs", "n_vertices=eight"], "--ttgs n_vertices=eight: n_vertices takes an int"),
        (["--variants", "ttgs", "--ttgs", "tau"], "--ttgs takes KEY=VALUE, got 'tau'"),
        (["--variants", "ttgs", "--ttgs", "tau=1", "--ttgs", "tau=2"], "--ttgs: key 'tau' given twice"),
        (["--variants", "ttgs", "--ttgs", "n_vertices=1"], "--ttgs: TTGS n_vertices must be an int >= 2, got 1"),
        (["--variants", "ttgs", "--ttgs", "distance=manhattan"], "--ttgs: TTGS distance must be one of"),
    ],
)
def test_eval_ttgs_settings_are_checked(trained, capsys, args, needle):
    d, ck = trained
    rc, _, err = run(["eval", str(ck), "--dir", str(d), *args], capsys)
    assert rc == 2 and needle in one_line_error(err), err
