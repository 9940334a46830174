"""In-program environments: pure JAX functions of an explicit state (see ``ttt.envs.base.Env``).

``make_env(env_id, backend)`` builds the JAX env of an OGBench gymnasium id: every PointMaze maze (medium,
large, giant, and teleport, whose random exits are drawn from a key carried in the state; physics 'mujoco' or
'mjx'), every AntMaze maze (``ttt.envs.antmaze``), every HumanoidMaze maze (``ttt.envs.humanoidmaze``) and
cube-single (``ttt.envs.cube``). The ant and humanoid mazes and the cube run OGBench's own MjModel with C MuJoCo
through a callback only ('mujoco'): MJX steps the ant maze 350-950x slower than C MuJoCo on CPU, and the cube's mesh
contacts are out of its reach (``MJX_ENVS`` lists the ids with 'mjx').
The host driver (OGBench's gymnasium env stepped from Python) remains for every id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ttt._lazy import exports

_LAZY = {  # imported on first use, so that the host-side helpers (`ttt.envs.gym`) load without JAX
    "Env": "ttt.envs.base",
    "State": "ttt.envs.base",
    "AntMaze": "ttt.envs.antmaze",
    "AntMazeState": "ttt.envs.antmaze",
    "CubeSingle": "ttt.envs.cube",
    "HumanoidMaze": "ttt.envs.humanoidmaze",
    "HumanoidMazeState": "ttt.envs.humanoidmaze",
    "CubeState": "ttt.envs.cube",
    "BACKENDS": "ttt.envs.pointmaze",
    "PointMaze": "ttt.envs.pointmaze",
    "PointMazeState": "ttt.envs.pointmaze",
    "impose_start_goal": "ttt.envs.pointmaze",
}

__getattr__, __dir__ = exports(__name__, _LAZY)


if TYPE_CHECKING:
    from ttt.envs.antmaze import AntMaze, AntMazeState
    from ttt.envs.base import Env, State
    from ttt.envs.cube import CubeSingle, CubeState
    from ttt.envs.humanoidmaze import HumanoidMaze, HumanoidMazeState
    from ttt.envs.pointmaze import BACKENDS, PointMaze, PointMazeState, impose_start_goal

_MAZES = ("medium", "large", "giant", "teleport")
# Ids with an in-program env, and its class (module, name).
_ENV_CLASSES: dict[str, tuple[str, str]] = {
    **{f"pointmaze-{m}-v0": ("ttt.envs.pointmaze", "PointMaze") for m in _MAZES},
    **{f"antmaze-{m}-v0": ("ttt.envs.antmaze", "AntMaze") for m in _MAZES},
    "cube-single-v0": ("ttt.envs.cube", "CubeSingle"),
    **{f"humanoidmaze-{m}-v0": ("ttt.envs.humanoidmaze", "HumanoidMaze") for m in _MAZES[:3]},  # no teleport maze
}
JAX_ENVS: tuple[str, ...] = tuple(_ENV_CLASSES)

# Ids whose in-program env also runs on MJX (backend 'mjx'); the others only on 'mujoco', and why.
MJX_ENVS: tuple[str, ...] = tuple(f"pointmaze-{m}-v0" for m in _MAZES)
NO_MJX: dict[str, str] = {
    "cube-single-v0": "its mesh contacts are out of MJX's reach",
    **{
        f"antmaze-{m}-v0": "MJX steps the ant maze 350-950x slower than C MuJoCo on CPU: "
        "benchmarks/speed/antmaze_physics.py"
        for m in _MAZES
    },
    **{
        f"humanoidmaze-{m}-v0": "not built: MJX steps the ant maze 350-950x slower than C MuJoCo on CPU "
        "(benchmarks/speed/antmaze_physics.py), the humanoid is the larger model, and its reset counts contacts "
        "on the host"
        for m in _MAZES[:3]
    },
}

# OGBench ids this project uses that have no in-program env, and why (none left: kept for callers that read it).
HOST_ONLY_ENVS: dict[str, str] = {}


def has_jax_env(env_id: str) -> bool:
    """Whether ``env_id`` (a gymnasium id) has an in-program JAX env."""
    return env_id in JAX_ENVS


def has_mjx(env_id: str) -> bool:
    """Whether ``env_id``'s in-program env runs on MJX (backend 'mjx') as well as on C MuJoCo ('mujoco')."""
    return env_id in MJX_ENVS


DRIVERS = ("auto", "compiled", "host")


def resolve_driver(driver: str, backend: str, env_id: str, say=lambda name, value: f"{name} = '{value}'") -> str:
    """The driver an evaluation of `env_id` runs on: 'auto' resolved ('compiled' where an in-program env exists,
    else 'host'), checked with the physics `backend`: 'compiled' needs an in-program env, 'mjx' is the compiled
    driver's physics and exists only for `MJX_ENVS`. The one place these rules live (a pipeline's plan and `ttt eval`
    call it); a mistake is a one-line `TttError`, `say(name, value)` naming the setting as the caller spells it
    (`backend = 'mjx'` in a pipeline, `--backend mjx` on the command line)."""
    from ttt.errors import TttError

    if driver not in DRIVERS:
        raise TttError(f"{say('driver', driver)} is not a driver; valid: {', '.join(DRIVERS)}")
    if driver == "compiled" and not has_jax_env(env_id):
        raise TttError(f"{say('driver', 'compiled')}: {env_id} has no in-program environment; use "
                       f"{say('driver', 'host')} or {say('driver', 'auto')}")  # fmt: skip
    if driver == "auto":
        driver = "compiled" if has_jax_env(env_id) else "host"
    if backend == "mjx" and driver == "host":
        raise TttError(f"{say('backend', 'mjx')} is the physics of the compiled driver, but {env_id} runs on the host "
                       f"driver here (OGBench's gym env, C MuJoCo); use {say('backend', 'mujoco')}")  # fmt: skip
    if backend == "mjx" and env_id in NO_MJX:
        raise TttError(f"{say('backend', 'mjx')}: {env_id} runs on C MuJoCo only ({NO_MJX[env_id]}); use "
                       f"{say('backend', 'mujoco')}")  # fmt: skip
    return driver


def make_env(env_id: str, backend: str = "mujoco") -> Env:
    """The JAX env of gymnasium id ``env_id`` with physics ``backend`` ('mujoco' or, for ``MJX_ENVS``, 'mjx')."""
    import importlib

    from ttt.envs.pointmaze import BACKENDS
    from ttt.errors import TttError

    if env_id not in _ENV_CLASSES:
        raise TttError(f"unknown env id '{env_id}'; valid ids: {', '.join(JAX_ENVS)}")
    if backend not in BACKENDS:
        raise TttError(f"unknown backend '{backend}'; valid backends: {', '.join(BACKENDS)}")
    if backend == "mjx" and env_id in NO_MJX:
        raise TttError(f"{env_id} has no MJX backend ({NO_MJX[env_id]}); use backend 'mujoco'")
    module, name = _ENV_CLASSES[env_id]
    return getattr(importlib.import_module(module), name)(env_id, backend)


__all__ = [
    "BACKENDS",
    "HOST_ONLY_ENVS",
    "JAX_ENVS",
    "MJX_ENVS",
    "NO_MJX",
    "AntMaze",
    "AntMazeState",
    "CubeSingle",
    "CubeState",
    "Env",
    "HumanoidMaze",
    "HumanoidMazeState",
    "PointMaze",
    "PointMazeState",
    "State",
    "has_jax_env",
    "has_mjx",
    "impose_start_goal",
    "make_env",
]
