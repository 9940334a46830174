"""OGBench's PointMaze as a pure JAX environment, on OGBench's own MjModel.

The maze, its MjModel, the evaluation tasks, the noise, the goal tolerance and the teleports are all read from
an OGBench gymnasium env instantiated once per id on the host (``ogbench/locomaze/{maze,point}.py``):

- reset: start ``ij_to_xy(init_ij)`` and goal ``ij_to_xy(goal_ij)`` of the task, each coordinate plus
  ``uniform(-1, 1) * noise * maze_unit / 4`` (OGBench's ``add_noise``; the goal only when
  ``add_noise_to_goal``); the observation is ``qpos`` (the xy position) and the goal observation is the
  goal xy;
- step: ``qpos += 0.2 * clip(a, -1, 1)``, ``qvel = 0``, ``frame_skip`` (5) ``mj_step``s. OGBench's env
  itself does not clip (its evaluation loop and its data generation do), so actions in ``[-1, 1]`` step
  exactly as in OGBench;
- success (timing 'post'): ``||qpos - goal|| <= goal_tol`` (1.0) after the step;
- teleports (pointmaze-teleport only; OGBench's ``_teleport_info``): after the step and after success is
  measured, an agent within ``1.5 * teleport_radius`` of an inbound teleport is moved to an outbound teleport
  drawn uniformly. As in OGBench, the observation that step returns is the position BEFORE the teleport; the
  state (so the next step) starts from the exit. OGBench draws the exit from numpy's global RNG; here it is
  drawn from a typed key carried in the state (split at every step, derived from the reset key), so
  trajectories through a teleport agree with OGBench's in distribution, and exactly once the exit is imposed
  (``gym_env.unwrapped.set_xy``). OGBench checks the inbound teleports in order and stops at the first match;
  every match leads to the same draw, so "any match" is the same rule.

Two physics backends (static field ``backend``):

- ``'mujoco'``: OGBench's C MuJoCo model stepped through ``jax.pure_callback``, one batched call per env
  step (a loop over the batch with a cached ``MjData``). Exactly OGBench's physics; the fastest on CPU.
- ``'mjx'``: the same MjModel in MuJoCo MJX (``mjx.put_model``), carried as a pytree field so it is a jit
  argument. Pure XLA, float32; the choice on accelerators.

The solver warm start does not carry information between env steps here (replaying an episode with a fresh
``MjData`` at every step reproduces OGBench's trajectory bit for bit), so the state needs only ``qpos`` (and,
with teleports, the key of the exit draws).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import io
import threading
import warnings
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray

from ttt.envs.base import Env
from ttt.errors import TttError

BACKENDS = ("mujoco", "mjx")
ACTION_SCALE = 0.2  # ogbench/locomaze/point.py: ``qpos += 0.2 * action``
TELEPORT_REACH = 1.5  # ogbench/locomaze/maze.py, MazeEnv.step: teleports within ``teleport_radius * 1.5``
RESET_KEY_DEFAULT = 0  # ``reset_to`` without a key: teleport exits drawn from ``jax.random.key(0)``
_TELEPORT_STREAM = 0x54454C45  # ``reset`` folds this into its key for the teleport draws ("TELE")


def _mjx():
    """``mujoco.mjx``, imported on first use (its import prints a notice about the optional Warp backend)."""
    with contextlib.redirect_stdout(io.StringIO()):
        from mujoco import mjx
    return mjx


class _HostPhysics:
    """OGBench's MjModel stepped on the host: ``qpos`` rows in, ``qpos`` after ``frame_skip`` steps out.

    Hashes by identity (it is a static field of ``PointMaze``); one instance per env id is cached, so envs
    built twice share it and compiled programs are reused. One ``MjData`` per instance, used under a lock:
    XLA runs callbacks on its own threads, whose Python thread state (and any ``threading.local``) is torn
    down after every call, and freeing an ``MjData`` there crashes the interpreter.
    """

    def __init__(self, model: mujoco.MjModel, frame_skip: int):
        self.model = model
        self.frame_skip = frame_skip
        self._lock = threading.Lock()
        self._mjdata = mujoco.MjData(model)

    def __call__(self, qpos: np.ndarray) -> np.ndarray:
        qpos = np.asarray(qpos)
        rows = qpos.reshape(-1, self.model.nq).astype(np.float64)
        with self._lock:
            data = self._mjdata
            for row in rows:  # host side: a plain loop over the batch
                data.qpos[:] = row
                data.qvel[:] = 0.0
                data.qacc_warmstart[:] = 0.0  # results independent of batch order
                mujoco.mj_step(self.model, data, nstep=self.frame_skip)
                row[:] = data.qpos
        return rows.reshape(qpos.shape).astype(qpos.dtype)


@dataclasses.dataclass(frozen=True, eq=False)
class _MazeInfo:
    """What ``PointMaze`` reads from OGBench's gymnasium env (host side, cached per id)."""

    env_id: str
    model: mujoco.MjModel
    frame_skip: int
    obs_dim: int
    max_steps: int
    goal_tol: float
    noise: float  # half-width of the start/goal noise per coordinate: noise * maze_unit / 4
    noise_goal: bool
    init_xy: np.ndarray  # (tasks, 2) task start cell centres
    goal_xy: np.ndarray  # (tasks, 2) task goal cell centres
    host: _HostPhysics
    teleport_in_xy: np.ndarray | None  # (inbound, 2) inbound teleport centres, in OGBench's order; None: no teleports
    teleport_out_xy: np.ndarray | None  # (outbound, 2) outbound teleport centres (the exits)
    teleport_radius: float | None  # OGBench's ``teleport_radius`` (an agent within 1.5x of it is teleported)
    free_xy: np.ndarray  # (cells, 2) centres of the maze's free cells (maze_map 0), row-major
    maze_unit: float  # side of a cell


