"""OGBench's HumanoidMaze (medium, large, giant) in the compiled program: OGBench's own MjModel stepped by C MuJoCo
through ``jax.pure_callback`` (``ttt.envs.hostsim``), the state carried bit for bit, as the ant mazes are
(``ttt.envs.antmaze``).

Read from OGBench's gymnasium env once per id on the host (``ogbench/locomaze/{maze,humanoid}.py``):

- reset (OGBench's ``MazeEnv.reset``): start ``ij_to_xy(init_ij)`` and goal ``ij_to_xy(goal_ij)`` plus
  ``uniform(-1, 1) * noise * maze_unit / 4`` per coordinate (the goal only with ``add_noise_to_goal``); the goal
  observation is the humanoid after ``mj_resetData``, OGBench's ``HumanoidEnv.reset_model`` and 40 uniform random
  actions, moved to the goal xy; the first observation is the humanoid after a second ``mj_resetData`` and
  ``reset_model``, moved to the start xy. ``reset_model`` is a rejection loop: a random root orientation
  (``uniform(size=4)``, normalised), ``qvel = 0.1 * standard_normal(nv)`` and every hinge uniform in its
  ``jnt_range``, drawn again while the pose penetrates anything (``data.ncon > 0`` after ``mj_forward`` with
  actuation disabled). Every number OGBench draws from its generators comes here from random bits drawn from the
  reset key (``reset_draws``: integers, so the same in any program), which the host turns into float64 draws
  (``hostsim.uniforms``), ``ATTEMPTS`` poses for each of the two ``reset_model`` calls; ``ogbench_reset`` runs
  OGBench's own loop over them. A reset is a pure function of the key, and ``impose`` puts OGBench's gymnasium env
  into the same state from the same bits (the host driver).
- step: OGBench's DMC-style stepping (``HumanoidEnv._step_mujoco_simulation``, frame skip 5): ``ctrl = action``,
  ``mj_step2``, 4 ``mj_step``s, ``mj_step1``. The state carried is MuJoCo's integration state only; ``mj_step1``
  from it first recomputes the position and velocity quantities ``mj_step2`` reads, which the previous step's
  closing ``mj_step1`` (or the reset's ``mj_forward``) left in OGBench's ``MjData``: the same numbers, bit for bit
  (tests/test_humanoidmaze_env.py). Observation: OGBench's own ``HumanoidEnv.get_ob`` (xy, joint angles, head
  height, extremities in the torso frame, torso vertical orientation, subtree linear velocity, qvel: 69 numbers);
  success (timing 'post') ``||xy - goal|| <= 0.5`` in float64 on the host, as OGBench's ``compute_success``.

The bound on ``reset_model``'s attempts: a pose is accepted with probability 0.74 (20,000 calls of OGBench's own
``reset_model`` after ``mj_resetData``, with its own generator: 1.35 attempts on average, 11 at most;
``python benchmarks/speed/humanoidmaze_driver.py``, benchmarks/results/speed/humanoidmaze_driver.json), so all
``ATTEMPTS`` = 32 poses penetrate with probability 0.26**32, about 1.4e-19 per call (two calls per reset). Such a
reset raises a ``TttError`` (through the callback on the compiled driver) rather than drawing further, so a reset
stays a pure function of its key.

Only the 'mujoco' backend, as the ant mazes (MJX steps the ant maze 350-950x slower than C MuJoCo on CPU,
``benchmarks/speed/antmaze_physics.py``; the humanoid in MJX is not measured here).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import types

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

RANDOM_ACTIONS = 40  # ogbench/locomaze/maze.py, MazeEnv.reset: random steps before the goal observation (humanoid)
ATTEMPTS = 32  # poses drawn for each reset_model call (HumanoidEnv.reset_model's rejection loop); see the docstring


@dataclasses.dataclass(frozen=True, eq=False)
class _HumanoidInfo:
    """What ``HumanoidMaze`` reads from OGBench's gymnasium env (host side, cached per id)."""

    env_id: str
    gym_env: object  # the gymnasium env whose unwrapped MjData the reset callback uses (never stepped otherwise)
    model: mujoco.MjModel  # a copy, for the step workers
    nq: int
    nv: int
    nu: int
    njnt: int
    obs_dim: int
    max_steps: int
    goal_tol: float
    noise: float  # half-width of the start/goal noise per coordinate: noise * maze_unit / 4
    noise_goal: bool
    jnt_low: np.ndarray  # (njnt - 1,) the hinges' ranges (reset_model's uniform joint draws)
    jnt_high: np.ndarray
    act_low: np.ndarray  # (nu,) the action space's bounds (float32 values), for its Box.sample
    act_high: np.ndarray
    init_xy: np.ndarray  # (tasks, 2) task start cell centres
    goal_xy: np.ndarray  # (tasks, 2) task goal cell centres
    n_words: int
    reset_fn: hostsim.RowRunner
    step_fn: hostsim.RowRunner

    @property
    def per_attempt(self) -> int:
        """Uniform numbers one pose of ``reset_model`` takes: quaternion (4), qvel (normals: two each), hinges."""
        return 4 + 2 * self.nv + (self.njnt - 1)

    @property
    def n_uniforms(self) -> int:
        """Uniform numbers one reset draws: start and goal noise, two blocks of poses, the random actions."""
        return 4 + 2 * ATTEMPTS * self.per_attempt + RANDOM_ACTIONS * self.nu

    def _poses(self, u: np.ndarray) -> dict[str, np.ndarray]:
        """``ATTEMPTS`` poses of ``reset_model`` from ``ATTEMPTS * per_attempt`` uniforms."""
        nv, nj = self.nv, self.njnt - 1
        u = u.reshape(ATTEMPTS, self.per_attempt)
        return dict(
            quat=u[:, :4].copy(),  # np_random.uniform(size=4), normalised in reset_model
            qvel=0.1 * hostsim.normals(u[:, 4 : 4 + 2 * nv].reshape(ATTEMPTS, nv, 2)),
            joints=self.jnt_low + (self.jnt_high - self.jnt_low) * u[:, 4 + 2 * nv : 4 + 2 * nv + nj],
        )

    def draws(self, task: int, init, goal, bits: np.ndarray) -> dict[str, np.ndarray]:
        """OGBench's reset draws (float64) from the random bits of ``reset_draws``; ``task`` 0: the start and goal are
        ``init`` and ``goal`` (``reset_to``), else the task's cell centres plus OGBench's ``add_noise``."""
        u = hostsim.uniforms(bits)
        if task >= 1:
            init = self.init_xy[task - 1] + self.noise * (2.0 * u[0:2] - 1.0)
            goal = self.goal_xy[task - 1] + (self.noise * (2.0 * u[2:4] - 1.0) if self.noise_goal else 0.0)
        out = dict(init=np.asarray(init, np.float64), goal=np.asarray(goal, np.float64))
        i, n = 4, ATTEMPTS * self.per_attempt
        out.update({f"goal_{k}": v for k, v in self._poses(u[i : i + n]).items()})
        i += n
        m = RANDOM_ACTIONS * self.nu  # gymnasium's Box.sample: uniform(low, high) in float64, then float32
        a = self.act_low + (self.act_high - self.act_low) * u[i : i + m].reshape(RANDOM_ACTIONS, self.nu)
        out["actions"] = a.astype(np.float32)
        i += m
        out.update(self._poses(u[i : i + n]))
        return out


