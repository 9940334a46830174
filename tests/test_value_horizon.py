"""The second pointmaze recipe's rule (issue 79): a checkpoint's value horizon and TTGS's tau / threshold from it
(`ttt.graph.value_horizon`, `horizon_tau_threshold`, `measure_value_horizon`), on hand-made inputs and on a tiny
checkpoint trained here."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_pretrain import NAV, tiny, toy_dataset

from ttt.checkpoint import open_checkpoint
from ttt.graph import (
    HORIZON_PAIRS,
    HORIZON_THRESHOLD_MAX,
    horizon_pairs,
    horizon_tau_threshold,
    measure_value_horizon,
    value_horizon,
    value_steps,
)
from ttt.pretrain import pretrain


@pytest.mark.parametrize(
    "horizon, want",
    [
        (48.0, (12.0, 24.0)),  # a 10k GC-IQL value's plateau: the first recipe's threshold-24 rows
        (49.3, (12.5, 25.0)),  # round(24.65) = 25
        (47.0, (12.0, 24.0)),  # 23.5 rounds up (halves up, not to even)
        (45.0, (11.5, 23.0)),  # 22.5 -> 23
        (96.0, (24.0, 48.0)),  # the cap is reached exactly
        (500.0, (24.0, 48.0)),  # updates x tau at 100k: capped at TTGS's published default 48
        (1.0, (1.0, 2.0)),  # round(0.5) = 1, held at the floor 2
        (0.0, (1.0, 2.0)),
    ],
)
def test_tau_threshold_by_hand(horizon, want):
    assert horizon_tau_threshold(horizon) == want


def test_tau_is_half_the_threshold_and_the_rule_is_monotone():
    prev = 0.0
    for h in np.linspace(0, 300, 601):
        tau, thr = horizon_tau_threshold(float(h))
        assert tau == thr / 2 and thr >= prev and 2.0 <= thr <= HORIZON_THRESHOLD_MAX
        prev = thr


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, "48", None])
def test_tau_threshold_refuses_bad_horizons(bad):
    with pytest.raises(ValueError, match="value horizon"):
        horizon_tau_threshold(bad)


def test_value_horizon_by_hand():
    # each seed's 0.95 quantile of 0..100 (linear interpolation) is 95 + its offset; H = the median over the seeds
    base = np.arange(101, dtype=float)
    steps = np.stack([base, base + 10, base + 2])
    h, per_seed = value_horizon(steps)
    assert per_seed == [95.0, 105.0, 97.0] and h == 97.0
    h2, _ = value_horizon(steps[:2])  # two seeds: the mean of the middle two
    assert h2 == 100.0
    h_max, _ = value_horizon(steps, quantile=1.0)
    assert h_max == 102.0


def test_value_horizon_is_a_plateau_for_a_saturated_value():
    # a value that reads every pair beyond 48 steps as about 48 (the 10k diagnosis) has H at the plateau, whatever
    # the true distances are
    true = np.random.default_rng(0).uniform(0, 400, 10_000)
    read = np.minimum(true, 48.0)[None]
    h, _ = value_horizon(read)
    assert h == 48.0 and horizon_tau_threshold(h) == (12.0, 24.0)


def test_value_horizon_refuses_bad_input():
    with pytest.raises(ValueError, match="seeds, pairs"):
        value_horizon(np.zeros(5))
    with pytest.raises(ValueError, match="quantile"):
        value_horizon(np.zeros((1, 5)), quantile=0.0)
    with pytest.raises(ValueError, match="non-finite"):
        value_horizon(np.array([[1.0, np.nan]]))


def test_horizon_pairs_are_valid_rows_and_fixed_by_the_seed():
    valid = np.array([True, False, True, True, False, True])
    i, j = horizon_pairs(valid, 1000, seed=0)
    assert set(i) | set(j) <= {0, 2, 3, 5} and len(i) == len(j) == 1000
    i2, j2 = horizon_pairs(valid, 1000, seed=0)
    assert (i == i2).all() and (j == j2).all()
    # the same draw as value_calibration.py's pair_rows (the calibration and the horizon read the same pairs)
    rng = np.random.default_rng(0)
    rows = np.flatnonzero(valid)
    assert (i == rows[rng.integers(0, 4, 1000)]).all() and (j == rows[rng.integers(0, 4, 1000)]).all()
    with pytest.raises(ValueError, match="valid rows"):
        horizon_pairs(np.zeros(3, bool), 10)


def test_measure_on_a_tiny_checkpoint(tmp_path):
    """A 2-seed GC-IQL checkpoint trained here for a few updates: the measurement reads the same steps as the value
    read by hand on the same pairs (chunking and padding change nothing), and its tau / threshold are the rule's."""
    data = toy_dataset()
    cfg, sampler = tiny()
    pretrain("gciql", NAV, data, cfg, sampler, steps=6, seeds=2, out=tmp_path, chunk_steps=6)
    ck = open_checkpoint(tmp_path)
    agents = ck.load().agent
    gamma = float(cfg.discount)
    pairs = 250  # not a multiple of the chunk: the last chunk is padded
    got = measure_value_horizon(ck.backbone, agents, data.observations, data.valid, gamma, pairs=pairs, chunk=64)

    import equinox as eqx

    i, j = horizon_pairs(data.valid, pairs)
    obs = np.asarray(data.observations)
    by_hand = eqx.filter_vmap(lambda a: value_steps(ck.backbone.value(a, obs[i], obs[j]), gamma))(agents)
    h, per_seed = value_horizon(np.asarray(by_hand))
    np.testing.assert_allclose(got["per_seed"], per_seed, rtol=1e-5)
    assert got["horizon"] == pytest.approx(h, rel=1e-5)
    assert (got["tau"], got["threshold"]) == horizon_tau_threshold(got["horizon"])
    assert got["pairs"] == pairs and got["gamma"] == gamma and len(got["per_seed"]) == 2
    assert HORIZON_PAIRS == 100_000


def test_the_analysis_script_on_a_tiny_checkpoint(tmp_path, monkeypatch, capsys):
    """benchmarks/analyses/value_horizon.py end to end on a tiny checkpoint with a stand-in maze (the oracle: straight
    -line steps): its record holds the rule's settings, and `--row` prints a `ttgs` table the pipeline accepts."""
    import json
    import sys
    import tomllib
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks" / "analyses"))
    import value_horizon as script

    from ttt.graph import TTGSConfig

    data = toy_dataset()
    cfg, sampler = tiny()
    pretrain("gciql", NAV, data, cfg, sampler, steps=4, seeds=2, out=tmp_path / "ck", chunk_steps=4)

    class Oracle:
        @staticmethod
        def steps(x, g):
            import jax.numpy as jnp

            return jnp.linalg.norm(x - g, axis=-1) / 0.1

    monkeypatch.setattr(script, "maze_tasks", lambda name: (None, data, Oracle, []))
    out = tmp_path / "h.json"
    rc = script.main([str(tmp_path / "ck"), "--pairs", "300", "--out", str(out), "--row", "medium-nav-ttgs-rule"])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert (doc["tau"], doc["threshold"]) == horizon_tau_threshold(doc["horizon"])
    assert doc["pairs"] == 300 and doc["step"] == 4 and len(doc["spearman"]) == 2
    assert doc["checkpoint_sha256"] == open_checkpoint(tmp_path / "ck").digest
    line = capsys.readouterr().out.strip().splitlines()[-1]
    ttgs = tomllib.loads(line)["ttgs"]
    assert (ttgs["tau"], ttgs["threshold"]) == (doc["tau"], doc["threshold"])
    TTGSConfig(**ttgs)  # valid settings
