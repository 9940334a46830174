"""GC-TTT selection (ttt/select.py) against DESIGN.md §2: hand-computed answers on tiny datasets, a brute-force
numpy reference on random datasets (hypothesis), fixed shapes, jit/vmap and one trace per configuration.

Statistical checks use fixed keys (deterministic) and state their tolerance in standard deviations.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import select_round
from hypothesis import given, settings
from hypothesis import strategies as st

from ttt.data.dataset import Dataset
from ttt.finetune import sample_ttt_rows, weight_table
from ttt.hparams import n_uniform
from ttt.select import (
    GoalTables,
    SelectConfig,
    n_keep,
    precompute,
    relevance,
    select,
    train_weights,
)


def build(*episodes) -> Dataset:
    """Dataset whose observations are the given 2-d positions (goal coordinates = observations)."""
    obs = np.concatenate([np.asarray(e, np.float32).reshape(-1, 2) for e in episodes])
    term = np.zeros(len(obs), dtype=bool)
    term[np.cumsum([len(e) for e in episodes]) - 1] = True
    return Dataset.from_arrays(obs, np.zeros((len(obs), 2), np.float32), term, goal_fn=lambda o: o[:, :2])


def line(xs):
    return [(float(x), 0.0) for x in xs]


# Rows 0-4 | 5-7 | 8-10. Goal (2, 0) with eps 0.5 is hit at rows 2 (d = 0), 3 and 6 (d = 0.5 exactly).
MIXED = build(
    [(0, 0), (1, 0), (2, 0), (2.5, 0), (4, 0)],
    [(5, 0), (2, 0.5), (9, 9)],
    [(7, 7), (8, 8), (9, 9)],
)
# Rows 0-5 at x = 0..5 | rows 6-9 at x = 10..13; goal (2, 0) with eps 0.5 is hit at row 2 only.
LINE = build(line(range(6)), line(range(10, 14)))
# V(s_j | g*): ties at rows 2/3 and 7/8/9; row 6's 10 must never leak into episode 0's argmax.
LINE_V = jnp.array([-5, -3, -1, -1, -2, -4, 10, 0, 0, 0], jnp.float32)
GOAL = jnp.array([2.0, 0.0])
EPS = 0.5

PRE = eqx.filter_jit(precompute)
ROUND = eqx.filter_jit(select_round)
SELECT = eqx.filter_jit(select)
SAMPLE = eqx.filter_jit(sample_ttt_rows)


def np_(x):
    return np.asarray(x)


def mask(n, rows):
    m = np.zeros(n, dtype=bool)
    m[list(rows)] = True
    return m


def tables_with(returns, eligible=None) -> GoalTables:
    n = len(returns)
    return GoalTables(
        rewards=jnp.zeros(n),
        ends=jnp.minimum(jnp.arange(n) + 1, n - 1),
        returns=jnp.asarray(returns, jnp.float32),
        eligible=jnp.ones(n, bool) if eligible is None else jnp.asarray(eligible),
        reaches=jnp.zeros(n, bool),
    )


# ---------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"q": 0.0}, r"q .* must be in \(0, 1\]"),
        ({"q": 1.5}, r"q .* must be in \(0, 1\]"),
        ({"eps_rel": 0.0}, "eps_rel must be > 0"),
        ({"h_min": 0}, "h_min must be an int >= 1"),
        ({"h_min": 2.5}, "h_min must be an int >= 1"),
        ({"mode": "oracle"}, "mode must be one of critic, mc, fixed"),
        ({"mode": "fixed"}, "H must be an int >= 2"),
        ({"mode": "fixed", "H": 1}, "H must be an int >= 2"),
        ({"mode": "mc", "H": 5}, "H is only used with mode='fixed'"),
        ({"gamma": 1.0}, r"gamma must be in \[0, 1\)"),
        ({"mix": -0.1}, r"mix must be in \[0, 1\]"),
        ({"noise_alpha": -1.0}, "noise_alpha must be >= 0"),
        ({"relevance": "near"}, "relevance must be one of distance, value"),
        ({"relevance": "value"}, "c_rel must be a finite number"),
    ],
)
def test_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SelectConfig(**kwargs)


def test_config_defaults_are_paper_and_hashable():
    cfg = SelectConfig()
    assert (cfg.q, cfg.h_min, cfg.mode, cfg.gamma, cfg.mix, cfg.eps_rel) == (0.05, 10, "critic", 0.99, 0.0, None)
    hash(cfg)


def test_default_rule_follows_the_mode():
    # With a critic the published code's rule (the selection study's verdict), without one the paper's.
    assert SelectConfig().rule is None and SelectConfig().rule_used == "episodes"
    assert SelectConfig(mode="mc").rule_used == "paper" and SelectConfig(mode="fixed", H=3).rule_used == "paper"
    assert dataclasses.replace(SelectConfig(), mode="mc").rule_used == "paper"  # nothing resolved is carried over
    assert SelectConfig(rule="paper").rule_used == "paper"
    with pytest.raises(ValueError, match="noise_alpha applies to rule 'paper'.*set rule='paper'"):
        SelectConfig(noise_alpha=0.1)


def test_missing_values_raise():
    with pytest.raises(ValueError, match="needs values"):
        precompute(LINE, GOAL, None, SelectConfig(), EPS)
    tables = precompute(LINE, GOAL, LINE_V, SelectConfig(h_min=1), EPS)
    with pytest.raises(ValueError, match="needs row_values"):
        relevance(tables, LINE, GOAL, SelectConfig(h_min=1, relevance="value", c_rel=0.0), EPS)


# ------------------------------------------------------------------------------------ per-goal tables


def test_rewards_include_the_threshold():
    t = PRE(MIXED, GOAL, None, SelectConfig(mode="mc", gamma=0.5), EPS)
    np.testing.assert_array_equal(np_(t.rewards), [-1, -1, 0, 0, -1, -1, 0, -1, -1, -1, -1])


def test_mc_ends_returns_and_never_arrived_rule():
    t = PRE(MIXED, GOAL, None, SelectConfig(mode="mc", gamma=0.5), EPS)
    # first row within eps at or after j inside j's episode, else the episode's final row
    np.testing.assert_array_equal(np_(t.ends), [2, 2, 2, 3, 4, 6, 6, 7, 10, 10, 10])
    # rows already at the goal (2, 3, 6) have e_j = j: no action, not eligible; final rows 4, 7, 10 neither
    np.testing.assert_array_equal(np_(t.eligible), mask(11, [0, 1, 5, 8, 9]))
    np.testing.assert_array_equal(np_(t.reaches), mask(11, [0, 1, 2, 3, 5, 6]))
    g = np_(t.returns)
    # -(1 - gamma^k) / (1 - gamma): k = 2 -> -1.5, k = 1 -> -1; never arriving: -1 / (1 - gamma) = -2
    np.testing.assert_allclose(g[[0, 1, 5, 8, 9]], [-1.5, -1.0, -1.0, -2.0, -2.0], rtol=1e-6)


@pytest.mark.parametrize(
    "h_min, ends, eligible, returns",
    [
        (1, [2, 2, 3, 4, 5, 5, 7, 8, 9, 9], [0, 1, 2, 3, 4, 6, 7, 8],
         {0: -1.75, 1: -1.5, 2: -0.5, 3: -2.0, 4: -3.0, 6: -1.0, 7: -1.0, 8: -1.0}),
        (2, [2, 3, 4, 5, 5, 5, 8, 9, 9, 9], [0, 1, 2, 3, 6, 7],
         {0: -1.75, 1: -1.25, 2: -1.0, 3: -2.5, 6: -1.5, 7: -1.5}),
        (20, [5, 5, 5, 5, 5, 5, 9, 9, 9, 9], [], {}),
    ],
)  # fmt: skip
def test_critic_ends_and_returns(h_min, ends, eligible, returns):
    # argmax V over [j + h_min, ep_end], ties -> earliest; j + h_min > ep_end: clipped end, not eligible.
    # G_j = sum_{t=j}^{e-1} 0.5^{t-j} R_t + 0.5^{e-j} V_e with R = -1 except R_2 = 0; e.g. h_min 1, row 0:
    # e = 2 (tie with row 3), G = -1 - 0.5 + 0.25 * (-1) = -1.75.
    t = PRE(LINE, GOAL, LINE_V, SelectConfig(h_min=h_min, gamma=0.5), EPS)
    np.testing.assert_array_equal(np_(t.ends), ends)
    np.testing.assert_array_equal(np_(t.eligible), mask(10, eligible))
    rows = list(returns)
    np.testing.assert_allclose(np_(t.returns)[rows], [returns[r] for r in rows], rtol=1e-6)


@pytest.mark.parametrize(
    "values, returns",
    [
        (LINE_V, {0: -1.75, 1: -1.25, 2: -1.0, 3: -2.5, 4: -3.0, 6: -1.5, 7: -1.5, 8: -1.0}),
        # no critic: Monte-Carlo rule with the first arrival inside the span [j, e_j]
        (None, {0: -1.5, 1: -1.0, 2: 0.0, 3: -2.0, 4: -2.0, 6: -2.0, 7: -2.0, 8: -2.0}),
    ],
)
def test_fixed_h_ends_and_returns(values, returns):
    t = PRE(LINE, GOAL, values, SelectConfig(mode="fixed", H=3, gamma=0.5), EPS)
    np.testing.assert_array_equal(np_(t.ends), [2, 3, 4, 5, 5, 5, 8, 9, 9, 9])
    np.testing.assert_array_equal(np_(t.eligible), mask(10, [0, 1, 2, 3, 4, 6, 7, 8]))
    rows = list(returns)
    np.testing.assert_allclose(np_(t.returns)[rows], [returns[r] for r in rows], rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------------------- per round


def test_relevance_is_strict_and_only_eligible():
    t1 = PRE(LINE, GOAL, LINE_V, SelectConfig(h_min=1), EPS)
    t2 = PRE(LINE, GOAL, LINE_V, SelectConfig(h_min=2), EPS)
    s = jnp.array([0.5, 0.0])
    assert not np_(relevance(t1, LINE, s, SelectConfig(h_min=1), EPS)).any()  # d = 0.5 is not < 0.5
    np.testing.assert_array_equal(
        np_(relevance(t1, LINE, s, SelectConfig(h_min=1, eps_rel=0.6), EPS)), mask(10, [0, 1])
    )
    near_end = jnp.array([4.9, 0.0])  # row 4 (d 0.9) eligible only with h_min 1; row 5 is a final row
    np.testing.assert_array_equal(
        np_(relevance(t1, LINE, near_end, SelectConfig(h_min=1, eps_rel=1.0), EPS)), mask(10, [4])
    )
    assert not np_(relevance(t2, LINE, near_end, SelectConfig(h_min=2, eps_rel=1.0), EPS)).any()


def test_value_relevance():
    cfg = SelectConfig(h_min=1, relevance="value", c_rel=6.5)
    t = PRE(LINE, GOAL, LINE_V, cfg, EPS)
    rel = relevance(t, LINE, GOAL, cfg, EPS, row_values=jnp.arange(10.0))  # V(s | s_j) = j
    np.testing.assert_array_equal(np_(rel), mask(10, [7, 8]))  # row 9 is a final row


@pytest.mark.parametrize(
    "q, n, k",
    [(0.05, 0, 0), (0.05, 1, 1), (0.05, 20, 1), (0.05, 21, 2), (0.07, 100, 7), (0.1, 30, 3), (0.3, 10, 3),
     (0.5, 7, 4), (1.0, 13, 13), (0.05, 1_000_000, 50_000), (0.123, 1_000_000, 123_000), (1 / 3, 999_999, 333_333)],
)  # fmt: skip
def test_n_keep_is_exact_ceil(q, n, k):
    assert int(n_keep(n, q)) == k == math.ceil(Fraction(q).limit_denominator(10_000) * n)


def test_select_keeps_the_top_fraction():
    g = [3, 0, 8, 1, 9, 4, 2, 7, 5, 6, 20, 30]  # rows 10, 11 are best but not relevant
    rel = jnp.asarray(mask(12, range(10)))
    sel = SELECT(jax.random.key(0), tables_with(g), rel, SelectConfig(q=0.25))
    np.testing.assert_array_equal(np_(sel.mask), mask(12, [4, 2, 7]))  # ceil(2.5) = 3: G = 9, 8, 7
    assert (int(sel.n_rel), int(sel.n_selected), float(sel.threshold)) == (10, 3, 7.0)
    everything = SELECT(jax.random.key(0), tables_with(g), rel, SelectConfig(q=1.0))
    np.testing.assert_array_equal(np_(everything.mask), np_(rel))


def test_all_equal_returns_keep_exactly_ceil_with_random_ties():
    cfg = SelectConfig(q=0.5)
    keys = jax.random.split(jax.random.key(1), 400)
    masks = np_(jax.vmap(lambda k: SELECT(k, tables_with([-1.0] * 7), jnp.ones(7, bool), cfg).mask)(keys))
    assert (masks.sum(1) == 4).all()  # ceil(0.5 * 7), never all 7
    freq = masks.mean(0)
    sd = math.sqrt(4 / 7 * 3 / 7 / 400)
    assert np.abs(freq - 4 / 7).max() < 5 * sd, freq  # uniform tie-breaking


def test_value_noise_keeps_count_and_relevance():
    g = np.linspace(-10, -1, 12)
    rel = jnp.asarray(mask(12, range(0, 12, 2)))
    base = SELECT(jax.random.key(0), tables_with(g), rel, SelectConfig(q=0.5))
    noisy = [
        SELECT(jax.random.key(s), tables_with(g), rel, SelectConfig(q=0.5, noise_alpha=2.0, rule="paper"))
        for s in range(8)
    ]
    for sel in noisy:
        m = np_(sel.mask)
        assert m.sum() == 3 and not (m & ~np_(rel)).any()
    assert any((np_(s.mask) != np_(base.mask)).any() for s in noisy)  # noise of 2 x mean|G| reorders


def test_train_weights_count_overlapping_spans():
    t = PRE(LINE, GOAL, LINE_V, SelectConfig(h_min=1), EPS)  # ends 2, 2, 3, 4, 5, 5, 7, 8, 9, 9
    w = train_weights(t, LINE, jnp.asarray(mask(10, [0, 1, 2, 6])))  # [0, 2) + [1, 2) + [2, 3) + [6, 7)
    np.testing.assert_array_equal(np_(w), [1, 2, 1, 0, 0, 0, 1, 0, 0, 0])


def test_select_round_by_hand():
    cfg = SelectConfig(h_min=1, gamma=0.5, q=0.5, eps_rel=1.6, rule="paper")
    t = PRE(LINE, GOAL, LINE_V, cfg, EPS)
    # relevant to (0.5, 0): rows 0, 1, 2 (d 0.5, 0.5, 1.5) with G -1.75, -1.5, -0.5; keep ceil(1.5) = 2
    w, m = ROUND(jax.random.key(0), t, LINE, jnp.array([0.5, 0.0]), cfg, EPS)
    np.testing.assert_array_equal(np_(w), [0, 1, 1, 0, 0, 0, 0, 0, 0, 0])  # spans [1, 2) and [2, 3)
    assert (int(m["n_rel"]), int(m["n_selected"]), float(m["threshold"]), bool(m["empty"])) == (3, 2, -1.5, False)
    assert int(m["n_train_rows"]) == 2 and float(m["reach_frac"]) == 1.0


def test_empty_selection_and_uniform_fallback():
    cfg = SelectConfig(h_min=1, rule="paper")
    t = PRE(LINE, GOAL, LINE_V, cfg, EPS)
    w, m = ROUND(jax.random.key(0), t, LINE, jnp.array([50.0, 50.0]), cfg, EPS)
    assert not np_(w).any()
    assert bool(m["empty"]) and int(m["n_rel"]) == 0 and int(m["n_selected"]) == 0 and np.isnan(m["threshold"])
    rows = np_(SAMPLE(jax.random.key(1), w, 800, 0.0, LINE))
    assert np.isin(rows, np_(LINE.valid_rows)).all() and len(set(rows.tolist())) == LINE.n_valid


# ---------------------------------------------------------------------------------------------- sampling


@pytest.mark.parametrize("dtype", [jnp.int32, jnp.float32])
def test_weighted_sampling_frequencies(dtype):
    w = jnp.asarray([1, 2, 1, 0, 0, 0, 0, 0, 0, 0], dtype)
    n = 20_000
    rows = np_(SAMPLE(jax.random.key(2), w, n, 0.0, LINE))
    assert set(rows.tolist()) <= {0, 1, 2}
    freq = np.bincount(rows, minlength=3)[:3] / n
    sd = math.sqrt(0.25 * 0.75 / n)
    np.testing.assert_allclose(freq, [0.25, 0.5, 0.25], atol=5 * sd)


@pytest.mark.parametrize("n, mix, k", [(10, 0.3, 3), (1024, 0.5, 512), (3, 0.5, 2), (5, 0.0, 0), (5, 1.0, 5)])
def test_n_uniform(n, mix, k):
    assert n_uniform(n, mix) == k


@pytest.mark.parametrize("mix", [0.0, 0.25, 1.0])
def test_mixing_fraction_is_exact(mix):
    n = 1000
    w = jnp.asarray(mask(10, [1]).astype(np.int32))
    rows = np_(SAMPLE(jax.random.key(3), w, n, mix, LINE))
    n_w = n - n_uniform(n, mix)
    assert rows.shape == (n,) and (rows[:n_w] == 1).all()
    uniform = rows[n_w:]
    assert np.isin(uniform, np_(LINE.valid_rows)).all()
    if len(uniform):  # 8 valid rows: row 1 about 1/8 of the uniform part
        assert len(set(uniform.tolist())) == LINE.n_valid and (uniform == 1).mean() < 0.25


def test_sampling_argument_errors():
    w = jnp.zeros(10, jnp.int32)
    with pytest.raises(ValueError, match="n must be an int >= 1"):
        sample_ttt_rows(jax.random.key(0), w, 0, 0.0, LINE)
    with pytest.raises(ValueError, match=r"mix must be in \[0, 1\]"):
        sample_ttt_rows(jax.random.key(0), w, 4, 1.5, LINE)


# ------------------------------------------------------------------------------------ jit, vmap, traces


def test_vmap_over_goals_matches_single_goal_with_one_trace():
    cfg = SelectConfig(h_min=1, gamma=0.5, q=0.5, eps_rel=1.6, rule="paper")

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def episode(keys, data, goals, values, states):
        tables = jax.vmap(lambda g, v: precompute(data, g, v, cfg, EPS))(goals, values)
        return tables, jax.vmap(lambda k, t, s: select_round(k, t, data, s, cfg, EPS))(keys, tables, states)

    goals = jnp.array([[2.0, 0.0], [4.0, 0.0], [11.0, 0.0]])
    values = jnp.stack([LINE_V, LINE_V[::-1], 2 * LINE_V])
    states = jnp.array([[0.5, 0.0], [3.0, 0.0], [10.5, 0.0]])
    keys = jax.random.split(jax.random.key(4), 3)
    tables, (w, m) = episode(keys, LINE, goals, values, states)
    for i in range(3):
        ti = PRE(LINE, goals[i], values[i], cfg, EPS)
        for name in ("rewards", "ends", "returns", "eligible", "reaches"):
            np.testing.assert_array_equal(np_(getattr(tables, name))[i], np_(getattr(ti, name)), err_msg=name)
        wi, mi = ROUND(keys[i], ti, LINE, states[i], cfg, EPS)
        np.testing.assert_array_equal(np_(w)[i], np_(wi))
        assert int(m["n_selected"][i]) == int(mi["n_selected"])
    # new goals, states and keys: same program
    episode(jax.random.split(jax.random.key(5), 3), LINE, goals[::-1], values + 1.0, states + 0.25)


# ----------------------------------------------------------------------------------- property tests

N_ROWS, N_EPISODES = 40, 5
P_GAMMA, P_EPS = 0.9, 1.0
P_CFGS = {
    "critic": SelectConfig(h_min=2, gamma=P_GAMMA, rule="paper"),
    "mc": SelectConfig(mode="mc", gamma=P_GAMMA),
    "fixed": SelectConfig(mode="fixed", H=3, gamma=P_GAMMA),
    "fixed_nv": SelectConfig(mode="fixed", H=4, gamma=P_GAMMA),  # fixed spans, no critic: MC returns
}
QS = (1.0, 0.5, 0.2, 0.05)


@eqx.filter_jit
@eqx.debug.assert_max_traces(max_traces=1)  # one program for every random dataset: shapes never depend on data
def _everything(key, data, goal, values, state):
    tables = {m: precompute(data, goal, None if m in ("mc", "fixed_nv") else values, c, P_EPS)
              for m, c in P_CFGS.items()}  # fmt: skip
    rounds = {
        m: [select_round(key, tables[m], data, state, dataclasses.replace(c, q=q), P_EPS) for q in QS]
        for m, c in P_CFGS.items()
        if m in ("critic", "mc")
    }
    return tables, rounds


def reference(xy, ep_end, valid, goal, values, cfg, use_values):
    """Brute-force DESIGN.md §2 in float64 with Python loops."""
    n, g = len(xy), cfg.gamma
    hit = np.linalg.norm(xy - goal, axis=1) <= P_EPS
    r = np.where(hit, 0.0, -1.0)
    ends, rets, elig = np.zeros(n, int), np.zeros(n), np.zeros(n, bool)
    for j in range(n):
        end = ep_end[j]
        if cfg.mode == "critic":
            lo = min(j + cfg.h_min, end)
            e = lo + int(np.argmax(values[lo : end + 1]))
        elif cfg.mode == "mc":
            e = next((t for t in range(j, end + 1) if hit[t]), end)
        else:
            e = min(j + cfg.H - 1, end)
        if use_values:
            rets[j] = sum(g ** (t - j) * r[t] for t in range(j, e)) + g ** (e - j) * values[e]
        else:
            first = next((t for t in range(j, e + 1) if hit[t]), None)
            rets[j] = -1 / (1 - g) if first is None else -(1 - g ** (first - j)) / (1 - g)
        ends[j], elig[j] = e, valid[j] and e > j and (cfg.mode != "critic" or j + cfg.h_min <= end)
    return ends, rets, elig


@st.composite
def problems(draw):
    # fixed shapes: N_ROWS rows in N_EPISODES episodes (Dataset.valid_rows has N_ROWS - N_EPISODES entries)
    lengths = draw(st.lists(st.integers(2, 8), min_size=N_EPISODES - 1, max_size=N_EPISODES - 1))
    lengths.append(N_ROWS - sum(lengths))  # a filler episode of >= 8 rows
    xy = np.asarray(draw(st.lists(st.integers(0, 3), min_size=2 * N_ROWS, max_size=2 * N_ROWS)), np.float32)
    values = np.asarray(draw(st.lists(st.integers(-3, 0), min_size=N_ROWS, max_size=N_ROWS)), np.float32)
    goal, state = (np.asarray(draw(st.tuples(st.integers(0, 3), st.integers(0, 3))), np.float32) for _ in range(2))
    return lengths, xy.reshape(N_ROWS, 2), values, goal, state, draw(st.integers(0, 2**31 - 1))


@settings(max_examples=25, deadline=None)
@given(problems())
def test_properties_against_reference(problem):
    lengths, xy, values, goal, state, seed = problem
    data = build(*np.split(xy, np.cumsum(lengths)[:-1]))
    ep_end, valid = np_(data.ep_end), np_(data.valid)
    tables, rounds = _everything(jax.random.key(seed), data, jnp.asarray(goal), jnp.asarray(values), jnp.asarray(state))
    rows = np.arange(N_ROWS)
    for m, cfg in P_CFGS.items():
        t = tables[m]
        for name in ("rewards", "ends", "returns", "eligible", "reaches"):
            assert getattr(t, name).shape == (N_ROWS,), (m, name)
        ends, rets, elig = reference(xy, ep_end, valid, goal, values, cfg, use_values=m in ("critic", "fixed"))
        e = np_(t.ends)
        assert ((rows <= e) & (e <= ep_end)).all(), m  # ends stay inside their episode
        np.testing.assert_array_equal(e, ends, err_msg=m)
        np.testing.assert_array_equal(np_(t.eligible), elig, err_msg=m)
        np.testing.assert_allclose(np_(t.returns)[elig], rets[elig], atol=1e-4, err_msg=m)

    near = np.linalg.norm(xy - state, axis=1) < P_EPS
    for m, per_q in rounds.items():
        t = tables[m]
        rel = near & np_(t.eligible)
        g = np_(t.returns)
        kept_before = n_rel = int(rel.sum())
        for q, (w, metrics) in zip(QS, per_q, strict=True):
            assert w.shape == (N_ROWS,)
            assert int(metrics["n_rel"]) == n_rel and bool(metrics["empty"]) == (n_rel == 0)
            k = int(metrics["n_selected"])
            assert k == math.ceil(Fraction(q).limit_denominator(10_000) * n_rel)
            if k:  # C is the k-th best relevant G
                assert float(metrics["threshold"]) == pytest.approx(np.sort(g[rel])[::-1][k - 1])
            w = np_(w)
            assert (w >= 0).all() and not w[~valid].any()
            if q == 1.0:
                expect = np.zeros(N_ROWS, int)
                for j in np.flatnonzero(rel):
                    expect[j : np_(t.ends)[j]] += 1
                np.testing.assert_array_equal(w, expect)  # q = 1 keeps every relevant row
            total = sum(np_(t.ends)[j] - j for j in np.flatnonzero(rel))
            assert w.sum() <= total
            assert k <= kept_before  # the number kept is non-increasing as q falls
            kept_before = k


@settings(max_examples=25, deadline=None)
@given(problems(), st.sampled_from(QS), st.sampled_from(QS))
def test_selection_is_nested_optimal_and_within_relevance(problem, q_hi, q_lo):
    q_hi, q_lo = max(q_hi, q_lo), min(q_hi, q_lo)
    lengths, xy, _, goal, state, seed = problem
    data = build(*np.split(xy, np.cumsum(lengths)[:-1]))
    returns = jnp.asarray(np.random.default_rng(seed).integers(-3, 1, N_ROWS), jnp.float32)  # many ties
    eligible = jnp.asarray(np_(data.valid) & (np.arange(N_ROWS) % 3 != 0))
    t = tables_with(returns, eligible)
    rel = relevance(t, data, jnp.asarray(state), SelectConfig(), P_EPS)
    key = jax.random.key(seed)
    hi = np_(_select_q(key, t, rel, q_hi))
    lo = np_(_select_q(key, t, rel, q_lo))
    r = np_(rel)
    assert not (hi & ~r).any() and not (lo & ~r).any()  # selected within relevant
    assert not (lo & ~hi).any()  # same key: the kept set shrinks as q falls
    g = np_(returns)
    if hi.any() and (r & ~hi).any():
        assert g[hi].min() >= g[r & ~hi].max()  # every kept row is at least as good as every dropped one
    if q_hi == 1.0:
        np.testing.assert_array_equal(hi, r)
    w = np_(train_weights(t, data, jnp.asarray(hi)))
    expect = np.zeros(N_ROWS, int)
    for j in np.flatnonzero(hi):
        expect[j : np_(t.ends)[j]] += 1
    np.testing.assert_array_equal(w, expect)


@eqx.filter_jit
def _select_q(key, tables, rel, q):
    return select(key, tables, rel, SelectConfig(q=q)).mask


@pytest.mark.parametrize("dtype", [jnp.int32, jnp.float32])
def test_a_rounds_weight_table_draws_the_same_rows_as_its_weights(dtype):
    """Fine-tuning builds the cumulative weights once per round (`weight_table`) and draws every batch from it;
    the rows are the ones drawn from the weights themselves, and never outside their support."""
    w = jnp.asarray(np.array([0, 3, 0, 1, 0, 0, 2, 0, 0, 0]), dtype)
    table = weight_table(w)
    for k in range(5):
        key = jax.random.key(k)
        from_table = np_(SAMPLE(key, table, 64, 0.25, LINE))
        np.testing.assert_array_equal(from_table, np_(SAMPLE(key, w, 64, 0.25, LINE)))
        assert np.isin(from_table[:48], [1, 3, 6]).all()