def _is_humanoid_maze(u) -> bool:
    from ogbench.locomaze.humanoid import HumanoidEnv

    return isinstance(u, HumanoidEnv) and hasattr(u, "maze_map")


def reset_model(u, quat: np.ndarray, qvel: np.ndarray, joints: np.ndarray) -> int:
    """OGBench's ``HumanoidEnv.reset_model`` on the unwrapped humanoid maze ``u`` with its draws given, one row per
    attempt (``quat`` (A, 4) uniforms, ``qvel`` (A, nv), ``joints`` (A, njnt - 1)): the first pose that penetrates
    nothing is kept. Returns the attempts used; a ``TttError`` when all ``A`` penetrate."""
    m, d = u.model, u.data
    for k in range(len(quat)):
        q = np.array(quat[k], np.float64)
        q /= np.linalg.norm(q)
        d.qpos[3:7] = q
        d.qvel = np.asarray(qvel[k], np.float64)
        for joint_id in range(1, m.njnt):
            d.qpos[6 + joint_id] = joints[k, joint_id - 1]
        with u.disable("actuation"):
            mujoco.mj_forward(m, d)
        if d.ncon == 0:
            return k + 1
    raise TttError(f"humanoid reset: all {len(quat)} poses drawn for this episode penetrate the floor or a wall "
                   "(probability about 1e-19); evaluate with another --seed")  # fmt: skip


