"""The pipeline report from saved records: rows keep every swept key, and a curve over pre-training steps draws."""

from __future__ import annotations

import pytest

from ttt.pipeline.report import plot_curves, rows


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
