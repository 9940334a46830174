"""benchmarks/ as a reader finds it: every script sits in its folder and is listed on the front page
(benchmarks/README.md), every path to a benchmark script named in the docs, tests, pipelines and scripts exists, every
link of the front page reaches a heading, and `studies/table1.py --write` fills the front page's Table 1 block."""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ttt.stats import welch

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
FRONT = BENCH / "README.md"
FOLDERS = ("speed", "studies", "analyses", "reliability")
# What a session lent a GPU runs first: at the top of the front page.
QUEUES = ("gpu_pipeline.sh", "gpu_queue.sh", "gpu_queue_merge.py", "gpu_wheels.py")
SCRIPT_PATH = re.compile(r"benchmarks/[\w/.-]*?\.(?:py|sh)\b")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_anchor(ln.lstrip("#")) for ln in path.read_text().splitlines() if ln.startswith("#")}


def _script(folder: str, name: str):
    """The benchmark script NAME of a folder of benchmarks/, imported (the folder on the path while it loads)."""
    sys.path.insert(0, str(BENCH / folder))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH / folder))


def _claims_at(tmp_path, monkeypatch):
    """`benchmarks/studies/claims.py` reading records under `tmp_path` (its RES and ROOT), and an empty
    `tmp_path/t/evals` for them."""
    claims = _script("studies", "claims")
    evals = tmp_path / "t" / "evals"
    evals.mkdir(parents=True)
    monkeypatch.setattr(claims, "RES", tmp_path)
    monkeypatch.setattr(claims, "ROOT", tmp_path)
    return claims, evals


def test_anchor_rule_by_hand():
    assert _anchor("## Table 1: the paper's main table beside ours (issue 37)".lstrip("#")) == (
        "table-1-the-papers-main-table-beside-ours-issue-37"
    )
    assert _anchor(" Reproduction run: `ttt run paper-main` (cpu profile)") == (
        "reproduction-run-ttt-run-paper-main-cpu-profile"
    )


def test_every_script_has_a_folder_and_a_line_on_the_front_page():
    loose = sorted(p.name for p in BENCH.glob("*") if p.suffix in (".py", ".sh") and p.name not in QUEUES)
    assert not loose, f"scripts directly in benchmarks/ (give each its folder): {loose}"
    text = FRONT.read_text()
    queues = text.split("### The GPU queues", 1)[1].split("\n### ", 1)[0]
    assert sorted(re.findall(r"^\| `([\w.]+)` \|", queues, flags=re.M)) == sorted(QUEUES)
    for folder in FOLDERS:
        scripts = sorted(p.name for p in (BENCH / folder).glob("*") if p.suffix in (".py", ".sh") and p.name[0] != "_")
        assert scripts, folder
        section = text.split(f"### `{folder}/`", 1)[1].split("\n### ", 1)[0]
        listed = re.findall(r"^\| `([\w.]+)` \|", section, flags=re.M)
        assert sorted(listed) == scripts, (folder, listed, scripts)


def test_front_page_links_reach_their_files_and_headings():
    assert "(benchmarks/README.md)" in (ROOT / "README.md").read_text()
    assert "[README.md](README.md)" in (BENCH / "RESULTS.md").read_text().split("\n## ", 1)[0]  # the pointer on top
    text = FRONT.read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert any(x.startswith("RESULTS.md#") for x in links)
    for link in links:
        target, _, anchor = link.partition("#")
        path = (BENCH / target).resolve()
        assert path.exists(), link
        if anchor:
            assert anchor in _anchors(path), f"{link}: no heading with that anchor in {target}"


def test_every_named_benchmark_script_exists():
    """Paths to benchmark scripts in the docs, tests, pipelines, shell queues and scripts (CHANGELOG.md and RESULTS.md
    are history: they name scripts where they were when the figure was made; the front page lists the retired ones)."""
    files = [ROOT / "README.md", ROOT / ".gitignore", FRONT, BENCH / "published" / "README.md"]
    files += [*(ROOT / "docs").glob("*.md"), *(ROOT / "tests").glob("*.py"), *(ROOT / "pipelines").glob("*.toml")]
    files += [p for folder in (*FOLDERS, "published") for p in (BENCH / folder).glob("*") if p.suffix in (".py", ".sh")]
    retired = FRONT.read_text().split("### Retired scripts", 1)[1]
    missing = []
    for f in files:
        text = f.read_text()
        if f == FRONT:
            text = text.split("### Retired scripts", 1)[0]
        missing += [f"{f.relative_to(ROOT)}: {m}" for m in SCRIPT_PATH.findall(text) if not (ROOT / m).exists()]
    assert not missing, missing
    assert "`cube_diagnosis.py`" in retired and not (BENCH / "cube_diagnosis.py").exists()


