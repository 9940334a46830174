"""What OGBench's locomotion mazes in the compiled program share (``ttt.envs.antmaze``, ``ttt.envs.humanoidmaze``):
the host info read once per id from OGBench's gymnasium env (``MazeInfo``, built by ``maze_info``) and the ``Env``
around it (``LocoMaze``): task tables, reset draws, and the ``jax.pure_callback`` plumbing of reset and step. Each
robot's module brings its own ``reset_model`` draws and ``ogbench_reset``, its host step row, its state and its step.
"""

from __future__ import annotations

import abc
import copy
import dataclasses
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray, UInt32

from ttt.envs import hostsim
from ttt.envs.base import Env, State
from ttt.envs.gym import make_gym_env
from ttt.errors import TttError


@dataclasses.dataclass(frozen=True, eq=False)
class MazeInfo:
    """What a ``LocoMaze`` reads from OGBench's gymnasium env (host side, cached per id); each robot adds its own."""

    env_id: str
    gym_env: object  # the gymnasium env whose unwrapped MjData the reset callback uses (never stepped otherwise)
    model: mujoco.MjModel  # a copy, for the step workers
    nq: int
    nv: int
    nu: int
    obs_dim: int
    max_steps: int
    goal_tol: float
    noise: float  # half-width of the start/goal noise per coordinate: noise * maze_unit / 4
    noise_goal: bool
    init_xy: np.ndarray  # (tasks, 2) task start cell centres
    goal_xy: np.ndarray  # (tasks, 2) task goal cell centres
    n_words: int
    reset_fn: hostsim.RowRunner
    step_fn: hostsim.RowRunner
    ogbench_reset: Callable  # the robot's OGBench reset given its draws: (unwrapped env, draws) -> (obs, goal_obs)

    @property
    def n_uniforms(self) -> int:
        """Uniform numbers one reset draws (the start and goal noise first: 4); each robot counts its own."""
        raise NotImplementedError

    def start_goal(self, task: int, init, goal, u: np.ndarray) -> dict[str, np.ndarray]:
        """The episode's start and goal (float64) from a reset's uniforms ``u``: ``task`` 0, ``init`` and ``goal``
        (``reset_to``), else the task's cell centres plus OGBench's ``add_noise`` (``u[0:4]``)."""
        if task >= 1:
            init = self.init_xy[task - 1] + self.noise * (2.0 * u[0:2] - 1.0)
            goal = self.goal_xy[task - 1] + (self.noise * (2.0 * u[2:4] - 1.0) if self.noise_goal else 0.0)
        return dict(init=np.asarray(init, np.float64), goal=np.asarray(goal, np.float64))


def open_maze(env_id: str, is_maze: Callable, what: str, check: Callable | None = None):
    """OGBench's gymnasium env of ``env_id``, checked (``is_maze`` of its unwrapped env, state observations, then
    the robot's own ``check(env_id, unwrapped)``) and reset to task 1: ``(env, unwrapped, model)``, ``model`` a copy
    of its MjModel detached from the gym env (whose ``set_goal`` moves the target geom)."""
    env = make_gym_env(env_id)
    u = env.unwrapped
    if not is_maze(u):
        raise ValueError(f"{env_id} is not an OGBench {what}")
    if u._ob_type != "states":
        raise ValueError(f"{env_id}: only state observations are supported, got ob_type={u._ob_type!r}")
    if check is not None:
        check(env_id, u)
    env.reset(seed=0, options=dict(task_id=1))
    return env, u, copy.deepcopy(u.model)