def _make_gym_env(env_id: str, **kwargs):
    import gymnasium
    import ogbench  # noqa: F401  (registers the environments)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gymnasium.make(env_id, **kwargs)


@functools.cache
def _maze_info(env_id: str) -> _MazeInfo:
    from ogbench.locomaze.point import PointEnv

    env = _make_gym_env(env_id)
    u = env.unwrapped
    if not isinstance(u, PointEnv) or not hasattr(u, "maze_map") or hasattr(u, "get_agent_ball_xy"):
        raise ValueError(f"{env_id} is not an OGBench PointMaze env")
    if u._ob_type != "states":
        raise ValueError(f"{env_id}: only state observations are supported, got ob_type={u._ob_type!r}")
    tp = u._teleport_info
    if tp is not None and not (len(tp["teleport_in_xys"]) and len(tp["teleport_out_xys"])):
        raise ValueError(f"{env_id}: teleports need at least one inbound and one outbound teleport, got {tp}")
    model = copy.deepcopy(u.model)  # detached from the gym env (whose set_goal moves the target geom)
    tasks = u.task_infos
    info = _MazeInfo(
        env_id=env_id,
        model=model,
        frame_skip=int(u.frame_skip),
        obs_dim=int(u.observation_space.shape[0]),
        max_steps=int(env.spec.max_episode_steps),
        goal_tol=float(u._goal_tol),
        noise=float(u._noise * u._maze_unit / 4),
        noise_goal=bool(u._add_noise_to_goal),
        init_xy=np.array([u.ij_to_xy(t["init_ij"]) for t in tasks], np.float64),
        goal_xy=np.array([u.ij_to_xy(t["goal_ij"]) for t in tasks], np.float64),
        host=_HostPhysics(model, int(u.frame_skip)),
        teleport_in_xy=None if tp is None else np.array(tp["teleport_in_xys"], np.float64).reshape(-1, 2),
        teleport_out_xy=None if tp is None else np.array(tp["teleport_out_xys"], np.float64).reshape(-1, 2),
        teleport_radius=None if tp is None else float(tp["teleport_radius"]),
        free_xy=np.array([u.ij_to_xy(ij) for ij in zip(*np.nonzero(np.asarray(u.maze_map) == 0), strict=True)],
                         np.float64),  # fmt: skip
        maze_unit=float(u._maze_unit),
    )
    env.close()
    return info