def test_table1_fills_the_front_page_block(tmp_path):
    page = tmp_path / "README.md"
    shutil.copy(FRONT, page)
    p = subprocess.run([sys.executable, str(BENCH / "studies" / "table1.py"), "--write", str(page)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    # the front page holds the compact table: one cell per line, the verdict's mark and word, no commands
    block = page.read_text().split("<!-- table1-front -->", 1)[1].split("<!-- /table1-front -->", 1)[0]
    assert block.strip().startswith("| env, data | backbone (updates) | ours: base → critic | paper | verdict |")
    assert "✓ gain reproduced" in block and "Commands" not in block and "<!-- table1 -->" not in page.read_text()
    assert page.read_text() == FRONT.read_text()  # the committed front page is the generated one


def test_table1_cells_name_a_different_episode_count():
    """A Table 1 cell whose record holds another number of episodes than its row says so; the row's own do not."""
    table1 = _script("studies", "table1")
    rec = {"per_seed": np.array([0.2, 0.4, 0.6]), "n": 30}  # mean 0.4, s.e. 0.2 / sqrt(3) = 0.115
    assert table1._pm(rec, 30) == "0.40 +- 0.12" and table1._pm(rec) == "0.40 +- 0.12"
    assert table1._pm(rec, 150) == "0.40 +- 0.12 (30 ep.)"
    assert table1._pm(None, 150) == "not run yet"


def test_table1_gpu_antmaze_lines_follow_the_records(tmp_path, monkeypatch):
    """A device folder `gpu/DEV/table1-antmaze` gives Table 1 a paper-profile GC-IQL antmaze stitch line only when it
    holds GC-IQL records, and SAW lines only when it holds SAW records (the GPU queue ran SAW there once)."""
    table1 = _script("studies", "table1")
    monkeypatch.setattr(table1, "RES", tmp_path)
    evals = tmp_path / "gpu" / "dev-a" / "table1-antmaze" / "evals"
    evals.mkdir(parents=True)

    def gpu_lines():
        return [(ln.data, ln.backbone) for ln in table1.lines() if "dev-a" in ln.backbone]

    assert gpu_lines() == []  # an empty device folder: no line
    (evals / "gciql-base-stitch-0123456789ab.json").write_text("{}")
    assert gpu_lines() == [("stitch", "GC-IQL, paper profile (dev-a)")]
    (evals / "saw-base-navigate-0123456789ab.json").write_text("{}")
    assert gpu_lines() == [("navigate", "SAW, cpu profile (dev-a)"), ("stitch", "SAW, cpu profile (dev-a)"),
                           ("stitch", "GC-IQL, paper profile (dev-a)")]


def test_table1_aggregate_takes_the_line_with_more_evidence_once_it_is_in(tmp_path, monkeypatch):
    """A 3-seed line superseded by a 5-seed line of the same cell: both count while the 5-seed line lacks a record;
    once it has both, only it (5 tasks x 5 seeds); a line of another env with the same label is not superseded."""
    claims, evals = _claims_at(tmp_path, monkeypatch)
    table1 = _script("studies", "table1")

    def put(name, seeds, rate):
        s = (np.random.default_rng(len(name) + seeds).random((seeds, 5, 2)) < rate).astype(int)
        (evals / f"{name}-0123456789ab.json").write_text(json.dumps({"success": s.tolist()}))

    paper = (0.1, 0.01, 0.5, 0.01)
    three = table1.Line("e", "d", "X", "1k", claims.Row("t/evals/a-base"), claims.Row("t/evals/a-ttt"), None, paper,
                        superseded_by="X, 5 seeds")  # fmt: skip
    five = table1.Line("e", "d", "X, 5 seeds", "1k", claims.Row("t/evals/b-base"), claims.Row("t/evals/b-ttt"), None,
                       paper)  # fmt: skip
    other = table1.Line("f", "d", "X", "1k", claims.Row("t/evals/c-base"), claims.Row("t/evals/c-ttt"), None, paper,
                        superseded_by="X, 5 seeds")  # fmt: skip
    monkeypatch.setattr(table1, "lines", lambda: [three, five, other])
    for name, seeds, rate in (("a-base", 3, 0.2), ("a-ttt", 3, 0.6), ("c-base", 3, 0.2), ("c-ttt", 3, 0.6),
                              ("b-base", 5, 0.2)):  # fmt: skip
        put(name, seeds, rate)
    assert "over the 2 scored lines (10 tasks x 3 seeds" in table1.aggregate()
    put("b-ttt", 5, 0.6)
    assert "over the 2 scored lines (10 tasks x 3/5 seeds" in table1.aggregate()  # b, and c of another env


def test_rows_pair_only_by_digest(tmp_path, monkeypatch):
    """Two rows compare seed by seed only when both records carry the same checkpoint digest and ran the same
    episodes; a record without a digest is never paired, whatever its path; ties between records are never broken by
    file time (a fresh clone makes every time equal)."""
    claims, evals = _claims_at(tmp_path, monkeypatch)

    def put(name, key, rates, **extra):
        s = np.array(rates, float)[:, None, None] * np.ones((3, 1, 2))
        s[:, 0, 1] = 0  # per seed: rate / 2
        (evals / f"{name}-{key}.json").write_text(json.dumps({"success": s.tolist(), "checkpoint": "ck", **extra}))

    put("base", "aaaaaaaaaaaa", [0, 1, 1])  # no digest, same checkpoint name
    put("ttt", "bbbbbbbbbbbb", [1, 1, 1])
    a, b = claims.load_pair(claims.Row("t/evals/base"), claims.Row("t/evals/ttt"))
    assert not claims.paired(a, b) and claims.diff(a, b).test == "welch"
    # with the same digest on both: paired; another base record on another digest is passed over for it
    put("base", "cccccccccccc", [0, 0, 1], checkpoint_sha256="s2")
    put("base", "dddddddddddd", [0, 1, 1], checkpoint_sha256="s1")
    put("ttt", "eeeeeeeeeeee", [1, 1, 1], checkpoint_sha256="s1")
    a, b = claims.load_pair(claims.Row("t/evals/base"), claims.Row("t/evals/ttt"))
    assert a["path"].name == "base-dddddddddddd.json" and b["path"].name == "ttt-eeeeeeeeeeee.json"
    assert claims.paired(a, b) and claims.diff(a, b).test == "paired" and a["tied"] == b["tied"] == 1
    # two records that nothing tells apart: the first by file name, whatever their times, and the cell says so
    for f, t in (("base-cccccccccccc.json", 2_000_000_000), ("base-aaaaaaaaaaaa.json", 1_000_000_000)):
        os.utime(evals / f, (t, t))
    x = claims.load(claims.Row("t/evals/base"))
    assert x["path"].name == "base-aaaaaaaaaaaa.json" and x["tied"] == 3 and "(1 of 3 records)" in claims.fmt(x)


def test_graph_search_records_of_an_earlier_path_default_are_taken_last(tmp_path, monkeypatch):
    """A TTGS row's record made before `ttgs_path` existed ran 'cut'; a record of the path in force ('slide') is
    taken over it even with fewer episodes, and the 'cut' one, where it is all there is, says how to rerun it."""
    from ttt.pipeline.keys import record_ttgs_path

    claims, evals = _claims_at(tmp_path, monkeypatch)

    def put(key, episodes, **extra):
        rec = {"success": np.ones((3, 1, episodes)).tolist(), "run": {"name": "g", "variant": "ttgs"}, **extra}
        (evals / f"g-{key}.json").write_text(json.dumps(rec))

    put("aaaaaaaaaaaa", 10)  # before 14febb1: no ttgs_path
    assert record_ttgs_path(json.loads((evals / "g-aaaaaaaaaaaa.json").read_text())) == "cut"
    assert record_ttgs_path({"run": {"variant": "ttt"}}) is None
    old = claims.load(claims.Row("t/evals/g"))
    assert old["path"].name == "g-aaaaaaaaaaaa.json" and "TTGS path 'cut'" in old["command"]
    put("bbbbbbbbbbbb", 2, ttgs_path="slide")
    new = claims.load(claims.Row("t/evals/g"))
    assert new["path"].name == "g-bbbbbbbbbbbb.json" and "TTGS path" not in new["command"]


def test_an_evaluation_says_each_tasks_compute_where_they_differ():
    """A record's `compute`: one dict where every task's part ran on the same; else each task's, None for a part
    written before parts recorded it (a resumed evaluation does not claim one machine)."""
    from ttt.pipeline.stages import _compute

    a = {"device": "cpu", "cpus": 1, "xla_flags": ""}
    b = {**a, "cpus": 2}
    part = lambda c: {"compute": np.asarray(json.dumps(c))}  # noqa: E731
    assert _compute([part(a), part(a)], (1, 2)) == a
    assert _compute([part(a), part(b)], (1, 2)) == [dict(task=1, compute=a), dict(task=2, compute=b)]
    assert _compute([{}, part(a)], (3, 4)) == [dict(task=3, compute=None), dict(task=4, compute=a)]


def test_table1_published_cell_shows_each_set_of_checkpoints(tmp_path, monkeypatch):
    """The published-code cell: the first run's records, then each rerun on other checkpoints (a subfolder) as its
    own base -> critic; an unfinished row says how far it got."""
    table1 = _script("studies", "table1")
    monkeypatch.setattr(table1, "RES", tmp_path)
    pattern = "published/toy-v0__gciql__*__10.json"
    assert table1.published(None) == "-" and table1.published(pattern) == "not run"

    def put(folder: Path, variant: str, mean, run: list, complete=True):
        folder.mkdir(parents=True, exist_ok=True)
        rec = dict(variant=variant, mean=mean, se=0.05, n_episodes=30, complete=complete, wall_s_per_episode=12.0,
                   episodes_asked=3, seeds=[0, 1], tasks=[1, 2, 3, 4, 5], episodes_run=run,
                   mean_episodes_run=sum(run) / max(len(run), 1))
        (folder / f"toy-v0__gciql__{variant}__10.json").write_text(json.dumps(rec))

    put(tmp_path / "published", "base", 0.2, [0.0] * 30)
    put(tmp_path / "published", "ttt", None, [1.0, 0.0, 0.0, 0.0], complete=False)
    assert table1.published(pattern) == (
        "0.20 +- 0.05 (2 seeds, 30 ep., 12 s/ep.) -> incomplete: 4 of 30 episodes run, 0.25")
    put(tmp_path / "published" / "retrained", "base", 0.3, [0.0] * 30)
    assert table1.published(pattern).endswith("; retrained: 0.30 +- 0.05 (2 seeds, 30 ep., 12 s/ep.) -> not run")


def _record(name: str, variant: str, success: list, alpha=None) -> dict:
    s = np.asarray(success, float)  # (seeds, tasks, episodes)
    per_seed = s.reshape(s.shape[0], -1).mean(1)
    return dict(run=dict(name=name, variant=variant, agent="gcbc", dataset="toy-v0", ft_alpha=alpha),
                checkpoint="ck", checkpoint_step=10000, success=s.tolist(), per_seed=per_seed.tolist(),
                mean=float(per_seed.mean()), se=float(per_seed.std(ddof=1) / np.sqrt(len(per_seed))),
                wall_s=1.0, rounds={})  # fmt: skip


def test_test_time_methods_verdicts_by_hand():
    """The verdict rule of studies/test_time_methods_table.py on records whose numbers are worked out by hand."""
    ttm = _script("studies", "test_time_methods_table")
    base = _record("b", "base", [[[0, 0]], [[0, 1]], [[0, 0]]])  # per seed 0, 0.5, 0: mean 1/6, se sqrt(1/12)/sqrt(3)
    ttgs = _record("g", "ttgs", [[[0, 1]], [[0, 1]], [[0, 0]]])  # per seed 0.5, 0.5, 0: mean 1/3, se 1/6
    ttt = _record("t", "ttt", [[[1, 1]], [[1, 1]], [[1, 1]]])  # 1, 1, 1: mean 1, se 0
    c = ttm.compare(base, ttgs)  # no digests: never paired, Welch over seeds
    assert math.isclose(c["diff"], 1 / 6) and math.isclose(c["se"], math.sqrt(1 / 36 + 1 / 36))
    assert c["test"] == "welch" and c["verdict"] == "no difference (unpaired)"
    c = ttm.compare(ttgs, ttt)  # t = (2/3) / (1/6) = 4 on 2 d.f. (ttt has no spread): p = 1 - 4 / sqrt(18) = 0.057
    assert math.isclose(c["diff"], 2 / 3) and math.isclose(c["se"], 1 / 6)
    assert math.isclose(c["p"], 1 - 4 / math.sqrt(18)) and c["verdict"] == "ttt better, weak evidence (unpaired)"
    # with one digest on both rows the same per-seed rates pair: d = [0.5, 0.5, 1] - ..., a paired t-test
    dig = {"checkpoint_sha256": "s"}
    c = ttm.compare({**ttgs, **dig}, {**ttt, **dig})  # d = [0.5, 0.5, 1]: t = (2/3) / (1/6) = 4, the same p here
    assert c["test"] == "paired" and math.isclose(c["p"], 1 - 4 / math.sqrt(18))
    c = ttm.compare({**base, **dig}, {**ttgs, **dig})  # d = [0.5, 0, 0]: t = (1/6) / (1/6) = 1: p = 1 - 1 / sqrt 3
    assert math.isclose(c["p"], 1 - 1 / math.sqrt(3)) and c["verdict"] == "no difference"
    ttt_a = _record("ta", "ttt", [[[1, 1]], [[1, 1]], [[1, 1]]], alpha=0.3)
    lines = ttm.verdict_table([base, ttgs, ttt, ttt_a])
    pairs = [tuple(x.strip() for x in ln.split("|")[2:4]) for ln in lines[2:]]
    # base and TTGS against every GC-TTT row; GC-TTT rows are not paired across alphas
    assert pairs == [("b", "g"), ("b", "t"), ("b", "ta"), ("g", "t"), ("g", "ta")]
    zero = _record("z", "ttt", [[[0, 0]], [[0, 0]], [[0, 0]]])  # no spread on either side: p undefined, printed '-'
    line = ttm.verdict_table([_record("b0", "base", [[[0, 0]], [[0, 0]], [[0, 0]]]), zero])[2]
    assert "| 1.000 (welch) | no difference (unpaired) |" in line  # both rows without spread, equal: nothing moved
    # the same checkpoint path pre-trained again elsewhere (another state digest) is another checkpoint: not paired
    again = {**_record("t2", "ttt", [[[1, 1]], [[1, 1]], [[1, 1]]]), "checkpoint_sha256": "other"}
    pairs = [tuple(x.strip() for x in ln.split("|")[2:4]) for ln in ttm.verdict_table([base, again])[2:]]
    assert pairs == []
    same = {**base, "checkpoint_sha256": "other"}
    pairs = [tuple(x.strip() for x in ln.split("|")[2:4]) for ln in ttm.verdict_table([same, again])[2:]]
    assert pairs == [("b", "t2")]


def test_test_time_methods_pools_rows_over_training_seeds_by_hand():
    """Rows run again on other training seeds pool into one row over all seeds, still paired file by file."""
    ttm = _script("studies", "test_time_methods_table")
    first = [_record("b", "base", [[[0, 0]], [[0, 1]]]), _record("t", "ttt", [[[1, 1]], [[1, 0]]])]
    second = [_record("b", "base", [[[0, 0, 0, 0]]]), _record("t", "ttt", [[[1, 1, 1, 1]]]),
              _record("only-here", "ttgs", [[[1, 1, 1, 1]]])]  # fmt: skip
    for r in second:
        r["checkpoint"] = "ck2"
        r["run"].update(chunk=20, bucket=None)  # batched differently: speed only, still poolable
    base, ttt = ttm.pool([first, second])  # "only-here" is not in both files
    assert base["per_seed"] == [0.0, 0.5, 0.0] and math.isclose(base["mean"], 1 / 6)
    assert math.isclose(ttt["mean"], 5 / 6) and math.isclose(ttt["se"], np.std([1, 0.5, 1], ddof=1) / 3**0.5)
    assert ttm._shape(base) == "2x1x2+1x1x4" and base["checkpoint"] == "ck+ck2"
    c = ttm.compare(base, ttt)  # mean over seeds, not over the 8 episodes (those would give 7/8 - 1/8)
    assert math.isclose(c["diff"], 5 / 6 - 1 / 6)
    assert c["test"] == "welch" and math.isclose(c["p"], welch([1, 0.5, 1], [0, 0.5, 0])[1])  # no digests
    lines = ttm.verdict_table([base, ttt])
    assert len(lines) == 3 and "| b | t |" in lines[2]  # one checkpoint group: the pooled rows pair
    with pytest.raises(ValueError, match="different episodes"):
        ttm.compare(base, _record("t1", "ttt", [[[1, 1]], [[1, 0]]]))
    # TTGS's round metrics pool over both files: at each episode's last round, 2 + 4 episodes
    g1, g2 = _record("g", "ttgs", [[[0, 1]], [[0, 1]]]), _record("g", "ttgs", [[[1, 1, 1, 1]]])
    g1["rounds"] = {"ttgs_goal_frac": np.zeros((2, 1, 2, 1)).tolist(), "ttgs_hops": np.full((2, 1, 2, 1), 3).tolist(),
                    "ttgs_unreachable": np.ones((2, 1, 2, 1)).tolist()}  # fmt: skip
    g2.update(checkpoint="ck2", rounds={"ttgs_goal_frac": np.ones((1, 1, 4, 1)).tolist(),
                                        "ttgs_hops": np.full((1, 1, 4, 1), 6).tolist(),
                                        "ttgs_unreachable": np.zeros((1, 1, 4, 1)).tolist()})  # fmt: skip
    line = ttm.rows_table(ttm.pool([[g1], [g2]]))[2]
    assert line.endswith(f"| {4 / 8:.2f} | {(4 * 3 + 4 * 6) / 8:.1f} | 4 |")
    with pytest.raises(ValueError, match="count its seeds twice"):
        ttm.pool([first, first])
    other = [_record("b", "base", [[[0, 0]]]), _record("t", "ttt", [[[1, 1]]], alpha=0.3)]
    for r in other:
        r["checkpoint"] = "ck3"
    with pytest.raises(ValueError, match="different settings"):
        ttm.pool([first, other])


def test_claims_load_pairs_a_screen_with_the_record_of_its_episode_count(tmp_path, monkeypatch):
    """`claims.load` takes the record with the most episodes; asked for `n`, the one of exactly `n` episodes where one
    exists (so Table 1 compares a 30-episode screen with the base's 30, not its 150), else still the largest."""
    claims, evals = _claims_at(tmp_path, monkeypatch)
    for key, episodes in (("aaaaaaaaaaaa", 2), ("bbbbbbbbbbbb", 10)):
        success = np.zeros((3, 5, episodes))
        success[0, 0, 0] = 1  # one success: 1 / 30 or 1 / 150
        (evals / f"row-{key}.json").write_text(json.dumps({"n_episodes": success.size, "success": success.tolist()}))
    row = claims.Row("t/evals/row")
    assert claims.load(row)["n"] == 150 and claims.load(row, 60)["n"] == 150
    paired = claims.load(row, 30)
    assert paired["n"] == 30 and paired["shape"] == "3x5x2" and paired["per_seed"][0] == 0.1
    # The claims table pairs a row that has only the screen with the other row's screen, not its 150 episodes.
    screen = {"n_episodes": 30, "success": np.ones((3, 5, 2)).tolist()}
    (evals / "screen-cccccccccccc.json").write_text(json.dumps(screen))
    a, b = claims.load_pair(row, claims.Row("t/evals/screen"))
    assert a["n"] == b["n"] == 30 and a["per_seed"][0] == 0.1
    a, b = claims.load_pair(row, row)
    assert a["n"] == b["n"] == 150
    # The largest count both rows hold, not the smaller of their largest (60 is the other row's, not this one's).
    sixty = {"n_episodes": 60, "success": np.ones((3, 5, 4)).tolist()}
    (evals / "other-dddddddddddd.json").write_text(json.dumps(sixty))
    (evals / "other-eeeeeeeeeeee.json").write_text(json.dumps(screen))
    a, b = claims.load_pair(row, claims.Row("t/evals/other"))
    assert a["shape"] == b["shape"] == "3x5x2"


def test_rederivation_counter_counts_calls_by_code_and_opens_by_file(tmp_path):
    """analyses/rederivation.py's counter: calls of a named function defined under its roots (not one of the same
    name elsewhere), split at the first stage marker, and file opens by label, reads apart from (atomic) writes."""
    rederivation = _script("analyses", "rederivation")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "mod.py").write_text("def get_spec(x):\n    return x\n\n\ndef ensure_data():\n    return get_spec(0)\n")
    sys.path.insert(0, str(pkg))
    try:
        import mod
    finally:
        sys.path.remove(str(pkg))

    def get_spec(x):  # the same name outside the roots: not counted
        return x

    meta = tmp_path / "meta.json"
    meta.write_text("{}")
    count = rederivation.Count(["get_spec", "read_meta"], [pkg], markers=["ensure_data"])
    count.start()
    try:
        mod.get_spec(1)
        get_spec(2)
        meta.read_text()
        mod.ensure_data()  # the stages begin, and it calls get_spec once more
        meta.read_text()
        with open(tmp_path / ".meta.json.abc123.tmp", "w"):  # how ttt.storage writes meta.json atomically
            pass
    finally:
        count.stop()
    meta.read_text()  # after stop(): not counted
    r = count.report()
    spec = r["resolvers"]["get_spec"]
    assert (spec["calls"], spec["planning"], spec["stages"]) == (2, 1, 1)
    assert r["resolvers"]["read_meta"]["calls"] == 0  # a name that never ran counts 0
    here = "tests/test_benchmarks_layout.py:test_rederivation_counter_counts_calls_by_code_and_opens_by_file"
    assert spec["sites"] == {here: 1, "mod.py:ensure_data": 1}  # the caller: in the repository by path, else by name
    f = r["files"]["meta.json"]
    assert (f["read_planning"], f["read_stages"], f["write"]) == (1, 1, 1)
    assert rederivation.classify("pointmaze-medium-navigate-v0-val.npz") == "dataset NAME-val.npz"
    assert rederivation.classify("ttt-0123456789ab.json") == "eval record ROW-KEY.json"


def test_round_diagnostics_average_the_rounds_that_ran_by_hand():
    """analyses/round_diagnostics.py: a metric's mean over active rounds only (a round after the episode ended, or a
    None, does not count); selection metrics blank for rows that select nothing (base, ttgs)."""
    rd = _script("analyses", "round_diagnostics")
    # 1 seed x 1 task x 2 episodes x 3 rounds; episode 1 ended after its first round
    active = [[[[1, 1, 1], [1, 0, 0]]]]
    rec = dict(mean=0.5, n_episodes=2, seeds=1, run=dict(variant="ttt"),
               rounds=dict(active=active, spearman=[[[[0.2, None, 0.4], [0.9, 5.0, 5.0]]]],
                           reach_frac=[[[[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]]]))  # fmt: skip
    s = rd.summarise(rec)
    assert s["spearman"] == pytest.approx((0.2 + 0.4 + 0.9) / 3)  # the None and the two inactive rounds left out
    assert s["reach_frac"] == pytest.approx(2 / 4)
    assert math.isnan(s["ttgs_hops"])  # a metric the row does not hold
    base = rd.summarise({**rec, "run": dict(variant="ttgs"), "rounds": {**rec["rounds"], "ttgs_hops": active}})
    assert math.isnan(base["spearman"]) and base["ttgs_hops"] == pytest.approx(1.0)
    # TTGS's metrics count over the episode so far: each episode's last round that ran is its value (0.4 and 0.2)
    frac = [[[[0.0, 0.5, 0.4], [0.2, 9.0, 9.0]]]]
    both = rd.summarise({**rec, "run": dict(variant="ttt+ttgs"), "rounds": {**rec["rounds"], "ttgs_goal_frac": frac}})
    assert both["ttgs_goal_frac"] == pytest.approx(0.3) and both["spearman"] == pytest.approx(s["spearman"])


def test_value_calibration_bins_by_hand():
    """analyses/value_calibration.py: pairs binned by the oracle's steps [lo, hi), all seeds pooled per bin, the share
    within the threshold inclusive; empty bins left out; pair draws only from valid rows."""
    vc = _script("analyses", "value_calibration")
    oracle = np.array([10.0, 30.0, 30.0, 500.0])
    steps = np.array([[5.0, 20.0, 48.0, 47.0], [7.0, 60.0, 40.0, 49.0]])  # 2 seeds x 4 pairs
    bins = vc.calibration(steps, oracle, threshold=48.0)
    assert [(b["oracle_lo"], b["oracle_hi"], b["pairs"]) for b in bins] == [(0, 25, 1), (25, 50, 2), (400, 800, 1)]
    assert bins[0]["median"] == 6.0 and bins[0]["within_threshold"] == 1.0
    assert bins[1]["median"] == 44.0 and bins[1]["within_threshold"] == 0.75  # 20, 48, 40 within; 60 not
    assert bins[2]["p10"] == pytest.approx(47.2) and bins[2]["within_threshold"] == 0.5
    valid = np.array([False, True, False, True])
    i, j = vc.pair_rows(4, valid, 200)
    assert set(i) | set(j) == {1, 3}


def test_pointmaze_beyond_choice_and_anchor_verdicts_by_hand(tmp_path, monkeypatch):
    """studies/pointmaze_beyond.py: the recipe is the best 4-dataset mean; a candidate within two s.e. of the leader's
    mean (per-seed differences paired by digest) ties with it and the cheaper per episode of tied ones is taken; no
    recipe until every cell is in with 2 seeds or more; above / level / below the anchor by two combined s.e."""
    _claims_at(tmp_path, monkeypatch)
    pb = _script("studies", "pointmaze_beyond")
    evals = tmp_path / "pointmaze-beyond" / "evals"
    evals.mkdir(parents=True)

    def put(d, suffix, rates, wall):
        s = (np.arange(10)[None, None, :] < np.round(np.array(rates) * 10)[:, None, None]).astype(float)
        rec = {"success": s.tolist(), "checkpoint": d, "checkpoint_sha256": f"sha-{d}", "wall_s": wall * s.size,
               "run": {"name": f"{d}-{suffix}", "variant": suffix.split("-")[0]}}  # fmt: skip
        (evals / f"{d}-{suffix}-{'a' * 12}.json").write_text(json.dumps(rec))

    leader = [1.0, 0.8, 1.0, 0.8]
    for d in pb.CHOOSE:
        put(d, "base", [0.1, 0.2, 0.1, 0.2], 1.0)
        put(d, "ttgs", [0.3, 0.3, 0.4, 0.2] if d == "large-stitch" else [0.5, 0.5, 0.6, 0.4], 1.5)
        put(d, "ttt-alpha0.3", leader, 2.0)
        put(d, "ttt+ttgs-alpha0.3", [0.9, 0.8, 0.9, 0.8], 1.0)  # cheaper; -0.1, 0, -0.1, 0 per seed
    c = pb.choose()
    assert c["leader"] == "ttt-alpha0.3" and c["means"]["ttgs"] == pytest.approx(0.45)
    # paired: -0.05, s.e. 0.0289 per dataset, / 2 over four -> 2 s.e. 0.029 < 0.05: no tie (Welch's 0.032 would tie)
    assert c["gap"]["ttt+ttgs-alpha0.3"] == pytest.approx((-0.05, math.sqrt(0.01 / 3 / 4) / 2), abs=1e-6)
    assert c["tests"]["ttt+ttgs-alpha0.3"] == ["paired"] and c["ties"] == ["ttt-alpha0.3"]
    assert c["recipe"] == "ttt-alpha0.3" and c["wall"]["ttt-alpha0.3"] == pytest.approx(2.0)
    for d in pb.CHOOSE:  # now 0, -0.3, 0, +0.1 per seed: -0.05, s.e. 0.0866 / 2: a tie, and the cheaper is taken
        put(d, "ttt+ttgs-alpha0.3", [1.0, 0.5, 1.0, 0.9], 1.0)
    c = pb.choose()
    assert c["ties"] == ["ttt-alpha0.3", "ttt+ttgs-alpha0.3"] and c["recipe"] == "ttt+ttgs-alpha0.3"
    text = pb.tables()
    assert "Recipe: **GC-TTT + TTGS** (leader GC-TTT (alpha 0.3); within two s.e. of it: GC-TTT + TTGS;" in text
    assert "| pointmaze-medium-navigate | 0.984 +- 0.012 (QRL + TTGS" in text  # the TTGS paper's s.d. 3.4 / sqrt(8)
    assert "GC-TTT + TTGS: 0.85 +- 0.12" in text
    # threshold under the value's horizon: beside the published-threshold row and base, paired by digest; its records'
    # names extend the published row's, which must not pick them up (a 12-character key ends every name)
    put("medium-stitch", "ttgs-thr24", [0.7, 0.7, 0.8, 0.6], 3.0)  # +0.2 on every seed: no spread, exact p 2/2^4
    under = pb.under_horizon()
    assert "| medium-stitch | TTGS | 0.50 +- 0.04 | 0.70 +- 0.04 | +0.20 (0.00, 0.125 paired) | +0.55 (0.06, " in under
    assert "| large-nav | GC-TTT + TTGS | 0.85 +- 0.12 | not run yet | - | - | - |" in under
    assert pb.choose()["rows"]["ttgs"]["medium-stitch"]["per_seed"].tolist() == pytest.approx([0.5, 0.5, 0.6, 0.4])
    # more seeds where the verdict was level: the recipe and base on other checkpoints, pooled; a pair that does not
    # pair by digest is left out rather than pooled unpaired
    assert "| large-nav | GC-TTT + TTGS | - | not run yet |" in pb.more_seeds()

    def put_more(suffix, rates, sha):
        s = (np.arange(10)[None, None, :] < np.round(np.array(rates) * 10)[:, None, None]).astype(float)
        rec = {"success": s.tolist(), "checkpoint": "more", "checkpoint_sha256": sha, "wall_s": 1.0,
               "run": {"name": f"large-nav-{suffix}", "variant": suffix.split("-")[0]}}  # fmt: skip
        (evals / f"large-nav-{suffix}-{'b' * 12}.json").write_text(json.dumps(rec))

    put_more("base-more", [0.0, 0.1, 0.0, 0.1], "sha-more")
    put_more("ttt+ttgs-alpha0.3-more", [0.8, 0.9, 0.8, 0.9], "sha-other")
    assert pb.pooled("large-nav", "ttt+ttgs-alpha0.3") is None
    put_more("ttt+ttgs-alpha0.3-more", [0.8, 0.9, 0.8, 0.9], "sha-more")
    x = pb.pooled("large-nav", "ttt+ttgs-alpha0.3")
    assert x["seeds"] == 8 and x["mean"] == pytest.approx(0.85) and x["first"][0] == pytest.approx(0.85)
    assert x["gain"].diff == pytest.approx(0.75) and x["gain"].test == "paired"  # .9 .3 .9 .7 | .8 .8 .8 .8
    assert x["verdict"] == "level"  # 0.85 against 0.920 +- 0.034: 0.07 < 2 x hypot(0.06, 0.034)
    row = "| large-nav | GC-TTT + TTGS | 0.85 +- 0.12 | 0.85 +- 0.03 | **0.85 +- 0.06** (8 seeds) | 4x1x10 + 4x1x10 |"
    assert row + " +0.75 (0.07, " in pb.more_seeds()
    put("medium-nav", "ttgs", [0.5], 1.5)  # one seed: no s.e., no recipe
    assert pb.choose()["recipe"] is None and "fewer than 2 training seeds" in pb.choose()["why"]
    (evals / f"large-stitch-ttgs-{'a' * 12}.json").unlink()
    assert pb.choose()["recipe"] is None and "not every candidate" in pb.choose()["why"]
    assert pb.anchor_verdict(0.90, 0.02, 0.98, 0.0) == "below"  # 0.08 > 2 x 0.02
    assert pb.anchor_verdict(0.97, 0.02, 0.98, 0.0) == "level"
    assert pb.anchor_verdict(1.00, 0.03, 0.92, 0.03) == "level"  # 0.08 < 2 x hypot 0.042; ours alone would be above
    assert pb.anchor_verdict(1.00, 0.03, 0.90, 0.03) == "above"  # 0.10 > 0.085; summed s.e. would be level
    assert pb.anchor_verdict(0.50, math.nan, 0.98, 0.0) == "-"


def test_failure_modes_motion_by_hand():
    """analyses/failure_modes.py `motion`: the mean distance a step and the share of slow steps, over the steps an
    episode ran (the padding after an early success left out)."""
    fm = _script("analyses", "failure_modes")
    x = np.array([0.0, 0.0, 0.01, 0.31, 0.61, 0.61])  # steps 0, .01, .3, .3, 0
    xy = np.stack([x, np.zeros_like(x)], -1)[None]  # one episode of 6 positions (5 steps)
    m = fm.motion(xy, np.array([6]), slow=0.02)
    assert m["speed"][0] == pytest.approx(0.61 / 5) and m["slow"][0] == pytest.approx(3 / 5)
    m = fm.motion(xy, np.array([4]), slow=0.02)  # it ended after 4 positions: 3 steps, 0, .01, .3
    assert m["speed"][0] == pytest.approx(0.31 / 3) and m["slow"][0] == pytest.approx(2 / 3)


def test_near_goal_actions_pairs_and_stats_by_hand():
    """analyses/near_goal_actions.py: a row pairs with the row k later only inside its episode and only if it is valid;
    the action statistics per seed (norm, share under 0.1, cosine with the data's way; a zero vector counts 0)."""
    ng = _script("analyses", "near_goal_actions")
    valid = np.array([True, True, True, False, True, True, False])  # episodes rows 0-3 and 4-6 (3, 6 final rows)
    ep_end = np.array([3, 3, 3, 3, 6, 6, 6])
    i, j = ng.offset_pairs(valid, ep_end, 2, np.array([0, 1, 2, 3, 4, 5, 1]))
    assert i.tolist() == [0, 1, 4, 1] and j.tolist() == [2, 3, 6, 3]  # 2 -> 4 crosses episodes, 3 is not valid
    actions = np.array([[[1.0, 0.0], [0.0, 0.05], [0.0, 0.0]]])  # one seed, three pairs
    moved = np.array([[2.0, 0.0], [0.0, -1.0], [1.0, 1.0]])
    s = ng.action_stats(actions, moved)
    assert s["norm"][0] == pytest.approx(1.05 / 3) and s["still"][0] == pytest.approx(2 / 3)
    assert s["cosine"][0] == pytest.approx((1.0 - 1.0 + 0.0) / 3)
    assert ng.main(["/no/such/checkpoint"]) == 2  # a one-line error, not a traceback
    assert ng.main(["/no/such/checkpoint", "--offsets", "0"]) == 2
