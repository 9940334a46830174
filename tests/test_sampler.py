"""Goal-conditioned sampler: OGBench's GCDataset semantics, exactly where deterministic, else statistically.

Statistical checks use fixed keys (so they are deterministic, not flaky); each states its tolerance in standard
deviations of the estimate under the intended distribution.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import ogbench
import pytest

from ttt.data.dataset import Dataset
from ttt.data.sampler import (
    GoalMix,
    SamplerConfig,
    make_batch,
    sample_batch,
    sample_goals,
    sample_rows,
    traj_final,
)

N_DRAWS = 20_000


def raw(lengths, scale=1.0):
    """Raw file layout: observation = (row, -row) * scale, action = (row + 0.5, 2 row); terminal at episode ends."""
    n = sum(lengths)
    rows = np.arange(n, dtype=np.float32)
    obs = np.stack([rows, -rows], axis=1) * np.float32(scale)
    act = np.stack([rows + 0.5, 2 * rows], axis=1)
    term = np.zeros(n, dtype=bool)
    term[np.cumsum(lengths) - 1] = True
    return obs, act, term


def make(lengths, scale=1.0) -> Dataset:
    return Dataset.from_arrays(*raw(lengths, scale))


TINY = (4, 6, 3)  # valid rows 0,1,2 | 4..8 | 10,11; last valid rows (OGBench's final_state_idx) 2, 8, 11


def goals_of(data, idxs, mix, discount, seed=0):
    return np.asarray(
        jax.jit(sample_goals, static_argnums=3)(jax.random.key(seed), data, jnp.asarray(idxs), mix, discount)
    )


def test_defaults_are_ogbench_gciql():
    cfg = SamplerConfig()
    assert (cfg.batch_size, cfg.discount, cfg.gc_negative) == (1024, 0.99, True)
    assert cfg.value == GoalMix(0.2, 0.5, 0.3, True)
    assert cfg.actor == GoalMix(0.0, 1.0, 0.0, False)
    hash(cfg)


@pytest.mark.parametrize(
    "args, match",
    [
        ((0.2, 0.5, 0.2, True), "sum to 1"),
        ((-0.1, 0.6, 0.5, True), r"p_cur must be in \[0, 1\]"),
        ((0.0, 1.5, -0.5, False), r"p_traj must be in \[0, 1\]"),
    ],
)
def test_goalmix_errors(args, match):
    with pytest.raises(ValueError, match=match):
        GoalMix(*args)


def test_sampler_config_errors():
    with pytest.raises(ValueError, match="discount"):
        SamplerConfig(discount=1.0)
    with pytest.raises(ValueError, match="batch_size"):
        SamplerConfig(batch_size=0)


def test_sample_rows_valid_and_uniform():
    data = make(TINY)
    rows = np.asarray(jax.jit(sample_rows, static_argnums=2)(jax.random.key(1), data, N_DRAWS))
    valid_rows = np.asarray(data.valid_rows)
    assert np.isin(rows, valid_rows).all()
    counts = np.array([(rows == r).sum() for r in valid_rows])
    expected = N_DRAWS / len(valid_rows)
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 33.7, chi2  # 9 degrees of freedom: P(chi2 > 33.7) = 1e-4 under uniformity


def test_traj_final_matches_ogbench_terminal_locs(tmp_path):
    obs, act, term = raw(TINY)
    np.savez(tmp_path / "d.npz", observations=obs, actions=act, terminals=term, qpos=obs, qvel=obs)
    d = ogbench.load_dataset(str(tmp_path / "d.npz"), compact_dataset=True)
    (terminal_locs,) = np.nonzero(d["terminals"] > 0)
    rows = np.arange(len(obs))
    ogbench_final = terminal_locs[np.searchsorted(terminal_locs, rows)]  # GCDataset.sample_goals
    np.testing.assert_array_equal(traj_final(Dataset.from_ogbench(d), jnp.asarray(rows)), ogbench_final)


def test_p_cur_one_is_identity():
    data = make(TINY)
    idxs = np.tile(np.asarray(data.valid_rows), 50)
    for geom in (True, False):
        np.testing.assert_array_equal(goals_of(data, idxs, GoalMix(1.0, 0.0, 0.0, geom), 0.99), idxs)


@pytest.mark.parametrize("geom", [True, False])
def test_traj_goals_support(geom):
    data = make(TINY)
    idxs = np.tile(np.asarray(data.valid_rows), 500)
    goals = goals_of(data, idxs, GoalMix(0.0, 1.0, 0.0, geom), 0.9)
    final = np.asarray(data.ep_end)[idxs] - 1
    ep = np.asarray(data.ep_id)
    assert (ep[goals] == ep[idxs]).all()
    at_final = idxs == final
    assert (goals[at_final] == idxs[at_final]).all()
    assert ((goals[~at_final] > idxs[~at_final]) & (goals[~at_final] <= final[~at_final])).all()
    # every reachable future row is hit
    for i in np.asarray(data.valid_rows):
        assert set(goals[idxs == i]) == set(range(min(i + 1, final[idxs == i][0]), final[idxs == i][0] + 1))


def test_geom_offsets_distribution():
    data = make((3000,))  # one long episode, valid rows 0..2998 (one shape: one compilation)
    mix = GoalMix(0.0, 1.0, 0.0, True)
    off = goals_of(data, np.zeros(N_DRAWS, np.int32), mix, 0.5)
    # P(offset = k) = 0.5^k; sd of each frequency <= 0.0036, tolerance 0.015 (> 4 sd)
    for k in range(1, 5):
        assert abs((off == k).mean() - 0.5**k) < 0.015, (k, (off == k).mean())
    # truncation at the last valid row (2998): from 2996, P(goal = 2997) = 0.5, P(goal = 2998) = P(offset >= 2)
    g = goals_of(data, np.full(N_DRAWS, 2996, np.int32), mix, 0.5, seed=1)
    assert set(np.unique(g)) == {2997, 2998}
    assert abs((g == 2998).mean() - 0.5) < 0.015
    # discount 0.99: mean offset 1 / (1 - 0.99) = 100 (truncation at 2998 is negligible), sd of the mean ~0.7,
    # tolerance 3
    off = goals_of(data, np.zeros(N_DRAWS, np.int32), mix, 0.99, seed=2)
    assert abs(off.mean() - 100.0) < 3.0, off.mean()


def test_uniform_traj_goals_match_ogbench_rounding():
    data = make((12,))  # final_state_idx = 10
    goals = goals_of(data, np.zeros(N_DRAWS, np.int32), GoalMix(0.0, 1.0, 0.0, False), 0.99)
    # round(1 * u + 10 * (1 - u)), u ~ U[0, 1): the two end values get half the mass of the inner ones
    expected = {k: (1 / 18 if k in (1, 10) else 1 / 9) for k in range(1, 11)}
    assert set(np.unique(goals)) == set(expected)
    for k, p in expected.items():
        assert abs((goals == k).mean() - p) < 0.012, (k, (goals == k).mean(), p)  # sd <= 0.0023: > 5 sd


@pytest.mark.parametrize("geom", [True, False])
def test_mixture_proportions(geom):
    # Row 0's episode has valid rows {0, 1}: its current goal is 0 and every trajectory goal is 1. The other
    # 1000 valid rows can only be random goals; a random goal lands on 0 or 1 with probability 1/1002 each.
    data = make((3,) + (101,) * 10)
    goals = goals_of(data, np.zeros(N_DRAWS, np.int32), GoalMix(0.2, 0.5, 0.3, geom), 0.99)
    assert np.asarray(data.valid)[goals].all()
    p_hit = 0.3 / 1002
    # sd of each frequency <= 0.0036; tolerance 0.015 (> 4 sd)
    assert abs((goals == 0).mean() - (0.2 + p_hit)) < 0.015
    assert abs((goals == 1).mean() - (0.5 + p_hit)) < 0.015
    assert abs((goals >= 3).mean() - 0.3 * 1000 / 1002) < 0.015
    rand = goals[goals >= 3]  # random goals spread over all ten other episodes
    assert len(np.unique(np.asarray(data.ep_id)[rand])) == 10


def test_rewards_masks_next_observations_by_hand():
    data = make(TINY)
    idxs = jnp.arange(13)  # all rows, final observation rows (3, 9, 12) included
    key = jax.random.key(3)
    # trajectory goal == idx exactly at the last valid rows (2, 8, 11) and at the final rows (their own final)
    traj = SamplerConfig(batch_size=13, value=GoalMix(0.0, 1.0, 0.0, True))
    b = make_batch(key, data, idxs, traj)
    success = np.isin(np.arange(13), [2, 3, 8, 9, 11, 12]).astype(np.float32)
    np.testing.assert_array_equal(b.rewards, success - 1)
    np.testing.assert_array_equal(b.masks, 1 - success)
    np.testing.assert_array_equal(b.next_observations[:, 0], [1, 2, 3, 3, 5, 6, 7, 8, 9, 9, 11, 12, 12])
    b = make_batch(key, data, idxs, dataclasses.replace(traj, gc_negative=False))
    np.testing.assert_array_equal(b.rewards, success)
    np.testing.assert_array_equal(b.masks, 1 - success)
    b = make_batch(key, data, idxs, dataclasses.replace(traj, value=GoalMix(1.0, 0.0, 0.0, False)))
    np.testing.assert_array_equal(b.rewards, np.zeros(13))
    np.testing.assert_array_equal(b.masks, np.zeros(13))
    assert b.rewards.dtype == jnp.float32 and b.masks.dtype == jnp.float32


def test_sample_batch_fields_jit_vmap_single_trace():
    data = make(TINY)
    cfg = SamplerConfig(batch_size=256)
    keys = jax.random.split(jax.random.key(5), 3)
    f = jax.jit(eqx.debug.assert_max_traces(sample_batch, max_traces=1), static_argnums=2)
    looped = [f(k, data, cfg) for k in keys]
    for b in looped:  # observations encode their row index: decode every field
        idxs = np.asarray(b.idxs)
        assert np.asarray(data.valid)[idxs].all()
        np.testing.assert_array_equal(b.observations[:, 0], idxs)
        np.testing.assert_array_equal(b.actions[:, 0], idxs + 0.5)
        np.testing.assert_array_equal(b.next_observations[:, 0], idxs + 1)  # valid rows: next row, same episode
        np.testing.assert_array_equal(b.value_goals[:, 0], b.value_goal_idxs)
        np.testing.assert_array_equal(b.actor_goals[:, 0], b.actor_goal_idxs)
        np.testing.assert_array_equal(b.rewards, (idxs == np.asarray(b.value_goal_idxs)) - 1.0)
        np.testing.assert_array_equal(b.masks, 1.0 - (idxs == np.asarray(b.value_goal_idxs)))
    # same shapes, different values: still the same compiled program (the dataset is an argument)
    other = make(TINY, scale=2.0)
    b_other = f(keys[0], other, cfg)
    np.testing.assert_array_equal(b_other.observations[:, 0], 2.0 * np.asarray(b_other.idxs))
    assert eqx.debug.get_num_traces(f) == 1
    batched = jax.jit(jax.vmap(lambda k, d: sample_batch(k, d, cfg), in_axes=(0, None)))(keys, data)
    for i, one in enumerate(looped):
        for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(batched), strict=True):
            np.testing.assert_array_equal(a, b[i])
    assert not all(np.array_equal(looped[0].idxs, x.idxs) for x in looped[1:])
