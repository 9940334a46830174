"""Pipeline files: defaults, grids, --set overrides, and one-line errors that name the key (and list the valid keys
for unknown ones). Every shipped pipeline validates. Welch's t-test and base-row pairing of the report."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ttt.cli import main
from ttt.errors import TttError
from ttt.pipeline.config import (
    RUN_KEYS,
    available_pipelines,
    effective_rule,
    find_pipeline,
    load_pipeline,
    parse_sets,
)
from ttt.pipeline.report import rows, table_md
from ttt.stats import welch

REPO = Path(__file__).resolve().parent.parent


def write(tmp_path, text: str) -> Path:
    p = tmp_path / "p.toml"
    p.write_text(text)
    return p


def test_defaults_runs_grid_and_sets(tmp_path):
    p = write(
        tmp_path,
        """
name = "t"
[defaults]
agent = "gciql"
episodes = 3
[[run]]
name = "b"
variant = "base"
[[run]]
name = "sweep"
variant = "ttt"
grid = { N = [10, 20], lr = [1e-3, 3] }
""",
    )
    pipe = load_pipeline(p, parse_sets(["episodes=2", "eps=null", "tasks=[2, 4]"]))
    names = [r["name"] for r in pipe.runs]
    assert names == ["b", "sweep-N10-lr0.001", "sweep-N10-lr3", "sweep-N20-lr0.001", "sweep-N20-lr3"]
    for r in pipe.runs:
        assert set(r) == set(RUN_KEYS) | {"grid"}  # every key resolved, nothing implicit
        assert r["agent"] == "gciql" and r["episodes"] == 2 and r["tasks"] == [2, 4] and r["eps"] is None
    assert pipe.runs[2]["lr"] == 3.0 and isinstance(pipe.runs[2]["lr"], float)  # ints accepted for float keys
    assert pipe.runs[1]["grid"] == ["N", "lr"] and pipe.runs[0]["grid"] == []
    assert pipe.runs[0]["q"] == RUN_KEYS["q"].default


@pytest.mark.parametrize(
    "text, sets, expected",
    [
        ("bogus = 1\n[[run]]\n", [], "unknown key(s) bogus; valid keys: name, description, defaults, run"),
        ("[defaults]\nKK = 3\n[[run]]\n", [], "[defaults]: unknown key(s) KK; valid keys: name, group, dataset"),
        ("[[run]]\nname = 'x'\nlearning_rate = 1\n", [], "run 1 (x): unknown key(s) learning_rate; valid keys: name,"),
        ("[[run]]\ngrid = { Q = [1] }\n", [], "grid: unknown key(s) Q; valid keys: name,"),
        ("[[run]]\n", ["foo=1"], "--set: unknown key(s) foo; valid keys: name,"),
        ("[[run]]\nK = 'ten'\n", [], 'K must be an integer (TTT period: environment steps per round), got "ten"'),
        ("[[run]]\nlr = true\n", [], "lr must be a number"),
        ("[[run]]\nq = 1.5\n", [], "q (fraction of relevant sub-trajectories kept) must be in (0, 1], got 1.5"),
        ("[[run]]\nN = -1\n", [], "N (fine-tuning steps per round) must be >= 1"),
        ("[[run]]\ntasks = [0, 9]\n", [], "tasks must be distinct task ids in 1..5"),
        ("[[run]]\nagent = 'ppo'\n", [], 'agent = "ppo" is not valid; valid: gcbc, gciql, gciql-awr, saw, qrl'),
        ("[[run]]\ndataset = 'antmaze'\n", [], 'dataset = "antmaze" is not valid; valid: pointmaze-medium-navigate-v0'),
        ("[[run]]\nK = 'null'\n", [], "K must be an integer (TTT period: environment steps per round), got null"),
        ("[[run]]\nvariant = 'ttt'\nrelevance = 'value'\n", [], "relevance = 'value' needs c_rel"),
        ("[[run]]\nH = 20\n", [], "H (fixed return horizon) applies to ttt / ttt-mc runs"),
        ("[[run]]\nname = 'a'\n[[run]]\nname = 'a'\n", [], "run names must be unique; repeated: a"),
        ("name = 'x'\n", [], "no runs: add at least one [[run]] table"),
        ("[[run]\n", [], "not valid TOML"),
        ("[[run]]\n", ["episodes=0"], "episodes must be >= 1"),
        ("[[run]]\nttgs = { tau = 3.0 }\n", [], "ttgs (test-time graph search settings) applies to variant 'ttgs'"),
        ("[[run]]\nvariant = 'ttgs'\ngrid = { lr = [1e-3, 3e-4] }\n", [], "variant 'ttgs' reads no TTT setting"),
    ],
)
def test_bad_pipelines_name_the_key(tmp_path, text, sets, expected):
    p = write(tmp_path, text)
    with pytest.raises(TttError) as e:
        load_pipeline(p, parse_sets(sets))
    assert expected in str(e.value)
    assert "\n" not in str(e.value)


def test_cli_errors_are_one_line(tmp_path, capsys):
    p = write(tmp_path, "[[run]]\nlearning_rate = 1\n")
    assert main(["run", str(p), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "unknown key(s) learning_rate; valid keys:" in err
    assert main(["run", "no-such-pipeline"]) == 2
    err = capsys.readouterr().err
    assert "unknown pipeline 'no-such-pipeline'; available:" in err and "quickstart" in err
    assert main(["run", "quickstart", "--set", "q=0"]) == 2
    assert "q (fraction of relevant sub-trajectories kept) must be in (0, 1]" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 2
    assert "no results.json" in capsys.readouterr().err
    assert main(["run", "paper-main", "--only", "nothing*", "--dry-run"]) == 2
    assert "--only 'nothing*' matches no run; the runs are: gcbc-base-navigate," in capsys.readouterr().err
    assert main(["run", "paper-main", "--only", "qrl-*-cube,saw-base-*", "--dry-run"]) == 0
    listed = [ln.split(":")[0].strip() for ln in capsys.readouterr().out.splitlines()[1:]]
    assert sorted(listed) == ["qrl-base-cube", "qrl-ttt-cube", "saw-base-cube", "saw-base-navigate", "saw-base-stitch"]


def test_shipped_pipelines_validate():
    names = available_pipelines()
    assert {"quickstart", "paper-main", "paper-fixed", "paper-fixed-all", "ablations"} <= set(names)
    for name in names:
        pipe = load_pipeline(find_pipeline(name))
        assert pipe.runs, name
        for r in pipe.runs:
            if r["variant"] != "base" and r["group"] != "main" and r.get("paper") is not None:
                assert r["paper_ref"], r["name"]


def test_paper_main_holds_the_papers_settings():
    runs = {r["name"]: r for r in load_pipeline(REPO / "pipelines" / "paper-main.toml").runs}
    r = runs["gciql-ttt-stitch"]  # hyper-parameter table: GC-IQL + TTT, pointmaze play
    assert (r["lr"], r["N"], r["K"], r["q"], r["paper"]) == (3e-4, 200, 100, 0.05, 0.38)
    r = runs["qrl-ttt-navigate"]  # the QRL appendix: lr 3e-4, N 200, K 500, 50% uniform mixing
    assert (r["lr"], r["N"], r["K"], r["mix"]) == (3e-4, 200, 500, 0.5)
    assert runs["gcbc-base-navigate"]["paper"] == 0.05 and runs["saw-ttt-cube"]["dataset"] == "cube-single-play-v0"
    for a in ("gcbc", "gciql", "gciql-awr", "saw", "qrl"):
        for d in ("navigate", "stitch", "cube"):
            assert f"{a}-base-{d}" in runs and f"{a}-ttt-{d}" in runs


def test_welch_matches_its_formula():
    a, b = [0.8, 0.9, 0.7, 0.85], [0.3, 0.5, 0.2]
    t, p = welch(a, b)
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    assert t == pytest.approx((np.mean(a) - np.mean(b)) / math.sqrt(va + vb))
    assert 0 < p < 0.05
    t2, p2 = welch(b, a)
    assert t2 == pytest.approx(-t) and p2 == pytest.approx(p)
    assert all(math.isnan(x) for x in welch([0.2, 0.2, 0.2], [0.2, 0.2, 0.2]))  # no variance: undefined


def _rec(name, variant, per_seed, ckpt="c1", episodes=2):
    run = {k: v.default for k, v in RUN_KEYS.items()}
    run.update(name=name, variant=variant, episodes=episodes, grid=[])
    return dict(run=run, checkpoint=ckpt, per_seed=per_seed, mean=float(np.mean(per_seed)), se=0.1, seeds=3,
                n_episodes=30, wall_s=1.0, profile="cpu")  # fmt: skip


def test_rows_pair_each_ttt_row_with_its_own_base():
    recs = [_rec("b1", "base", [0.1, 0.2, 0.3]), _rec("b2", "base", [0.5, 0.5, 0.6], ckpt="c2"),
            _rec("t1", "ttt", [0.7, 0.8, 0.9]), _rec("t2", "ttt", [0.5, 0.6, 0.6], ckpt="c2"),
            _rec("t3", "ttt", [0.5, 0.6, 0.6], episodes=5)]  # fmt: skip
    rs = {r["name"]: r for r in rows(recs)}
    assert rs["t1"]["base"] == "b1" and rs["t2"]["base"] == "b2" and rs["t3"]["base"] is None
    assert rs["t1"]["t"] == pytest.approx(welch([0.7, 0.8, 0.9], [0.1, 0.2, 0.3])[0]) and rs["t1"]["test"] == "welch"
    assert rs["b1"]["base"] is None and rs["b1"]["p"] is None


def test_rows_pair_a_row_with_its_base_by_checkpoint_digest():
    """The report's t, p: the paired t-test where both records carry the same checkpoint digest and ran the same
    episodes, Welch's where one lacks the digest (the report names which)."""
    from ttt.stats import paired

    def rec(name, variant, rates, sha):
        s = np.asarray(rates, float)[:, None, None] * np.ones((len(rates), 1, 2))
        return {**_rec(name, variant, list(rates)), "success": s.tolist(), "checkpoint_sha256": sha}

    base, tt = [0.1, 0.5, 0.2], [0.3, 0.6, 0.5]
    rs = {r["name"]: r for r in rows([rec("b", "base", base, "s1"), rec("t", "ttt", tt, "s1")])}
    d = paired(base, tt)
    assert rs["t"]["test"] == "paired" and (rs["t"]["t"], rs["t"]["p"]) == pytest.approx((d.t, d.p))
    assert rs["t"]["p"] != pytest.approx(welch(tt, base)[1])  # the seeds move together: not Welch's p
    rs = {r["name"]: r for r in rows([rec("b", "base", base, None), rec("t", "ttt", tt, "s1")])}
    assert rs["t"]["test"] == "welch" and rs["t"]["p"] == pytest.approx(welch(tt, base)[1])
    one = {r["name"]: r for r in rows([rec("b", "base", base[:1], "s1"), rec("t", "ttt", tt[:1], "s1")])}
    assert math.isnan(one["t"]["p"])  # one seed: no test, and no error
    # unpaired rows without spread: the exact permutation test's p (2 / C(6, 3)), as every table, not Welch's nan
    flat = {r["name"]: r for r in rows([rec("b", "base", [0.2] * 3, None), rec("t", "ttt", [0.9] * 3, None)])}
    assert (flat["t"]["test"], flat["t"]["p"]) == ("welch", pytest.approx(0.1)) and flat["t"]["t"] == math.inf
    md = table_md(list(flat.values()))
    assert "inf, 0.100 (ns)" in md and "n/a (one seed)" in table_md(list(one.values()))