class PointMazeState(eqx.Module):
    """Position, goal, (``'mjx'`` backend only) the MJX physics data, (teleport mazes only) the exit-draw key."""

    qpos: Float[Array, " 2"]
    goal: Float[Array, " 2"]
    data: Any = None  # mjx.Data for the 'mjx' backend, None for 'mujoco'
    key: PRNGKeyArray | None = None  # typed key of the teleport exit draws (split every step); None: no teleports


class PointMaze(Env):
    """OGBench's PointMaze (medium, large, giant, teleport) on OGBench's own MjModel; see the module docstring."""

    env_id: str = eqx.field(static=True)
    backend: str = eqx.field(static=True)
    obs_dim: int = eqx.field(static=True)
    action_dim: int = eqx.field(static=True)
    goal_dim: int = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    goal_eps: float = eqx.field(static=True)
    num_tasks: int = eqx.field(static=True)
    frame_skip: int = eqx.field(static=True)
    noise: float = eqx.field(static=True)
    noise_goal: bool = eqx.field(static=True)
    host: _HostPhysics | None = eqx.field(static=True)
    teleport_reach: float | None = eqx.field(static=True)  # 1.5 * teleport_radius; None: no teleports
    init_xy: Float[Array, "task 2"]
    goal_xy: Float[Array, "task 2"]
    teleport_in: Float[Array, "inbound 2"] | None  # inbound teleport centres; None: no teleports
    teleport_out: Float[Array, "outbound 2"] | None  # outbound teleport centres (exits); None: no teleports
    mjx_model: Any  # mjx.Model for the 'mjx' backend (a jit argument like any leaf), None for 'mujoco'

    def __init__(self, env_id: str = "pointmaze-medium-v0", backend: str = "mujoco"):
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend '{backend}'; valid backends: {', '.join(BACKENDS)}")
        info = _maze_info(env_id)
        dtype = jnp.result_type(float)
        self.env_id = env_id
        self.backend = backend
        self.obs_dim = info.obs_dim
        self.action_dim = int(info.model.nu)
        self.goal_dim = 2
        self.max_steps = info.max_steps
        self.goal_eps = info.goal_tol
        self.num_tasks = len(info.init_xy)
        self.frame_skip = info.frame_skip
        self.noise = info.noise
        self.noise_goal = info.noise_goal
        self.host = info.host if backend == "mujoco" else None
        self.init_xy = jnp.asarray(info.init_xy, dtype)
        self.goal_xy = jnp.asarray(info.goal_xy, dtype)
        tele = info.teleport_in_xy is not None
        self.teleport_reach = TELEPORT_REACH * info.teleport_radius if tele else None
        self.teleport_in = jnp.asarray(info.teleport_in_xy, dtype) if tele else None
        self.teleport_out = jnp.asarray(info.teleport_out_xy, dtype) if tele else None
        self.mjx_model = _mjx().put_model(info.model) if backend == "mjx" else None

    def sample_start_goal(
        self, key: PRNGKeyArray, task: Int[ArrayLike, ""]
    ) -> tuple[Float[Array, " 2"], Float[Array, " 2"]]:
        """Task cell centres plus OGBench's ``add_noise`` (uniform, +-``noise`` per coordinate)."""
        if not isinstance(task, jax.core.Tracer):  # a concrete id is checked; a traced one out of range is clamped
            t = np.asarray(task)
            if np.any((t < 1) | (t > self.num_tasks)):
                raise ValueError(f"task {task} does not exist in {self.env_id}; valid: 1..{self.num_tasks}")
        idx = jnp.asarray(task, jnp.int32) - 1
        k_init, k_goal = jax.random.split(key)
        init = self.init_xy[idx] + self.noise * jax.random.uniform(k_init, (2,), self.init_xy.dtype, -1.0, 1.0)
        goal = self.goal_xy[idx]
        if self.noise_goal:
            goal = goal + self.noise * jax.random.uniform(k_goal, (2,), self.goal_xy.dtype, -1.0, 1.0)
        return init, goal

    def free_cells(self) -> np.ndarray:
        """The centres (x, y) of the maze's free cells, shape (cells, 2) (host NumPy): where an agent can start and
        a goal can be; each cell spans +-`maze_unit / 2` around its centre."""
        return _maze_info(self.env_id).free_xy.copy()

    def contains(self, xy: ArrayLike) -> bool:
        """Whether concrete coordinates `xy` (shape (2,)) are finite and inside a free cell of the maze (not in a
        wall, not outside the maze). Host-side, for checking a user's start or goal."""
        xy = np.asarray(xy, np.float64)
        if xy.shape != (2,) or not np.isfinite(xy).all():
            return False
        info = _maze_info(self.env_id)
        return bool((np.abs(info.free_xy - xy).max(axis=1) <= info.maze_unit / 2).any())

    def sample_free(self, seed: int | np.random.Generator, n: int = 1) -> np.ndarray:
        """`n` positions drawn uniformly over the maze's free space (a free cell uniformly, then a point uniformly
        in it), shape (n, 2), host NumPy: valid starts or goals for `ttt.run_episode`."""
        rng = np.random.default_rng(seed)
        info = _maze_info(self.env_id)
        cells = info.free_xy[rng.integers(0, len(info.free_xy), n)]
        return cells + rng.uniform(-info.maze_unit / 2, info.maze_unit / 2, (n, 2))

    @property
    def has_teleports(self) -> bool:
        """Whether the maze has teleports (pointmaze-teleport); a static property of the env's structure."""
        return self.teleport_in is not None

    def reset(
        self, key: PRNGKeyArray, task: Int[ArrayLike, ""]
    ) -> tuple[PointMazeState, Float[Array, " 2"], Float[Array, " 2"]]:
        """``reset_to(*sample_start_goal(key, task), key=fold_in(key, ...))``: the start and goal are drawn from
        ``key`` exactly as ``sample_start_goal`` draws them, the teleport exits from a stream folded out of it."""
        init, goal = self.sample_start_goal(key, task)
        return self.reset_to(init, goal, key=jax.random.fold_in(key, _TELEPORT_STREAM))

    def reset_to(
        self, init_xy: Float[ArrayLike, " 2"], goal_xy: Float[ArrayLike, " 2"], key: PRNGKeyArray | None = None
    ) -> tuple[PointMazeState, Float[Array, " 2"], Float[Array, " 2"]]:
        """A state at ``init_xy`` with goal ``goal_xy``; observation = position, goal observation = goal xy.

        ``key`` (typed) seeds the teleport exit draws of the episode (default ``jax.random.key(0)``); mazes
        without teleports ignore it and carry no key.
        """
        for name, xy in (("init_xy", init_xy), ("goal_xy", goal_xy)):  # no silent broadcasting of a user's input
            if jnp.shape(xy) != (2,):
                raise TttError(f"reset_to: {name} must be the maze's xy coordinates, shape (2,), got shape "
                               f"{jnp.shape(xy)}; vmap for a batch")  # fmt: skip
        qpos = jnp.asarray(init_xy, self.init_xy.dtype)
        goal = jnp.asarray(goal_xy, self.init_xy.dtype)
        data = None
        if self.backend == "mjx":
            data = _mjx().make_data(self.mjx_model)
            data = data.replace(qpos=qpos.astype(data.qpos.dtype))
        if not self.has_teleports:
            return PointMazeState(qpos, goal, data), qpos, goal
        if key is None:
            key = jax.random.key(RESET_KEY_DEFAULT)
        if not jnp.issubdtype(jnp.asarray(key).dtype, jax.dtypes.prng_key):
            raise TypeError(f"key must be a typed key (jax.random.key), got dtype {jnp.asarray(key).dtype}")
        if jnp.shape(key) != ():
            raise ValueError(f"key must be a single key (shape ()), got shape {jnp.shape(key)}; vmap for a batch")
        return PointMazeState(qpos, goal, data, key), qpos, goal

    def step(
        self, state: PointMazeState, action: Float[ArrayLike, " 2"]
    ) -> tuple[PointMazeState, Float[Array, " 2"], Bool[Array, ""]]:
        """``qpos += 0.2 * clip(a, -1, 1)``, ``qvel = 0``, ``frame_skip`` physics steps; success after the step.

        Teleport mazes: then, within ``1.5 * teleport_radius`` of an inbound teleport, the NEXT state is put at an
        outbound teleport drawn uniformly from the state's key; the returned observation (like OGBench's) is the
        position before the teleport.
        """
        dtype = state.qpos.dtype
        qpos = state.qpos + ACTION_SCALE * jnp.clip(jnp.asarray(action, dtype), -1.0, 1.0)
        data = state.data
        if self.backend == "mjx":
            mjx = _mjx()
            data = data.replace(qpos=qpos.astype(data.qpos.dtype), qvel=jnp.zeros_like(data.qvel))
            data = jax.lax.fori_loop(0, self.frame_skip, lambda _, d: mjx.step(self.mjx_model, d), data)
            qpos = data.qpos.astype(dtype)
        else:
            out = jax.ShapeDtypeStruct(qpos.shape, dtype)
            qpos = jax.pure_callback(self.host, out, qpos, vmap_method="broadcast_all")
        success = jnp.linalg.norm(qpos - state.goal) <= self.goal_eps
        if not self.has_teleports:
            return PointMazeState(qpos, state.goal, data), qpos, success
        key, k_exit = jax.random.split(state.key)
        hit = jnp.any(jnp.linalg.norm(qpos - self.teleport_in, axis=-1) <= self.teleport_reach)
        exit_xy = self.teleport_out[jax.random.randint(k_exit, (), 0, self.teleport_out.shape[0])]
        new_qpos = jnp.where(hit, exit_xy, qpos)
        if data is not None:
            data = data.replace(qpos=new_qpos.astype(data.qpos.dtype))
        return PointMazeState(new_qpos, state.goal, data, key), qpos, success

    def goal_coords(self, obs: Float[Array, "*batch obs"]) -> Float[Array, "*batch 2"]:
        """The xy position: ``obs[..., :2]``."""
        return obs[..., :2]

    def impose(self, gym_env, draws: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """``impose_start_goal(gym_env, draws['init'], draws['goal'])`` (see there; teleport exits are not imposed)."""
        return impose_start_goal(gym_env, draws["init"], draws["goal"])


def impose_start_goal(gym_env, init_xy: ArrayLike, goal_xy: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Put OGBench's (already reset) gymnasium PointMaze env at ``init_xy`` with goal ``goal_xy``.

    Does what the end of OGBench's ``reset`` does with its own draws (``set_goal``, ``set_xy``), so the
    gymnasium env and ``PointMaze.reset_to(init_xy, goal_xy)`` face the same episode. Returns
    ``(obs, goal_obs)`` as OGBench's reset would (the goal observation of a point is the goal xy).

    pointmaze-teleport: the teleport exits are not imposed (OGBench draws them from numpy's global RNG, the JAX
    env from its state's key), so the two agree through a teleport only in distribution, or exactly when the
    JAX exit is imposed after each teleport (``gym_env.unwrapped.set_xy(state.qpos)``).
    """
    u = gym_env.unwrapped
    goal = np.array(goal_xy, np.float64)
    u.set_goal(goal_xy=goal)
    u.set_xy(np.array(init_xy, np.float64))
    return u.get_ob(), goal.copy()
