"""benchmarks/published/adapter.py's recovery of a lost episode log: a row's record gives its episodes back only when
they provably ran on this machine's checkpoints (same digests), or when told to after a check by hand."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("published_adapter", ROOT / "benchmarks" / "published" / "adapter.py")
adapter = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(adapter)  # stdlib at import time: their packages are imported inside functions


def _ep(seed, task, ep, success=1.0):
    return {"seed": seed, "task": task, "episode": ep, "success": success, "steps": 100, "wall_s": 1.0}


def _record(path: Path, episodes, digests):
    pre = [{"seed": s, "steps": 10, **({"params_sha256": d} if d else {})} for s, d in digests.items()]
    path.write_text(json.dumps({"episodes_run": episodes, "pretrain": pre}))
    return path


def test_digest_is_of_the_bytes(tmp_path):
    a, b, c = tmp_path / "a.pkl", tmp_path / "b.pkl", tmp_path / "c.pkl"
    a.write_bytes(b"params")
    b.write_bytes(b"params")
    c.write_bytes(b"paramz")
    assert adapter.digest(a) == adapter.digest(b) != adapter.digest(c)
    assert adapter.digest(a) == hashlib.sha256(b"params").hexdigest()


def test_no_record_nothing_to_adopt(tmp_path):
    assert adapter.adopt([], tmp_path / "none.json", [], [0], [1], 3, False) == ([], None)


def test_same_digests_adopt_only_what_the_log_lacks(tmp_path):
    eps = [_ep(0, 1, 0), _ep(0, 2, 0, 0.0), _ep(1, 1, 0), _ep(0, 1, 1), _ep(0, 1, 5), _ep(2, 1, 0), _ep(0, 9, 0)]
    rec = _record(tmp_path / "r.json", eps, {0: "aa", 1: "bb", 2: "cc"})
    pre = [{"seed": 0, "params_sha256": "aa"}, {"seed": 1, "params_sha256": "bb"}]
    done = [_ep(0, 1, 0)]
    extra, err = adapter.adopt(done, rec, pre, seeds=[0, 1], tasks=[1, 2], episodes=3, force=False)
    assert err is None
    # not (0,1,0): in the log; not episode 5 (>= 3), seed 2 or task 9: outside the row asked for
    assert sorted((d["seed"], d["task"], d["episode"]) for d in extra) == [(0, 1, 1), (0, 2, 0), (1, 1, 0)]


def test_missing_or_different_digests_refuse_unless_forced(tmp_path):
    eps = [_ep(0, 1, 0), _ep(1, 1, 0)]
    pre = [{"seed": 0, "params_sha256": "aa"}, {"seed": 1, "params_sha256": "bb"}]
    old = _record(tmp_path / "old.json", eps, {0: None, 1: None})  # made before digests were recorded
    extra, err = adapter.adopt([], old, pre, [0, 1], [1], 3, False)
    assert extra == [] and "digests the record does not hold" in err and "--adopt-record" in err
    other = _record(tmp_path / "other.json", eps, {0: "aa", 1: "zz"})  # seed 1 retrained differently
    extra, err = adapter.adopt([], other, pre, [0, 1], [1], 3, False)
    assert extra == [] and "other than this machine's" in err
    # only the seeds whose episodes are missing must match: seed 1's episode already in the log
    extra, err = adapter.adopt([_ep(1, 1, 0)], other, pre, [0, 1], [1], 3, False)
    assert err is None and [(d["seed"], d["task"]) for d in extra] == [(0, 1)]
    extra, err = adapter.adopt([], old, pre, [0, 1], [1], 3, True)
    assert err is None and len(extra) == 2


def test_pieces_by_hand(tmp_path):
    cfg = {"seed": 3, "train_steps": 250, "working_dir": str(tmp_path / "seed3"), "save_interval": 250}
    pieces = tmp_path / "seed3" / "pieces"
    got = [adapter.piece_cfg(cfg, pieces, k, 100) for k in (1, 2, 3)]
    assert [c["train_steps"] for c in got] == [100, 100, 50]
    assert [c["save_interval"] for c in got] == [100, 100, 50]
    assert [c["seed"] for c in got] == [3, 100_003, 200_003]  # fresh batches in every piece, none of another seed's
    assert [c["restore_path"] for c in got] == [None, str(pieces / "piece001"), str(pieces / "piece002")]
    assert [c["restore_epoch"] for c in got] == [None, 100, 100]
    assert got[2]["working_dir"] == str(pieces / "piece003") and cfg["train_steps"] == 250  # (cfg left as it was)


def test_a_cut_pretraining_resumes_at_its_piece(tmp_path, monkeypatch):
    runs = []

    def fake_main(code, c, log_path, mode="w"):  # their main.py: writes params_<its updates>.pkl
        runs.append((Path(c["working_dir"]).name, c["restore_path"] and Path(c["restore_path"]).name))
        Path(c["working_dir"]).mkdir(parents=True, exist_ok=True)
        (Path(c["working_dir"]) / f"params_{c['train_steps']}.pkl").write_bytes(c["working_dir"].encode())
        return 2.0

    monkeypatch.setattr(adapter, "run_main", fake_main)
    work = tmp_path / "seed0"
    cfg = {"seed": 0, "train_steps": 300, "working_dir": str(work)}
    (work / "pieces" / "piece001").mkdir(parents=True)  # piece 1 finished before a stop ...
    (work / "pieces" / "piece001" / "params_100.pkl").write_bytes(b"1")
    (work / "pieces" / "piece001" / "piece.json").write_text(json.dumps({"wall_s": 5.0}))
    (work / "pieces" / "piece002").mkdir()  # ... piece 2 was cut short: no piece.json
    (work / "pieces" / "piece002" / "stale").write_text("x")
    meta = adapter.pretrain(tmp_path, cfg, tmp_path / "log", chunk=100)
    assert runs == [("piece002", "piece001"), ("piece003", "piece002")]
    assert not (work / "pieces" / "piece002" / "stale").exists()  # the cut piece started again
    assert (work / "params_300.pkl").read_bytes() == str(work / "pieces" / "piece003").encode()  # the last piece's
    assert meta["chunk"] == 100 and meta["pieces"] == 3 and meta["wall_s"] == 9.0 and meta["steps"] == 300
    assert meta["params_sha256"] == adapter.digest(work / "params_300.pkl")
    assert adapter.pretrain(tmp_path, cfg, tmp_path / "log", chunk=100) == meta and len(runs) == 2  # done: reused


def _speed_pair():
    spec = importlib.util.spec_from_file_location("speed_pair", ROOT / "benchmarks" / "published" / "speed_pair.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_speed_pair_quotes_a_ratio_only_for_equal_work():
    """benchmarks/published/speed_pair.py: the median of the pairs' ratios, and none when an episode succeeded on
    either side (it stopped early: less work than the other side's 10 rounds)."""
    sp = _speed_pair()

    def pair(ratio, inner, pub=(0.0,), ours=(0.0, 0.0, 0.0)):
        return dict(published=dict(success=list(pub)), ttt=dict(success=list(ours)), ratio_wall_per_episode=ratio,
                    ratio_episode_s=inner)  # fmt: skip

    s = sp.summarise([pair(2.0, 3.0), pair(4.0, 5.0), pair(2.5, 4.0)])
    assert s == dict(median_ratio_wall_per_episode=2.5, median_ratio_episode_s=4.0, equal_work=True, note=None)
    s = sp.summarise([pair(2.0, 3.0), pair(4.0, 5.0, ours=(0.0, 1.0, 0.0))])
    assert s["median_ratio_wall_per_episode"] is None and s["median_ratio_episode_s"] is None
    assert not s["equal_work"] and "unequal work" in s["note"]


def test_speed_pair_refuses_missing_inputs(tmp_path, capsys):
    import sys

    import pytest

    sp = _speed_pair()
    argv = ["speed_pair.py", "--published-root", str(tmp_path), "--ckpt", str(tmp_path / "ck")]
    for setup, want in [
        (lambda: None, "no meta-gc-rl/ checkout there"),
        (lambda: (tmp_path / "meta-gc-rl").mkdir(), "no published checkpoint"),
        (lambda: _touch(tmp_path / "runs/pointmaze-medium-stitch-v0/gciql-10000/seed0/params_10000.pkl"),
         "not a ttt checkpoint folder"),
    ]:
        setup()
        sys_argv, sys.argv = sys.argv, argv
        try:
            with pytest.raises(SystemExit) as e:
                sp.main()
        finally:
            sys.argv = sys_argv
        assert e.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("speed_pair: ") and want in err and "\n" not in err


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
