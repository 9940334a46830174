"""The pipeline report from saved records: rows keep every swept key, and a curve over pre-training steps draws."""

from __future__ import annotations

import pytest

from ttt.pipeline.report import curve_labels, paper_table_md, plot_curves, rows, settings_text


def _record(steps: int, variant: str, mean: float) -> dict:
    run = dict(name=f"c-steps{steps}-variant{variant}", group="GC-BC navigate", dataset="pointmaze-medium-navigate-v0",
               agent="gcbc", variant=variant, tasks=[1], episodes=2, eval_seed=0, steps=steps,
               grid=["steps", "variant"])  # fmt: skip
    return dict(run=run, checkpoint=f"ckpt-{steps}", profile="cpu", seeds=3, n_episodes=6, mean=mean, se=0.1,
                wall_s=1.0, per_seed=[mean - 0.1, mean, mean + 0.1])  # fmt: skip


def test_rows_keep_swept_keys_and_a_steps_curve_draws(tmp_path):
    pytest.importorskip("matplotlib")
    recs = [_record(s, v, m) for s, base in ((10_000, 0.3), (30_000, 0.2)) for v, m in (("base", base), ("ttt", 0.9))]
    rs = rows(recs)
    assert [r["steps"] for r in rs] == [10_000, 10_000, 30_000, 30_000]
    ttt = [r for r in rs if r["variant"] == "ttt"]
    assert [r["base_mean"] for r in ttt] == [0.3, 0.2]  # each paired with the base row of its own checkpoint
    path = tmp_path / "curve.png"
    plot_curves(rs, "steps", path, "success vs steps")
    assert path.stat().st_size > 1000


def test_curve_legend_names_the_variant_and_only_what_differs():
    recs = [_record(10_000, v, 0.5) for v in ("base", "ttt-mc", "ttt")]
    assert curve_labels(rows(recs), "steps") == ["base (no TTT)", "GC-TTT, critic-free", "GC-TTT, critic"]
    other = _record(10_000, "ttt", 0.5)
    other["run"].update(agent="gciql", lr=3e-5, grid=["steps", "variant", "lr"])
    labels = curve_labels(rows([recs[0], other]), "steps")
    assert labels == ["gcbc base (no TTT)", "gciql GC-TTT, critic (lr 3e-05)"]
    # Success against the variant itself: one line per pre-training length, across the variants.
    by_steps = rows([_record(s, v, 0.5) for s in (10_000, 30_000) for v in ("base", "ttt")])
    assert curve_labels(by_steps, "variant") == ["steps 10000", "steps 10000", "steps 30000", "steps 30000"]


def _write_record(d, rec: dict, key: str, n_episodes: int, written: int) -> None:
    """A record written at second `written` of a day; its file time says the opposite (file times must not count)."""
    import json
    import os

    rec = dict(rec, n_episodes=n_episodes, written=f"2026-11-28T00:{written // 60:02d}:{written % 60:02d}Z")
    p = d / f"{rec['run']['name']}-{key}.json"
    p.write_text(json.dumps(rec))
    os.utime(p, ns=(10**12 - written, 10**12 - written))


def test_report_from_evals_keeps_per_run_the_record_with_most_episodes_then_newest_written(tmp_path, capsys):
    """`ttt report DIR --from-evals`: results.json from every record in DIR/evals, whatever the last --only wrote."""
    import json

    from ttt.cli.app import main

    pytest.importorskip("matplotlib")
    ev = tmp_path / "evals"
    ev.mkdir()
    base, ttt = _record(10_000, "base", 0.3), _record(10_000, "ttt", 0.9)
    ttt["run"].update(lr=3e-4, N=100, K=100, q=0.05, mix=0.0)
    _write_record(ev, dict(base, mean=0.5), "a", 30, 3_000 % 3600)  # a 30-episode screen, newest
    _write_record(ev, base, "b", 150, 1_000 % 3600)  # the 150-episode row: kept
    _write_record(ev, dict(ttt, mean=0.7), "c", 150, 1_000 % 3600)
    _write_record(ev, ttt, "d", 150, 2_000 % 3600)  # same episodes, written later: kept
    (tmp_path / "results.json").write_text(json.dumps(dict(rows=[], records=[])))  # what an --only run left
    assert main(["report", str(tmp_path), "--from-evals"]) == 0
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "results.json").read_text())
    assert [(r["run"]["variant"], r["n_episodes"], r["mean"]) for r in doc["records"]] == [
        ("base", 150, 0.3),
        ("ttt", 150, 0.9),
    ]
    assert (tmp_path / "report.md").exists()
    assert "kept c-steps10000-variantbase-b.json (150 episodes)" in out


