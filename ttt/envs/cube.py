"""OGBench's cube-single in the compiled program: OGBench's own env (its MjModel, its inverse-kinematics controller,
its observation) run on the host through ``jax.pure_callback`` (``ttt.envs.hostsim``), the state carried bit for bit.

Read from OGBench's gymnasium env once on the host (``ogbench/manipspace/envs/{cube_env,manipspace_env,env}.py``):

- reset (task mode, OGBench's ``CubeEnv.initialize_episode``): the goal observation is the scene with the arm at a
  random pose (``initialize_arm``: effector position uniform in the arm bounds, yaw uniform in [-pi, pi], solved by
  OGBench's IK), the cube at the task's goal, and 2 uniform random actions; the first observation is the arm at a
  second random pose and the cube at the task's start plus ``uniform(-0.01, 0.01)`` on x and y with a uniform yaw.
  Every number OGBench draws comes here from random bits drawn from the reset key (``reset_draws``), turned into
  float64 draws on the host (``hostsim.uniforms``); ``impose`` puts OGBench's gymnasium env into the same state from
  the same bits (the host driver);
- step (``ManipSpaceEnv.step``): OGBench's ``set_control`` (IK to the commanded effector pose), 25 ``mj_step``s,
  ``mj_rnePostConstraint``, its observation (28 numbers); success (timing 'post') when the cube is within 0.04 m
  of the target, in float64 on the host.

OGBench's step reads derived quantities (the pinch site's pose, the pad's contact force) that ``mj_step`` leaves as
they were at the START of its last physics step. So the state carried is the integration state one physics step
before the end of the env step (plus a flag word, 0 right after a reset), and each step first replays that last
physics step: the host's ``MjData`` is then exactly what OGBench's env holds between steps.

Only the 'mujoco' backend: the cube's mesh contacts are out of MJX's reach.
"""

from __future__ import annotations

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

RANDOM_ACTIONS = 2  # CubeEnv.initialize_episode: random steps before the goal observation
INIT_NOISE = 0.01  # ... the cube's start xy noise (uniform, +-)


@dataclasses.dataclass(frozen=True, eq=False)
class _CubeInfo:
    """What ``CubeSingle`` reads from OGBench's gymnasium env (host side, cached per id)."""

    env_id: str
    gym_env: object  # the gymnasium env the callbacks run OGBench's code on (never stepped otherwise)
    max_steps: int
    goal_tol: float
    obs_dim: int
    arm_low: np.ndarray
    arm_high: np.ndarray
    init_xyz: np.ndarray  # (tasks, 3)
    goal_xyz: np.ndarray  # (tasks, 3)
    n_words: int
    reset_fn: hostsim.RowRunner
    step_fn: hostsim.RowRunner

    def draws(self, task: int, init, goal, bits: np.ndarray) -> dict[str, np.ndarray]:
        """OGBench's reset draws (float64) from the random bits of ``reset_draws``; ``task`` 0: the cube's start and
        goal are ``init`` and ``goal`` (``reset_to``), else the task's plus OGBench's start noise."""
        u = hostsim.uniforms(bits)
        if task >= 1:
            init = self.init_xyz[task - 1].copy()
            init[:2] += -INIT_NOISE + 2.0 * INIT_NOISE * u[0:2]
            goal = self.goal_xyz[task - 1]
        span = self.arm_high - self.arm_low
        return dict(
            init=np.asarray(init, np.float64),
            goal=np.asarray(goal, np.float64),
            goal_arm=self.arm_low + span * u[2:5],
            goal_yaw=-np.pi + 2.0 * np.pi * u[5],
            actions=(-1.0 + 2.0 * u[6:16]).astype(np.float32).reshape(RANDOM_ACTIONS, 5),
            arm=self.arm_low + span * u[16:19],
            yaw=-np.pi + 2.0 * np.pi * u[19],
            cube_yaw=2.0 * np.pi * u[20],
        )


N_UNIFORMS = 21  # start noise 2, goal-scene arm 3 + yaw 1, random actions 2 x 5, arm 3 + yaw 1, cube yaw 1


def _initialize_arm(u, eff_pos: np.ndarray, yaw: float) -> None:
    """OGBench's ``ManipSpaceEnv.initialize_arm`` with its two draws given."""
    from ogbench.manipspace import lie

    eff_ori = lie.SO3.from_z_radians(yaw) @ u._effector_down_rotation
    T_wa = lie.SE3.from_rotation_and_translation(eff_ori, np.asarray(eff_pos, np.float64)) @ u._T_pa
    qpos_init = u._ik.solve(pos=T_wa.translation(), quat=T_wa.rotation().wxyz, curr_qpos=u._home_qpos)
    u._data.qpos[u._arm_joint_ids] = qpos_init
    mujoco.mj_forward(u._model, u._data)


