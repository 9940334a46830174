"""OGBench's BFS oracle, as used by generation, solves pointmaze-medium and covers the maze."""

from __future__ import annotations

import gymnasium
import numpy as np
import ogbench  # noqa: F401
import pytest

from ttt.data import generate as gen


@pytest.mark.parametrize("task_id", [1, 2, 3, 4, 5])
def test_noise_free_oracle_reaches_each_evaluation_goal(task_id):
    env = gymnasium.make("pointmaze-medium-v0", terminate_at_goal=False, max_episode_steps=1000)
    env.reset(seed=task_id, options=dict(task_id=task_id))
    u = env.unwrapped
    goal = np.array(u.cur_goal_xy)
    reached_at = None
    for t in range(1000):
        _, _, _, _, info = env.step(np.clip(gen.oracle_direction(env), -1, 1))
        if info["success"]:
            reached_at = t
            break
    env.close()
    assert reached_at is not None, f"task {task_id}: oracle did not reach {goal} in 1000 steps"
    assert np.linalg.norm(u.get_xy() - goal) <= 1.0


@pytest.mark.slow
def test_200_navigate_episodes_visit_every_free_cell(tmp_path):
    name = "pointmaze-medium-navigate-v0"
    gen.generate(name, episodes=200, seed=0, directory=tmp_path, workers=2)
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
