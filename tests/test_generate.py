"""Offline dataset generation: OGBench's format, reproducibility, atomic files and resume."""

from __future__ import annotations

import json

import numpy as np
import ogbench
import pytest

from ttt.data import generate as gen
from ttt.data.files import check, list_datasets
from ttt.data.specs import SPECS, get_spec

NAV = "pointmaze-medium-navigate-v0"
STITCH = "pointmaze-medium-stitch-v0"


@pytest.fixture(scope="module")
def nav10(tmp_path_factory):
    """A 10-episode navigate dataset (1 val episode), generated once for the module."""
    d = tmp_path_factory.mktemp("nav10")
    gen.generate(NAV, episodes=10, seed=3, directory=d, workers=2)
    return d


def test_format_matches_ogbench(nav10):
    spec = get_spec(NAV)
    with np.load(nav10 / f"{NAV}.npz") as f:
        assert sorted(f.files) == ["actions", "observations", "qpos", "qvel", "terminals"]
        assert f["observations"].dtype == np.float32 and f["observations"].shape == (10 * 1001, 2)
        assert f["actions"].dtype == np.float32 and f["actions"].shape == (10 * 1001, 2)
        assert f["terminals"].dtype == np.bool_
        assert f["qpos"].dtype == np.float32 and f["qvel"].dtype == np.float32
        term = f["terminals"]
        # OGBench's layout: True exactly at the last row of every episode.
        assert np.array_equal(np.flatnonzero(term), np.arange(1000, 10 * 1001, 1001))
        # The point maze observation is its qpos, recorded before the step.
        assert np.array_equal(f["observations"], f["qpos"])
        assert np.abs(f["actions"]).max() <= 1.0
    with np.load(nav10 / f"{NAV}-val.npz") as f:
        assert f["observations"].shape == (1001, spec.ob_dim)

    # ogbench's own loaders read the files unchanged, in both layouts.
    env, train, val = ogbench.make_env_and_datasets(NAV, dataset_dir=str(nav10))
    assert train["observations"].shape == (10 * 1000, 2) and train["next_observations"].shape == (10 * 1000, 2)
    assert val["observations"].shape == (1000, 2)
    np.testing.assert_array_equal(train["observations"][1:1000], train["next_observations"][:999])
    assert env.observation_space.shape == (2,)
    compact = ogbench.load_dataset(str(nav10 / f"{NAV}.npz"), compact_dataset=True)
    assert compact["valids"].sum() == 10 * 1000
    env.close()


def test_check_and_list(nav10):
    reports = check(NAV, nav10)
    assert [r.episodes for r in reports] == [10, 1]
    rows = list_datasets(nav10)
    assert rows[0]["name"] == NAV and rows[0]["status"] == "complete" and rows[0]["episodes"] == 10
    meta = json.loads((nav10 / f"{NAV}.json").read_text())
    assert meta["seed"] == 3 and meta["episodes"] == 10 and meta["split"] == "train"


def test_same_seed_same_arrays_any_worker_count(nav10, tmp_path):
    spec = get_spec(NAV)
    again = gen.generate_episodes(spec, seed=3, split=0, episodes=range(7, 10))
    with np.load(nav10 / f"{NAV}.npz") as f:
        for k in gen.KEYS:
            np.testing.assert_array_equal(again[k], f[k][7 * 1001:])
    other = gen.generate_episodes(spec, seed=4, split=0, episodes=range(7, 8))
    assert not np.array_equal(other["observations"], again["observations"][:1001])
    # The validation split draws from another stream than training.
    val0 = gen.generate_episodes(spec, seed=3, split=1, episodes=range(0, 1))
    assert not np.array_equal(val0["observations"], gen.generate_episodes(spec, 3, 0, range(1))["observations"])


