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

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, PRNGKeyArray, UInt32

from ttt.envs import hostsim
from ttt.envs.locomaze import LocoMaze, MazeInfo, maze_info, open_maze

RANDOM_ACTIONS = 5  # ogbench/locomaze/maze.py, MazeEnv.reset: random steps before the goal observation (ant)
TELEPORT_REACH = 1.5  # MazeEnv.step: teleports within ``teleport_radius * 1.5``
_TELEPORT_STREAM = 0x54454C45  # ``reset`` folds this into its key for the teleport exits ("TELE")


@dataclasses.dataclass(frozen=True, eq=False)
class _AntInfo(MazeInfo):
    """What ``AntMaze`` reads from OGBench's gymnasium env (host side, cached per id)."""

    reset_noise: float  # AntEnv._reset_noise_scale
    n_exits: int  # outbound teleports (0: none)

    @property
    def n_uniforms(self) -> int:
        """Uniform numbers one reset draws: start and goal noise, two joint noises (normals: two each), actions."""
        return 4 + 2 * (self.nq + 2 * self.nv) + RANDOM_ACTIONS * self.nu

    def draws(self, task: int, init, goal, bits: np.ndarray) -> dict[str, np.ndarray]:
        """OGBench's reset draws (float64) from the random bits of ``reset_draws``; ``task`` 0: the start and goal are
        ``init`` and ``goal`` (``reset_to``), else the task's cell centres plus OGBench's ``add_noise``."""
        u = hostsim.uniforms(bits)
        nq, nv, s = self.nq, self.nv, self.reset_noise
        i = 4
        out = self.start_goal(task, init, goal, u)
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
    env, u, model = open_maze(env_id, _is_ant_maze, "ant maze")
    obs_dim = model.nq + model.nv
    goal_tol = float(u._goal_tol)
    tp = u._teleport_info
    t_in = None if tp is None else np.array(tp["teleport_in_xys"], np.float64).reshape(-1, 2)
    t_out = None if tp is None else np.array(tp["teleport_out_xys"], np.float64).reshape(-1, 2)
    t_reach = None if tp is None else TELEPORT_REACH * float(tp["teleport_radius"])
    frame_skip = int(u.frame_skip)

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

    return maze_info(_AntInfo, env_id, env, model, obs_dim, ogbench_reset, step_row,
                     reset_noise=float(u._reset_noise_scale), n_exits=0 if t_out is None else len(t_out))  # fmt: skip


class AntMazeState(eqx.Module):
    """The goal xy and MuJoCo's integration state, float64, as uint32 words (``hostsim.pack``); (teleport maze) the
    key of the exit draws."""

    sim: UInt32[Array, " words"]
    key: PRNGKeyArray | None = None


class AntMaze(LocoMaze):
    """OGBench's AntMaze (medium, large, giant, teleport) on OGBench's own MjModel; see the module docstring."""

    info: _AntInfo = eqx.field(static=True)

    def __init__(self, env_id: str = "antmaze-medium-v0", backend: str = "mujoco"):
        if backend != "mujoco":
            raise ValueError(f"{env_id}: backend {backend!r} is not available; the ant mazes run on 'mujoco' (C MuJoCo "
                             "through a callback): MJX steps them 350-950x slower on CPU")  # fmt: skip
        super().__init__(env_id, backend, _ant_info(env_id))

    @property
    def n_exits(self) -> int:
        """Outbound teleports; 0: no teleports."""
        return self.info.n_exits

    @property
    def has_teleports(self) -> bool:
        return self.n_exits > 0

    def _state(self, sim: UInt32[Array, " words"], key: PRNGKeyArray) -> AntMazeState:
        """The teleport exits are drawn from a stream folded out of the reset's key."""
        return AntMazeState(sim, jax.random.fold_in(key, _TELEPORT_STREAM) if self.has_teleports else None)

    def step(
        self, state: AntMazeState, action: Float[ArrayLike, " action"]
    ) -> tuple[AntMazeState, Float[Array, " obs"], Bool[Array, ""]]:
        """OGBench's ant step (``ctrl = action``, 5 physics steps); success after the step; then the teleports."""
        key = state.key
        exit_idx = jnp.int32(0)
        if self.has_teleports:
            key, k_exit = jax.random.split(state.key)
            exit_idx = jax.random.randint(k_exit, (), 0, self.n_exits)
        sim, obs, success = self._step_sim(state.sim, action, exit_idx)
        return AntMazeState(sim, key), obs, success
