"""OGBench's AntMaze (medium, large, giant, teleport) in the compiled program: OGBench's own MjModel stepped by C
MuJoCo through ``jax.pure_callback`` (``ttt.envs.hostsim``), the state carried bit for bit.

Read from OGBench's gymnasium env once per id on the host (``ogbench/locomaze/{maze,ant}.py``):

- reset (OGBench's ``MazeEnv.reset``): start ``ij_to_xy(init_ij)`` and goal ``ij_to_xy(goal_ij)`` plus
  ``uniform(-1, 1) * noise * maze_unit / 4`` per coordinate (the goal only with ``add_noise_to_goal``); the goal
  observation is the ant after ``mj_resetData``, OGBench's ``reset_model`` noise (qpos ``+ uniform(-0.1, 0.1)``,
  qvel ``+ 0.1 * normal``) and 5 uniform random actions, moved to the goal xy; the first observation is the ant
  after a second ``mj_resetData`` and ``reset_model`` noise, moved to the start xy. Every number OGBench draws from
  its generators comes here from random bits drawn from the reset key (``reset_draws``: integers, so the same in
  any program), which the host turns into float64 draws (``hostsim.uniforms``): a reset is a pure function of the
  key, and ``impose`` puts OGBench's gymnasium env into the same state from the same bits (the host driver);
- step: ``ctrl = action``, ``frame_skip`` (5) ``mj_step``s and ``mj_rnePostConstraint`` (OGBench's
  ``do_simulation``); observation ``[qpos, qvel]`` (29); success (timing 'post') ``||xy - goal|| <= 0.5`` in
  float64 on the host, as OGBench's ``compute_success``;
- teleports (antmaze-teleport): after success is measured, an ant within ``1.5 * teleport_radius`` of an inbound
  teleport is moved to an outbound teleport; the observation returned is the one before the teleport. OGBench draws
  the exit from numpy's global RNG, here from a typed key carried in the state (as ``ttt.envs.pointmaze``).

Only the 'mujoco' backend: MJX steps the ant maze 350-950x slower than C MuJoCo on CPU
(``benchmarks/speed/antmaze_physics.py``).
"""

from __future__ import annotations

import copy
import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray, UInt32

from ttt.envs import hostsim
from ttt.envs.base import Env
from ttt.envs.gym import make_gym_env
from ttt.errors import TttError

RANDOM_ACTIONS = 5  # ogbench/locomaze/maze.py, MazeEnv.reset: random steps before the goal observation (ant)
TELEPORT_REACH = 1.5  # MazeEnv.step: teleports within ``teleport_radius * 1.5``
_TELEPORT_STREAM = 0x54454C45  # ``reset`` folds this into its key for the teleport exits ("TELE")


@dataclasses.dataclass(frozen=True, eq=False)
class _AntInfo:
    """What ``AntMaze`` reads from OGBench's gymnasium env (host side, cached per id)."""

    env_id: str
    gym_env: object  # the gymnasium env whose unwrapped MjData the reset callback uses (never stepped otherwise)
    model: mujoco.MjModel  # a copy, for the step workers
    nq: int
    nv: int
    nu: int
    max_steps: int
    goal_tol: float
    noise: float  # half-width of the start/goal noise per coordinate: noise * maze_unit / 4
    noise_goal: bool
    reset_noise: float  # AntEnv._reset_noise_scale
    init_xy: np.ndarray  # (tasks, 2) task start cell centres
    goal_xy: np.ndarray  # (tasks, 2) task goal cell centres
    n_exits: int  # outbound teleports (0: none)
    n_words: int
    reset_fn: hostsim.RowRunner
    step_fn: hostsim.RowRunner

    @property
    def n_uniforms(self) -> int:
        """Uniform numbers one reset draws: start and goal noise, two joint noises (normals: two each), actions."""
        return 4 + 2 * (self.nq + 2 * self.nv) + RANDOM_ACTIONS * self.nu

    def draws(self, task: int, init, goal, bits: np.ndarray) -> dict[str, np.ndarray]:
        """OGBench's reset draws (float64) from the random bits of ``reset_draws``; ``task`` 0: the start and goal are
        ``init`` and ``goal`` (``reset_to``), else the task's cell centres plus OGBench's ``add_noise``."""
        u = hostsim.uniforms(bits)
        nq, nv, s = self.nq, self.nv, self.reset_noise
        if task >= 1:
            init = self.init_xy[task - 1] + self.noise * (2.0 * u[0:2] - 1.0)
            goal = self.goal_xy[task - 1] + (self.noise * (2.0 * u[2:4] - 1.0) if self.noise_goal else 0.0)
        i = 4
        out = dict(init=np.asarray(init, np.float64), goal=np.asarray(goal, np.float64))
        for name in ("goal_qpos", "goal_qvel", "actions", "qpos", "qvel"):
            if name.endswith("qpos"):
                out[name] = -s + 2.0 * s * u[i : i + nq]
                i += nq
            elif name.endswith("qvel"):
                out[name] = s * hostsim.normals(u[i : i + 2 * nv].reshape(nv, 2))
                i += 2 * nv
            else:  # gymnasium's Box.sample of [-1, 1]^nu: float32
                n = RANDOM_ACTIONS * self.nu
                out[name] = (-1.0 + 2.0 * u[i : i + n]).astype(np.float32).reshape(RANDOM_ACTIONS, self.nu)
                i += n
        return out


