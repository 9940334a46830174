"""Dataset pytree: construction from the raw file layout and from OGBench's compact loader, and validation."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import ogbench
import pytest

from ttt.data.dataset import Dataset, episode_bounds
from ttt.errors import TttError

LENGTHS = (4, 6, 3)  # rows per episode, final observation row included
N = sum(LENGTHS)


def raw_arrays():
    """Observation = (row, -row), action = (row + 0.5, 2 * row); terminal at each episode's last row."""
    rows = np.arange(N, dtype=np.float32)
    obs = np.stack([rows, -rows], axis=1)
    act = np.stack([rows + 0.5, 2 * rows], axis=1)
    terminals = np.zeros(N, dtype=bool)
    terminals[np.cumsum(LENGTHS) - 1] = True
    return obs, act, terminals


# Expected values, by hand.
VALID = np.array([1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 1, 0], dtype=bool)
NEXT_IDX = np.array([1, 2, 3, 3, 5, 6, 7, 8, 9, 9, 11, 12, 12])
EP_ID = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2])
EP_END = np.array([3, 3, 3, 3, 9, 9, 9, 9, 9, 9, 12, 12, 12])
VALID_ROWS = np.array([0, 1, 2, 4, 5, 6, 7, 8, 10, 11])


def assert_same(a: Dataset, b: Dataset) -> None:
    for name in ("observations", "actions", "next_idx", "ep_id", "ep_end", "valid", "goals", "valid_rows"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=name)


def test_from_arrays_by_hand():
    obs, act, term = raw_arrays()
    d = Dataset.from_arrays(obs, act, term)
    np.testing.assert_array_equal(d.valid, VALID)
    np.testing.assert_array_equal(d.next_idx, NEXT_IDX)
    np.testing.assert_array_equal(d.ep_id, EP_ID)
    np.testing.assert_array_equal(d.ep_end, EP_END)
    np.testing.assert_array_equal(d.valid_rows, VALID_ROWS)
    np.testing.assert_array_equal(d.observations, obs)
    np.testing.assert_array_equal(d.actions, act)
    np.testing.assert_array_equal(d.goals, obs)  # default goal_fn: the full observation
    assert (d.n_rows, d.obs_dim, d.action_dim, d.goal_dim, d.n_episodes, d.n_valid) == (13, 2, 2, 2, 3, 10)
    assert d.next_idx.dtype == jnp.int32 and d.valid.dtype == jnp.bool_ and d.observations.dtype == jnp.float32


def test_goal_fn_and_episode_bounds():
    obs, act, term = raw_arrays()
    d = Dataset.from_arrays(obs, act, term, goal_fn=lambda o: o[:, :1] * 2)
    np.testing.assert_array_equal(d.goals, obs[:, :1] * 2)
    assert d.goal_dim == 1
    ep_id, start, end = episode_bounds(term)
    np.testing.assert_array_equal(ep_id, EP_ID)
    np.testing.assert_array_equal(end, EP_END)
    np.testing.assert_array_equal(start, [0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 10, 10, 10])


def test_from_ogbench_matches_from_arrays(tmp_path):
    obs, act, term = raw_arrays()
    path = tmp_path / "tiny.npz"
    np.savez(path, observations=obs, actions=act, terminals=term, qpos=obs.copy(), qvel=np.zeros_like(obs))
    loaded = ogbench.load_dataset(str(path), compact_dataset=True)
    # OGBench's compact terminals are 1 at the last two rows of each episode; valids 0 at the last row.
    np.testing.assert_array_equal(loaded["valids"], VALID.astype(np.float32))
    np.testing.assert_array_equal(loaded["terminals"] > 0, ~VALID | np.roll(~VALID, -1))
    goal_fn = lambda o: o[:, :1]  # noqa: E731
    assert_same(Dataset.from_ogbench(loaded, goal_fn), Dataset.from_arrays(obs, act, term, goal_fn))
    assert_same(Dataset.from_ogbench(loaded), Dataset.from_arrays(obs, act, term))


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda o, a, t: (o, a[:-1], t), "mismatched lengths"),
        (lambda o, a, t: (o, a, np.concatenate([t[:-1], [False]])), "last row"),
        (lambda o, a, t: (o[:3], a[:3], np.array([False, True, True])), r"episode 1 .* 1 row"),
        (lambda o, a, t: (np.where(np.arange(N)[:, None] == 5, np.nan, o), a, t), "observations has 2 non-finite"),
        (lambda o, a, t: (o, np.where(np.arange(N)[:, None] == 7, np.inf, a), t), r"actions .*row 7"),
        (lambda o, a, t: (o[:, 0], a, t), "2-D"),
    ],
)
def test_from_arrays_errors(mutate, match):
    obs, act, term = raw_arrays()
    with pytest.raises(TttError, match=match) as e:
        Dataset.from_arrays(*mutate(obs, act, term))
    assert "\n" not in str(e.value)


def test_from_ogbench_errors():
    obs, act, term = raw_arrays()
    with pytest.raises(TttError, match="compact_dataset=True"):
        Dataset.from_ogbench({"observations": obs, "actions": act, "terminals": term.astype(np.float32)})
    with pytest.raises(TttError, match="goal_fn must return"):
        Dataset.from_arrays(obs, act, term, goal_fn=lambda o: o[:-1])