def test_bad_distributed_environment_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv("TTT_COORDINATOR", "localhost:1")
    monkeypatch.setenv("TTT_NUM_PROCESSES", "two")
    monkeypatch.setenv("TTT_PROCESS_ID", "0")
    assert main(["run", "quickstart", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "TTT_NUM_PROCESSES and TTT_PROCESS_ID must be integers" in err
    monkeypatch.setenv("TTT_NUM_PROCESSES", "2")
    monkeypatch.setenv("TTT_PROCESS_ID", "2")
    assert main(["run", "quickstart", "--dry-run"]) == 2
    assert "TTT_PROCESS_ID must be in [0, TTT_NUM_PROCESSES), got 2 of 2" in capsys.readouterr().err


def test_antmaze_data_stage_needs_an_expert(tmp_path):
    from ttt.pipeline import ensure_data, plan_run

    p = write(tmp_path, '[defaults]\ndataset = "antmaze-medium-stitch-v0"\ndata_episodes = 2\n[[run]]\n')
    run = load_pipeline(p).runs[0]
    assert run["expert"] is None

    def bar(*a):
        raise AssertionError("nothing may be generated")

    with pytest.raises(TttError, match="set the run key expert to an expert.npz"):
        ensure_data(plan_run(run, tmp_path / "cache"), True, bar, lambda s: None)
    with pytest.raises(TttError, match="the 'data' stage produces it"):
        ensure_data(plan_run(run, tmp_path / "cache"), False, bar, lambda s: None)


def test_ttgs_rows_check_their_settings_before_any_stage(tmp_path):
    from ttt.pipeline.plan import validate_run

    p = write(tmp_path, "[[run]]\nvariant = 'ttgs'\nttgs = { n_vertices = 500, tau = 12.0 }\n")
    (r,) = load_pipeline(p).runs
    validate_run(r)  # gcbc (with its critic): distance 'value'
    with pytest.raises(TttError, match=r"run gcbc-ttgs-pointmaze-medium-navigate: ttgs: unknown field\(s\) taus"):
        validate_run({**r, "ttgs": {"taus": 3}})
    with pytest.raises(TttError, match="ttgs: TTGS threshold must be a finite number > 0, got -1"):
        validate_run({**r, "ttgs": {"threshold": -1}})
    p = write(tmp_path, "[[run]]\nvariant = 'ttt+ttgs'\nttgs = { n_vertices = 500 }\n")
    (r,) = load_pipeline(p).runs
    validate_run(r)
    assert effective_rule(r) == "episodes"  # the GC-TTT part is variant ttt's, with the critic's rule