def _is_ant_maze(u) -> bool:
    from ogbench.locomaze.ant import AntEnv

    return isinstance(u, AntEnv) and hasattr(u, "maze_map") and not hasattr(u, "get_agent_ball_xy")


def ogbench_reset(u, draws: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """OGBench's ``MazeEnv.reset`` on the unwrapped ant maze ``u`` with the numbers it would draw given (float64):
    ``init`` / ``goal`` (start and goal xy with their noise), ``goal_qpos`` / ``goal_qvel`` and ``qpos`` / ``qvel``
    (the two ``reset_model`` noises), ``actions`` (the random steps). Returns ``(obs, goal_obs)`` (float64) and
    leaves ``u`` exactly where OGBench's reset would."""
    goal_xy = np.asarray(draws["goal"], np.float64)
    # First, the goal observation: a reset, a few random steps, the ant moved to the goal.
    mujoco.mj_resetData(u.model, u.data)
    u.set_state(u.init_qpos + draws["goal_qpos"], u.init_qvel + draws["goal_qvel"])
    for a in draws["actions"]:
        u.do_simulation(a, u.frame_skip)  # AntEnv.step's physics (its observation is not used)
    u.set_goal(goal_xy=goal_xy)
    u.set_xy(goal_xy)
    goal_ob = u.get_ob()
    # Now the actual reset.
    mujoco.mj_resetData(u.model, u.data)
    u.set_state(u.init_qpos + draws["qpos"], u.init_qvel + draws["qvel"])
    u.set_goal(goal_xy=goal_xy)
    u.set_xy(np.asarray(draws["init"], np.float64))
    return u.get_ob(), goal_ob


@functools.cache
def _ant_info(env_id: str) -> _AntInfo:
    env = make_gym_env(env_id)
    u = env.unwrapped
    if not _is_ant_maze(u):
        raise ValueError(f"{env_id} is not an OGBench ant maze")
    if u._ob_type != "states":
        raise ValueError(f"{env_id}: only state observations are supported, got ob_type={u._ob_type!r}")
    env.reset(seed=0, options=dict(task_id=1))
    model = copy.deepcopy(u.model)  # detached from the gym env (whose set_goal moves the target geom)
    obs_dim = model.nq + model.nv
    goal_tol = float(u._goal_tol)
    tp = u._teleport_info
    t_in = None if tp is None else np.array(tp["teleport_in_xys"], np.float64).reshape(-1, 2)
    t_out = None if tp is None else np.array(tp["teleport_out_xys"], np.float64).reshape(-1, 2)
    t_reach = None if tp is None else TELEPORT_REACH * float(tp["teleport_radius"])
    frame_skip = int(u.frame_skip)
    n_state = hostsim.state_size(model)
    info_box = []  # the _AntInfo, for the reset rows (made below)

    def reset_row(ctx, task, init, goal, bits):
        draws = info_box[0].draws(int(task), init, goal, bits)
        obs, goal_obs = ogbench_reset(ctx, draws)
        state = np.concatenate([draws["goal"], hostsim.get_state(ctx.model, ctx.data)])
        return hostsim.pack(state), obs, goal_obs

    def step_row(data, words, action, exit_idx):
        state = hostsim.unpack(words)
        goal = state[:2]
        hostsim.set_state(model, data, state[2:])
        data.ctrl[:] = action  # AntEnv.step: do_simulation
        mujoco.mj_step(model, data, nstep=frame_skip)
        mujoco.mj_rnePostConstraint(model, data)
        obs = np.concatenate([data.qpos, data.qvel])
        success = np.linalg.norm(data.qpos[:2] - goal) <= goal_tol  # MazeEnv.compute_success, timing 'post'
        if t_in is not None:  # MazeEnv.step: the first inbound teleport within reach sends the ant to an exit
            for x, y in t_in:
                if np.linalg.norm(data.qpos[:2] - np.array([x, y])) <= t_reach:
                    data.qpos[:2] = t_out[int(exit_idx)]
                    mujoco.mj_forward(model, data)  # as OGBench's set_xy
                    break
        return hostsim.pack(np.concatenate([goal, hostsim.get_state(model, data)])), obs, success

    words = (2 * (2 + n_state),)
    obs_out = ((obs_dim,), np.float64)
    reset_fn = hostsim.RowRunner(reset_row, [u], [(words, np.uint32), obs_out, obs_out])
    workers = [mujoco.MjData(model) for _ in range(hostsim.default_workers())]
    step_fn = hostsim.RowRunner(step_row, workers, [(words, np.uint32), obs_out, ((), bool)])
    tasks = u.task_infos
    info = _AntInfo(
        env_id=env_id,
        gym_env=env,
        model=model,
        nq=int(model.nq),
        nv=int(model.nv),
        nu=int(model.nu),
        max_steps=int(env.spec.max_episode_steps),
        goal_tol=goal_tol,
        noise=float(u._noise * u._maze_unit / 4),
        noise_goal=bool(u._add_noise_to_goal),
        reset_noise=float(u._reset_noise_scale),
        init_xy=np.array([u.ij_to_xy(t["init_ij"]) for t in tasks], np.float64),
        goal_xy=np.array([u.ij_to_xy(t["goal_ij"]) for t in tasks], np.float64),
        n_exits=0 if t_out is None else len(t_out),
        n_words=words[0],
        reset_fn=reset_fn,
        step_fn=step_fn,
    )
    info_box.append(info)
    return info


class AntMazeState(eqx.Module):
    """The goal xy and MuJoCo's integration state, float64, as uint32 words (``hostsim.pack``); (teleport maze) the
    key of the exit draws."""

    sim: UInt32[Array, " words"]
    key: PRNGKeyArray | None = None


class AntMaze(Env):
    """OGBench's AntMaze (medium, large, giant, teleport) on OGBench's own MjModel; see the module docstring."""

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
    n_exits: int = eqx.field(static=True)  # outbound teleports; 0: no teleports
    info: _AntInfo = eqx.field(static=True)
    init_xy: Float[Array, "task 2"]
    goal_xy: Float[Array, "task 2"]

    def __init__(self, env_id: str = "antmaze-medium-v0", backend: str = "mujoco"):
        if backend != "mujoco":
            raise ValueError(f"{env_id}: backend {backend!r} is not available; the ant mazes run on 'mujoco' (C MuJoCo "
                             "through a callback): MJX steps them 350-950x slower on CPU")  # fmt: skip
        info = _ant_info(env_id)
        dtype = jnp.result_type(float)
        self.env_id = env_id
        self.backend = backend
        self.obs_dim = info.nq + info.nv
        self.action_dim = info.nu
        self.goal_dim = 2
        self.max_steps = info.max_steps
        self.goal_eps = info.goal_tol
        self.num_tasks = len(info.init_xy)
        self.noise = info.noise
        self.noise_goal = info.noise_goal
        self.n_words = info.n_words
        self.n_uniforms = info.n_uniforms
        self.n_exits = info.n_exits
        self.info = info
        self.init_xy = jnp.asarray(info.init_xy, dtype)
        self.goal_xy = jnp.asarray(info.goal_xy, dtype)

    @property
    def has_teleports(self) -> bool:
        return self.n_exits > 0

    def _check_task(self, task) -> None:
        if not isinstance(task, jax.core.Tracer):  # a concrete id is checked; a traced one out of range is clamped
            t = np.asarray(task)
            if np.any((t < 1) | (t > self.num_tasks)):
                raise ValueError(f"task {task} does not exist in {self.env_id}; valid: 1..{self.num_tasks}")

    def reset_draws(self, key: PRNGKeyArray, task: Int[ArrayLike, ""]) -> dict[str, Array]:
        """What ``reset(key, task)`` draws: ``task``, the random ``bits`` the host turns into OGBench's float64 draws
        (start and goal noise, joint noises, random actions), and ``init`` / ``goal``, the start and goal xy to
        float32 precision."""
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
    ) -> tuple[AntMazeState, Float[Array, " obs"], Float[Array, " obs"]]:
        """OGBench's reset of task ``task`` (1-based), every draw from ``key`` (teleport exits: a stream folded out)."""
        return self._reset(self.reset_draws(key, task), jax.random.fold_in(key, _TELEPORT_STREAM))

    def reset_to(
        self, init_xy: Float[ArrayLike, " 2"], goal_xy: Float[ArrayLike, " 2"], key: PRNGKeyArray | None = None
    ) -> tuple[AntMazeState, Float[Array, " obs"], Float[Array, " obs"]]:
        """An episode from ``init_xy`` to ``goal_xy``; the joint noises, random actions and (teleport maze) exits
        are drawn from the typed ``key`` (default ``jax.random.key(0)``)."""
        for name, xy in (("init_xy", init_xy), ("goal_xy", goal_xy)):
            if jnp.shape(xy) != (2,):
                raise TttError(f"reset_to: {name} must be the maze's xy coordinates, shape (2,), got shape "
                               f"{jnp.shape(xy)}; vmap for a batch")  # fmt: skip
        key = jax.random.key(0) if key is None else key
        dtype = self.init_xy.dtype
        draws = dict(task=jnp.int32(0), init=jnp.asarray(init_xy, dtype), goal=jnp.asarray(goal_xy, dtype),
                     bits=jax.random.bits(key, (self.n_uniforms, 2), jnp.uint32))  # fmt: skip
        return self._reset(draws, jax.random.fold_in(key, _TELEPORT_STREAM))

    def _reset(self, draws: dict[str, Array], key: PRNGKeyArray):
        dtype = self.init_xy.dtype
        out = (jax.ShapeDtypeStruct((self.n_words,), jnp.uint32), jax.ShapeDtypeStruct((self.obs_dim,), dtype),
               jax.ShapeDtypeStruct((self.obs_dim,), dtype))  # fmt: skip

        def host(task, init, goal, bits):
            sim, obs, goal_obs = self.info.reset_fn(task.ndim, task, init, goal, bits)
            return sim, obs.astype(dtype), goal_obs.astype(dtype)

        args = (draws["task"], draws["init"], draws["goal"], draws["bits"])
        sim, obs, goal_obs = jax.pure_callback(host, out, *args, vmap_method="broadcast_all")
        return AntMazeState(sim, key if self.has_teleports else None), obs, goal_obs

    def step(
        self, state: AntMazeState, action: Float[ArrayLike, " action"]
    ) -> tuple[AntMazeState, Float[Array, " obs"], Bool[Array, ""]]:
        """OGBench's ant step (``ctrl = action``, 5 physics steps); success after the step; then the teleports."""
        dtype = self.init_xy.dtype
        key = state.key
        exit_idx = jnp.int32(0)
        if self.has_teleports:
            key, k_exit = jax.random.split(state.key)
            exit_idx = jax.random.randint(k_exit, (), 0, self.n_exits)
        out = (jax.ShapeDtypeStruct((self.n_words,), jnp.uint32), jax.ShapeDtypeStruct((self.obs_dim,), dtype),
               jax.ShapeDtypeStruct((), jnp.bool_))  # fmt: skip

        def host(sim, a, e):
            s, obs, success = self.info.step_fn(sim.ndim - 1, sim, a, e)
            return s, obs.astype(dtype), success

        sim, obs, success = jax.pure_callback(host, out, state.sim, jnp.asarray(action, jnp.float32), exit_idx,
                                              vmap_method="broadcast_all")  # fmt: skip
        return AntMazeState(sim, key), obs, success

    def goal_coords(self, obs: Float[Array, "*batch obs"]) -> Float[Array, "*batch 2"]:
        """The xy position: ``obs[..., :2]``."""
        return obs[..., :2]

    def impose(self, gym_env, draws: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Put OGBench's gymnasium env (already reset) where ``reset`` puts the in-program env from the same draws
        (``reset_draws``): ``(obs, goal_obs)``. The host driver's reset, so both drivers face the same episodes."""
        d = self.info.draws(int(draws["task"]), draws["init"], draws["goal"], np.asarray(draws["bits"]))
        return ogbench_reset(gym_env.unwrapped, d)
