"""An oracle critic for point mazes: true shortest-path steps to a goal through the maze.

`maze_oracle(env_id)` reads OGBench's maze map (host side, once) and breadth-first searches it into a table of
cell-to-cell hops; `MazeOracle.steps(xy, goal_xy)` is then pure JAX, O(rows):

    geodesic(x, g) = |x - g|                                       same cell
                   = |x - c(x)| + unit * hops(c(x), c(g)) + |c(g) - g|   otherwise (through the cell centres)
    steps(x, g)    = max(geodesic - goal_eps, 0) / step_len          (point maze: 0.2 per step at full speed)

and `MazeOracle.values` puts it on OGBench's value scale, `V = -(1 - gamma^steps) / (1 - gamma)` (reward -1 per
step until the goal). Used in place of a learned value for SELECTION only (`TTTConfig.critic = 'oracle'`), it is
the upper bound of a perfect critic; with any critic it gives the ranking diagnostics of `select.span_metrics`.
The resolution is one maze cell: within a cell and across its neighbours it measures through the cell centres.
"""

from __future__ import annotations

import collections
import functools

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ttt.envs.pointmaze import ACTION_SCALE, _make_gym_env

UNREACHABLE = 1e9  # hops between cells with no path (and from a wall cell)


class MazeOracle(eqx.Module):
    """Shortest-path steps to a goal through one maze (see the module docstring). Pass it to jitted code as an
    argument (it holds arrays)."""

    cell_of: Int[Array, "H W"]  # index of each free grid square in `hops`, -1 for walls
    hops: Float[Array, "cells cells"]  # BFS hops between free cells (UNREACHABLE if none)
    centers: Float[Array, "cells 2"]  # xy of each free cell's centre
    unit: float = eqx.field(static=True)
    offset: tuple[float, float] = eqx.field(static=True)
    step_len: float = eqx.field(static=True)
    goal_eps: float = eqx.field(static=True)

    def cell(self, xy: Float[Array, "*batch 2"]) -> Int[Array, "*batch"]:
        """Free-cell index of each point (OGBench's `xy_to_ij`), -1 outside the free cells."""
        h, w = self.cell_of.shape
        i = jnp.floor((xy[..., 1] + self.offset[1] + 0.5 * self.unit) / self.unit).astype(jnp.int32)
        j = jnp.floor((xy[..., 0] + self.offset[0] + 0.5 * self.unit) / self.unit).astype(jnp.int32)
        inside = (i >= 0) & (i < h) & (j >= 0) & (j < w)
        return jnp.where(inside, self.cell_of[jnp.clip(i, 0, h - 1), jnp.clip(j, 0, w - 1)], -1)

    def geodesic(self, xy: Float[Array, "n 2"], goal_xy: Float[Array, " 2"]) -> Float[Array, " n"]:
        """Path length from each point to the goal through the maze, at cell resolution."""
        c = self.cell(xy)
        cg = self.cell(goal_xy)
        ci, cgi = jnp.maximum(c, 0), jnp.maximum(cg, 0)
        straight = jnp.linalg.norm(xy - goal_xy, axis=-1)
        via = (
            jnp.linalg.norm(xy - self.centers[ci], axis=-1)
            + self.unit * self.hops[ci, cgi]
            + jnp.linalg.norm(self.centers[cgi] - goal_xy)
        )
        d = jnp.where(c == cg, straight, via)
        return jnp.where((c < 0) | (cg < 0), UNREACHABLE, d).astype(jnp.float32)

    def steps(self, xy: Float[Array, "n 2"], goal_xy: Float[Array, " 2"]) -> Float[Array, " n"]:
        """Environment steps from each point until it is within `goal_eps` of the goal, at full speed."""
        return jnp.maximum(self.geodesic(xy, goal_xy) - self.goal_eps, 0.0) / self.step_len

    def values(self, xy: Float[Array, "n 2"], goal_xy: Float[Array, " 2"], gamma: float = 0.99) -> Float[Array, " n"]:
        """OGBench's value scale: `-(1 - gamma^steps) / (1 - gamma)`."""
        return -(1.0 - jnp.power(jnp.float32(gamma), self.steps(xy, goal_xy))) / (1.0 - gamma)


def bfs_hops(free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cell index grid (-1 for walls) and the all-pairs hop table of a boolean free-cell grid (4-neighbour BFS)."""
    free = np.asarray(free, bool)
    cells = [tuple(ij) for ij in np.argwhere(free)]
    cell_of = -np.ones(free.shape, np.int32)
    for k, (i, j) in enumerate(cells):
        cell_of[i, j] = k
    hops = np.full((len(cells), len(cells)), UNREACHABLE, np.float32)
    for k, src in enumerate(cells):
        hops[k, k] = 0
        queue = collections.deque([src])
        while queue:
            i, j = queue.popleft()
            for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                a, b = i + di, j + dj
                if 0 <= a < free.shape[0] and 0 <= b < free.shape[1] and free[a, b]:
                    m = cell_of[a, b]
                    if hops[k, m] >= UNREACHABLE:
                        hops[k, m] = hops[k, cell_of[i, j]] + 1
                        queue.append((a, b))
    return cell_of, hops


def has_oracle(env_id: str) -> bool:
    """Whether `maze_oracle` supports the env: OGBench's point mazes without teleports."""
    return env_id.startswith("pointmaze-") and "teleport" not in env_id


@functools.cache
def maze_oracle(env_id: str) -> MazeOracle:
    """The oracle of an OGBench point maze (gymnasium id, e.g. 'pointmaze-medium-v0')."""
    if not has_oracle(env_id):
        raise ValueError(
            f"the oracle critic supports OGBench's point mazes without teleports (pointmaze-medium/large/giant-v0), "
            f"got {env_id!r}"
        )
    env = _make_gym_env(env_id)
    u = env.unwrapped
    maze_map = np.asarray(u.maze_map)
    unit, ox, oy = float(u._maze_unit), float(u._offset_x), float(u._offset_y)
    env.close()
    cell_of, hops = bfs_hops(maze_map == 0)
    centers = np.array([(j * unit - ox, i * unit - oy) for i, j in np.argwhere(maze_map == 0)], np.float32)
    return MazeOracle(
        cell_of=jnp.asarray(cell_of),
        hops=jnp.asarray(hops),
        centers=jnp.asarray(centers),
        unit=unit,
        offset=(ox, oy),
        step_len=float(ACTION_SCALE),
        goal_eps=float(u._goal_tol) if hasattr(u, "_goal_tol") else 1.0,
    )
