"""Offline dataset generation: OGBench's format, reproducibility, atomic files and resume."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import ogbench
import pytest

from ttt.data import generate as gen
from ttt.data.expert import blas_kernel
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
            np.testing.assert_array_equal(again[k], f[k][7 * 1001 :])
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
        gen.generate(NAV, episodes=10, seed=4, directory=nav10)
    # The same plan again (a rerun of a finished command) leaves the files as they are.
    mtime = (nav10 / f"{NAV}.npz").stat().st_mtime_ns
    gen.generate(NAV, episodes=10, seed=3, directory=nav10)
    assert (nav10 / f"{NAV}.npz").stat().st_mtime_ns == mtime


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


ANT_STITCH = "antmaze-medium-stitch-v0"


@pytest.fixture(scope="module")
def ant_experts(tmp_path_factory):
    """Two untrained (random) tiny ant experts saved as `ttt expert train` saves them."""
    import jax

    from ttt.data.expert import save_actor
    from ttt.data.sac import SACConfig, TanhGaussianActor

    d = tmp_path_factory.mktemp("experts")
    cfg = SACConfig(actor_hidden_dims=(16,))
    for i in (0, 1):
        actor = TanhGaussianActor(jax.random.key(i), 29, 8, (16,), final_init_scale=1.0)
        save_actor(d / f"e{i}.npz", actor, cfg, dict(step=0))
    return d


def test_antmaze_generation_with_an_expert_in_ogbench_format(ant_experts, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    gen.generate(ANT_STITCH, episodes=2, seed=5, directory=a, workers=2, expert=ant_experts / "e0.npz")
    with np.load(a / f"{ANT_STITCH}.npz") as f:
        assert sorted(f.files) == ["actions", "observations", "qpos", "qvel", "terminals"]
        obs = f["observations"]
        assert obs.shape == (2 * 201, 29) and f["actions"].shape == (2 * 201, 8)
        assert f["qpos"].shape == (2 * 201, 15) and f["qvel"].shape == (2 * 201, 14)
        np.testing.assert_allclose(obs[:, :15], f["qpos"], atol=1e-6)  # observation = qpos, qvel (xy first)
        np.testing.assert_allclose(obs[:, 15:], f["qvel"], atol=1e-6)
        assert np.array_equal(np.flatnonzero(f["terminals"]), [200, 401])
        assert np.abs(f["actions"]).max() <= 1.0 and f["actions"].std() > 0.1
        flipped = gen.upside_down(f["qpos"]).reshape(2, 201)
    assert [r.episodes for r in check(ANT_STITCH, a)] == [2, 1]
    env, train, val = ogbench.make_env_and_datasets(ANT_STITCH, dataset_dir=str(a))
    assert train["observations"].shape == (2 * 200, 29) and val["observations"].shape == (200, 29)
    env.close()
    meta = json.loads((a / f"{ANT_STITCH}.json").read_text())
    assert len(meta["expert_sha256"]) == 64 and 0.0 <= meta["goal_reached_fraction"] <= 1.0
    assert meta["flipped_episodes"] == int(flipped.any(1).sum())  # counted from the file's own torso
    assert meta["flipped_rows_fraction"] == float(flipped.mean())
    assert meta["blas_kernel"] == blas_kernel() and "reference" not in meta  # (no reference for a 2-episode plan)

    # Reproducible for a seed and an expert; another expert gives other data.
    gen.generate(ANT_STITCH, episodes=2, seed=5, directory=b, workers=1, expert=ant_experts / "e0.npz")
    assert json.loads((b / f"{ANT_STITCH}.json").read_text())["sha256_arrays"] == meta["sha256_arrays"]
    gen.generate(ANT_STITCH, episodes=2, seed=5, directory=b, workers=1, expert=ant_experts / "e1.npz", force=True)
    assert json.loads((b / f"{ANT_STITCH}.json").read_text())["sha256_arrays"] != meta["sha256_arrays"]


def test_reference_check_only_for_the_reference_plan():
    nav = get_spec("antmaze-medium-navigate-v0")
    ref = gen.GenerationPlan(nav, nav.episodes, 0, nav.noise, gen.REFERENCE_EXPERT)
    want = gen.REFERENCE_ARRAYS[(nav.name, "train")]
    assert gen.reference_check(ref, "train", want) == "equal"
    assert gen.reference_check(ref, "val", want) == "differs"  # (the val split has its own digest)
    assert gen.reference_check(ref, "train", "0" * 64) == "differs"
    for other in (
        dataclasses.replace(ref, seed=1),
        dataclasses.replace(ref, episodes=10),
        dataclasses.replace(ref, noise=0.3),
        dataclasses.replace(ref, expert="f" * 64),
        gen.GenerationPlan(get_spec(NAV), 1000, 0, 0.5, None),
    ):
        assert gen.reference_check(other, "train", want) is None


def test_reference_digests_are_the_committed_records():
    root = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "expert"
    for (name, split), want in gen.REFERENCE_ARRAYS.items():
        rec = json.loads((root / f"{name}{'-val' if split == 'val' else ''}.json").read_text())
        assert (rec["split"], rec["sha256_arrays"], rec["expert_sha256"]) == (split, want, gen.REFERENCE_EXPERT)
        spec = get_spec(name)
        assert (rec["seed"], rec["noise"], rec["episodes"]) == (
            0,
            spec.noise,
            spec.val_episodes(spec.episodes) if split == "val" else spec.episodes,
        )


def test_a_draw_unlike_the_reference_is_said_and_recorded(ant_experts, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gen, "reference_check", lambda plan, split, sha: "differs")
    gen.generate(ANT_STITCH, episodes=1, seed=2, directory=tmp_path, workers=1, expert=ant_experts / "e0.npz")
    err = capsys.readouterr().err
    assert f"warning: {ANT_STITCH}.npz: not bit-equal to this project's reference generation" in err
    assert json.loads((tmp_path / f"{ANT_STITCH}.json").read_text())["reference"] == "differs"


def test_blas_kernel_is_the_one_openblas_runs(tmp_path):
    if blas_kernel() is None or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("NumPy does not run OpenBLAS on an x86-64 CPU here")
    code = "import numpy; from ttt.data.expert import blas_kernel; print(blas_kernel())"
    env = dict(os.environ, OPENBLAS_CORETYPE="Nehalem")  # (SSE4.2: every x86-64 CPU this runs on has it)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "Nehalem"


def test_antmaze_needs_an_expert_and_pointmaze_refuses_one(ant_experts, tmp_path):
    with pytest.raises(gen.TttError, match="--expert PATH"):
        gen.generate(ANT_STITCH, episodes=1, directory=tmp_path)
    with pytest.raises(gen.TttError, match="--expert is for the antmaze and humanoidmaze datasets"):
        gen.generate(STITCH, episodes=1, directory=tmp_path, expert=ant_experts / "e0.npz")
    with pytest.raises(gen.TttError, match="no expert at"):
        gen.generate(ANT_STITCH, episodes=1, directory=tmp_path, expert=tmp_path / "missing.pkl")
    assert {"antmaze-medium-navigate-v0", ANT_STITCH} <= set(SPECS)
    assert get_spec("antmaze-medium-navigate-v0").episode_rows == 1001 and get_spec(ANT_STITCH).goal_eps == 0.5


HUM_STITCH = "humanoidmaze-medium-stitch-v0"


def test_humanoidmaze_generation_with_an_expert_in_ogbench_format(ant_experts, tmp_path):
    import jax

    from ttt.data.expert import save_actor
    from ttt.data.sac import SACConfig, TanhGaussianActor

    spec = get_spec(HUM_STITCH)
    assert (spec.robot, spec.episode_rows, spec.episodes, spec.ob_dim, spec.action_dim) == (
        "humanoid",
        401,
        5000,
        69,
        21,
    )
    assert get_spec("humanoidmaze-giant-navigate-v0").episode_rows == 4001
    assert get_spec("humanoidmaze-giant-stitch-v0").episodes == 10000
    actor = TanhGaussianActor(jax.random.key(0), 69, 21, (16,), final_init_scale=1.0)
    save_actor(tmp_path / "h.npz", actor, SACConfig(actor_hidden_dims=(16,)), dict(step=0), robot="humanoid")
    with pytest.raises(gen.TttError, match="is generated with a humanoid expert; .* is a ant's"):
        gen.generate(HUM_STITCH, episodes=1, directory=tmp_path, expert=ant_experts / "e0.npz")
    gen.generate(HUM_STITCH, episodes=1, seed=3, directory=tmp_path, workers=1, expert=tmp_path / "h.npz")
    with np.load(tmp_path / f"{HUM_STITCH}.npz") as f:
        assert f["observations"].shape == (401, 69) and f["actions"].shape == (401, 21)
        assert f["qpos"].shape == (401, 28) and f["qvel"].shape == (401, 27)
        np.testing.assert_allclose(f["observations"][:, :2], f["qpos"][:, :2], atol=1e-6)  # xy first
        np.testing.assert_allclose(f["observations"][:, -27:], f["qvel"], atol=1e-5)  # velocities last
        assert np.array_equal(np.flatnonzero(f["terminals"]), [400])
    assert [r.episodes for r in check(HUM_STITCH, tmp_path)] == [1, 1]
    env, train, val = ogbench.make_env_and_datasets(HUM_STITCH, dataset_dir=str(tmp_path))
    assert train["observations"].shape == (400, 69) and val["observations"].shape == (400, 69)
    env.close()


def test_upside_down_ants_by_hand():
    c, s = np.cos(np.radians(40)), np.sin(np.radians(40))
    quats = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [c, s, 0, 0], [0.5, 0, np.sqrt(0.75), 0], [0, 0, 0, 1]])
    qpos = np.zeros((5, 15))
    qpos[:, 3:7] = quats  # upright; 180 deg about x; 80 deg about x (tilted); 120 deg about y; yaw only
    assert gen.upside_down(qpos).tolist() == [False, True, False, True, False]
    # Per episode (2 episodes of 3 rows): the second turns over at its last row.
    rows = np.zeros((6, 15))
    rows[:, 3] = 1.0
    rows[5, 3:7] = [0, 1, 0, 0]
    stats = gen._flip_stats(dataclasses.replace(get_spec(ANT_STITCH), episode_rows=3), dict(qpos=rows))
    assert stats == dict(flipped_episodes=1, flipped_rows_fraction=1 / 6)
    assert gen._flip_stats(get_spec(STITCH), dict(qpos=rows)) == {}  # point mazes have no ant


def test_seeded_ogbench_resets_repeat():
    """OGBench's reset draws the start/goal noise from NumPy's global generator and runs random actions from the
    action space's generator before the goal observation: ``seed_env`` makes a reset repeat exactly."""
    env = gen._make_env(get_spec(ANT_STITCH))
    resets = []
    for _ in range(2):
        gen.seed_env(env, 7)
        ob, info = env.reset(seed=7, options=dict(task_id=2))
        resets.append((ob, info["goal"]))
        np.random.rand(), env.action_space.sample()  # whatever ran in between
    np.testing.assert_array_equal(resets[0][0], resets[1][0])
    np.testing.assert_array_equal(resets[0][1], resets[1][1])
    env.close()