def maze_info(
    cls: type[MazeInfo], env_id: str, env, model, obs_dim: int, ogbench_reset: Callable, step_row: Callable, **extra
):
    """The ``cls`` info of the maze ``env_id`` (``env``, ``model``: from ``open_maze``): the reset rows run
    ``ogbench_reset`` on the gym env's own MjData, the step rows ``step_row(data, words, action, *extra)`` on workers
    of ``model``; the state carried is the goal xy and MuJoCo's integration state (``hostsim.pack``). ``extra``: the
    robot's own fields."""
    u = env.unwrapped
    n_state = hostsim.state_size(model)
    info_box = []  # the info, for the reset rows (made below)

    def reset_row(ctx, task, init, goal, bits):
        draws = info_box[0].draws(int(task), init, goal, bits)
        obs, goal_obs = ogbench_reset(ctx, draws)
        state = np.concatenate([draws["goal"], hostsim.get_state(ctx.model, ctx.data)])
        return hostsim.pack(state), obs, goal_obs

    words = (2 * (2 + n_state),)
    obs_out = ((obs_dim,), np.float64)
    reset_fn = hostsim.RowRunner(reset_row, [u], [(words, np.uint32), obs_out, obs_out])
    workers = [mujoco.MjData(model) for _ in range(hostsim.default_workers())]
    step_fn = hostsim.RowRunner(step_row, workers, [(words, np.uint32), obs_out, ((), bool)])
    tasks = u.task_infos
    info = cls(
        env_id=env_id,
        gym_env=env,
        model=model,
        nq=int(model.nq),
        nv=int(model.nv),
        nu=int(model.nu),
        obs_dim=obs_dim,
        max_steps=int(env.spec.max_episode_steps),
        goal_tol=float(u._goal_tol),
        noise=float(u._noise * u._maze_unit / 4),
        noise_goal=bool(u._add_noise_to_goal),
        init_xy=np.array([u.ij_to_xy(t["init_ij"]) for t in tasks], np.float64),
        goal_xy=np.array([u.ij_to_xy(t["goal_ij"]) for t in tasks], np.float64),
        n_words=words[0],
        reset_fn=reset_fn,
        step_fn=step_fn,
        ogbench_reset=ogbench_reset,
        **extra,
    )
    info_box.append(info)
    return info


