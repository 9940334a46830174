"""In-program environments: pure JAX functions of an explicit state (see ``ttt.envs.base.Env``).

``make_env(env_id, backend)`` builds the JAX env of an OGBench gymnasium id: every PointMaze maze (medium,
large, giant, and teleport, whose random exits are drawn from a key carried in the state). Envs without one
(``cube-single-v0``: mesh contacts MJX cannot run well; the ant mazes: MJX is 350-950x slower than C MuJoCo
on CPU) use the host driver, which steps OGBench's gymnasium
env from Python.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ttt._lazy import exports

_LAZY = {  # imported on first use, so that the host-side helpers (`ttt.envs.gym`) load without JAX
    "Env": "ttt.envs.base",
    "State": "ttt.envs.base",
    "BACKENDS": "ttt.envs.pointmaze",
    "PointMaze": "ttt.envs.pointmaze",
    "PointMazeState": "ttt.envs.pointmaze",
    "impose_start_goal": "ttt.envs.pointmaze",
}

__getattr__, __dir__ = exports(__name__, _LAZY)


if TYPE_CHECKING:
    from ttt.envs.base import Env, State
    from ttt.envs.pointmaze import BACKENDS, PointMaze, PointMazeState, impose_start_goal

JAX_ENVS: tuple[str, ...] = (
    "pointmaze-medium-v0",
    "pointmaze-large-v0",
    "pointmaze-giant-v0",
    "pointmaze-teleport-v0",
)

# OGBench ids this project uses that have no in-program env, and why.
HOST_ONLY_ENVS: dict[str, str] = {
    "cube-single-v0": "its mesh contacts are out of MJX's reach",
    **{
        f"antmaze-{maze}-v0": "MJX steps the ant maze 350-950x slower than C MuJoCo on CPU: "
        "benchmarks/antmaze_physics.py"
        for maze in ("medium", "large", "giant", "teleport")
    },
}


def has_jax_env(env_id: str) -> bool:
    """Whether ``env_id`` (a gymnasium id) has an in-program JAX env."""
    return env_id in JAX_ENVS


def make_env(env_id: str, backend: str = "mujoco") -> Env:
    """The JAX env of gymnasium id ``env_id`` with physics ``backend`` ('mujoco' or 'mjx')."""
    from ttt.envs.pointmaze import BACKENDS, PointMaze
    from ttt.errors import TttError

    if env_id in HOST_ONLY_ENVS:
        raise TttError(f"{env_id} has no in-program env ({HOST_ONLY_ENVS[env_id]}); use the host driver")
    if backend not in BACKENDS:
        raise TttError(f"unknown backend '{backend}'; valid backends: {', '.join(BACKENDS)}")
    if env_id not in JAX_ENVS:
        raise TttError(f"unknown env id '{env_id}'; valid ids: {', '.join(JAX_ENVS)}")
    return PointMaze(env_id, backend)


__all__ = [
    "BACKENDS",
    "HOST_ONLY_ENVS",
    "JAX_ENVS",
    "Env",
    "PointMaze",
    "PointMazeState",
    "State",
    "has_jax_env",
    "impose_start_goal",
    "make_env",
]
