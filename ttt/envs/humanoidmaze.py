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

import dataclasses
import functools
import types

import equinox as eqx
import mujoco
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, PRNGKeyArray, UInt32

from ttt.envs import hostsim
from ttt.envs.locomaze import LocoMaze, MazeInfo, maze_info, open_maze
from ttt.errors import TttError

RANDOM_ACTIONS = 40  # ogbench/locomaze/maze.py, MazeEnv.reset: random steps before the goal observation (humanoid)
ATTEMPTS = 32  # poses drawn for each reset_model call (HumanoidEnv.reset_model's rejection loop); see the docstring


@dataclasses.dataclass(frozen=True, eq=False)
class _HumanoidInfo(MazeInfo):
    """What ``HumanoidMaze`` reads from OGBench's gymnasium env (host side, cached per id)."""

    njnt: int
    jnt_low: np.ndarray  # (njnt - 1,) the hinges' ranges (reset_model's uniform joint draws)
    jnt_high: np.ndarray
    act_low: np.ndarray  # (nu,) the action space's bounds (float32 values), for its Box.sample
    act_high: np.ndarray

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
        out = self.start_goal(task, init, goal, u)
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


def _check_humanoid(env_id: str, u) -> None:
    if u.model.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4.value:
        raise ValueError(f"{env_id}: RK4 models are stepped otherwise by OGBench; not supported")
    if u._teleport_info is not None:
        raise ValueError(f"{env_id}: teleports are not supported for the humanoid")


@functools.cache
def _humanoid_info(env_id: str) -> _HumanoidInfo:
    from ogbench.locomaze.humanoid import HumanoidEnv

    env, u, model = open_maze(env_id, _is_humanoid_maze, "humanoid maze", _check_humanoid)
    frame_skip = int(u.frame_skip)
    goal_tol = float(u._goal_tol)
    obs_dim = int(env.observation_space.shape[0])

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

    space = env.action_space
    return maze_info(
        _HumanoidInfo,
        env_id,
        env,
        model,
        obs_dim,
        ogbench_reset,
        step_row,
        njnt=int(model.njnt),
        jnt_low=np.array(model.jnt_range[1:, 0], np.float64),
        jnt_high=np.array(model.jnt_range[1:, 1], np.float64),
        act_low=np.asarray(space.low, np.float64),
        act_high=np.asarray(space.high, np.float64),
    )


class HumanoidMazeState(eqx.Module):
    """The goal xy and MuJoCo's integration state, float64, as uint32 words (``hostsim.pack``)."""

    sim: UInt32[Array, " words"]


class HumanoidMaze(LocoMaze):
    """OGBench's HumanoidMaze (medium, large, giant) on OGBench's own MjModel; see the module docstring."""

    info: _HumanoidInfo = eqx.field(static=True)

    def __init__(self, env_id: str = "humanoidmaze-medium-v0", backend: str = "mujoco"):
        if backend != "mujoco":
            raise ValueError(f"{env_id}: backend {backend!r} is not available; the humanoid mazes run on 'mujoco' "
                             "(C MuJoCo through a callback)")  # fmt: skip
        super().__init__(env_id, backend, _humanoid_info(env_id))

    def _state(self, sim: UInt32[Array, " words"], key: PRNGKeyArray) -> HumanoidMazeState:
        return HumanoidMazeState(sim)

    def step(
        self, state: HumanoidMazeState, action: Float[ArrayLike, " action"]
    ) -> tuple[HumanoidMazeState, Float[Array, " obs"], Bool[Array, ""]]:
        """OGBench's humanoid step (DMC-style, 5 physics steps); success after the step."""
        sim, obs, success = self._step_sim(state.sim, action)
        return HumanoidMazeState(sim), obs, success
