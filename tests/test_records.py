"""Records without the machine (`ttt.pipeline.records`): what `ttt run` and `ttt eval` write names a checkpoint by its
cache key or a path under a placeholder, never this machine's absolute path; and no committed record, table or page
under benchmarks/results, docs or pipelines holds one."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest
from helpers import pretrain_argv, run

from ttt.cli import main
from ttt.data import generate as gen
from ttt.pipeline.keys import checkpoint_ref, resolve_checkpoint
from ttt.pipeline.records import SCHEMA, local_path, portable_path, portable_run

ROOT = Path(__file__).resolve().parent.parent
NAV = "pointmaze-medium-navigate-v0"
# The home, scratch and temporary folders of the machines these records were made on (and of other systems).
MACHINE_PATH = re.compile(r"(?<![\w.~$/-])(/root|/home/[^/\s\"']+|/Users/[^/\s\"']+|/work|/tmp|/scratch|/private/var)"
                          r"(?=/|\b)|[A-Za-z]:\\\\?Users\\")  # fmt: skip
SUFFIXES = (".json", ".csv", ".txt", ".md", ".toml", ".jsonl", ".yaml", ".yml")


def test_portable_path_roots(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.chdir(tmp_path)
    assert portable_path(tmp_path / "ck" / "a", cache) == "ck/a"  # inside the working directory: relative
    assert portable_path(tmp_path, cache) == "."
    assert portable_path(cache / "ckpt" / "d" / "n", cache) == "$TTT_CACHE/ckpt/d/n"  # the deepest root wins
    assert portable_path("rel/x", cache) == "rel/x"  # a relative path as given
    monkeypatch.chdir("/")
    tmp = Path(tempfile.gettempdir()).resolve()
    assert portable_path(tmp / "x" / "y", cache) == "$TMPDIR/x/y"
    assert portable_path(Path.home() / "ck", cache) == "~/ck" or Path.home().resolve() == Path("/")
    assert portable_path("/nowhere/known/parent/name", cache) == ".../parent/name"
    assert local_path("$TTT_CACHE/ckpt/d/n", cache) == cache / "ckpt" / "d" / "n"
    assert local_path("$TMPDIR/x/y") == tmp / "x" / "y"
    assert local_path("~/ck") == Path.home() / "ck"
    run_ = dict(name="r", checkpoint=str(tmp / "ck"), data_dir=None, expert=str(cache / "e.pkl"), K=100)
    assert portable_run(run_, cache) == dict(name="r", checkpoint="$TMPDIR/ck", data_dir=None,
                                             expert="$TTT_CACHE/e.pkl", K=100)  # fmt: skip


def test_checkpoint_ref_is_a_cache_key_or_a_portable_path(tmp_path, monkeypatch):
    monkeypatch.setenv("TTT_CACHE", str(tmp_path / "c"))
    monkeypatch.chdir("/")
    ck = tmp_path / "c" / "ckpt" / NAV / "gcbc-cpu-0123456789ab"
    ck.mkdir(parents=True)
    assert checkpoint_ref(ck) == f"{NAV}/gcbc-cpu-0123456789ab"
    assert resolve_checkpoint(checkpoint_ref(ck)) == ck
    mine = tmp_path / "mine"
    mine.mkdir()
    ref = checkpoint_ref(mine)  # outside the cache and the working directory (/: never a root)
    assert ref.startswith("$TMPDIR/") and ref.endswith("/mine")
    assert resolve_checkpoint(ref).resolve() == mine.resolve()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("records")
    gen.generate(NAV, episodes=3, seed=0, directory=root / "data", workers=1)
    assert main(pretrain_argv(NAV, 4, root / "ck", root / "data")) == 0
    return root


def _machine_paths(text: str, *also: Path) -> list[str]:
    hits = [m.group(0) for m in MACHINE_PATH.finditer(text)]
    return hits + [str(p) for p in also if str(p) in text]


def test_ttt_run_writes_no_machine_path(tiny, tmp_path, capsys):
    """A row that names its checkpoint and data directory by absolute paths: pipeline.json, the evaluation record,
    results.json / .csv and report.md name them under `$TMPDIR` (the test's folders are there), at schema 2."""
    row = f'name = "r"\nvariant = "base"\ncheckpoint = "{tiny / "ck"}"\ndata_dir = "{tiny / "data"}"\n'
    (tmp_path / "p.toml").write_text(f'name = "p"\n[[run]]\n{row}data_episodes = 3\nepisodes = 1\ntasks = [1]\n')
    out = tmp_path / "out"
    rc, _, err = run(["run", str(tmp_path / "p.toml"), "--out", str(out), "--cache", str(tmp_path / "c")], capsys)
    assert rc == 0, err
    written = [p for p in out.rglob("*") if p.suffix in SUFFIXES]
    assert {p.name for p in written} >= {"pipeline.json", "results.json", "results.csv", "report.md"}
    for p in written:
        assert not _machine_paths(p.read_text(), tiny, tmp_path), p
    (rec,) = json.loads((out / "results.json").read_text())["records"]
    assert rec["schema"] == SCHEMA and rec["checkpoint"].startswith("$TMPDIR/") and rec["checkpoint"].endswith("/ck")
    assert rec["run"]["data_dir"].endswith("/data")
    assert resolve_checkpoint(rec["checkpoint"]).resolve() == (tiny / "ck").resolve()
    assert json.loads((out / "pipeline.json").read_text())["schema"] == SCHEMA


def test_ttt_eval_json_writes_no_machine_path(tiny, capsys):
    j = tiny / "e.json"
    rc, _, err = run(["eval", str(tiny / "ck"), "--episodes", "1", "--tasks", "1", "--dir", str(tiny / "data"),
                      "--variants", "base", "--json", str(j)], capsys)  # fmt: skip
    assert rc == 0, err
    doc = json.loads(j.read_text())
    assert doc["schema"] == SCHEMA and doc["checkpoint"].startswith("$TMPDIR/") and doc["checkpoint_sha256"]
    assert not _machine_paths(j.read_text(), tiny)


def _committed() -> list[Path]:
    out = []
    for top in ("benchmarks/results", "docs", "pipelines"):
        out += [p for p in (ROOT / top).rglob("*") if p.is_file() and p.suffix in SUFFIXES]
    return out + [*(ROOT / "benchmarks" / "published").glob("*.md"), ROOT / "README.md", ROOT / "CHANGELOG.md"]


def test_no_committed_record_or_page_holds_a_machine_path():
    """benchmarks/migrations/records_schema2.py rewrote the records made before schema 2; every page names paths
    relative to the repository or under a placeholder ($TTT_CACHE, $TMPDIR, ~, $WORK, $PUBLISHED_ROOT)."""
    bad = {}
    for p in _committed():
        hits = _machine_paths(p.read_text(errors="replace"))
        if hits:
            bad[p.relative_to(ROOT).as_posix()] = sorted(set(hits))[:3]
    assert not bad, f"absolute paths of a machine (run benchmarks/migrations/records_schema2.py): {bad}"


def test_committed_pipeline_records_are_schema_2():
    from ttt.pipeline.keys import record_ttgs_path

    recs = [p for p in (ROOT / "benchmarks" / "results").rglob("*.json") if p.parent.name == "evals"]
    assert recs
    for p in recs:
        rec = json.loads(p.read_text())
        assert rec.get("schema") == SCHEMA, p
        if rec["run"]["variant"] in ("ttgs", "ttt+ttgs"):
            assert rec.get("ttgs_path") == record_ttgs_path(rec), p


def test_the_migration_has_nothing_left_to_do():
    """`benchmarks/migrations/records_schema2.py --check`: every committed file is at schema 2 already."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "migrations" / "records_schema2.py"), "--check"],
                       capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr


def test_ttt_eval_is_a_pipeline_row(tiny, tmp_path, capsys):
    """`ttt eval` evaluates each variant as a `ttt run` row naming the checkpoint: the same content key, the same
    record (its results equal), and a rerun with the same `--json` keeps the variant by that key."""
    row = f'name = "r"\nvariant = "base"\ncheckpoint = "{tiny / "ck"}"\ndata_dir = "{tiny / "data"}"\n'
    (tmp_path / "p.toml").write_text(f'name = "p"\n[[run]]\n{row}data_episodes = 3\nepisodes = 1\ntasks = [2]\n')
    rc, _, err = run(["run", str(tmp_path / "p.toml"), "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "c")],
                     capsys)  # fmt: skip
    assert rc == 0, err
    (rec,) = json.loads((tmp_path / "out" / "results.json").read_text())["records"]
    argv = ["eval", str(tiny / "ck"), "--episodes", "1", "--tasks", "2", "--dir", str(tiny / "data"), "--variants",
            "base", "--json", str(tmp_path / "e.json")]  # fmt: skip
    rc, out, err = run(argv, capsys)
    assert rc == 0, err
    mine = json.loads((tmp_path / "e.json").read_text())["variants"]["base"]
    assert mine["eval_key"] == rec["eval_key"] and mine["schema"] == rec["schema"] == SCHEMA
    assert set(mine) == set(rec) and (mine["success"], mine["steps"]) == (rec["success"], rec["steps"])
    assert "base: gcbc on " in out and "per seed:" in out
    rc, out, err = run(argv, capsys)
    assert rc == 0 and "base: kept from" in out, err
