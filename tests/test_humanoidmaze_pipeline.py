"""Table 1's humanoidmaze rows, ready to run where the data exist: the presets resolve OGBench's and the authors'
humanoidmaze settings (each value asserted against the source ttt/presets.py cites), the pipeline
`pipelines/table1-humanoidmaze.toml` holds the paper's rows and dry-runs, the study page declares them as not run
beside the paper's figures, and a tiny one-row pipeline runs end to end on humanoidmaze data generated in the test (an
untrained expert, via the `expert` key)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import jax
import pytest
from helpers import run

from ttt.data.specs import get_spec
from ttt.pipeline.config import find_pipeline, load_pipeline
from ttt.presets import GIANT_DISCOUNT, make_configs

ROOT = Path(__file__).resolve().parents[1]
HUMANOID = [f"humanoidmaze-{m}-{k}-v0" for m in ("medium", "large", "giant") for k in ("navigate", "stitch")]

# The paper's Table 1, humanoidmaze columns ("expert" = navigate, "play" = stitch), as printed: (base, s.e.,
# critic-free, s.e., critic, s.e.); critic-free only on navigate.
PAPER = {
    ("gcbc", "navigate"): (0.07, 0.02, 0.15, 0.02, 0.21, 0.01),
    ("gcbc", "stitch"): (0.33, 0.01, None, None, 0.68, 0.03),
    ("gciql", "navigate"): (0.32, 0.03, 0.40, 0.02, 0.56, 0.03),
    ("gciql", "stitch"): (0.10, 0.02, None, None, 0.49, 0.03),
    ("saw", "navigate"): (0.85, 0.03, 0.87, 0.04, 0.92, 0.03),
    ("saw", "stitch"): (0.78, 0.02, None, None, 0.84, 0.01),
}
# The paper's hyper-parameter table (tab:hyperparams), humanoidmaze columns: (lr, N, K) per (agent, variant, data).
TUNED = {
    ("gcbc", "ttt-mc", "navigate"): (3e-4, 100, 100),
    ("gcbc", "ttt", "navigate"): (3e-4, 200, 200),
    ("gcbc", "ttt", "stitch"): (3e-4, 50, 100),
    ("gciql", "ttt-mc", "navigate"): (3e-5, 200, 100),
    ("gciql", "ttt", "navigate"): (3e-4, 50, 200),
    ("gciql", "ttt", "stitch"): (3e-5, 100, 100),
    ("saw", "ttt-mc", "navigate"): (3e-5, 100, 200),
    ("saw", "ttt", "navigate"): (3e-4, 50, 100),
    ("saw", "ttt", "stitch"): (3e-5, 100, 100),
}


@pytest.mark.parametrize("dataset", HUMANOID)
def test_humanoidmaze_presets_are_ogbench_and_the_authors(dataset):
    """OGBench impls/hyperparameters.sh, every humanoidmaze line: GCIQL `--agent.alpha=0.1 --agent.discount=0.995`,
    QRL `--agent.alpha=0.001 --agent.discount=0.995`, GCIVL (GC-BC's critic) `--agent.discount=0.995`, stitch actor
    goals 0.5 trajectory / 0.5 random for all but GCBC. SAW (its authors' commands; the GC-TTT authors' grids/saw.yaml):
    discount 0.995, subgoal_steps 100, expectile 0.7, kl_alpha 3.0."""
    spec = get_spec(dataset)
    stitch = spec.kind == "stitch"
    gciql, s_iql = make_configs("gciql", spec, "cpu")
    assert (gciql.alpha, gciql.discount, gciql.actor_loss, s_iql.discount) == (0.1, 0.995, "ddpgbc", 0.995)
    assert (s_iql.actor.p_traj, s_iql.actor.p_rand) == ((0.5, 0.5) if stitch else (1.0, 0.0))
    qrl, _ = make_configs("qrl", spec, "cpu")
    assert (qrl.alpha, qrl.discount) == (0.001, 0.995)
    saw, s_saw = make_configs("saw", spec, "cpu")
    assert (saw.discount, saw.subgoal_steps, saw.expectile, saw.kl_alpha) == (0.995, 100, 0.7, 3.0)
    assert s_saw.discount == 0.995
    gcbc, s_bc = make_configs("gcbc", spec, "cpu")
    assert gcbc.with_critic and gcbc.discount == s_bc.discount == GIANT_DISCOUNT == 0.995
    assert (s_bc.actor.p_traj, s_bc.actor.p_rand) == (1.0, 0.0)  # OGBench's GCBC lines: no actor goal mix
    awr, _ = make_configs("gciql-awr", spec, "cpu")
    assert (awr.alpha, awr.discount) == (10.0, 0.995)  # AWR keeps its own alpha
    assert make_configs("gcbc", spec, "cpu", {"discount": 0.99})[0].discount == 0.99  # the user's value wins


def test_other_families_keep_their_settings():
    ant = get_spec("antmaze-medium-navigate-v0")
    assert [make_configs(a, ant, "cpu")[0].discount for a in ("gcbc", "gciql", "saw", "qrl")] == [0.99] * 4
    assert make_configs("gciql", ant, "cpu")[0].alpha == 0.3 and make_configs("saw", ant, "cpu")[0].subgoal_steps == 25
    assert make_configs("gciql", get_spec("pointmaze-medium-navigate-v0"), "cpu")[0].alpha == 0.003


def test_table1_humanoidmaze_pipeline_holds_the_papers_rows(capsys):
    runs = {r["name"]: r for r in load_pipeline(find_pipeline("table1-humanoidmaze")).runs}
    want = {f"{a}-{v}-{k}" for (a, k) in PAPER for v in ("base", "ttt")}
    want |= {f"{a}-ttt-mc-navigate" for a in ("gcbc", "gciql", "saw")}
    assert set(runs) == want
    for name, r in runs.items():
        a, k = r["agent"], r["dataset"].split("-")[2]
        assert name.startswith(f"{a}-{r['variant']}-") and r["dataset"] == f"humanoidmaze-medium-{k}-v0"
        assert (r["profile"], r["steps"], r["seeds"], r["episodes"]) == ("cpu", 100000, 3, 10)
        assert r["tasks"] == [1, 2, 3, 4, 5]
        assert (r["q"], r["eps"], r["expert"], r["data_episodes"]) == (0.05, None, None, None)  # OGBench's full size
        base, bse, free, fse, critic, cse = PAPER[a, k]
        paper = {"base": (base, bse), "ttt-mc": (free, fse), "ttt": (critic, cse)}[r["variant"]]
        assert (r["paper"], r["paper_se"], r["paper_ref"]) == (*paper, "Table 1")
        if r["variant"] != "base":
            assert (r["lr"], r["N"], r["K"]) == TUNED[a, r["variant"], k], name
    rc, out, err = run(["run", "table1-humanoidmaze", "--dry-run"], capsys)
    assert rc == 0, err
    listed = [ln.split(":")[0].strip() for ln in out.splitlines()[1:] if ln.strip()]
    assert sorted(listed) == sorted(want)


def test_table1_study_declares_the_humanoidmaze_lines_not_run_with_the_papers_figures():
    """Each humanoidmaze line of the Table 1 declaration carries the paper's base -> critic (the pipeline's figures)
    and no record yet; the page shows them as not run yet."""
    decl = tomllib.loads((ROOT / "benchmarks" / "studies" / "table1.toml").read_text())
    assert "table1-humanoidmaze" in decl["pipelines"]
    lines = [ln for ln in decl["lines"] if ln["env"] == "humanoidmaze-medium"]
    label = {"gcbc": "GC-BC", "gciql": "GC-IQL", "saw": "SAW"}
    assert {(ln["backbone"], ln["data"]) for ln in lines} == {(label[a], k) for a, k in PAPER}
    for ln in lines:
        a = next(a for a, lab in label.items() if lab == ln["backbone"])
        base, bse, _, _, critic, cse = PAPER[a, ln["data"]]
        assert ln["paper"] == [base, bse, critic, cse]
        assert ln["base"] == ln["critic"] == "" and ln.get("free", "") == ""
        assert ("free" in ln) == (ln["data"] == "navigate")
    page = (ROOT / "benchmarks" / "studies" / "table1.md").read_text()
    rows = [r for r in page.splitlines() if r.startswith("| humanoidmaze-medium |")]
    assert len(rows) == len(PAPER) and all("not run yet" in r for r in rows)
    assert "| humanoidmaze-medium | navigate | SAW | 100k | - | not run yet | not run yet | not run yet |" in page
    assert "0.85 +- 0.03 → 0.92 +- 0.03" in page


def test_lines_not_run_yet_render_as_such_and_are_listed_by_environment():
    """A line whose records are "" is "not run yet" in every cell, has no verdict, and the tally lists the lines not run
    in a paragraph of their own, by environment and dataset (the front page's lines stay short)."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from reporting import table1

    def line(env, data, backbone, free=None):
        ln = dict(env=env, data=data, backbone=backbone, updates="100k", paper=[0.07, 0.02, 0.21, 0.01], base="",
                  critic="")  # fmt: skip
        return ln if free is None else {**ln, "free": free}

    decl = {"lines": [line("humanoidmaze-medium", "navigate", "GC-BC", free=""),
                      line("humanoidmaze-medium", "navigate", "SAW", free=""),
                      line("humanoidmaze-medium", "stitch", "GC-IQL")]}  # fmt: skip
    rows = table1.full(decl).splitlines()[2:]
    assert rows[0] == ("| humanoidmaze-medium | navigate | GC-BC | 100k | - | not run yet | not run yet | "
                       "not run yet | - | - | 0.07 +- 0.02 → 0.21 +- 0.01 | - | - |")  # fmt: skip
    assert "| not run yet | - | not run yet |" in rows[2]  # no critic-free column on stitch
    assert table1.tally(decl) == ("Lines by verdict: .\n\nNot run yet: humanoidmaze-medium navigate (GC-BC / SAW); "
                                  "humanoidmaze-medium stitch (GC-IQL).")  # fmt: skip
    assert "0.07 → 0.21 | - |" in table1.front(decl) and table1.commands(decl) == ""


TINY = """
name = "humanoid-mini"
description = "one humanoidmaze row, tiny"
[defaults]
dataset = "humanoidmaze-medium-stitch-v0"
data_episodes = 2
expert = "{expert}"
agent = "gciql"
agent_config = {{ actor_hidden_dims = [16], value_hidden_dims = [16], batch_size = 16 }}
steps = 4
train_chunk = 2
seeds = 1
episodes = 1
tasks = [1]
driver = "compiled"
[[run]]
name = "gciql-ttt-stitch"
variant = "ttt"
K = 1000
N = 2
lr = 1e-3
h_min = 3
"""


@pytest.mark.slow
def test_a_tiny_humanoidmaze_row_runs_end_to_end(tmp_path, capsys):
    """`ttt run` of one GC-IQL GC-TTT row: the data stage generates a 2-episode humanoidmaze-medium stitch dataset with
    an untrained humanoid expert (the `expert` key), pre-trains with the humanoidmaze presets (alpha 0.1, discount
    0.995), and evaluates one full episode on the compiled driver, writing a record."""
    from ttt.data.expert import save_actor
    from ttt.data.sac import SACConfig, TanhGaussianActor

    actor = TanhGaussianActor(jax.random.key(0), 69, 21, (16,), final_init_scale=1.0)
    save_actor(tmp_path / "h.npz", actor, SACConfig(actor_hidden_dims=(16,)), dict(step=0), robot="humanoid")
    pipe = tmp_path / "mini.toml"
    pipe.write_text(TINY.format(expert=(tmp_path / "h.npz").as_posix()))
    out, cache = tmp_path / "out", tmp_path / "cache"
    rc, stdout, err = run(["run", str(pipe), "--out", str(out), "--cache", str(cache)], capsys)
    assert rc == 0, err
    assert "data: generating" in stdout and "pretrain: gciql" in stdout
    recs = list((out / "evals").glob("gciql-ttt-stitch-*.json"))
    assert len(recs) == 1
    rec = json.loads(recs[0].read_text())
    assert rec["run"]["dataset"] == "humanoidmaze-medium-stitch-v0" and rec["driver"] == "compiled"
    assert len(rec["success"]) == 1 and len(rec["success"][0]) == 1 and len(rec["success"][0][0]) == 1
    assert rec["steps"][0][0][0] == 2000  # one full humanoidmaze-medium episode (an untrained agent never arrives)
    meta = json.loads((cache / "ckpt" / rec["checkpoint"] / "meta.json").read_text())
    text = json.dumps(meta)
    assert '"alpha": 0.1' in text and '"discount": 0.995' in text, text[:2000]