def test_report_from_evals_without_records_is_a_one_line_error(tmp_path, capsys):
    from ttt.cli.app import main

    assert main(["report", str(tmp_path), "--from-evals"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "no evaluation records" in err and "\n" not in err


def test_flops_figure_places_ttt_at_the_flops_of_the_matched_wider_policy(tmp_path):
    """Insight 5's figure: the paper's FLOP estimate puts 256x2 + TTT (N 100, K 1000) where a 324x2 policy sits."""
    from ttt.pipeline.report import episode_flops, flops_rows, plot_flops

    pytest.importorskip("matplotlib")
    ref = _record(10_000, "base", 0.3)
    ref["run"].update(name="ref", group="reference", grid=[])
    wide = []
    for w in (324, 512):
        rec = _record(10_000, "base", 0.3)
        rec["run"].update(name=f"wide-{w}", group="width", grid=[], agent_config={"actor_hidden_dims": [w, w]})
        rec["checkpoint"] = f"ckpt-wide-{w}"
        wide.append(rec)
    ttt = _record(10_000, "ttt-mc", 0.9)
    ttt["run"].update(name="ttt-K1000", group="width", grid=["K"], N=100, K=1000)
    rs = rows([ref, *wide, ttt])
    sub = [r for r in rs if r["group"] == "width"]
    fl = flops_rows(sub, rs)
    assert sorted(r["name"] for r in fl) == ["ref", "ttt-K1000", "wide-324", "wide-512"]  # its base row joins
    by = {r["name"]: episode_flops(r, 1000) for r in fl}
    assert by["ref"] == 1000 * 2 * 2 * 256**2
    assert abs(by["ttt-K1000"] / by["wide-324"] - 1) < 0.01  # 1.601 x 256^2 = 324^2 within 0.1%
    assert flops_rows([r for r in rs if r["group"] == "reference"], rs) is None  # one width, no TTT: no figure
    path = tmp_path / "flops.png"
    plot_flops(fl, 1000, path, "width")
    assert path.stat().st_size > 1000


def test_a_group_row_that_does_not_sweep_the_key_is_a_labelled_reference_line(tmp_path):
    """Value-based relevance: the reward-based row beside a sweep of C is drawn on C's curve, named by its run."""
    from ttt.pipeline.report import curve_refs

    pytest.importorskip("matplotlib")
    base = _record(10_000, "base", 0.1)
    base["run"].update(name="base", group="reference", grid=[])
    ref = _record(10_000, "ttt", 0.8)
    ref["run"].update(name="reward", group="relevance", grid=[])
    swept = []
    for c, m in ((-18.0, 0.87), (-5.0, 0.7)):
        rec = _record(10_000, "ttt", m)
        rec["run"].update(name=f"value-c_rel{c:g}", group="relevance", grid=["c_rel"], c_rel=c)
        swept.append(rec)
    rs = rows([base, ref, *swept])
    sub = [r for r in rs if r["group"] == "relevance"]
    refs = curve_refs(sub, "c_rel")
    assert [r["name"] for r in refs] == ["reward"]  # not the swept rows, not a base row
    labels = plot_curves([r for r in sub if "c_rel" in r["grid"]], "c_rel", tmp_path / "c.png", "C", refs=refs)
    assert labels == ["GC-TTT, critic", "base (no TTT)", "reward: 0.80 +- 0.10"]
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_results_json_has_readable_rows_and_one_line_per_record(tmp_path):
    """results.json: rows indented, each record (with its per-round diagnostics) on one line, NaN as null; it reads
    back to the same rows and records, and `load_results` accepts it."""
    import json
    import math

    from ttt.pipeline.report import load_results, write_results

    recs = [_record(10_000, v, m) for v, m in (("base", 0.3), ("ttt", 0.9))]
    recs[1]["rounds"] = dict(active=[[[[1], [1]]]], spearman=[[[[float("nan"), 0.5]]]])
    for r in recs:  # one seed a row: no test, p is NaN in the ttt row
        r["per_seed"] = [0.5]
    write_results(recs, tmp_path)
    text = (tmp_path / "results.json").read_text()
    lines = text.splitlines()
    record_lines = [ln for ln in lines if ln.startswith('{"run":')]
    assert len(record_lines) == 2 and all(json.loads(ln.rstrip(",")) for ln in record_lines)
    assert '\n   "name": "c-steps10000-variantbase",\n' in text  # the rows stay one key per line
    doc = load_results(tmp_path)
    assert "NaN" not in text  # strict JSON: NaN written as null, in rows and records alike
    assert math.isnan(rows(recs)[1]["p"]) and doc["rows"][1]["p"] is None
    assert doc["rows"] == json.loads(json.dumps(rows(recs)).replace("NaN", "null"))
    assert doc["records"][1]["rounds"]["spearman"] == [[[[None, 0.5]]]]
    write_results([], tmp_path)
    assert json.loads((tmp_path / "results.json").read_text()) == dict(rows=[], records=[])


def test_a_paper_figure_for_another_dataset_is_not_shown():
    """A copied quickstart on stitch: the rows' navigate figures (`paper_dataset`) are not shown beside stitch."""
    nav = _record(10_000, "base", 0.3)
    nav["run"].update(paper=0.05, paper_ref="Table 1", paper_dataset="pointmaze-medium-navigate-v0")
    stitch = _record(20_000, "base", 0.3)
    stitch["run"].update(paper=0.05, paper_ref="Table 1", paper_dataset="pointmaze-medium-navigate-v0",
                         dataset="pointmaze-medium-stitch-v0")  # fmt: skip
    a, b = rows([nav, stitch])
    assert a["paper"] == 0.05
    assert b["paper"] is None and "none for pointmaze-medium-stitch-v0" in b["paper_ref"]
    assert "[0.05]" not in paper_table_md([b])


def test_settings_text_names_ttgs_settings_wherever_the_row_plans():
    """The dry run and report.md name TTGS's settings for `ttgs` rows and for `ttt+ttgs` rows (they used to drop them
    there, so two combined rows with different thresholds read alike)."""
    ttt = dict(variant="ttt+ttgs", lr=3e-4, N=100, K=200, q=0.05, mix=0.0, ft_alpha=0.3)
    ttgs = {"threshold": 24.0, "n_vertices": 1000}
    assert (
        settings_text({**ttt, "ttgs": ttgs})
        == "lr 0.0003, N 100, K 200, ft alpha 0.3, TTGS n_vertices 1000, threshold 24.0"
    )
    assert settings_text({**ttt, "ttgs": {}}).endswith("ft alpha 0.3, TTGS defaults")
    assert settings_text({**ttt, "variant": "ttt", "ttgs": ttgs}) == "lr 0.0003, N 100, K 200, ft alpha 0.3"
    assert settings_text({"variant": "ttgs", "ttgs": ttgs}) == "TTGS n_vertices 1000, threshold 24.0"
    assert settings_text({"variant": "base"}) == "-"


def test_rows_carry_what_the_settings_label_names():
    """A row built from a record keeps the fine-tuning settings and TTGS's (they were dropped, so an alpha-0.3 row
    with threshold 24 read 'lr 0.0003, N 200, K 100')."""
    run = dict(name="x", group="g", dataset="pointmaze-medium-stitch-v0", agent="gciql", variant="ttt+ttgs", lr=3e-4,
               N=200, K=100, q=0.05, mix=0.0, ft_alpha=0.3, critic="oracle", reuse_adam=True, grid=[],
               ttgs={"tau": 12.0, "threshold": 24.0}, tasks=[1], episodes=1, eval_seed=0)  # fmt: skip
    rec = dict(run=run, seeds=1, n_episodes=1, mean=1.0, se=0.0, wall_s=1.0, checkpoint="c", per_seed=[1.0])
    (row,) = rows([rec])
    assert settings_text(row) == (
        "lr 0.0003, N 200, K 100, oracle critic, reused Adam, ft alpha 0.3, TTGS tau 12.0, threshold 24.0"
    )