def ogbench_reset(u, draws: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """OGBench's ``MazeEnv.reset`` on the unwrapped humanoid maze ``u`` with the numbers it would draw given (float64):
    ``init`` / ``goal`` (start and goal xy with their noise), ``goal_quat`` / ``goal_qvel`` / ``goal_joints`` and
    ``quat`` / ``qvel`` / ``joints`` (the poses the two ``reset_model`` loops try, in order), ``actions`` (the random
    steps). Returns ``(obs, goal_obs)`` (float64) and leaves ``u`` exactly where OGBench's reset would."""
    goal_xy = np.asarray(draws["goal"], np.float64)
    # First, the goal observation: a reset, a few random steps, the humanoid moved to the goal.
    mujoco.mj_resetData(u.model, u.data)
    reset_model(u, draws["goal_quat"], draws["goal_qvel"], draws["goal_joints"])
    for a in draws["actions"]:
        u.do_simulation(a, u.frame_skip)  # HumanoidEnv.step's physics (its observation is not used)
    u.set_goal(goal_xy=goal_xy)
    u.set_xy(goal_xy)
    goal_ob = u.get_ob()
    # Now the actual reset.
    mujoco.mj_resetData(u.model, u.data)
    reset_model(u, draws["quat"], draws["qvel"], draws["joints"])
    u.set_goal(goal_xy=goal_xy)
    u.set_xy(np.asarray(draws["init"], np.float64))
    return u.get_ob(), goal_ob


@functools.cache
def _humanoid_info(env_id: str) -> _HumanoidInfo:
    from ogbench.locomaze.humanoid import HumanoidEnv

    env = make_gym_env(env_id)
    u = env.unwrapped
    if not _is_humanoid_maze(u):
        raise ValueError(f"{env_id} is not an OGBench humanoid maze")
    if u._ob_type != "states":
        raise ValueError(f"{env_id}: only state observations are supported, got ob_type={u._ob_type!r}")
    if u.model.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4.value:
        raise ValueError(f"{env_id}: RK4 models are stepped otherwise by OGBench; not supported")
    if u._teleport_info is not None:
        raise ValueError(f"{env_id}: teleports are not supported for the humanoid")
    env.reset(seed=0, options=dict(task_id=1))
    model = copy.deepcopy(u.model)  # detached from the gym env (whose set_goal moves the target geom)
    frame_skip = int(u.frame_skip)
    goal_tol = float(u._goal_tol)
    n_state = hostsim.state_size(model)
    obs_dim = int(env.observation_space.shape[0])
    info_box = []  # the _HumanoidInfo, for the reset rows (made below)

    def reset_row(ctx, task, init, goal, bits):
        draws = info_box[0].draws(int(task), init, goal, bits)
        obs, goal_obs = ogbench_reset(ctx, draws)
        state = np.concatenate([draws["goal"], hostsim.get_state(ctx.model, ctx.data)])
        return hostsim.pack(state), obs, goal_obs

    def step_row(data, words, action):
        state = hostsim.unpack(words)
        goal = state[:2]
        hostsim.set_state(model, data, state[2:])
        mujoco.mj_step1(model, data)  # what the previous step's closing mj_step1 left in OGBench's MjData
        data.ctrl[:] = action  # HumanoidEnv._step_mujoco_simulation (DMC-style stepping)
        mujoco.mj_step2(model, data)
        mujoco.mj_step(model, data, nstep=frame_skip - 1)
        mujoco.mj_step1(model, data)
        obs = HumanoidEnv.get_ob(types.SimpleNamespace(data=data))  # OGBench's own observation code
        success = np.linalg.norm(data.qpos[:2] - goal) <= goal_tol  # MazeEnv.compute_success, timing 'post'
        return hostsim.pack(np.concatenate([goal, hostsim.get_state(model, data)])), obs, success

    words = (2 * (2 + n_state),)
    obs_out = ((obs_dim,), np.float64)
    reset_fn = hostsim.RowRunner(reset_row, [u], [(words, np.uint32), obs_out, obs_out])
    workers = [mujoco.MjData(model) for _ in range(hostsim.default_workers())]
    step_fn = hostsim.RowRunner(step_row, workers, [(words, np.uint32), obs_out, ((), bool)])
    tasks = u.task_infos
    space = env.action_space
    info = _HumanoidInfo(
        env_id=env_id,
        gym_env=env,
        model=model,
        nq=int(model.nq),
        nv=int(model.nv),
        nu=int(model.nu),
        njnt=int(model.njnt),
        obs_dim=obs_dim,
        max_steps=int(env.spec.max_episode_steps),
        goal_tol=goal_tol,
        noise=float(u._noise * u._maze_unit / 4),
        noise_goal=bool(u._add_noise_to_goal),
        jnt_low=np.array(model.jnt_range[1:, 0], np.float64),
        jnt_high=np.array(model.jnt_range[1:, 1], np.float64),
        act_low=np.asarray(space.low, np.float64),
        act_high=np.asarray(space.high, np.float64),
        init_xy=np.array([u.ij_to_xy(t["init_ij"]) for t in tasks], np.float64),
        goal_xy=np.array([u.ij_to_xy(t["goal_ij"]) for t in tasks], np.float64),
        n_words=words[0],
        reset_fn=reset_fn,
        step_fn=step_fn,
    )
    info_box.append(info)
    return info


class HumanoidMazeState(eqx.Module):
    """The goal xy and MuJoCo's integration state, float64, as uint32 words (``hostsim.pack``)."""

    sim: UInt32[Array, " words"]


class HumanoidMaze(Env):
    """OGBench's HumanoidMaze (medium, large, giant) on OGBench's own MjModel; see the module docstring."""

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
    info: _HumanoidInfo = eqx.field(static=True)
    init_xy: Float[Array, "task 2"]
    goal_xy: Float[Array, "task 2"]

    def __init__(self, env_id: str = "humanoidmaze-medium-v0", backend: str = "mujoco"):
        if backend != "mujoco":
            raise ValueError(f"{env_id}: backend {backend!r} is not available; the humanoid mazes run on 'mujoco' "
                             "(C MuJoCo through a callback)")  # fmt: skip
        info = _humanoid_info(env_id)
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

    def _check_task(self, task) -> None:
        if not isinstance(task, jax.core.Tracer):  # a concrete id is checked; a traced one out of range is clamped
            t = np.asarray(task)
            if np.any((t < 1) | (t > self.num_tasks)):
                raise ValueError(f"task {task} does not exist in {self.env_id}; valid: 1..{self.num_tasks}")

    def reset_draws(self, key: PRNGKeyArray, task: Int[ArrayLike, ""]) -> dict[str, Array]:
        """What ``reset(key, task)`` draws: ``task``, the random ``bits`` the host turns into OGBench's float64 draws
        (start and goal noise, the poses of both ``reset_model`` loops, random actions), and ``init`` / ``goal``, the
        start and goal xy to float32 precision."""
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
    ) -> tuple[HumanoidMazeState, Float[Array, " obs"], Float[Array, " obs"]]:
        """OGBench's reset of task ``task`` (1-based), every draw from ``key``."""
        return self._reset(self.reset_draws(key, task))

    def reset_to(
        self, init_xy: Float[ArrayLike, " 2"], goal_xy: Float[ArrayLike, " 2"], key: PRNGKeyArray | None = None
    ) -> tuple[HumanoidMazeState, Float[Array, " obs"], Float[Array, " obs"]]:
        """An episode from ``init_xy`` to ``goal_xy``; the poses and random actions are drawn from the typed ``key``
        (default ``jax.random.key(0)``)."""
        for name, xy in (("init_xy", init_xy), ("goal_xy", goal_xy)):
            if jnp.shape(xy) != (2,):
                raise TttError(f"reset_to: {name} must be the maze's xy coordinates, shape (2,), got shape "
                               f"{jnp.shape(xy)}; vmap for a batch")  # fmt: skip
        key = jax.random.key(0) if key is None else key
        dtype = self.init_xy.dtype
        draws = dict(task=jnp.int32(0), init=jnp.asarray(init_xy, dtype), goal=jnp.asarray(goal_xy, dtype),
                     bits=jax.random.bits(key, (self.n_uniforms, 2), jnp.uint32))  # fmt: skip
        return self._reset(draws)

    def _reset(self, draws: dict[str, Array]):
        dtype = self.init_xy.dtype
        out = (jax.ShapeDtypeStruct((self.n_words,), jnp.uint32), jax.ShapeDtypeStruct((self.obs_dim,), dtype),
               jax.ShapeDtypeStruct((self.obs_dim,), dtype))  # fmt: skip

        def host(task, init, goal, bits):
            sim, obs, goal_obs = self.info.reset_fn(task.ndim, task, init, goal, bits)
            return sim, obs.astype(dtype), goal_obs.astype(dtype)

        args = (draws["task"], draws["init"], draws["goal"], draws["bits"])
        sim, obs, goal_obs = jax.pure_callback(host, out, *args, vmap_method="broadcast_all")
        return HumanoidMazeState(sim), obs, goal_obs

    def step(
        self, state: HumanoidMazeState, action: Float[ArrayLike, " action"]
    ) -> tuple[HumanoidMazeState, Float[Array, " obs"], Bool[Array, ""]]:
        """OGBench's humanoid step (DMC-style, 5 physics steps); success after the step."""
        dtype = self.init_xy.dtype
        out = (jax.ShapeDtypeStruct((self.n_words,), jnp.uint32), jax.ShapeDtypeStruct((self.obs_dim,), dtype),
               jax.ShapeDtypeStruct((), jnp.bool_))  # fmt: skip

        def host(sim, a):
            s, obs, success = self.info.step_fn(sim.ndim - 1, sim, a)
            return s, obs.astype(dtype), success

        sim, obs, success = jax.pure_callback(host, out, state.sim, jnp.asarray(action, jnp.float32),
                                              vmap_method="broadcast_all")  # fmt: skip
        return HumanoidMazeState(sim), obs, success

    def goal_coords(self, obs: Float[Array, "*batch obs"]) -> Float[Array, "*batch 2"]:
        """The xy position: ``obs[..., :2]``."""
        return obs[..., :2]

    def impose(self, gym_env, draws: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Put OGBench's gymnasium env (already reset) where ``reset`` puts the in-program env from the same draws
        (``reset_draws``): ``(obs, goal_obs)``. The host driver's reset, so both drivers face the same episodes."""
        d = self.info.draws(int(draws["task"]), draws["init"], draws["goal"], np.asarray(draws["bits"]))
        return ogbench_reset(gym_env.unwrapped, d)