def test_navigate_redraws_goals_and_actions_follow_oracle(nav10):
    with np.load(nav10 / f"{NAV}.npz") as f:
        obs, act = f["observations"], f["actions"]
    # Actions are the oracle direction plus N(0, 0.5^2) clipped: far from clipping, mean norm of the noise-free
    # part is 1, so the mean action norm sits well above that of pure noise and below sqrt(2).
    norms = np.linalg.norm(act, axis=-1)
    assert 0.8 < norms.mean() < 1.3
    # Navigate episodes re-draw goals, so the agent travels far: mean path per episode over 50 maze units.
    steps = np.linalg.norm(np.diff(obs.reshape(10, 1001, 2), axis=1), axis=-1).sum(1)
    assert steps.mean() > 50


def test_maze_cells_and_stitch_goal_cells_by_hand():
    import gymnasium

    env = gymnasium.make("pointmaze-medium-v0")
    maze = np.array(env.unwrapped.maze_map)
    env.close()
    # From (1, 1): (2,1),(1,2) -> (2,2) -> (3,2) -> (4,2),(3,3) are 4 BFS steps away.
    assert gen.cells_at_bfs_distance(maze, (1, 1), 4) == [(4, 2), (3, 3)]
    free, vertex = gen.maze_cells(maze)
    assert len(free) == int((maze == 0).sum())
    assert set(vertex) <= set(free)
    assert (1, 1) in vertex  # a corner
    assert (3, 3) not in vertex  # a straight horizontal hallway cell
    assert (2, 2) in vertex  # open area


def test_interrupted_run_leaves_no_file_and_resumes(tmp_path):
    calls = []

    def boom(done, total):
        calls.append(done)
        if len(calls) == 2:  # after the first block has been cached
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        gen.generate(STITCH, episodes=30, seed=1, directory=tmp_path, workers=1, progress=boom)
    assert not list(tmp_path.glob("*.npz"))  # no partial dataset file
    partial = list(tmp_path.glob(f".{STITCH}.partial-*"))
    assert len(partial) == 1 and len(list(partial[0].glob("split*.npz"))) == 1
    assert "partial run" in list_datasets(tmp_path)[0]["status"]

    seen = []
    gen.generate(STITCH, episodes=30, seed=1, directory=tmp_path, workers=1, progress=lambda d, t: seen.append(d))
    assert seen[0] == 25  # resumed after the cached block of 25 episodes
    assert not list(tmp_path.glob(f".{STITCH}.partial-*"))
    fresh = gen.generate_episodes(get_spec(STITCH), seed=1, split=0, episodes=range(30))
    with np.load(tmp_path / f"{STITCH}.npz") as f:
        for k in gen.KEYS:
            np.testing.assert_array_equal(f[k], fresh[k])
    assert [r.episodes for r in check(STITCH, tmp_path)] == [30, 3]


def test_refuses_to_overwrite(nav10):
    from ttt.errors import TttError

    with pytest.raises(TttError, match="already exists; pass --force"):
        gen.generate(NAV, episodes=10, seed=3, directory=nav10)


@pytest.mark.slow
def test_cube_single_format(tmp_path):
    name = "cube-single-play-v0"
    gen.generate(name, episodes=1, seed=0, directory=tmp_path, workers=2)
    env, train, val = ogbench.make_env_and_datasets(name, dataset_dir=str(tmp_path))
    assert train["observations"].shape == (1000, 28) and train["actions"].shape == (1000, 5)
    assert val["observations"].shape == (1000, 28)
    with np.load(tmp_path / f"{name}.npz") as f:
        assert f["qpos"].shape[0] == 1001 and f["terminals"].sum() == 1
        obs = f["observations"]
    # The cube moves during play data (the plan oracle picks and places it).
    cube = SPECS[name].goal_coords(obs)
    assert np.linalg.norm(cube[-1] - cube[0]) > 0.02 or np.ptp(cube, axis=0).max() > 0.02
    assert check(name, tmp_path)[0].rows == 1001
    env.close()


def test_load_builds_dataset_with_goal_coordinates(nav10):
    from ttt.data.files import load

    data = load(NAV, nav10)
    assert data.n_rows == 10 * 1001 and data.n_episodes == 10 and data.n_valid == 10 * 1000
    np.testing.assert_array_equal(np.asarray(data.goals), np.asarray(data.observations))  # maze goal = xy
    assert load(NAV, nav10, split="val").n_episodes == 1