def ogbench_reset(u, draws: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """OGBench's cube-single reset (task mode) on the unwrapped env ``u`` (reset once before) with the numbers it would
    draw given in ``draws`` (``CubeSingle.reset_draws``; ``init`` holds the start with its xy noise): ``(obs,
    goal_obs)``, float64. Leaves ``u`` exactly where OGBench's reset would (cube colours aside)."""
    from ogbench.manipspace import lie

    m, d = u._model, u._data
    init = np.asarray(draws["init"], np.float64)
    goal = np.asarray(draws["goal"], np.float64)
    ident = lie.SO3.identity().wxyz.tolist()
    mocap = u._cube_target_mocap_ids[0]
    joint = d.joint("object_joint_0")
    mujoco.mj_resetData(m, d)  # CustomMuJoCoEnv.reset (model already compiled)
    mujoco.mj_forward(m, d)
    u._reset_next_step = False
    d.qpos[u._arm_joint_ids] = u._home_qpos  # CubeEnv.initialize_episode, task mode, one cube
    mujoco.mj_kinematics(m, d)
    saved_qpos, saved_qvel = d.qpos.copy(), d.qvel.copy()
    _initialize_arm(u, draws["goal_arm"], float(draws["goal_yaw"]))
    joint.qpos[:3] = goal
    joint.qpos[3:] = ident
    d.mocap_pos[mocap] = goal
    d.mocap_quat[mocap] = ident
    mujoco.mj_forward(m, d)
    for a in np.asarray(draws["actions"], np.float32):
        u.step(a)
    goal_ob = u.compute_observation()
    d.qpos[:] = saved_qpos
    d.qvel[:] = saved_qvel
    _initialize_arm(u, draws["arm"], float(draws["yaw"]))
    joint.qpos[:3] = init
    joint.qpos[3:] = lie.SO3.from_z_radians(float(draws["cube_yaw"])).wxyz.tolist()
    d.mocap_pos[mocap] = goal
    d.mocap_quat[mocap] = ident
    u.pre_step()
    mujoco.mj_forward(m, d)
    u.post_step()
    u._success = False
    mujoco.mj_forward(m, d)  # CustomMuJoCoEnv.reset, after initialize_episode
    return u.compute_observation(), goal_ob


@functools.cache
def _cube_info(env_id: str) -> _CubeInfo:
    from ogbench.manipspace.envs.cube_env import CubeEnv

    env = make_gym_env(env_id)
    u = env.unwrapped
    if not isinstance(u, CubeEnv) or u._num_cubes != 1:
        raise ValueError(f"{env_id} is not OGBench's cube-single")
    if u._ob_type != "states" or u._mode != "task" or u._success_timing != "post":
        raise ValueError(f"{env_id}: only state observations, task mode and success timing 'post' are supported")
    env.reset(seed=0, options=dict(task_id=1))
    m = u._model
    n_state = hostsim.state_size(m)
    n_steps = int(u._n_steps)
    obs_dim = int(u.compute_observation().shape[0])
    goal_tol = 0.04  # CubeEnv._compute_successes

    def restore(d, words):
        """``d`` as OGBench's env holds its MjData between steps (see the module docstring)."""
        hostsim.set_state(m, d, hostsim.unpack(words[1:]))
        if words[0] == 0:  # right after a reset: the reset ends with mj_forward
            mujoco.mj_forward(m, d)
        else:  # after a step: replay its last physics step
            mujoco.mj_step(m, d)
            mujoco.mj_rnePostConstraint(m, d)

    info_box = []  # the _CubeInfo, for the reset rows (made below)

    def reset_row(ctx, task, init, goal, bits):
        draws = info_box[0].draws(int(task), init, goal, bits)
        obs, goal_obs = ogbench_reset(ctx, draws)
        words = np.concatenate([np.zeros(1, np.uint32), hostsim.pack(hostsim.get_state(m, ctx._data))])
        return words, obs, goal_obs

    def step_row(ctx, words, action):
        d = ctx._data
        restore(d, words)
        ctx.set_control(np.array(action))  # ManipSpaceEnv.step, success timing 'post'
        ctx.pre_step()
        mujoco.mj_step(m, d, nstep=n_steps - 1)
        before_last = hostsim.get_state(m, d)
        mujoco.mj_step(m, d)
        mujoco.mj_rnePostConstraint(m, d)
        ctx.post_step()
        words = np.concatenate([np.ones(1, np.uint32), hostsim.pack(before_last)])
        return words, ctx.compute_observation(), bool(ctx._success)

    n_words = 1 + 2 * n_state
    obs_out = ((obs_dim,), np.float64)
    # One context: OGBench's step runs its IK in Python (holding the GIL), so threads would not help.
    reset_fn = hostsim.RowRunner(reset_row, [u], [((n_words,), np.uint32), obs_out, obs_out])
    step_fn = hostsim.RowRunner(step_row, [u], [((n_words,), np.uint32), obs_out, ((), bool)])
    tasks = u.task_infos
    info = _CubeInfo(
        env_id=env_id,
        gym_env=env,
        max_steps=int(env.spec.max_episode_steps),
        goal_tol=goal_tol,
        obs_dim=obs_dim,
        arm_low=np.asarray(u._arm_sampling_bounds[0], np.float64),
        arm_high=np.asarray(u._arm_sampling_bounds[1], np.float64),
        init_xyz=np.array([t["init_xyzs"][0] for t in tasks], np.float64),
        goal_xyz=np.array([t["goal_xyzs"][0] for t in tasks], np.float64),
        n_words=n_words,
        reset_fn=reset_fn,
        step_fn=step_fn,
    )
    info_box.append(info)
    return info


class CubeState(eqx.Module):
    """A flag word and MuJoCo's integration state as uint32 words (see the module docstring), and the goal xyz."""

    sim: UInt32[Array, " words"]
    goal: Float[Array, " 3"]


class CubeSingle(Env):
    """OGBench's cube-single on OGBench's own env; see the module docstring. Goal coordinates: the cube's xyz (m)."""

    env_id: str = eqx.field(static=True)
    backend: str = eqx.field(static=True)
    obs_dim: int = eqx.field(static=True)
    action_dim: int = eqx.field(static=True)
    goal_dim: int = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    goal_eps: float = eqx.field(static=True)
    num_tasks: int = eqx.field(static=True)
    n_words: int = eqx.field(static=True)
    info: _CubeInfo = eqx.field(static=True)
    init_xyz: Float[Array, "task 3"]
    goal_xyz: Float[Array, "task 3"]

    def __init__(self, env_id: str = "cube-single-v0", backend: str = "mujoco"):
        if backend != "mujoco":
            raise ValueError(f"{env_id}: backend {backend!r} is not available; cube-single runs on 'mujoco' (C MuJoCo "
                             "through a callback): its mesh contacts are out of MJX's reach")  # fmt: skip
        info = _cube_info(env_id)
        dtype = jnp.result_type(float)
        self.env_id = env_id
        self.backend = backend
        self.obs_dim = info.obs_dim
        self.action_dim = 5
        self.goal_dim = 3
        self.max_steps = info.max_steps
        self.goal_eps = info.goal_tol
        self.num_tasks = len(info.init_xyz)
        self.n_words = info.n_words
        self.info = info
        self.init_xyz = jnp.asarray(info.init_xyz, dtype)
        self.goal_xyz = jnp.asarray(info.goal_xyz, dtype)

    def _check_task(self, task) -> None:
        if not isinstance(task, jax.core.Tracer):  # a concrete id is checked; a traced one out of range is clamped
            t = np.asarray(task)
            if np.any((t < 1) | (t > self.num_tasks)):
                raise ValueError(f"task {task} does not exist in {self.env_id}; valid: 1..{self.num_tasks}")

    def reset_draws(self, key: PRNGKeyArray, task: Int[ArrayLike, ""]) -> dict[str, Array]:
        """What ``reset(key, task)`` draws: ``task``, the random ``bits`` the host turns into OGBench's float64 draws
        (start noise, arm poses, random actions, the cube's yaw), and ``init`` / ``goal``, the cube's start and goal
        xyz to float32 precision."""
        self._check_task(task)
        task = jnp.clip(jnp.asarray(task, jnp.int32), 1, self.num_tasks)
        bits = jax.random.bits(key, (N_UNIFORMS, 2), jnp.uint32)
        u = hostsim.uniforms_in_program(bits[:2])
        init = self.init_xyz[task - 1].at[:2].add(-INIT_NOISE + 2.0 * INIT_NOISE * u)
        return dict(task=task, init=init, goal=self.goal_xyz[task - 1], bits=bits)

    def sample_start_goal(
        self, key: PRNGKeyArray, task: Int[ArrayLike, ""]
    ) -> tuple[Float[Array, " 3"], Float[Array, " 3"]]:
        """The task's cube start plus ``uniform(-0.01, 0.01)`` on x and y, and its goal (no noise), to float32
        precision (the host computes the episode's own in float64 from the same bits)."""
        d = self.reset_draws(key, task)
        return d["init"], d["goal"]

    def reset(
        self, key: PRNGKeyArray, task: Int[ArrayLike, ""]
    ) -> tuple[CubeState, Float[Array, " obs"], Float[Array, " obs"]]:
        """OGBench's reset of task ``task`` (1-based), every draw from ``key``."""
        return self._reset(self.reset_draws(key, task))

    def reset_to(
        self, init_xyz: Float[ArrayLike, " 3"], goal_xyz: Float[ArrayLike, " 3"], key: PRNGKeyArray | None = None
    ) -> tuple[CubeState, Float[Array, " obs"], Float[Array, " obs"]]:
        """An episode with the cube at ``init_xyz`` and its target at ``goal_xyz`` (metres); the arm poses, random
        actions and the cube's yaw are drawn from the typed ``key`` (default ``jax.random.key(0)``)."""
        for name, xyz in (("init_xyz", init_xyz), ("goal_xyz", goal_xyz)):
            if jnp.shape(xyz) != (3,):
                raise TttError(f"reset_to: {name} must be the cube's xyz, shape (3,), got shape {jnp.shape(xyz)}; "
                               "vmap for a batch")  # fmt: skip
        key = jax.random.key(0) if key is None else key
        dtype = self.init_xyz.dtype
        draws = dict(task=jnp.int32(0), init=jnp.asarray(init_xyz, dtype), goal=jnp.asarray(goal_xyz, dtype),
                     bits=jax.random.bits(key, (N_UNIFORMS, 2), jnp.uint32))  # fmt: skip
        return self._reset(draws)

    def _reset(self, draws: dict[str, Array]):
        dtype = self.init_xyz.dtype
        out = (jax.ShapeDtypeStruct((self.n_words,), jnp.uint32), jax.ShapeDtypeStruct((self.obs_dim,), dtype),
               jax.ShapeDtypeStruct((self.obs_dim,), dtype))  # fmt: skip

        def host(task, init, goal, bits):
            sim, obs, goal_obs = self.info.reset_fn(task.ndim, task, init, goal, bits)
            return sim, obs.astype(dtype), goal_obs.astype(dtype)

        args = (draws["task"], draws["init"], draws["goal"], draws["bits"])
        sim, obs, goal_obs = jax.pure_callback(host, out, *args, vmap_method="broadcast_all")
        return CubeState(sim, draws["goal"]), obs, goal_obs

    def step(
        self, state: CubeState, action: Float[ArrayLike, " action"]
    ) -> tuple[CubeState, Float[Array, " obs"], Bool[Array, ""]]:
        """OGBench's cube step (IK control, 25 physics steps, its observation); success after the step."""
        dtype = self.init_xyz.dtype
        out = (jax.ShapeDtypeStruct((self.n_words,), jnp.uint32), jax.ShapeDtypeStruct((self.obs_dim,), dtype),
               jax.ShapeDtypeStruct((), jnp.bool_))  # fmt: skip

        def host(sim, a):
            s, obs, success = self.info.step_fn(sim.ndim - 1, sim, a)
            return s, obs.astype(dtype), success

        sim, obs, success = jax.pure_callback(host, out, state.sim, jnp.asarray(action, jnp.float32),
                                              vmap_method="broadcast_all")  # fmt: skip
        return CubeState(sim, state.goal), obs, success

    def goal_coords(self, obs: Float[Array, "*batch obs"]) -> Float[Array, "*batch 3"]:
        """The cube's position in metres: ``obs[..., 19:22] / 10 + (0.425, 0, 0)`` (OGBench's scaling undone)."""
        return obs[..., 19:22] / 10.0 + jnp.asarray([0.425, 0.0, 0.0], obs.dtype)

    def impose(self, gym_env, draws: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Put OGBench's gymnasium env (already reset) where ``reset`` puts the in-program env from the same draws
        (``reset_draws``): ``(obs, goal_obs)``. The host driver's reset, so both drivers face the same episodes."""
        d = self.info.draws(int(draws["task"]), draws["init"], draws["goal"], np.asarray(draws["bits"]))
        return ogbench_reset(gym_env.unwrapped, d)
