"""benchmarks/gpu_queue.sh (issue 38): its CPU dry run runs every step of the queue with tiny sizes in a scratch
directory and records each in queue.json; a broken step, a broken benchmark it calls or a broken pipeline fails
here. Its figures are not checked (tiny sizes on a CPU say nothing); that every step ran and wrote its file is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_queue.sh"


def _run(*args: str, tmp: Path | None = None, **extra_env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT), **extra_env}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)  # fmt: skip


def test_usage_and_plan():
    bad = _run("ten")
    assert bad.returncode == 2 and "usage:" in bad.stderr
    plan = _run("--plan")
    assert plan.returncode == 0, plan.stderr
    assert [ln.split(":")[0] for ln in plan.stdout.splitlines()] == ["updates", "episode", "batched", "table1"]
    only = _run("--plan", GPU_QUEUE_ONLY="table1")  # a new kind of card: Table 1 alone
    assert only.returncode == 0, only.stderr
    assert [ln.split(":")[0] for ln in only.stdout.splitlines()] == ["table1"]
    wrong = _run("--plan", GPU_QUEUE_ONLY="table1 speed")
    assert wrong.returncode == 2 and "unknown step speed" in wrong.stderr and "valid: updates" in wrong.stderr


@pytest.mark.slow
def test_dry_run_runs_every_step(tmp_path):
    p = _run("--dry-run", str(tmp_path))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "queue: complete" in p.stdout, p.stdout[-3000:]
    res = tmp_path / "results" / "gpu" / "cpu-dry-run"
    queue = json.loads((res / "queue.json").read_text())
    assert {k: v["state"] for k, v in queue["steps"].items()} == {"updates": "done", "episode": "done",
                                                                    "batched": "done", "table1": "done"}  # fmt: skip
    upd = json.loads((res / "update_flops.json").read_text())
    assert upd["timed_here"] and upd["peak_gflops"] > 0
    assert [r["job"] for r in upd["rows"]] == ["gcbc-cpu"] and upd["rows"][0]["measured_ms"] > 0
    ep = json.loads((res / "paper_episode.json").read_text())
    assert ep["batch"] == 5 and ep["episode_s"] > 0 and ep["bucket"] == 1
    batched = json.loads((res / "paper_episode_batched.json").read_text())
    assert batched["batch"] == 5 and batched["bucket"] is None and batched["steps"] == ep["steps"]
    rows = json.loads((res / "table1" / "results.json").read_text())["rows"]
    assert {r["name"] for r in rows} == {"gcbc-base-navigate", "gcbc-ttt-navigate"}
    assert all(r["n_episodes"] == 1 for r in rows)
    ttgs = json.loads((res / "test-time-methods" / "results.json").read_text())["rows"]  # TTGS next (issue 41)
    assert [(r["name"], r["variant"], r["agent"], r["n_episodes"]) for r in ttgs] == [
        ("gciql-ttgs", "ttgs", "gciql", 1)]
    ant = json.loads((res / "table1-antmaze" / "results.json").read_text())["rows"]  # SAW on antmaze, after them
    assert [(r["name"], r["dataset"], r["agent"], r["n_episodes"]) for r in ant] == [
        ("saw-base-navigate", "antmaze-medium-navigate-v0", "saw", 1)]
    assert list((res / "pretrain").glob("*.json")), "no pre-training record (updates/s) was copied"
    meta = json.loads(next((res / "pretrain").glob("*.json")).read_text())
    assert meta["updates_per_s"] > 0
    # A second call finds every step done and runs none again.
    again = _run("--dry-run", str(tmp_path))
    assert again.returncode == 0 and again.stdout.count("done before") == 4, again.stdout[-2000:]
    # A table1 step left partial (a lease that ran out) skips the row groups whose records exist, before any
    # pre-training (a fresh device machine has no checkpoints).
    queue["steps"]["table1"]["state"] = "partial"
    (res / "queue.json").write_text(json.dumps(queue))
    third = _run("--dry-run", str(tmp_path))
    assert third.returncode == 0 and "queue: complete" in third.stdout, third.stdout[-2000:]
    assert "table1 rows gcbc-base-navigate done before" in third.stdout, third.stdout[-2000:]
    assert "table1 rows gcbc-ttt-navigate done before" in third.stdout and "pretrain" not in third.stdout
    assert "test-time-methods rows gciql-ttgs done before" in third.stdout, third.stdout[-2000:]
    assert "table1-antmaze rows saw-base-navigate done before" in third.stdout, third.stdout[-2000:]
    # Nothing was written into the repository's results.
    assert not (ROOT / "benchmarks" / "results" / "gpu" / "cpu-dry-run").exists()


def test_wheels_pack_and_unpack_round_trip(tmp_path):
    """benchmarks/gpu_wheels.py: a packed wheel comes back with the same members, order, bytes and file modes."""
    import zipfile

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_wheels

    src, dest = tmp_path / "whl", tmp_path / "out"
    src.mkdir()
    members = {"pkg/__init__.py": b"x = 1\n", "pkg/bin/tool": b"#!/bin/sh\n", "pkg-1.0.dist-info/RECORD": b"r" * 500}
    for name in ("pkg-1.0-py3-none-any.whl", "other-2.0-py3-none-any.whl"):
        with zipfile.ZipFile(src / name, "w", zipfile.ZIP_DEFLATED) as z:
            for m, data in members.items():
                info = zipfile.ZipInfo(m)
                info.external_attr = (0o755 if m.endswith("tool") else 0o644) << 16
                z.writestr(info, data)
    archive = tmp_path / "x" / "wheels.tar.xz"
    assert gpu_wheels.pack(src, archive) == 2
    assert gpu_wheels.unpack(archive, dest) == 2
    for w in src.glob("*.whl"):
        with zipfile.ZipFile(w) as a, zipfile.ZipFile(dest / w.name) as b:
            assert a.namelist() == b.namelist()
            assert all(a.read(m) == b.read(m) for m in a.namelist())
            assert [i.external_attr >> 16 & 0o777 for i in a.infolist()] == [i.external_attr >> 16 & 0o777
                                                                             for i in b.infolist()]
    assert not list(dest.glob("*.tmp"))
    # --drop: the matching members and their RECORD lines go; the rest stays as it was.
    record = b"pkg/__init__.py,sha256=a,6\npkg/bin/tool,sha256=b,10\npkg-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(src / "rec-1.0-py3-none-any.whl", "w") as z:
        z.writestr("pkg/__init__.py", b"x = 1\n")
        z.writestr("pkg/bin/tool", b"#!/bin/sh\n")
        z.writestr("pkg-1.0.dist-info/RECORD", record)
    assert gpu_wheels.main(["pack", str(src), str(archive), "--drop", "pkg/bin/*"]) == 0
    assert gpu_wheels.unpack(archive, dest) == 3
    with zipfile.ZipFile(dest / "rec-1.0-py3-none-any.whl") as z:
        assert z.namelist() == ["pkg/__init__.py", "pkg-1.0.dist-info/RECORD"]
        assert z.read("pkg-1.0.dist-info/RECORD") == b"pkg/__init__.py,sha256=a,6\npkg-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(dest / "pkg-1.0-py3-none-any.whl") as z:
        assert "pkg/bin/tool" not in z.namelist() and z.read("pkg-1.0.dist-info/RECORD") == b"r" * 500
    before = archive.read_bytes()
    with pytest.raises(SystemExit, match="^gpu_wheels: --drop pkg/nothing/\\* matches no member"):
        gpu_wheels.main(["pack", str(src), str(archive), "--drop", "pkg/bin/*", "--drop", "pkg/nothing/*"])
    assert archive.read_bytes() == before and not list(archive.parent.glob("*.tmp"))  # nothing half-written
    with pytest.raises(SystemExit, match="no \\*.whl"):
        gpu_wheels.pack(tmp_path / "empty", archive)
    with pytest.raises(SystemExit, match="does not exist"):
        gpu_wheels.unpack(tmp_path / "missing.tar.xz", dest)
    bad = tmp_path / "bad.tar.xz"
    bad.write_bytes(b"not an archive")
    with pytest.raises(SystemExit, match="^gpu_wheels: unpack failed: ReadError"):
        gpu_wheels.main(["unpack", str(bad), str(dest)])
    (src / "broken-1.0-py3-none-any.whl").write_bytes(b"not a zip")
    with pytest.raises(SystemExit, match="^gpu_wheels: pack failed: BadZipFile"):
        gpu_wheels.main(["pack", str(src), str(archive)])
    assert not archive.with_name(archive.name + ".tmp").exists()  # the failed pack left no partial file


def test_warm_machine_queue_json_merge(tmp_path, monkeypatch):
    """On a warm machine the queue.json an earlier call kept merges into the tree's: per step the later `updated`
    wins, steps only one side has are kept, and the file is rewritten in place; an unreadable file is one line."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from gpu_queue_merge import main

    kept = {"device": "H100", "steps": {"table1": {"state": "partial", "seconds": 820, "updated": "2026-11-27T10:05Z"},
                                        "episode": {"state": "done", "seconds": 90, "updated": "2026-11-20T09:00Z"}}}
    tree = {"device": "H100", "steps": {"table1": {"state": "partial", "seconds": 541, "updated": "2026-11-27T09:50Z"},
                                        "episode": {"state": "done", "seconds": 95, "updated": "2026-11-21T09:00Z"},
                                        "updates": {"state": "done", "seconds": 60, "updated": "2026-11-19T09:00Z"}}}
    (tmp_path / "kept.json").write_text(json.dumps(kept))
    (tmp_path / "tree.json").write_text(json.dumps(tree))
    main(str(tmp_path / "kept.json"), str(tmp_path / "tree.json"))
    got = json.loads((tmp_path / "tree.json").read_text())["steps"]
    assert got["table1"]["seconds"] == 820  # the device's newer entry, not the committed one
    assert got["episode"]["seconds"] == 95 and got["updates"]["seconds"] == 60
    main(str(tmp_path / "kept.json"), str(tmp_path / "new.json"))  # no queue.json in the tree: the kept one
    assert json.loads((tmp_path / "new.json").read_text())["steps"] == kept["steps"]
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(SystemExit, match="^gpu_queue_merge: cannot read .*bad.json"):
        main(str(tmp_path / "bad.json"), str(tmp_path / "tree.json"))
    assert json.loads((tmp_path / "tree.json").read_text())["steps"]["table1"]["seconds"] == 820  # left as it was
