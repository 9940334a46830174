"""Shared set-up of the selection-only maze analyses (noise_scale, horizon_spans): the full
dataset, its spec, the maze oracle and each evaluation task's start and goal; and the atomic write of the result."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import jax.numpy as jnp

from ttt.data.files import load
from ttt.data.specs import DatasetSpec, get_spec
from ttt.envs import pointmaze as pm
from ttt.envs.oracle import MazeOracle, maze_oracle
from ttt.storage import atomic_write_json


class MazeTasks(NamedTuple):
    spec: DatasetSpec
    data: object  # ttt.data.dataset.Dataset
    oracle: MazeOracle
    tasks: list  # (task number from 1, start xy, goal xy) per evaluation task


def maze_tasks(dataset: str) -> MazeTasks:
    """`dataset` from OGBench's directory and its maze's evaluation tasks (start and goal in goal coordinates)."""
    spec = get_spec(dataset)
    info = pm._maze_info(spec.env_id)
    tasks = [
        (i + 1, jnp.asarray(s, jnp.float32), jnp.asarray(g, jnp.float32))
        for i, (s, g) in enumerate(zip(info.init_xy, info.goal_xy, strict=True))
    ]
    return MazeTasks(spec, load(dataset, None), maze_oracle(spec.env_id), tasks)


def write_doc(out: str | Path, doc: dict) -> None:
    """Write the analysis' JSON atomically (creating its directory) and say where."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out, doc)
    print(f"wrote {out}")
