"""The OGBench datasets this project can generate offline, with OGBench's published generation settings.

Settings follow OGBench's `data_gen_scripts/commands.sh` (navigate: 1000 episodes x 1001 rows, giant 500 x 2001;
stitch: 5000 x 201; humanoidmaze navigate 1000 x 2001 (giant 4001), stitch 5000 x 401 (giant 10000); cube-single
play: 1000 x 1001) and the `-val` split holds one tenth of the episodes. The antmaze and humanoidmaze datasets need
a trained locomotion expert (``ttt expert train ant`` / ``humanoid``; OGBench downloads its own).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ttt.errors import TttError

# Centre that OGBench's manipulation environments subtract from positions before scaling them by 10.
CUBE_XYZ_CENTER = np.array([0.425, 0.0, 0.0], dtype=np.float32)


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """How one OGBench dataset is generated and what its files must look like."""

    name: str  # e.g. 'pointmaze-medium-navigate-v0'
    env_id: str  # gymnasium id, e.g. 'pointmaze-medium-v0'
    family: str  # 'pointmaze' | 'antmaze' | 'humanoidmaze' | 'cube'
    kind: str  # 'navigate' | 'stitch' | 'play'
    episodes: int  # training episodes at full size (val: episodes // 10)
    episode_rows: int  # rows per episode (= max_episode_steps; the last row is the terminal one)
    noise: float  # action noise (maze: Gaussian std; cube: plan-oracle noise)
    ob_dim: int
    action_dim: int
    goal_eps: float  # success threshold on goal coordinates (pointmaze 1.0, antmaze 0.5, cube 0.04 m)
    noise_smoothing: float = 0.0  # cube plan oracle only

    @property
    def is_maze(self) -> bool:
        """A locomotion maze (point, ant or humanoid): goals are the agent's xy, the first two observation numbers."""
        return self.family in ("pointmaze", "antmaze", "humanoidmaze")

    @property
    def robot(self) -> str | None:
        """The robot whose trained expert generates the data (``ttt expert train ROBOT``); None for an oracle."""
        return {"antmaze": "ant", "humanoidmaze": "humanoid"}.get(self.family)

    @property
    def needs_expert(self) -> bool:
        """Generated with a trained locomotion expert (``ttt expert train ROBOT``) rather than an oracle."""
        return self.robot is not None

    @property
    def maze_type(self) -> str:
        return self.env_id.split("-")[1]

    def val_episodes(self, episodes: int) -> int:
        return max(1, episodes // 10)

    def goal_coords(self, observations: np.ndarray) -> np.ndarray:
        """Goal coordinates of observations: maze xy, or the cube's position in metres."""
        if self.is_maze:
            return observations[..., :2]
        return observations[..., 19:22] / np.float32(10.0) + CUBE_XYZ_CENTER


def _build() -> dict[str, DatasetSpec]:
    specs = {}
    # pointmaze: OGBench's BFS oracle + N(0, 0.5^2); antmaze: our SAC ant expert steered by the same oracle,
    # N(0, 0.2^2) (family, noise, ob_dim, action_dim, goal_eps).
    for family, noise, ob_dim, action_dim, goal_eps in (("pointmaze", 0.5, 2, 2, 1.0), ("antmaze", 0.2, 29, 8, 0.5)):
        for maze in ("medium", "large", "giant", "teleport"):
            nav_eps, nav_rows = (500, 2001) if maze == "giant" else (1000, 1001)
            for kind, eps, rows in (("navigate", nav_eps, nav_rows), ("stitch", 5000, 201)):
                name = f"{family}-{maze}-{kind}-v0"
                specs[name] = DatasetSpec(
                    name=name,
                    env_id=f"{family}-{maze}-v0",
                    family=family,
                    kind=kind,
                    episodes=eps,
                    episode_rows=rows,
                    noise=noise,
                    ob_dim=ob_dim,
                    action_dim=action_dim,
                    goal_eps=goal_eps,
                )
    # humanoidmaze: our SAC humanoid expert steered by the BFS oracle, N(0, 0.2^2) (OGBench's commands.sh: navigate
    # 1000 x 2001, giant 1000 x 4001; stitch 5000 x 401, giant 10000 x 401); no teleport maze.
    for maze in ("medium", "large", "giant"):
        for kind, eps, rows in (
            ("navigate", 1000, 4001 if maze == "giant" else 2001),
            ("stitch", 10000 if maze == "giant" else 5000, 401),
        ):
            name = f"humanoidmaze-{maze}-{kind}-v0"
            specs[name] = DatasetSpec(
                name=name,
                env_id=f"humanoidmaze-{maze}-v0",
                family="humanoidmaze",
                kind=kind,
                episodes=eps,
                episode_rows=rows,
                noise=0.2,
                ob_dim=69,
                action_dim=21,
                goal_eps=0.5,
            )
    specs["cube-single-play-v0"] = DatasetSpec(
        name="cube-single-play-v0",
        env_id="cube-single-v0",
        family="cube",
        kind="play",
        episodes=1000,
        episode_rows=1001,
        noise=0.1,
        noise_smoothing=0.5,
        ob_dim=28,
        action_dim=5,
        goal_eps=0.04,
    )
    return specs


SPECS: dict[str, DatasetSpec] = _build()


def get_spec(name: str) -> DatasetSpec:
    """The spec of a dataset name; an unknown name is an error listing the valid ones."""
    if name not in SPECS:
        raise TttError(f"unknown dataset '{name}'; valid names: {', '.join(SPECS)}")
    return SPECS[name]
