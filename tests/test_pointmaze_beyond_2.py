"""The second pointmaze recipe as committed before its rows: the pipeline's rows are the protocol's, every
TTGS (rule) row that appears follows the rule of its own checkpoint's horizon, and the page's rule check by hand."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from ttt.graph import HORIZON_THRESHOLD_MAX, HORIZON_THRESHOLD_MIN, horizon_tau_threshold
from ttt.pipeline.config import load_pipeline

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from reporting import beyond2, records  # noqa: E402

DECL = tomllib.loads((ROOT / "benchmarks" / "studies" / "pointmaze-beyond-2.toml").read_text())["beyond2"]
SHORTS = [d["short"] for d in DECL["datasets"]]


def _runs():
    return {r["name"]: r for r in load_pipeline(ROOT / "pipelines" / "pointmaze-beyond-2.toml").runs}


def test_the_pipeline_is_the_protocol():
    runs = _runs()
    for short in SHORTS:
        for name in (f"{short}-10k-base", f"{short}-base", f"{short}-ttt-alpha0.3", f"{short}-base-more",
                     f"{short}-ttt-alpha0.3-more"):  # fmt: skip
            assert name in runs, name
    for name, r in runs.items():
        assert (r["agent"], r["profile"], r["seeds"], r["episodes"], list(r["tasks"]), r["eval_seed"]) == (
            "gciql", "cpu", 5, 6, [1, 2, 3, 4, 5], 0), name  # fmt: skip
        assert r["steps"] == (10_000 if "-10k-" in name else 100_000), name
        assert r["train_seed"] == (5 if name.endswith("-more") else 0), name
        if r["variant"] in ("ttt", "ttt+ttgs"):
            assert (r["lr"], r["N"], r["K"], r["ft_alpha"]) == (3e-4, 100, 200, 0.3), name
        if r["variant"] in ("ttgs", "ttt+ttgs"):  # a TTGS (rule) row, appended once its checkpoint's H is measured
            t = r["ttgs"]
            if "(diagnosis:" in r["group"]:  # a labelled diagnosis: never a candidate, never on the page as one
                refs = [*DECL.get("rows", {}).values(), *DECL.get("before", {}).values()]
                assert "ttgs-rule" not in name and not any(f":{name}@" in ref for ref in refs), name
                continue
            assert "ttgs-rule" in name and r["variant"] == "ttgs", name
            assert (t["n_vertices"], t["max_hops"], t["path"]) == (1000, 128, "slide"), name
            assert t["tau"] == t["threshold"] / 2 and HORIZON_THRESHOLD_MIN <= t["threshold"] <= HORIZON_THRESHOLD_MAX


def test_every_declared_rule_row_follows_its_checkpoints_horizon():
    """Vacuous until the first TTGS (rule) record is declared; from then on a row that ran other settings than the
    rule gives its checkpoint fails here (and reads NO on the page)."""
    refs = {**DECL.get("rows", {}), **DECL.get("before", {})}
    for key, ref in refs.items():
        if "ttgs-rule" in key:
            h, word = beyond2.rule_follows(DECL, records.load(ref))
            assert h is not None and word == "yes", (key, word)


def _record(sha: str, tau, threshold) -> dict:
    return {"sha": sha, "raw": {"run": {"ttgs": {"tau": tau, "threshold": threshold}}}}


def test_rule_check_by_hand(monkeypatch):
    docs = ({"checkpoint_sha256": "a" * 64, "horizon": 131.0, "tau": 24.0, "threshold": 48.0},
            {"checkpoint_sha256": "b" * 64, "horizon": 49.3, "tau": 12.5, "threshold": 25.0})  # fmt: skip
    monkeypatch.setattr(beyond2, "_json_docs", lambda folder: docs)
    assert beyond2.rule_follows(DECL, _record("a" * 64, 24.0, 48.0))[1] == "yes"
    assert beyond2.rule_follows(DECL, _record("b" * 64, 12.5, 25.0))[1] == "yes"
    word = beyond2.rule_follows(DECL, _record("b" * 64, 12.0, 24.0))[1]  # the first recipe's -thr24 setting
    assert word.startswith("NO") and "12.5, 25" in word
    assert beyond2.rule_follows(DECL, _record("c" * 64, 24.0, 48.0)) == (None, "no horizon record of its checkpoint")
    assert horizon_tau_threshold(131.0) == (24.0, 48.0)


def test_two_horizon_records_of_one_checkpoint_must_agree(monkeypatch):
    docs = ({"checkpoint_sha256": "a" * 64, "horizon": 48.0, "tau": 12.0, "threshold": 24.0},
            {"checkpoint_sha256": "a" * 64, "horizon": 60.0, "tau": 15.0, "threshold": 30.0})  # fmt: skip
    monkeypatch.setattr(beyond2, "_json_docs", lambda folder: docs)
    with pytest.raises(records.RecordError, match="disagree"):
        beyond2.horizon_of(DECL, "a" * 64)


def test_nothing_has_run_yet_reads_so():
    page = (ROOT / "benchmarks" / "studies" / "pointmaze-beyond-2.md").read_text()
    if not DECL.get("rows"):
        assert "No recipe yet" in page and "not run yet" in page


def test_diagnoses_table_by_hand(monkeypatch):
    """A diagnosis row against the row it explains: row - against, paired where the checkpoint digests agree."""
    import numpy as np

    def rec(name, per_seed):
        s = np.asarray(per_seed, float)[:, None, None] * np.ones((1, 1, 2))
        raw = {"run": {"name": name, "variant": "ttgs"}, "rounds": {}, "mean": s.mean(), "n_episodes": s.size,
               "seeds": len(s)}  # fmt: skip
        return {"per_seed": s.reshape(len(s), -1).mean(1), "raw": raw,
                "rec": {"success": s, "run": {"name": name}, "checkpoint_sha256": "c" * 64}}  # fmt: skip

    recs = {"r": rec("diag", [1.0, 1.0, 0.5]), "a": rec("rule", [0.5, 0.0, 0.0])}
    monkeypatch.setattr(beyond2.records, "load", lambda ref: recs[ref])
    table = beyond2.diagnoses({"diagnoses": [{"what": "why", "row": "r", "against": "a", "metric": "ttgs_hops"}]})
    line = table.splitlines()[2]
    assert line.startswith("| why | diag | rule | 0.83 +- 0.17 | 0.17 +- 0.17 | +0.67 (0.17, ") and "paired" in line
    assert line.endswith("| ttgs_hops | - / - |")  # the rows ran no round: nothing to show, said as "-"
    assert "none yet" in beyond2.diagnoses({}).splitlines()[2]


def test_each_datasets_10k_rows_are_on_one_checkpoint():
    """The before rows of a dataset are never mixed between the first recipe's 10k checkpoint and the one made again;
    where one was made again, it is its -10k-base row."""
    for short in SHORTS:
        recs = {k: beyond2._before(DECL, short, k) for k in ("base", "ttt-alpha0.3", "ttgs-rule")}
        shas = {k: r["sha"] for k, r in recs.items() if r is not None}
        assert len(set(shas.values())) <= 1, (short, shas)
        again = records.maybe(DECL.get("remade", {}).get(short))
        if again is not None:
            assert again["raw"]["run"]["name"] == f"{short}-10k-base", short
    assert "MIXED" not in beyond2.checkpoints(DECL)


def test_checkpoints_table_by_hand(monkeypatch):
    def rec(sha):
        return {"sha": sha * 64, "raw": {"dataset_hash": sha * 16}}

    recs = {"first": rec("a"), "again": rec("b"), "other": rec("c")}
    monkeypatch.setattr(beyond2.records, "maybe", lambda ref: recs.get(ref) if ref else None)
    decl = {"datasets": [{"short": "x"}], "first": {"x": "first"}, "remade": {"x": "again"},
            "before": {"x-base": "again", "x-ttt-alpha0.3": "again"}}  # fmt: skip
    line = beyond2.checkpoints(decl).splitlines()[2]
    assert line == (
        f"| x | {'a' * 12} ({'a' * 16}) | {'b' * 12} ({'b' * 16}) | no | {'b' * 12}: made again | not run yet | - |"
    )
    decl["rows"] = {"x-base": "other"}  # a 100k checkpoint trained on another copy of the data than the 10k rows'
    assert beyond2.checkpoints(decl).splitlines()[2].endswith(f"| {'c' * 12} ({'c' * 16}) | no: another copy |")
    recs["other"]["raw"]["dataset_hash"] = "b" * 16
    assert beyond2.checkpoints(decl).splitlines()[2].endswith(f"| {'c' * 12} ({'b' * 16}) | yes |")
    decl["before"]["x-ttgs-rule"] = "first"
    assert f"MIXED: {'a' * 12}, {'b' * 12}" in beyond2.checkpoints(decl)
    decl["before"] = {"x-base": "first"}
    decl["remade"] = {}
    decl["rows"] = {}
    assert (
        beyond2.checkpoints(decl)
        .splitlines()[2]
        .endswith(f"| not run yet | - | {'a' * 12}: the first recipe's | not run yet | - |")
    )


def test_per_task_table_by_hand(monkeypatch):
    """Each row's per-task success at 10k and 100k, a row not run left out, its mean +- s.e. over seeds beside."""

    def rec(tasks, per_seed):
        return {"per_seed": per_seed, "raw": {"per_task": tasks}}

    recs = {"b10": rec([0.0, 0.5], [0.0, 0.5]), "b100": rec([1.0, 0.25], [0.5, 0.75]), "t100": rec([1.0, 1.0], [1, 1])}
    monkeypatch.setattr(beyond2.records, "maybe", lambda ref: recs.get(ref) if ref else None)
    decl = {"datasets": [{"short": "x"}], "choose": ["x"], "candidates": [["ttt", "GC-TTT"], ["ttgs", "TTGS"]],
            "before": {"x-base": "b10"}, "rows": {"x-base": "b100", "x-ttt": "t100"}}  # fmt: skip
    lines = beyond2.per_task(decl).splitlines()
    assert lines[0] == "| dataset | method | updates | task 1 | task 2 | all |"
    assert lines[2:] == ["| x | base | 10k | 0.00 | 0.50 | 0.25 +- 0.25 |",
                         "| x | base | 100k | 1.00 | 0.25 | 0.62 +- 0.12 |",
                         "| x | GC-TTT | 100k | 1.00 | 1.00 | 1.00 +- 0.00 |"]  # fmt: skip