class LocoMaze(Env):
    """An OGBench locomotion maze on OGBench's own MjModel (C MuJoCo through a callback); a robot's env gives its
    host info to ``__init__`` and writes ``_state`` and ``step`` (with ``_step_sim``)."""

    env_id: str = eqx.field(static=True)
    backend: str = eqx.field(static=True)
    obs_dim: int = eqx.field(static=True)
    action_dim: int = eqx.field(static=True)
    goal_dim: int = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    goal_eps: float = eqx.field(static=True)
    num_tasks: int = eqx.field(static=True)
    noise: float = eqx.field(static=True)
    noise_goal: bool = eqx.field(static=True)
    n_words: int = eqx.field(static=True)
    n_uniforms: int = eqx.field(static=True)
    info: MazeInfo = eqx.field(static=True)
    init_xy: Float[Array, "task 2"]
    goal_xy: Float[Array, "task 2"]

    def __init__(self, env_id: str, backend: str, info: MazeInfo):
        dtype = jnp.result_type(float)
        self.env_id = env_id
        self.backend = backend
        self.obs_dim = info.obs_dim
        self.action_dim = info.nu
        self.goal_dim = 2
        self.max_steps = info.max_steps
        self.goal_eps = info.goal_tol
        self.num_tasks = len(info.init_xy)
        self.noise = info.noise
        self.noise_goal = info.noise_goal
        self.n_words = info.n_words
        self.n_uniforms = info.n_uniforms
        self.info = info
        self.init_xy = jnp.asarray(info.init_xy, dtype)
        self.goal_xy = jnp.asarray(info.goal_xy, dtype)

    @abc.abstractmethod
    def _state(self, sim: UInt32[Array, " words"], key: PRNGKeyArray) -> State:
        """The robot's state of a fresh episode: ``sim`` from the reset callback, ``key`` the reset's key."""

    def _check_task(self, task) -> None:
        if not isinstance(task, jax.core.Tracer):  # a concrete id is checked; a traced one out of range is clamped
            t = np.asarray(task)
            if np.any((t < 1) | (t > self.num_tasks)):
                raise ValueError(f"task {task} does not exist in {self.env_id}; valid: 1..{self.num_tasks}")

    def reset_draws(self, key: PRNGKeyArray, task: Int[ArrayLike, ""]) -> dict[str, Array]:
        """What ``reset(key, task)`` draws: ``task``, the random ``bits`` the host turns into OGBench's float64 draws
        (start and goal noise, the robot's ``reset_model`` draws, random actions), and ``init`` / ``goal``, the start
        and goal xy to float32 precision."""
        self._check_task(task)
        task = jnp.clip(jnp.asarray(task, jnp.int32), 1, self.num_tasks)
        bits = jax.random.bits(key, (self.n_uniforms, 2), jnp.uint32)
        u = hostsim.uniforms_in_program(bits[:4])
        init = self.init_xy[task - 1] + self.noise * (2.0 * u[0:2] - 1.0)
        goal = self.goal_xy[task - 1] + (self.noise * (2.0 * u[2:4] - 1.0) if self.noise_goal else 0.0)
        return dict(task=task, init=init, goal=goal, bits=bits)

    def sample_start_goal(
        self, key: PRNGKeyArray, task: Int[ArrayLike, ""]
    ) -> tuple[Float[Array, " 2"], Float[Array, " 2"]]:
        """Task cell centres plus OGBench's ``add_noise`` (uniform, +-``noise`` per coordinate), to float32 precision
        (the host computes the episode's own in float64 from the same bits)."""
        d = self.reset_draws(key, task)
        return d["init"], d["goal"]

    def reset(
        self, key: PRNGKeyArray, task: Int[ArrayLike, ""]
    ) -> tuple[State, Float[Array, " obs"], Float[Array, " obs"]]:
        """OGBench's reset of task ``task`` (1-based), every draw from ``key``."""
        return self._reset(self.reset_draws(key, task), key)

    def reset_to(
        self, init_xy: Float[ArrayLike, " 2"], goal_xy: Float[ArrayLike, " 2"], key: PRNGKeyArray | None = None
    ) -> tuple[State, Float[Array, " obs"], Float[Array, " obs"]]:
        """An episode from ``init_xy`` to ``goal_xy``; the robot's ``reset_model`` draws, random actions and (teleport
        maze) exits are drawn from the typed ``key`` (default ``jax.random.key(0)``)."""
        for name, xy in (("init_xy", init_xy), ("goal_xy", goal_xy)):
            if jnp.shape(xy) != (2,):
                raise TttError(f"reset_to: {name} must be the maze's xy coordinates, shape (2,), got shape "
                               f"{jnp.shape(xy)}; vmap for a batch")  # fmt: skip
        key = jax.random.key(0) if key is None else key
        dtype = self.init_xy.dtype
        draws = dict(task=jnp.int32(0), init=jnp.asarray(init_xy, dtype), goal=jnp.asarray(goal_xy, dtype),
                     bits=jax.random.bits(key, (self.n_uniforms, 2), jnp.uint32))  # fmt: skip
        return self._reset(draws, key)

    def _reset(self, draws: dict[str, Array], key: PRNGKeyArray):
        dtype = self.init_xy.dtype
        out = (jax.ShapeDtypeStruct((self.n_words,), jnp.uint32), jax.ShapeDtypeStruct((self.obs_dim,), dtype),
               jax.ShapeDtypeStruct((self.obs_dim,), dtype))  # fmt: skip

        def host(task, init, goal, bits):
            sim, obs, goal_obs = self.info.reset_fn(task.ndim, task, init, goal, bits)
            return sim, obs.astype(dtype), goal_obs.astype(dtype)

        args = (draws["task"], draws["init"], draws["goal"], draws["bits"])
        sim, obs, goal_obs = jax.pure_callback(host, out, *args, vmap_method="broadcast_all")
        return self._state(sim, key), obs, goal_obs

    def _step_sim(
        self, sim: UInt32[Array, " words"], action: Float[ArrayLike, " action"], *extra: Array
    ) -> tuple[UInt32[Array, " words"], Float[Array, " obs"], Bool[Array, ""]]:
        """The host step rows (``info.step_fn``) through the callback: ``(sim, obs, success)``; ``extra``: the
        robot's own per-step arguments."""
        dtype = self.init_xy.dtype
        out = (jax.ShapeDtypeStruct((self.n_words,), jnp.uint32), jax.ShapeDtypeStruct((self.obs_dim,), dtype),
               jax.ShapeDtypeStruct((), jnp.bool_))  # fmt: skip

        def host(sim, a, *e):
            s, obs, success = self.info.step_fn(sim.ndim - 1, sim, a, *e)
            return s, obs.astype(dtype), success

        return jax.pure_callback(host, out, sim, jnp.asarray(action, jnp.float32), *extra, vmap_method="broadcast_all")

    def goal_coords(self, obs: Float[Array, "*batch obs"]) -> Float[Array, "*batch 2"]:
        """The xy position: ``obs[..., :2]``."""
        return obs[..., :2]

    def impose(self, gym_env, draws: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Put OGBench's gymnasium env (already reset) where ``reset`` puts the in-program env from the same draws
        (``reset_draws``): ``(obs, goal_obs)``. The host driver's reset, so both drivers face the same episodes."""
        d = self.info.draws(int(draws["task"]), draws["init"], draws["goal"], np.asarray(draws["bits"]))
        return self.info.ogbench_reset(gym_env.unwrapped, d)
