"""The published code's selection rules ('episodes', 'mc-episodes'), the public `training_rows`, the quantile cut,
the round diagnostics and the maze oracle: hand-computed answers on tiny datasets and a tiny maze."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import select_round
from hypothesis import given, settings
from hypothesis import strategies as st

from ttt.data.dataset import Dataset
from ttt.envs.oracle import UNREACHABLE, MazeOracle, bfs_hops, maze_oracle
from ttt.errors import TttError
from ttt.select import (
    SelectConfig,
    precompute,
    predicted_steps,
    quantile_cut,
    steps_to_values,
    training_rows,
)


def build(*episodes) -> Dataset:
    """Dataset whose observations are the given x positions on the line y = 0 (goal coordinates = observations)."""
    obs = np.concatenate([np.stack([np.asarray(e, np.float32), np.zeros(len(e), np.float32)], 1) for e in episodes])
    term = np.zeros(len(obs), dtype=bool)
    term[np.cumsum([len(e) for e in episodes]) - 1] = True
    return Dataset.from_arrays(obs, np.zeros((len(obs), 2), np.float32), term, goal_fn=lambda o: o[:, :2])


def rows_of(w) -> list[int]:
    return np.flatnonzero(np.asarray(w)).tolist()


TRAIN = eqx.filter_jit(training_rows)
ROUND = eqx.filter_jit(select_round)

# ------------------------------------------------------------------------------------------ rule 'episodes'
# Episodes of unequal length: rows 0-5 | 6-8 | 9-12. The state (0, 0) with radius 0.5 is relevant at rows 0 and 6;
# episode 2 never comes near it. h_min = 2: candidate ends are rows >= f + 2 (an episode's last row included).
EP = build([0, 1, 2, 3, 4, 5], [0, 1, 2], [10, 11, 12, 13])
EP_STEPS = np.array([9, 8, 7, 3, 5, 3, 9, 9, 2, 0, 0, 0, 0], np.float32)  # predicted steps to the goal per row
STATE = jnp.array([0.0, 0.0])
FAR_GOAL = jnp.array([100.0, 0.0])  # rule 'episodes' ranks by the values only; no row reaches this goal


def episodes_rows(steps, n_episodes, **kw):
    values = steps_to_values(jnp.asarray(steps), 0.99)
    return rows_of(TRAIN("episodes", EP, STATE, FAR_GOAL, values, goal_eps=0.5, h_min=2, n_episodes=n_episodes, **kw))


def test_episodes_rule_by_hand():
    # Episode 0: f = 0, candidates rows 2-5 (steps 7, 3, 5, 3): b = 3 (the earlier of the tie), score 3, span [0, 3).
    # Episode 1: f = 6, candidate row 8 only (its last row, steps 2): b = 8, score 2, span [6, 8).
    assert episodes_rows(EP_STEPS, 1) == [6, 7]
    assert episodes_rows(EP_STEPS, 2) == [0, 1, 2, 6, 7]
    assert episodes_rows(EP_STEPS, 5) == [0, 1, 2, 6, 7]  # episode 2 has no relevant row: never kept


def test_episodes_rule_ties_keep_the_lower_episode():
    steps = EP_STEPS.copy()
    steps[8] = 3.0  # both episodes now score 3
    assert episodes_rows(steps, 1) == [0, 1, 2]


def test_episodes_rule_nan_and_out_of_range_values_count_as_very_far():
    for bad in (np.nan, -100.0, -250.0):  # V NaN, V = -1/(1-gamma), V below it
        values = np.asarray(steps_to_values(jnp.asarray(EP_STEPS), 0.99)).copy()
        values[3] = bad  # episode 0's best row is now row 5 (steps 3): span [0, 5)
        w = TRAIN("episodes", EP, STATE, FAR_GOAL, jnp.asarray(values), goal_eps=0.5, h_min=2, n_episodes=2)
        assert rows_of(w) == [0, 1, 2, 3, 4, 6, 7], bad


def test_episodes_rule_without_relevant_rows_is_empty():
    values = steps_to_values(jnp.asarray(EP_STEPS), 0.99)
    w, m = ROUND(
        jax.random.key(0),
        precompute(EP, FAR_GOAL, values, SelectConfig(rule="episodes", h_min=2), 0.5),
        EP,
        jnp.array([50.0, 50.0]),
        SelectConfig(rule="episodes", h_min=2),
        0.5,
    )
    assert rows_of(w) == [] and bool(m["empty"]) and int(m["n_rel"]) == 0 and int(m["n_selected"]) == 0
    assert np.isnan(float(m["threshold"])) and np.isnan(float(m["reach_frac"]))


def test_episodes_rule_metrics_by_hand():
    cfg = SelectConfig(rule="episodes", h_min=2, n_episodes=2, eps_rel=0.5)
    values = steps_to_values(jnp.asarray(EP_STEPS), 0.99)
    goal = jnp.array([3.0, 0.0])  # within 0.5 of row 3 only
    tables = precompute(EP, goal, values, cfg, 0.5)
    w, m = ROUND(jax.random.key(0), tables, EP, STATE, cfg, 0.5)
    assert rows_of(w) == [0, 1, 2, 6, 7]
    assert int(m["n_rel"]) == 2 and int(m["n_selected"]) == 2 and int(m["n_train_rows"]) == 5
    assert int(m["max_span"]) == 3  # [0, 3)
    assert float(m["reach_frac"]) == pytest.approx(0.5)  # episode 0's span ends at row 3, the goal row
    assert float(m["threshold"]) == pytest.approx(3.0, abs=1e-3)  # the worse kept score


def test_predicted_steps_inverts_the_value_scale():
    d = jnp.array([0.0, 1.0, 10.0, 150.0])
    np.testing.assert_allclose(np.asarray(predicted_steps(steps_to_values(d, 0.99), 0.99)), d, rtol=1e-3, atol=1e-3)
    v = jnp.array([jnp.nan, -100.0, -101.0, 0.0])
    out = np.asarray(predicted_steps(v, 0.99))
    assert (out[:3] > 1e30).all() and out[3] == 0.0


# -------------------------------------------------------------------------------------- rule 'mc-episodes'
# Goal (3, 0), eps 0.5: goal rows 3, 10 (episode 1's LAST row) and 19. State (0, 0), radius 0.5.
MC = build([0, 1, 2, 3, 4, 5], [1, 0, 5, 6, 3], [0, 1, 2, 9], [0, 0, 0, 1, 3])
# rows:      0-5                 6-10            11-14        15-19
MC_GOAL = jnp.array([3.0, 0.0])


def mc_rows(q, slack=1, state=STATE):
    return rows_of(TRAIN("mc-episodes", MC, state, MC_GOAL, goal_eps=0.5, eps_rel=0.5, q=q, slack=slack))


def test_mc_episodes_rule_by_hand():
    # Episode 0: s = 0, c = 3. Episode 1: s = 7, c = 3 (the goal is its last row). Episode 2: no goal row.
    # Episode 3: relevant rows 15, 16, 17 with c = 4, 3, 2: s = 17, c = 2. c over episodes: [3, 3, 2].
    assert float(np.quantile([3, 3, 2], 0.2)) == pytest.approx(2.4)
    assert mc_rows(0.2) == [17, 18]  # c <= 2.4: episode 3, rows [17, min(17 + 2 + 1, 19))
    # q = 0.5: quantile 3, all three kept; episode 1's span [7, min(7 + 3 + 1, 10)) is cut at its end.
    assert mc_rows(0.5) == [0, 1, 2, 3, 7, 8, 9, 17, 18]
    assert mc_rows(0.5, slack=0) == [0, 1, 2, 7, 8, 9, 17, 18]


def test_mc_episodes_rule_a_relevant_row_on_the_goal_is_no_start():
    # From (3, 0) the only relevant rows are goal rows (3, 10, 19; c = 0): nothing to learn, nothing kept.
    assert mc_rows(1.0, state=jnp.array([3.0, 0.0])) == []


def test_mc_episodes_rule_without_goal_rows_is_empty():
    w = TRAIN("mc-episodes", MC, STATE, jnp.array([50.0, 0.0]), goal_eps=0.5, q=0.5)
    assert rows_of(w) == []


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 40), min_size=1, max_size=30),
    st.lists(st.booleans(), min_size=30, max_size=30),
    st.sampled_from([0.05, 0.1, 0.2, 0.25, 1 / 3, 0.5, 0.7, 0.9, 1.0]),
)
def test_quantile_cut_matches_numpy(scores, ok, q):
    scores = np.array(scores, np.int32)
    ok = np.array(ok[: len(scores)])
    keep, value = jax.jit(quantile_cut, static_argnums=2)(jnp.asarray(scores), jnp.asarray(ok), q)
    if ok.sum() == 0:
        assert not np.asarray(keep).any() and np.isnan(float(value))
        return
    cut = np.quantile(scores[ok], q)
    np.testing.assert_array_equal(np.asarray(keep), ok & (scores <= cut))
    assert float(value) == pytest.approx(cut, rel=1e-6)


# ------------------------------------------------------------------------------------------ training_rows


def test_training_rows_paper_rule_matches_select_round():
    values = steps_to_values(jnp.asarray(EP_STEPS), 0.99)
    w = TRAIN("paper", EP, STATE, FAR_GOAL, values, goal_eps=0.5, h_min=2, q=1.0)
    # Rule 'paper' with a critic: rows 0 and 6 start spans ending at their argmax-V rows >= j + 2: 3 and 8.
    assert rows_of(w) == [0, 1, 2, 6, 7]


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        (("nope",), {}, "rule must be one of paper, episodes, mc-episodes"),
        (("episodes",), {}, "needs values"),
        (("mc-episodes",), {"values": jnp.zeros(13)}, "critic-free"),
        (("paper",), {"mode": "mc"}, "mode and rule follow"),
    ],
)
def test_training_rows_errors(args, kwargs, match):
    with pytest.raises(TttError, match=match):  # a user's mistake: one line (issue 39)
        training_rows(*args, EP, STATE, FAR_GOAL, goal_eps=0.5, **kwargs)


def test_rule_config_errors():
    with pytest.raises(ValueError, match="rule='episodes' needs mode='critic'"):
        SelectConfig(rule="episodes", mode="mc")
    with pytest.raises(ValueError, match="rule='mc-episodes' needs mode='mc'"):
        SelectConfig(rule="mc-episodes")
    with pytest.raises(ValueError, match="n_episodes must be an int >= 1"):
        SelectConfig(rule="episodes", n_episodes=0)
    with pytest.raises(ValueError, match="noise_alpha applies to rule 'paper'"):
        SelectConfig(rule="episodes", noise_alpha=0.1)


# ------------------------------------------------------------------------------------------------ oracle
# A 3 x 3 maze with a wall in the middle row's first two cells (free: True):
#   . . .
#   # # .
#   . . .
FREE = np.array([[1, 1, 1], [0, 0, 1], [1, 1, 1]], bool)


def tiny_oracle() -> MazeOracle:
    cell_of, hops = bfs_hops(FREE)
    unit = 2.0  # cell (i, j) has centre (2 j, 2 i) with no offset
    centers = np.array([(j * unit, i * unit) for i, j in np.argwhere(FREE)], np.float32)
    return MazeOracle(jnp.asarray(cell_of), jnp.asarray(hops), jnp.asarray(centers), unit, (0.0, 0.0), 0.2, 0.5)


def test_bfs_hops_by_hand():
    cell_of, hops = bfs_hops(FREE)
    a, b = cell_of[0, 0], cell_of[2, 0]
    assert hops[a, b] == 6  # around the wall: (0,0) (0,1) (0,2) (1,2) (2,2) (2,1) (2,0)
    assert hops[cell_of[0, 0], cell_of[0, 2]] == 2 and hops[a, a] == 0
    assert cell_of[1, 0] == -1 and cell_of[1, 1] == -1


def test_oracle_steps_by_hand():
    o = tiny_oracle()
    goal = jnp.array([0.0, 4.0])  # centre of cell (2, 0)
    xy = jnp.array([[0.0, 0.0], [0.5, 0.3], [0.3, 4.3], [0.0, 2.0]])
    steps = np.asarray(o.steps(xy, goal))
    assert steps[0] == pytest.approx((12.0 - 0.5) / 0.2)  # 6 hops of 2 through the cell centres
    assert steps[1] == pytest.approx((np.hypot(0.5, 0.3) + 12.0 - 0.5) / 0.2, rel=1e-5)
    assert steps[2] == 0.0  # within 0.5 of the goal, same cell
    assert steps[3] > UNREACHABLE / 10  # inside the wall
    v = np.asarray(o.values(xy[:1], goal))
    assert v[0] == pytest.approx(-(1 - 0.99 ** ((12.0 - 0.5) / 0.2)) / 0.01, rel=1e-5)


def test_oracle_of_ogbench_medium_maze():
    o = maze_oracle("pointmaze-medium-v0")
    assert o.cell_of.shape == (8, 8) and int((np.asarray(o.cell_of) >= 0).sum()) == 26
    same = np.asarray(o.steps(jnp.array([[0.0, 0.0]]), jnp.array([1.5, 0.0])))
    assert same[0] == pytest.approx((1.5 - 1.0) / 0.2)
    # (0, 0) is cell (1, 1); (4, 0) is cell (1, 2), its open neighbour: one hop of 4.
    nb = np.asarray(o.steps(jnp.array([[0.0, 0.0]]), jnp.array([4.0, 0.0])))
    assert nb[0] == pytest.approx((4.0 - 1.0) / 0.2)