def test_diagnosis_held_by_hand(monkeypatch):
    """Each stated outcome read on each dataset: yes / no beside what it read, "-" where it does not apply or is not
    measured, and the count of yes over what was measured."""
    import numpy as np

    def rec(sha, per_seed):
        s = np.asarray(per_seed, float)[:, None, None] * np.ones((1, 1, 2))
        return {"sha": sha * 64, "per_seed": s.reshape(len(s), -1).mean(1), "raw": {},
                "rec": {"success": s, "run": {"name": sha}, "checkpoint_sha256": sha * 64}}  # fmt: skip

    recs = {"x10": rec("a", [0.0, 0.0, 0.1]), "x100": rec("b", [0.5, 0.4, 0.6]), "xt10": rec("a", [0.9, 0.9, 1.0]),
            "xt100": rec("b", [0.4, 0.5, 0.3]), "y100": rec("c", [0.1, 0.1, 0.1])}  # fmt: skip
    horizons = {"a" * 64: {"horizon": 48.9, "threshold": 24.0}, "b" * 64: {"horizon": 123.2, "threshold": 48.0},
                "c" * 64: {"horizon": 60.0, "threshold": 30.0}}  # fmt: skip
    probes = {"c" * 64: {"offsets": [{"offset": 1, "cosine": 0.5}, {"offset": 3, "cosine": -0.1},
                                     {"offset": 6, "cosine": 0.2}]}}  # fmt: skip
    monkeypatch.setattr(beyond2.records, "maybe", lambda ref: recs.get(ref) if ref else None)
    monkeypatch.setattr(beyond2, "horizon_of", lambda decl, sha: horizons.get(sha))
    monkeypatch.setattr(beyond2, "probe_of", lambda decl, sha: probes.get(sha))
    monkeypatch.setattr(beyond2, "_round_metrics", lambda r: {} if r is None else {"ttgs_goal_frac": 0.8})
    decl = {"datasets": [{"short": "x-nav"}, {"short": "y-stitch"}], "choose": ["x-nav"],
            "candidates": [["ttgs-rule", "TTGS (rule)"]],
            "before": {"x-nav-base": "x10", "x-nav-ttgs-rule": "xt10"},
            "rows": {"x-nav-base": "x100", "x-nav-ttgs-rule": "xt100", "y-stitch-base": "y100"}}  # fmt: skip
    lines = beyond2.diagnosis_held(decl).splitlines()
    assert lines[2].startswith("| x-nav | 48.9 -> 123.2, threshold 48: yes | 0.80: no | - | -0.53 (")
    assert lines[2].endswith("), loss: no |")
    assert lines[3] == "| y-stitch | ? -> 60.0, threshold 30: no | - | +0.50 / -0.10 / +0.20: no | - |"
    assert lines[4] == "| measured so far | 1 of 2 yes | 0 of 1 yes | 0 of 1 yes | 0 of 1 yes |"


