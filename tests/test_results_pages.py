"""The results pages are generated: `python benchmarks/report.py --check` passes on the committed records, a reference
names exactly one record by key, and the engine's rules (pairwise verdicts, the anchors' words, the recipe) by hand."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

from reporting import beyond, expert, methods, records, samecheckpoint  # noqa: E402


def test_report_check_passes_on_the_committed_records():
    """Every committed page equals what the declarations and records give (a number, a verdict word or an anchor's
    s.e. cannot drift from its record)."""
    p = subprocess.run([sys.executable, str(BENCH / "report.py"), "--check"], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr[-2000:]
    assert p.stdout == ""


def test_pages_fit_a_reader():
    front = (BENCH / "README.md").read_text().splitlines()
    assert len(front) <= 150 and max(map(len, front)) <= 300
    for page in (BENCH / "studies").glob("*.md"):
        text = page.read_text()
        assert len(text.splitlines()) <= 400, page.name
        diary = r"this CPU|[Ss]ession \d|\b20\d\d-\d\d-\d\d\b|^#.*[Ii]ssue \d"
        assert not re.search(diary, text, flags=re.M), page.name


def test_a_reference_names_exactly_one_record(tmp_path, monkeypatch):
    ev = tmp_path / "out" / "evals"
    ev.mkdir(parents=True)
    rec = {"run": {"name": "a-base", "variant": "base"}, "eval_key": "0123456789ab", "success": [[[1, 0]], [[0, 0]]]}
    (ev / "a-base-0123456789ab.json").write_text(json.dumps(rec))
    (ev / "a-base-ffffffffffff.json").write_text(json.dumps({**rec, "eval_key": "ffffffffffff"}))
    monkeypatch.setattr(records, "RES", tmp_path)
    monkeypatch.setattr(records, "ROOT", tmp_path)
    for f in (records._folder, records.raw):
        f.cache_clear()
    try:
        _, d, _ = records.raw("out:a-base@0123456789ab")
        assert d["eval_key"] == "0123456789ab"
        with pytest.raises(records.RecordError, match="no record"):
            records.raw("out:a-base@000000000000")
        (ev / "copy.json").write_text(json.dumps(rec))  # the same content twice: ambiguous, refused
        records._folder.cache_clear()
        records.raw.cache_clear()
        with pytest.raises(records.RecordError, match="2 records"):
            records.raw("out:a-base@0123456789ab")
        with pytest.raises(records.RecordError, match="not a record reference"):
            records.raw("out/evals/*.json")
    finally:
        for f in (records._folder, records.raw):
            f.cache_clear()


def _record(name: str, variant: str, success: list, **extra) -> dict:
    s = np.asarray(success, float)
    per_seed = s.reshape(s.shape[0], -1).mean(1)
    return dict(run=dict(name=name, variant=variant, agent="gcbc", dataset="toy-v0"), checkpoint_step=10000,
                success=s.tolist(), per_seed=per_seed.tolist(), mean=float(per_seed.mean()),
                se=float(per_seed.std(ddof=1) / np.sqrt(len(per_seed))), wall_s=1.0, rounds={}, **extra)  # fmt: skip


def test_pairwise_verdicts_by_hand():
    base = _record("b", "base", [[[0, 0]], [[0, 1]], [[0, 0]]])  # per seed 0, 0.5, 0
    ttgs = _record("g", "ttgs", [[[0, 1]], [[0, 1]], [[0, 0]]])  # 0.5, 0.5, 0
    ttt = _record("t", "ttt", [[[1, 1]], [[1, 1]], [[1, 1]]])  # 1, 1, 1
    c = methods.compare(base, ttgs)  # no digests: Welch over seeds
    assert math.isclose(c["diff"], 1 / 6) and c["verdict"] == "no difference (unpaired)"
    c = methods.compare(ttgs, ttt)  # t = 4 on 2 d.f.: p = 1 - 4 / sqrt(18) = 0.057
    assert math.isclose(c["p"], 1 - 4 / math.sqrt(18)) and c["verdict"] == "ttt better, weak evidence (unpaired)"
    dig = {"checkpoint_sha256": "s"}
    c = methods.compare({**base, **dig}, {**ttgs, **dig})  # paired d = [0.5, 0, 0]: p = 1 - 1 / sqrt 3
    assert c["test"] == "paired" and math.isclose(c["p"], 1 - 1 / math.sqrt(3)) and c["verdict"] == "no difference"
    first = [_record("b", "base", [[[0, 0]], [[0, 1]]], checkpoint_sha256="x")]
    second = [_record("b", "base", [[[0, 0, 0, 0]]], checkpoint_sha256="y")]
    (pooled,) = methods.pool([first, second])
    assert pooled["per_seed"] == [0.0, 0.5, 0.0] and methods._shape(pooled) == "2x1x2+1x1x4"
    with pytest.raises(ValueError, match="count its seeds twice"):
        methods.pool([first, first])


def test_anchor_words_and_the_recipe_rule_by_hand():
    assert beyond.anchor_verdict(0.90, 0.02, 0.98, 0.0) == "below"  # 0.08 > 2 x 0.02
    assert beyond.anchor_verdict(0.97, 0.02, 0.98, 0.0) == "level"
    assert beyond.anchor_verdict(1.00, 0.03, 0.92, 0.03) == "level"  # 0.08 < 2 x hypot 0.042
    assert beyond.anchor_verdict(1.00, 0.03, 0.90, 0.03) == "above"
    assert beyond.anchor_verdict(0.50, math.nan, 0.98, 0.0) == "-"
    decl = {"choose": ["d1"], "candidates": [["cheap", "C"], ["dear", "D"]], "datasets": [], "rows": {}}

    def rec(rates, sha="s", wall=1.0):
        s = np.asarray(rates, float)[:, None, None]
        return {"per_seed": s.ravel(), "n": s.size, "raw": {"wall_s": wall * s.size},
                "rec": {"success": s, "checkpoint_sha256": sha}}

    rows = {"d1-cheap": rec([0.8, 0.9, 0.8], wall=1.0), "d1-dear": rec([0.9, 0.9, 0.9], wall=5.0)}
    study = beyond.Study(decl)
    study.row = lambda short, suffix: rows.get(f"{short}-{suffix}")  # type: ignore[method-assign]
    c = beyond.choose(study)  # the dearer leads by 0.067, s.e. 0.033 (paired): within two s.e., the cheaper is taken
    assert c["leader"] == "dear" and set(c["ties"]) == {"cheap", "dear"}
    assert c["recipe"] == "cheap"


def test_same_checkpoint_pairs_episodes_by_key_on_one_grid():
    """Episodes pair by (seed, task, episode), not by order; an episode one side ran on some task only is left out of
    the grid; two records on different data are refused."""
    def ep(s, t, e, ok):
        return {"seed": s, "task": t, "episode": e, "success": float(ok), "steps": 10}

    pub = {"dataset_sha256_arrays": "d", "episodes_run": [ep(s, t, e, s == t == 1) for s in (0, 1) for t in (1, 2)
                                                           for e in (1, 0)]}  # fmt: skip
    mine = {"dataset_sha256_arrays": "d", "episodes_run": [ep(s, t, e, t == 1) for s in (0, 1) for t in (1, 2)
                                                            for e in (0, 1)] + [ep(0, 1, 2, 1)]}  # fmt: skip
    keys, shape = samecheckpoint.episodes(pub, mine)
    assert shape == (2, 2, 2) and (0, 1, 2) not in keys
    a, b = samecheckpoint._by_key(pub), samecheckpoint._by_key(mine)
    assert list(samecheckpoint._per_seed(a, keys)) == [0.0, 0.5]
    assert list(samecheckpoint._per_seed(b, keys)) == [0.5, 0.5]
    with pytest.raises(ValueError, match="different data"):
        samecheckpoint.episodes({**pub, "dataset_sha256_arrays": "other"}, mine)


def test_expert_stages_appear_by_adding_records(tmp_path, monkeypatch):
    """A robot's stage table and training table come from its records: "no stage measured yet" without them, one row
    per ``eval-STEPS.json`` (keyed by its trained_steps) with them, the gate per task; a file of another robot or whose
    name disagrees with its steps is refused."""
    monkeypatch.setattr(expert, "RES", tmp_path)
    monkeypatch.setattr(expert, "ROOT", tmp_path)
    robot = {"name": "humanoid", "train": "expert/humanoid/train.csv", "window": 200000, "stages": "expert/humanoid",
             "gate": 0.9, "gate_episodes": 10, "datasets": []}  # fmt: skip
    assert expert.stages(robot).startswith("No stage measured yet")
    assert expert.training(robot).startswith("No training log yet")
    folder = tmp_path / "expert" / "humanoid"
    folder.mkdir(parents=True)

    def stage(steps, success, progress=80.0, maze_episodes=10, **extra):
        direction = dict(episodes=50, mean_return=100.0 + steps / 1e5, std_return=3.0, min_return=90.0,
                         mean_progress=progress, std_progress=7.0, falls=7, falls_per_episode=0.14, up_fraction=0.97,
                         mean_length=1000.0)  # fmt: skip
        maze = dict(env_id="humanoidmaze-medium-v0", episodes_per_task=maze_episodes, noise=0.2, success=success,
                    mean_steps={t: 300.0 for t in success}, falls={t: 1 for t in success},
                    overall=sum(success.values()) / len(success))  # fmt: skip
        doc = dict(expert=f"actor-{steps}.npz", robot="humanoid", trained_steps=steps, direction=direction, maze=maze)
        (folder / f"eval-{steps}.json").write_text(json.dumps({**doc, **extra}))

    stage(1000000, {"1": 0.8, "2": 1.0, "3": 0.9, "4": 1.0, "5": 1.0}, progress=82.0)
    stage(400000, {"1": 0.5, "2": 0.6, "3": 0.7, "4": 0.9, "5": 1.0}, progress=70.0)
    stage(200000, {"1": 1.0, "2": 1.0, "3": 1.0, "4": 1.0, "5": 1.0}, progress=40.0, maze_episodes=4)
    table = expert.stages(robot)
    lines = [x for x in table.splitlines() if x.startswith(("| 200k", "| 400k", "| 1M"))]
    assert [x.split(" | ")[0] for x in lines] == ["| 200k", "| 400k", "| 1M"]  # by steps, not by file order
    assert "every task at or above (4 episodes a task; the gate reads 10)" in lines[0]  # 4 a task: not the gate's
    assert "not met (task 1 0.50, task 2 0.60, task 3 0.70)" in lines[1]
    assert "not met (task 1 0.80)" in lines[2] and "0.80 / 1.00 / 0.90 / 1.00 / 1.00 (0.94)" in lines[2]
    assert "| 0.97 |" in lines[2] and "maze: falls" in table and "humanoidmaze-medium-v0, 10 episodes per task" in table
    # the stop rule on progress: s.e. = 7 / sqrt(49) = 1 a stage, two combined s.e. = 2.83
    assert "progress +30.0 (2 s.e. 2.8): moved" in lines[1] and "progress +12.0 (2 s.e. 2.8): moved" in lines[2]
    stage(1000000, {"1": 0.8, "2": 1.0, "3": 0.9, "4": 1.0, "5": 1.0}, progress=72.0)
    assert "progress +2.0 (2 s.e. 2.8): within 2 s.e." in expert.stages(robot)
    (folder / "train.csv").write_text("step,episode,return,length,falls,progress,up\n"
                                      "1000,1,2.0,1000,1,0.5,0.9\n150000,2,4.0,1000,3,1.5,0.7\n"
                                      "250000,3,9.0,1000,0,3.0,1.0\n")  # fmt: skip
    train = expert.training(robot)
    assert "| 0-200 | 2 | 3.0 | 4 / 2 | 1.00 | 0.80 |" in train and "| 200-400 | 1 | 9.0 | 0 / 1 |" in train
    stage(600000, {"1": 1.0}, robot="ant")
    with pytest.raises(ValueError, match="not a humanoid evaluation"):
        expert.stages(robot)
    (folder / "eval-600000.json").unlink()
    stage(700000, {"1": 1.0}, trained_steps=800000)
    with pytest.raises(ValueError, match="not a humanoid evaluation"):
        expert.stages(robot)


ISSUE_NUMBER = re.compile(r"\b[Ii]ssues? ?#?\d+")


def _reader_pages() -> list[Path]:
    """The pages and records a user reads: the front pages, the studies, docs/, the results pages and records (not the
    evaluation records under evals/), the published-code pages."""
    pages = [ROOT / "README.md", *BENCH.glob("*.md"), *(BENCH / "studies").glob("*.md"), *(ROOT / "docs").glob("*.md")]
    pages += (BENCH / "published").glob("*.md")
    for ext in ("md", "json", "csv"):
        pages += [p for p in (BENCH / "results").rglob(f"*.{ext}") if "evals" not in p.relative_to(BENCH).parts]
    return sorted(set(pages))


def test_reader_pages_name_no_issue_number():
    """A page says what a thing is ("the second recipe", "the reliability probe's table"), never which tracker item
    asked for it: no "issue 79", "Issue 64's protocol", "(issue 20)" in the pages, the records beside them or a
    pipeline's description (which its report and pipeline.json copy)."""
    found = []
    for page in _reader_pages():
        rel = page.relative_to(ROOT).as_posix()
        for n, line in enumerate(page.read_text(errors="replace").splitlines(), 1):
            for m in ISSUE_NUMBER.finditer(line):
                found.append(f"{rel}:{n}: {m.group()!r}")
    for toml in sorted((ROOT / "pipelines").glob("*.toml")):
        description = tomllib.loads(toml.read_text()).get("description", "")
        if m := ISSUE_NUMBER.search(description):
            found.append(f"{toml.relative_to(ROOT)} description: {m.group()!r}")
    assert not found, "\n".join(found)
