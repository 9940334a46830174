"""OGBench's BFS oracle, as used by generation, solves pointmaze-medium and covers the maze."""

from __future__ import annotations

import gymnasium
import numpy as np
import ogbench  # noqa: F401
import pytest

from ttt.data import generate as gen


@pytest.mark.parametrize("task_id", [1, 2, 3, 4, 5])
def test_noise_free_oracle_reaches_each_evaluation_goal(task_id):
    """OGBench's BFS oracle without action noise reaches every evaluation goal of pointmaze-medium.

    The oracle steers to the centre of the next BFS cell; inside the goal's cell that is the cell centre,
    while evaluation goals carry up to +-1 of uniform noise per coordinate, so the last leg heads for the goal
    itself (the success test is ||xy - goal|| <= 1). Goal noise comes from numpy's global RNG (OGBench's
    `add_noise`), seeded here so the test does not depend on test order; 3 noise draws per task.
    """
    for draw in range(3):
        np.random.seed(100 * task_id + draw)
        env = gymnasium.make("pointmaze-medium-v0", terminate_at_goal=False, max_episode_steps=1000)
        env.reset(seed=draw, options=dict(task_id=task_id))
        u = env.unwrapped
        goal = np.array(u.cur_goal_xy)
        reached_at, entered_goal_cell = None, None
        for t in range(1000):
            if u.xy_to_ij(u.get_xy()) == u.xy_to_ij(goal):
                entered_goal_cell = t if entered_goal_cell is None else entered_goal_cell
                d = goal - u.get_xy()
                direction = d / (np.linalg.norm(d) + 1e-6)
            else:
                direction = gen.oracle_direction(env)
            _, _, _, _, info = env.step(np.clip(direction, -1, 1))
            if info["success"]:
                reached_at = t
                break
        env.close()
        assert reached_at is not None, f"task {task_id} draw {draw}: no success within 1000 steps (goal {goal})"
        # Shortest paths in pointmaze-medium are at most ~12 cells of 4 units at 0.2 per step: well under 400.
        assert reached_at < 400, f"task {task_id}: took {reached_at} steps"


def test_cell_centre_oracle_follows_bfs_route():
    """The BFS subgoal is always a free neighbour (or the same cell) one step closer to the goal."""
    env = gymnasium.make("pointmaze-medium-v0")
    u = env.unwrapped
    free, _ = gen.maze_cells(np.array(u.maze_map))
    goal_ij = (6, 6)
    for ij in free:
        sub, bfs = u.get_oracle_subgoal(np.array(u.ij_to_xy(ij)), np.array(u.ij_to_xy(goal_ij)))
        sub_ij = u.xy_to_ij(sub)
        assert sub_ij in free
        assert abs(sub_ij[0] - ij[0]) + abs(sub_ij[1] - ij[1]) <= 1
        assert bfs[sub_ij] == max(bfs[ij] - 1, 0)
    env.close()


@pytest.mark.slow
def test_50_navigate_episodes_visit_every_free_cell(tmp_path):
    name = "pointmaze-medium-navigate-v0"
    gen.generate(name, episodes=50, seed=0, directory=tmp_path, workers=2)
    with np.load(tmp_path / f"{name}.npz") as f:
        xy = f["observations"]
    env = gymnasium.make("pointmaze-medium-v0")
    maze = np.array(env.unwrapped.maze_map)
    env.close()
    free, _ = gen.maze_cells(maze)
    # OGBench's xy_to_ij: cell (i, j) is centred at (4 j - 4, 4 i - 4) with unit 4.
    i = np.floor((xy[:, 1] + 4 + 2) / 4).astype(int)
    j = np.floor((xy[:, 0] + 4 + 2) / 4).astype(int)
    visited = set(zip(i.tolist(), j.tolist(), strict=True))
    assert visited == set(free), f"unvisited: {sorted(set(free) - visited)}, outside: {sorted(visited - set(free))}"


def test_memoised_oracle_is_ogbench_s_at_every_step():
    """`oracle_subgoal` answers from its memo what OGBench's BFS would at every step of a noisy navigate episode
    (the memo is keyed by the agent's and the goal's cells, on which alone the BFS answer depends), and it is used:
    far fewer searches than steps."""
    from ttt.envs.gym import oracle_direction, oracle_subgoal

    env = gymnasium.make("pointmaze-large-v0", terminate_at_goal=False, max_episode_steps=1000)
    env.reset(seed=3, options=dict(task_id=2))
    u = env.unwrapped
    rng = np.random.default_rng(0)
    free, _ = gen.maze_cells(np.array(u.maze_map))
    for t in range(300):
        if t == 150:  # navigate re-draws the goal when reached: the goal cell is part of the key
            u.set_goal(goal_ij=free[len(free) // 2])
        want = u.get_oracle_subgoal(u.get_xy(), u.cur_goal_xy)[0]
        got = oracle_subgoal(env)
        assert got.dtype == want.dtype and np.array_equal(got, want)
        env.step(np.clip(oracle_direction(env) + rng.normal(0, 0.5, 2), -1, 1))
    assert 1 < len(u._ttt_oracle_memo) < 100  # one search per (cell, goal cell) visited: far fewer than 300 steps
    assert len({goal for _, goal in u._ttt_oracle_memo}) == 2
    with pytest.raises(ValueError, match="read-only"):
        oracle_subgoal(env)[0] = 0.0  # the memo's answer cannot be edited in place by a caller
    env.close()