def test_more_seeds_says_when_its_halves_were_trained_on_other_copies_of_the_data(monkeypatch):
    """The pooled more-seeds row is computed over both halves; where the first and the more seeds' checkpoints were
    trained on different copies of the data (by dataset hash), a line under the table names both copies."""
    from reporting import beyond

    def rec(ckpt, data, rates):
        s = np.repeat(np.asarray(rates, float)[:, None, None], 6, axis=2)  # (seeds, 1 task, 6 episodes)
        return {"per_seed": np.asarray(rates, float), "shape": "x".join(map(str, s.shape)),
                "raw": {"dataset_hash": data},
                "rec": {"success": s, "run": {}, "checkpoint_sha256": ckpt * 64, "dataset_hash": data}}  # fmt: skip

    recs = {"b": rec("a", "1" * 16, [0.0, 0.5]), "t": rec("a", "1" * 16, [1.0, 0.5]),
            "bm": rec("c", "2" * 16, [0.0, 0.0]), "tm": rec("c", "2" * 16, [0.5, 1.0])}  # fmt: skip
    monkeypatch.setattr(beyond.records, "maybe", lambda ref: recs.get(ref) if ref else None)
    monkeypatch.setattr(beyond, "choose", lambda s: {"recipe": "ttt"})
    decl = {"datasets": [{"short": "x", "anchor": 0.9, "sd": 0.1, "anchor_seeds": 4}], "choose": ["x"],
            "candidates": [["ttt", "GC-TTT"]], "more": ["x"],
            "rows": {"x-base": "b", "x-ttt": "t", "x-base-more": "bm", "x-ttt-more": "tm"}}  # fmt: skip
    lines = beyond.more_seeds(decl).splitlines()
    assert lines[2].startswith("| x | GC-TTT | 0.75 +- 0.25 | 0.75 +- 0.25 | **0.75 +- 0.14** (4 seeds) |")
    assert lines[-1].startswith(f"x: the first seeds were trained on the copy of the data with hash {'1' * 16}, the "
                                f"more seeds on the copy with hash {'2' * 16}")  # fmt: skip
    recs["bm"]["raw"]["dataset_hash"] = recs["tm"]["raw"]["dataset_hash"] = "1" * 16
    recs["bm"]["rec"]["dataset_hash"] = recs["tm"]["rec"]["dataset_hash"] = "1" * 16
    assert len(beyond.more_seeds(decl).splitlines()) == 3  # one copy: no line under the table


def test_front_line_reads_the_pooled_verdict_where_more_seeds_ran():
    """The front page's line gives a dataset with more seeds its pooled figure and verdict, not its first 5 seeds'."""
    from reporting import beyond

    s = beyond.Study(DECL)
    recipe = beyond.choose(s)["recipe"]
    line = beyond2.front_line(DECL)
    assert DECL["more"] and line.startswith("The recipe is")  # every dataset has its row: no "So far"
    for short in DECL["more"]:
        x = beyond.pooled(s, short, recipe)
        assert x is not None, short  # the -more rows of every "level" dataset have run
        assert f"{short} {x['mean']:.2f} over {x['seeds']} seeds ({x['verdict']})" in line
        assert x["seeds"] == 10
