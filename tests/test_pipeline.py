"""A miniature pipeline end to end through `ttt run`: data generated, agents pre-trained, base / critic-free /
critic GC-TTT evaluated, results, report and plots written; then caching (nothing recomputed), resuming an
evaluation from its finished tasks, `ttt report` rebuilding, and the stage that would produce a missing artifact."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import run

PIPE = """
name = "mini"
description = "a miniature pipeline for the tests"
[defaults]
dataset = "pointmaze-medium-stitch-v0"
data_episodes = 6
agent = "gcbc"
agent_config = { actor_hidden_dims = [16, 16], value_hidden_dims = [16, 16], batch_size = 16 }
steps = 30
train_chunk = 15
seeds = 2
episodes = 1
tasks = [1, 2]
K = 500
N = 3
lr = 1e-3
eps = 3.0
h_min = 3
[[run]]
name = "base"
variant = "base"
paper = 0.30
paper_ref = "Table 1"
[[run]]
name = "mc"
variant = "ttt-mc"
q = 0.5
figure = true
[[run]]
name = "critic"
variant = "ttt"
"""



@pytest.mark.slow
def test_mini_pipeline_end_to_end(tmp_path, capsys):
    pipe = tmp_path / "mini.toml"
    pipe.write_text(PIPE)
    out, cache = tmp_path / "out", tmp_path / "cache"
    args = ["run", str(pipe), "--out", str(out), "--cache", str(cache)]

    # Stages that may not produce a missing artifact name the stage that would.
    rc, _, err = run([*args, "--stages", "eval"], capsys)
    assert rc == 2 and "is missing from" in err and "the 'data' stage produces it" in err and "Traceback" not in err
    rc, _, err = run([*args, "--stages", "data,eval"], capsys)
    assert rc == 2 and "no checkpoint of gcbc" in err and "the 'pretrain' stage produces it" in err

    rc, stdout, err = run(args, capsys)
    assert rc == 0, err
    assert "pretrain: gcbc" in stdout and stdout.count("eval: ") == 3
    assert "| critic | pointmaze-medium-stitch | gcbc | ttt |" in stdout  # the table is printed
    doc = json.loads((out / "results.json").read_text())
    rows = {r["name"]: r for r in doc["rows"]}
    assert set(rows) == {"base", "mc", "critic"}
    for r in rows.values():
        assert r["seeds"] == 2 and r["n_episodes"] == 4 and 0 <= r["mean"] <= 1
    assert rows["mc"]["base"] == "base" and rows["critic"]["base"] == "base"
    recs = {r["run"]["name"]: r for r in doc["records"]}
    assert recs["critic"]["run"]["K"] == 500 and len(recs["critic"]["rounds"]["n_selected"][0][0][0]) == 2
    assert max(x for s in recs["critic"]["rounds"]["n_selected"] for t in s for e in t for x in e) > 0
    # records name the checkpoint by its cache key (no machine path) and carry its state's and its data's digests
    ref = recs["base"]["checkpoint"]
    assert not Path(ref).is_absolute() and ref.startswith("pointmaze-medium-stitch-v0/gcbc-")
    ckpt_meta = json.loads((cache / "ckpt" / ref / "meta.json").read_text())
    assert {r["checkpoint_sha256"] for r in recs.values()} == {ckpt_meta["state_sha256"]}  # one checkpoint, by content
    assert {r["dataset_hash"] for r in recs.values()} == {ckpt_meta["dataset_hash"]}
    assert all(r["compute"]["device"] == "cpu" and r["compute"]["cpus"] >= 1 for r in recs.values())  # what ran it
    assert ckpt_meta["compute"][0]["from_step"] == 0
    header = (out / "results.csv").read_text().splitlines()[0]
    assert header.startswith("name,group,dataset,agent,variant") and ",t,p,test," in header
    report = (out / "report.md").read_text()
    assert "| base | pointmaze-medium-stitch | gcbc | base |" in report and "vs base: t, p" in report
    assert (out / "plots" / "bars-main.png").stat().st_size > 1000
    assert (out / "plots" / "selection-mc.png").stat().st_size > 1000
    assert "equal to what the episode recorded" in report  # the figure's selections are the episode's own
    traj = np.load(out / "trajectories" / "critic.npz")  # xy paths and each episode's last observation
    assert traj["xy"].shape[:3] == traj["final_obs"].shape[:3] == (2, 2, 1)  # seeds, tasks, episodes
    np.testing.assert_allclose(traj["final_obs"][..., :2], traj["xy"][..., -1, :], rtol=1e-3, atol=1e-3)

    # Everything cached: a rerun trains and evaluates nothing and gives the same results.
    ckpts = list((cache / "ckpt").rglob("state-*.eqx"))
    mtimes = {p: p.stat().st_mtime_ns for p in ckpts}
    rc, stdout, err = run(args, capsys)
    assert rc == 0, err
    assert not _fresh(stdout, "pretrain") and not _fresh(stdout, "eval") and "data:" not in stdout
    assert len([ln for ln in stdout.splitlines() if "from the cache" in ln]) >= 3  # said per row
    assert {p: p.stat().st_mtime_ns for p in ckpts} == mtimes
    assert json.loads((out / "results.json").read_text())["rows"] == doc["rows"]

    # An interrupted evaluation resumes from its finished tasks: drop the record, keep one task's part.
    rec = next((out / "evals").glob("critic-*.json"))
    part = out / "evals" / f".partial-{rec.stem.rsplit('-', 1)[1]}"
    (part / "task2.npz").unlink()
    rec.unlink()
    (cache / "evals" / f"{rec.stem.rsplit('-', 1)[1]}.json").unlink()  # nor was it cached
    rc, stdout, err = run(args, capsys)
    assert rc == 0, err
    worked = _fresh(stdout, "eval")
    assert worked and all(ln.strip().split()[1].rstrip(":") == "critic" for ln in worked), stdout
    again = {r["name"]: r for r in json.loads((out / "results.json").read_text())["rows"]}
    assert again["critic"]["per_seed"] == rows["critic"]["per_seed"]

    # A changed evaluation setting is a new evaluation on the same checkpoint (the seed: the same programs run).
    rc, stdout, err = run([*args, "--set", "eval_seed=1"], capsys)
    assert rc == 0, err
    assert not _fresh(stdout, "pretrain") and len(_fresh(stdout, "eval")) == 3
    reseeded = json.loads((out / "results.json").read_text())
    assert {r["run"]["eval_seed"] for r in reseeded["records"]} == {1}
    assert [r["n_episodes"] for r in reseeded["rows"]] == [4, 4, 4]

    # `ttt report` rebuilds the report from the saved results alone.
    (out / "report.md").unlink()
    rc, stdout, err = run(["report", str(out)], capsys)
    assert rc == 0 and (out / "report.md").exists(), err
    rc, _, err = run(["report", str(out), str(out)], capsys)
    assert rc == 2 and "give --out DIR" in err
    rc, _, err = run(["report", str(out), str(out), "--out", str(tmp_path / "both")], capsys)
    assert rc == 0 and len(json.loads((tmp_path / "both" / "results.json").read_text())["rows"]) == 6, err


def _fresh(stdout: str, stage: str) -> list[str]:
    """The lines of `stage` (pretrain, eval) that did work: not the per-row "from the cache" notes."""
    return [ln for ln in stdout.splitlines() if ln.strip().startswith(f"{stage}:") and "from the cache" not in ln]
