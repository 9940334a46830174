"""The locomotion experts that OGBench's antmaze and humanoidmaze datasets are generated with, trained here with
our SAC.

OGBench (``data_gen_scripts/main_sac.py``) trains SAC on ``online-ant-v0`` / ``online-humanoid-v0`` wrapped for
direction following: the observation is the robot's state without its xy position, followed by a random unit
direction ``z`` (2 numbers), redrawn at reset and every ``resample_interval`` steps (ant 100, humanoid 200); the
ant's reward is the torso's xy displacement along ``z`` (``GymXYWrapper``), the humanoid's is the DeepMind Control
stand reward times ``1 + 100 * displacement . z`` (``DMCHumanoidXYWrapper``: it must get up from lying and walk).
``ROBOTS`` declares both, with the recipe each is trained with here (``docs/datasets.md`` says why).

This module holds that environment (``DirectionalRobot``, host MuJoCo), the host training loop (``train_expert``:
the environment on the host, everything else one jitted call per step, see ``ttt.data.sac.make_train_step``),
checkpoints that resume exactly, the deterministic evaluation (``evaluate_expert``), and a NumPy copy of the
deterministic actor (``NumpyExpert``) for data-generation workers that should not start JAX.

Files are ``.npz`` archives of plain numeric arrays plus one JSON document (``doc``), read with
``np.load(allow_pickle=False)``: an expert handed to ``ttt data generate`` cannot run code. Checkpoints are written
at the end of an episode once ``checkpoint_every`` steps have passed since the last one: the agent, the optimiser,
the replay buffer, the key, the environment's random state and the robot's initial state of the next episode, so a
resumed run continues the same run (the same numbers as an uninterrupted one, up to floating-point reduction order).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ttt.data.sac import Replay, SACConfig, TanhGaussianActor, TrainCarry, init_sac, make_train_step
from ttt.envs.gym import make_gym_env, oracle_direction, quiet, seed_env, upside_down
from ttt.errors import TttError
from ttt.safe_files import loads_json, one_line, safe_load_npz, show
from ttt.storage import atomic_write_bytes, atomic_write_text, dumps

CKPT_NAME = "checkpoint.npz"
EXPERT_NAME = "expert.npz"
FORMAT = 2  # .npz + JSON (format 1, ttt 0.1's, was a pickle: `convert_legacy_expert` reads it safely)


@dataclasses.dataclass(frozen=True)
class Robot:
    """A direction-following locomotion task and the recipe its expert is trained with here."""

    name: str
    env_id: str  # OGBench's online environment
    obs_dim: int  # the robot's observation without xy, plus the direction (2)
    action_dim: int
    resample_interval: int  # steps between directions (OGBench: ant 100, humanoid 200)
    maze: str  # the maze whose oracle test `ttt expert eval` runs by default
    recipe: SACConfig  # what `ttt expert train ROBOT` trains with
    steps: int  # default environment steps
    checkpoint_every: int  # default steps between checkpoints


ROBOTS = {
    # OGBench's ant recipe unchanged (`main_sac.py --env_name=online-ant-xy-v0`).
    "ant": Robot("ant", "online-ant-v0", 29, 8, 100, "antmaze-medium-v0", SACConfig(), 400_000, 20_000),
    # OGBench's humanoid recipe (LayerNorm critics, the mean of the two critics, one update every 4 steps) with
    # critics of 256x2 instead of 1024x3: an update is 12x cheaper on one CPU core (docs/datasets.md).
    "humanoid": Robot(
        "humanoid",
        "online-humanoid-v0",
        69,
        21,
        200,
        "humanoidmaze-medium-v0",
        SACConfig(value_hidden_dims=(256, 256), layer_norm=True, min_q=False, train_interval=4),
        2_000_000,
        100_000,
    ),
}
ANT_OBS_DIM, ANT_ACTION_DIM = ROBOTS["ant"].obs_dim, ROBOTS["ant"].action_dim


def _make_env(env_id: str):
    quiet()
    import gymnasium
    import ogbench.online_locomotion  # noqa: F401  (registers online-ant-v0, online-humanoid-v0)

    return gymnasium.make(env_id)


def unit_direction(rng: np.random.Generator) -> np.ndarray:
    """A uniformly random unit vector in the plane (a normalised standard normal draw, as OGBench)."""
    z = rng.standard_normal(2)
    return z / np.linalg.norm(z)


# The humanoid counts as up once its head is above UP_HEIGHT and as fallen when it then drops below DOWN_HEIGHT
# (OGBench's stand reward is full from a head height of 1.4 m; lying, the head is below 0.3 m). It starts each
# episode in the air in a random pose and drops in about 0.6 s: the first SETTLE_STEPS (1 s) count neither way.
UP_HEIGHT, DOWN_HEIGHT, SETTLE_STEPS = 1.2, 0.8, 40


def humanoid_up(up: bool, head_height: float, step: int) -> tuple[bool, bool]:
    """The humanoid's state after a step: ``(up, fell)`` from the state before, its head height and the number of
    steps taken in the episode (``UP_HEIGHT``, ``DOWN_HEIGHT``, ``SETTLE_STEPS``)."""
    if step <= SETTLE_STEPS:
        return False, False
    if head_height >= UP_HEIGHT:
        return True, False
    if up and head_height < DOWN_HEIGHT:
        return False, True
    return up, False


class DirectionalRobot:
    """A robot's online environment with OGBench's direction-following wrapper.

    ``reset() -> obs``; ``step(action) -> (obs, reward, terminated, truncated)``. The observation is the robot's
    own followed by ``z``; the reward is OGBench's wrapper's (module docstring), with the ``z`` in force during the
    step; ``z`` is redrawn after every ``resample_interval`` steps. All randomness (reset noise, directions) comes
    from ``rng``, so a seed fixes the whole stream. Per episode it counts ``progress`` (the displacement along
    ``z``, summed), ``falls`` (the ant: terminated; the humanoid: ``humanoid_up``) and ``up_steps`` (steps the
    robot is up: the ant until it terminates, the humanoid as ``humanoid_up``).
    """

    def __init__(self, robot: Robot | str, rng: np.random.Generator, resample_interval: int | None = None, env=None):
        self.robot = ROBOTS[robot] if isinstance(robot, str) else robot
        self.obs_dim, self.action_dim = self.robot.obs_dim, self.robot.action_dim
        self.env = _make_env(self.robot.env_id) if env is None else env
        self.rng = rng
        self.resample_interval = resample_interval or self.robot.resample_interval
        self.humanoid = self.robot.name == "humanoid"
        self.z = np.zeros(2)
        self.steps = 0
        self._episode_stats()

    @property
    def mj(self):
        return self.env.unwrapped

    def _episode_stats(self) -> None:
        self.progress, self.falls, self.up_steps = 0.0, 0, 0
        self.up = not self.humanoid  # the humanoid starts lying

    def head_height(self) -> float:
        return float(self.mj.data.xpos[2, 2]) if self.humanoid else float("nan")

    def reset(self) -> np.ndarray:
        ob, _ = self.env.reset(seed=int(self.rng.integers(2**31 - 1)))
        self.z = unit_direction(self.rng)
        self.steps = 0
        self._episode_stats()
        return np.concatenate([ob, self.z])

    def snapshot(self) -> dict:
        """The state at the start of an episode (right after ``reset``), random stream included."""
        return dict(
            rng_state=self.rng.bit_generator.state,
            qpos=self.mj.data.qpos.copy(),
            qvel=self.mj.data.qvel.copy(),
            z=self.z.copy(),
        )

    def restore(self, snap: dict) -> np.ndarray:
        """Start the episode a ``snapshot`` was taken at (used when resuming); returns its observation."""
        self.env.reset(seed=0)
        self.mj.set_state(np.asarray(snap["qpos"], np.float64), np.asarray(snap["qvel"], np.float64))
        self.rng.bit_generator.state = snap["rng_state"]
        self.z = np.asarray(snap["z"], np.float64)
        self.steps = 0
        self._episode_stats()
        return np.concatenate([self.mj._get_obs(), self.z])

    def _humanoid_reward(self, moved: float) -> float:
        from ogbench.online_locomotion.humanoid import tolerance

        head_height = self.mj.data.xpos[2, 2]
        torso_upright = self.mj.data.xmat[1, 8]
        standing = tolerance(head_height, bounds=(1.4, float("inf")), margin=1.4 / 4)
        upright = tolerance(torso_upright, bounds=(0.9, float("inf")), margin=1.9, sigmoid="linear", value_at_margin=0)
        return float(standing * upright * (1 + moved * 100))

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool]:
        before = self.mj.data.qpos[:2].copy()
        ob, _, terminated, truncated, _ = self.env.step(action)
        after = self.mj.data.qpos[:2].copy()
        moved = float((after - before) @ self.z)
        reward = self._humanoid_reward(moved) if self.humanoid else moved
        self.progress += moved
        self.steps += 1
        if self.humanoid:
            self.up, fell = humanoid_up(self.up, self.head_height(), self.steps)
            self.falls += int(fell)
            self.up_steps += int(self.up)
        else:
            self.falls += int(terminated)
            self.up_steps += int(not terminated)
        if self.steps % self.resample_interval == 0:
            self.z = unit_direction(self.rng)
        return np.concatenate([ob, self.z]), reward, bool(terminated), bool(truncated)


class DirectionalAnt(DirectionalRobot):
    """``online-ant-v0`` with OGBench's ``GymXYWrapper`` (resample 100): ``DirectionalRobot("ant", ...)``."""

    def __init__(self, rng: np.random.Generator, resample_interval: int = 100, env=None):
        super().__init__("ant", rng, resample_interval, env)


@dataclasses.dataclass
class TrainLog:
    """Host-side statistics of a training run (saved with every checkpoint)."""

    step: int = 0
    episodes: int = 0
    falls: int = 0
    # (step, return, length, falls, progress along z, fraction of steps up) per episode
    returns: list = dataclasses.field(default_factory=list)
    wall: float = 0.0  # seconds of training, over every session

    def recent_return(self, n: int = 10) -> float:
        r = [x[1] for x in self.returns[-n:]]
        return float(np.mean(r)) if r else float("nan")

    def to_json(self) -> dict:
        return dict(step=self.step, episodes=self.episodes, falls=self.falls, wall=self.wall,
                    returns=[list(r) for r in self.returns])  # fmt: skip

    @staticmethod
    def from_json(doc: dict) -> TrainLog:
        rows = [tuple(r) for r in doc["returns"]]
        return TrainLog(int(doc["step"]), int(doc["episodes"]), int(doc["falls"]), rows, float(doc["wall"]))


CSV_HEADER = "step,episode,return,length,falls,progress,up\n"
MAX_EXPERT_BYTES = 64 * 2**20  # an actor file (the humanoid's 256x2 actor is 0.4 MB)
MAX_CHECKPOINT_BYTES = 16 * 2**30  # a training checkpoint (a full 1M-row humanoid replay is 0.7 GB)


def _write_npz(path: Path, arrays: dict[str, np.ndarray], doc: dict) -> None:
    """``arrays`` and the JSON document ``doc`` as one ``.npz`` archive, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {k: np.asarray(v, order="C") for k, v in arrays.items()}  # (ascontiguousarray makes 0-d 1-d)
    payload["doc"] = np.asarray(json.dumps(dict(doc, format=FORMAT)))
    atomic_write_bytes(path, lambda f: np.savez(f, **payload))


def _read_npz(path: Path, kinds: tuple[str, ...], max_bytes: int) -> tuple[dict, dict[str, np.ndarray]]:
    """The JSON document and the arrays of a file written by ``_write_npz`` whose ``doc['kind']`` is one of
    ``kinds``, read by ``ttt.safe_files`` (a regular file within ``max_bytes``, members' sizes checked before
    anything is decompressed, plain numeric arrays only, never a pickle); anything else is a one-line ``TttError``."""
    what = f"{show(str(path), 200)} is not a file written by `ttt expert train`"
    if not path.is_file():
        raise TttError(f"{what} (not a regular file)")
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic[:1] == b"\x80" or path.suffix == ".pkl":
        raise TttError(f"{what}: expert files are .npz now (pickles can run code); an expert saved by ttt 0.1 "
                       "converts with `ttt expert convert OLD.pkl NEW.npz`")  # fmt: skip
    try:
        arrays = safe_load_npz(path, max_bytes, "expert", required=("doc",))
        text = arrays.pop("doc")
        if text.dtype.kind != "U" or text.ndim != 0:
            raise TttError("its document is not text")
        doc = loads_json(str(text), "its document")
    except TttError as e:
        raise TttError(f"{what} ({one_line(str(e), 300)})") from None
    if not isinstance(doc, dict) or doc.get("kind") not in kinds or doc.get("format") != FORMAT:
        raise TttError(f"{what} (expected one of: {', '.join(kinds)})")
    for k, v in arrays.items():
        if v.dtype.kind not in "biuf":
            raise TttError(f"{what} (array {show(k)} has dtype {v.dtype})")
    return doc, arrays


def _leaves(arrays: dict[str, np.ndarray], prefix: str) -> list[np.ndarray]:
    n = sum(1 for k in arrays if k.startswith(prefix))
    return [arrays[f"{prefix}{i}"] for i in range(n)]


def _to_numpy(tree):
    return jax.tree.map(lambda x: np.asarray(jax.random.key_data(x)) if _is_key(x) else np.asarray(x), tree)


def _is_key(x) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def save_actor(path: Path, actor: TanhGaussianActor, cfg: SACConfig, meta: dict, robot: str | None = None) -> None:
    """The expert's actor alone (what data generation needs), with its config and training record."""
    leaves = [np.asarray(x) for x in jax.tree.leaves(eqx.filter(actor, eqx.is_array))]
    obs_dim, action_dim = actor.trunk.layers[0].weight.shape[0], actor.mean_head.weight.shape[1]
    robot = robot or next((r.name for r in ROBOTS.values() if (r.obs_dim, r.action_dim) == (obs_dim, action_dim)), None)
    doc = dict(kind="expert", robot=robot, cfg=dataclasses.asdict(cfg), meta=meta, obs_dim=obs_dim,
               action_dim=action_dim)  # fmt: skip
    _write_npz(Path(path), {f"leaf{i}": x for i, x in enumerate(leaves)}, doc)


def load_actor(path: str | Path) -> tuple[TanhGaussianActor, SACConfig, dict]:
    """An expert actor saved by ``save_actor`` (``expert.npz``), or the actor of a training checkpoint, or the
    expert in a run folder. ``meta`` holds the training record and ``robot``."""
    path = Path(path)
    if path.is_dir():
        path = path / EXPERT_NAME if (path / EXPERT_NAME).exists() else path / CKPT_NAME
    if not path.exists():
        raise TttError(f"no expert at {str(path)[:200]!r}: train one with `ttt expert train ROBOT --out DIR`")
    doc, arrays = _read_npz(path, ("expert", "expert-checkpoint"), MAX_CHECKPOINT_BYTES)
    try:
        cfg = SACConfig(**doc["cfg"])
        obs_dim, action_dim = int(doc["obs_dim"]), int(doc["action_dim"])
        if not (0 < obs_dim <= 4096 and 0 < action_dim <= 256 and all(0 < w <= 8192 for w in cfg.actor_hidden_dims)):
            raise ValueError("sizes out of range")
    except (KeyError, TypeError, ValueError) as e:
        raise TttError(f"{str(path)[:200]!r}: its settings are not an expert's ({type(e).__name__})") from None
    like = TanhGaussianActor(
        jax.random.key(0), obs_dim, action_dim, cfg.actor_hidden_dims, final_init_scale=cfg.actor_fc_scale
    )
    params, static = eqx.partition(like, eqx.is_array)
    want, treedef = jax.tree.flatten(params)
    if doc["kind"] == "expert":
        got, meta = _leaves(arrays, "leaf"), dict(doc.get("meta", {}), robot=doc.get("robot"))
    else:  # the actor's leaves lead the agent's (SACParams.actor first)
        got = _leaves(arrays, "sac")[: len(want)]
        meta = dict(step=doc["log"]["step"], seed=doc["host"]["seed"], robot=doc["host"].get("robot"))
    if [a.shape for a in want] != [np.shape(x) for x in got] or any(x.dtype != np.float32 for x in got):
        raise TttError(f"{str(path)[:200]!r}: the saved actor does not match a {cfg.actor_hidden_dims} actor")
    actor = eqx.combine(jax.tree.unflatten(treedef, [jnp.asarray(x) for x in got]), static)
    return actor, cfg, meta


def convert_legacy_expert(src: str | Path, dst: str | Path) -> dict:
    """An actor saved by ttt 0.1 (``expert.pkl`` / ``actors/actor-STEP.pkl``: a pickled dict of the config, the
    leaves and the training record) rewritten as ``expert.npz``, its weights unchanged. The pickle is read by
    ``ttt.safe_pickle`` (plain values and arrays built by the reader; nothing in it runs). Returns the new meta."""
    from ttt.safe_pickle import load as safe_pickle_load

    doc = safe_pickle_load(Path(src))
    if not isinstance(doc, dict) or doc.get("kind") != "ant-expert" or not isinstance(doc.get("leaves"), list):
        raise TttError(f"{show(str(src), 200)} is not an expert saved by ttt 0.1 (ant-expert, expert.pkl)")
    try:
        cfg = SACConfig(**doc["cfg"])
    except (KeyError, TypeError, ValueError) as e:
        raise TttError(f"{show(str(src), 200)}: its settings are not an expert's ({type(e).__name__})") from None
    obs_dim, action_dim = int(doc.get("obs_dim", ANT_OBS_DIM)), int(doc.get("action_dim", ANT_ACTION_DIM))
    like = TanhGaussianActor(jax.random.key(0), obs_dim, action_dim, cfg.actor_hidden_dims)
    params, static = eqx.partition(like, eqx.is_array)
    want, treedef = jax.tree.flatten(params)
    got = doc["leaves"]
    if [a.shape for a in want] != [np.shape(x) for x in got] or not all(
        isinstance(x, np.ndarray) and x.dtype == np.float32 for x in got
    ):
        raise TttError(f"{show(str(src), 200)}: the saved actor does not match a {cfg.actor_hidden_dims} actor")
    actor = eqx.combine(jax.tree.unflatten(treedef, [jnp.asarray(x) for x in got]), static)
    meta = dict(doc.get("meta") or {}) if isinstance(doc.get("meta"), dict) else {}
    meta = {k: v for k, v in meta.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
    save_actor(Path(dst), actor, cfg, meta, robot="ant")
    return meta


def blas_kernel() -> str | None:
    """The OpenBLAS kernel NumPy's matrix products run on in this process (``'SkylakeX'``, ``'Haswell'``, ...), or
    None where NumPy uses another BLAS or the name cannot be read.

    OpenBLAS picks the kernel from the CPU (``OPENBLAS_CORETYPE`` overrides it). The kernels round float64 products
    differently, and an ant rollout amplifies the last bit (a forced ``Prescott`` kernel moves episode 0 of
    antmaze-medium-navigate from row 64 on, about 8 maze units by its end), so an antmaze dataset is reproduced bit for
    bit only where NumPy runs the same kernel."""
    import ctypes

    try:
        with open("/proc/self/maps") as f:
            fields = [line.split(None, 5) for line in f if "openblas" in line.lower()]
        paths = {x[5].strip() for x in fields if len(x) == 6}
    except OSError:  # (not Linux)
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for sym in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename64_",
                    "openblas_get_corename"):  # fmt: skip
            fn = getattr(lib, sym, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                name = fn()
                return name.decode() if name else None
    return None


class NumpyExpert:
    """The deterministic expert action ``tanh(mean(obs))`` in NumPy (float64), for generation workers."""

    def __init__(self, actor: TanhGaussianActor):
        self.kernels = [np.asarray(layer.weight, np.float64) for layer in actor.trunk.layers]
        self.biases = [np.asarray(layer.bias, np.float64) for layer in actor.trunk.layers]
        self.mean_w = np.asarray(actor.mean_head.weight, np.float64)
        self.mean_b = np.asarray(actor.mean_head.bias, np.float64)

    def digest(self) -> str:
        """sha256 of the weights (what the generated data depends on)."""
        import hashlib

        h = hashlib.sha256()
        for a in (*self.kernels, *self.biases, self.mean_w, self.mean_b):
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        h = np.asarray(obs, np.float64)
        for w, b in zip(self.kernels, self.biases, strict=True):
            x = h @ w + b
            h = 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))  # tanh-approximated GELU
        return np.tanh(h @ self.mean_w + self.mean_b)


REPLAY_FIELDS = ("observations", "actions", "rewards", "masks", "next_observations")


def _write_checkpoint(path: Path, carry: TrainCarry, cfg: SACConfig, log: TrainLog, host: dict) -> None:
    size = int(carry.replay.size)
    rows = min(size, carry.replay.rewards.shape[0])  # the buffer is full once it has wrapped
    arrays = {f"replay_{k}": np.asarray(getattr(carry.replay, k)[:rows]) for k in REPLAY_FIELDS}
    arrays.update({f"sac{i}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(carry.sac))})
    arrays["key"] = np.asarray(jax.random.key_data(carry.key))
    host = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in host.items()}
    doc = dict(kind="expert-checkpoint", cfg=dataclasses.asdict(cfg), log=log.to_json(), host=host,
               replay_size=size)  # fmt: skip
    _write_npz(path, arrays, doc)


def _restore_carry(doc: dict, arrays: dict, cfg: SACConfig, capacity: int, obs_dim: int, action_dim: int):
    like = init_sac(jax.random.key(0), obs_dim, action_dim, cfg)
    leaves, treedef = jax.tree.flatten(like)
    saved = _leaves(arrays, "sac")
    if [np.shape(x) for x in leaves] != [x.shape for x in saved]:
        raise TttError("the checkpoint does not match this SAC configuration")
    sac = jax.tree.unflatten(treedef, [jnp.asarray(x, a.dtype) for x, a in zip(saved, leaves, strict=True)])
    replay = Replay.empty(capacity, obs_dim, action_dim)
    rows = len(arrays["replay_rewards"])
    replay = Replay(
        *(getattr(replay, k).at[:rows].set(jnp.asarray(arrays[f"replay_{k}"])) for k in REPLAY_FIELDS),
        jnp.asarray(int(doc["replay_size"]), jnp.int32),
    )
    return TrainCarry(sac, replay, jax.random.wrap_key_data(jnp.asarray(arrays["key"])))


def _same_cfg(saved: dict, cfg: SACConfig) -> bool:
    """Whether a saved config is ``cfg`` (settings added since default as they were; steps aside)."""
    try:
        was = dataclasses.asdict(SACConfig(**saved))
    except TypeError:
        return False
    now = dataclasses.asdict(cfg)
    return {k: v for k, v in was.items() if k != "total_steps"} == {k: v for k, v in now.items() if k != "total_steps"}


def train_expert(
    out: str | Path,
    *,
    steps: int = 400_000,
    seed: int = 0,
    cfg: SACConfig | None = None,
    checkpoint_every: int = 20_000,
    progress: Callable[[TrainLog, float], None] | None = None,
    env_factory: Callable[[np.random.Generator], DirectionalRobot] | None = None,
    stop_after_s: float | None = None,
    robot: str = "ant",
) -> TrainLog:
    """Train (or resume) ``robot``'s expert in ``out`` for ``steps`` environment steps in all.

    ``cfg`` defaults to the robot's recipe (``ROBOTS``). ``env_factory(rng)`` makes the environment (default:
    ``DirectionalRobot(robot, rng)``); any object with ``obs_dim``, ``action_dim``, ``reset``, ``step``,
    ``snapshot`` and ``restore`` will do.

    Writes ``out/checkpoint.npz`` (resumable state), ``out/train.csv`` (one line per episode), the actor at every
    checkpoint (``out/actors/actor-STEP.npz``) and, when done, ``out/expert.npz`` (the actor).
    ``progress(log, steps_per_s)`` is called every 1000 steps. ``stop_after_s`` checkpoints and returns after that
    many seconds (at the next episode end).
    """
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TttError(f"cannot use {out} as the run directory ({e.strerror}); give a directory") from None
    cfg = dataclasses.replace(cfg or ROBOTS[robot].recipe, total_steps=steps)
    capacity = min(cfg.replay_size, steps)
    make_env = env_factory or (lambda rng: DirectionalRobot(robot, rng))
    ckpt, csv = out / CKPT_NAME, out / "train.csv"
    env = make_env(np.random.default_rng(np.random.SeedSequence([seed, 1])))
    obs_dim, action_dim = env.obs_dim, env.action_dim
    train_step = make_train_step(cfg, action_dim)

    done_log = _finished_log(out, cfg, seed, steps)
    if done_log is not None:  # already trained this far: nothing to do
        return done_log
    carry, log, obs, action, host = _start(ckpt, csv, env, cfg, capacity, seed, robot)

    if log.step >= steps:
        _finish(out, carry, cfg, log, seed, robot)
        return log

    arrays, static, step_jit = _jit_step(train_step, carry)
    if not csv.exists():
        csv.write_text(CSV_HEADER)
    ep_return, ep_len = 0.0, 0
    last_ckpt = log.step
    t0, t_last, s_last = time.perf_counter(), time.perf_counter(), log.step
    wall0 = log.wall
    zero_obs = np.zeros(obs_dim, np.float32)
    while log.step < steps:
        next_obs, reward, terminated, truncated = env.step(action)
        done = terminated or truncated
        if done:  # the episode's counts, before a reset clears them
            falls, moved, up = _episode_counts(env, terminated, ep_len)
        reset_obs = env.reset() if done else zero_obs
        arrays, a, _, _ = step_jit(
            arrays,
            np.float32(obs),
            np.float32(action),
            np.float32(reward),
            np.float32(0.0 if terminated else 1.0),
            np.float32(next_obs),
            np.float32(reset_obs),
            np.bool_(done),
        )
        action = np.asarray(a, np.float64)
        log.step += 1
        ep_return += reward
        ep_len += 1
        obs = reset_obs if done else next_obs
        if done:
            _log_episode(csv, log, ep_return, ep_len, falls, moved, up)
            ep_return, ep_len = 0.0, 0
            elapsed = time.perf_counter() - t0
            if (
                log.step - last_ckpt >= checkpoint_every
                or log.step >= steps
                or (stop_after_s is not None and elapsed >= stop_after_s)
            ):
                log.wall = wall0 + elapsed
                host.update(env.snapshot(), action=action.copy())  # the next episode's start
                _save_checkpoint(out, eqx.combine(arrays, static), cfg, log, host, seed, robot)
                last_ckpt = log.step
                if stop_after_s is not None and elapsed >= stop_after_s:
                    break
        if progress is not None and log.step % 1000 == 0:
            now = time.perf_counter()
            progress(log, (log.step - s_last) / max(now - t_last, 1e-9))
            t_last, s_last = now, log.step
    carry = eqx.combine(arrays, static)
    if log.step >= steps:
        _finish(out, carry, cfg, log, seed, robot)
    return log


def _start(ckpt: Path, csv: Path, env, cfg: SACConfig, capacity: int, seed: int, robot: str):
    """(carry, log, observation, action, host state) to train from: ``ckpt``'s when it exists (the lines ``csv``
    logged after it are dropped: those episodes run again), else a fresh run of ``seed``."""
    obs_dim, action_dim = env.obs_dim, env.action_dim
    if not ckpt.exists():
        k_init, k_carry = jax.random.split(jax.random.key(seed))
        carry = TrainCarry(
            init_sac(k_init, obs_dim, action_dim, cfg), Replay.empty(capacity, obs_dim, action_dim), k_carry
        )
        host = dict(seed=seed, capacity=capacity, obs_dim=obs_dim, action_dim=action_dim, robot=robot)
        return carry, TrainLog(), env.reset(), env.rng.uniform(-1.0, 1.0, action_dim), host
    doc, arrays = _read_npz(ckpt, ("expert-checkpoint",), MAX_CHECKPOINT_BYTES)
    if not _same_cfg(doc["cfg"], cfg) or doc["host"]["seed"] != seed:
        raise TttError(f"{ckpt} was trained with other settings (seed {doc['host']['seed']}); use another --out")
    capacity = max(capacity, len(arrays["replay_rewards"]))
    carry = _restore_carry(doc, arrays, cfg, capacity, obs_dim, action_dim)
    del arrays
    log = TrainLog.from_json(doc["log"])
    host = doc["host"]
    obs = env.restore(host)
    action = np.asarray(host["action"], np.float64)
    if csv.exists():
        lines = csv.read_text().splitlines()
        kept = [lines[0]] + [ln for ln in lines[1:] if int(ln.split(",")[0]) <= log.step]
        csv.write_text("\n".join(kept) + "\n")
    return carry, log, obs, action, host


def _jit_step(train_step: Callable, carry: TrainCarry):
    """(the carry's arrays, its static part, the jitted step on the arrays, which it donates)."""
    arrays, static = eqx.partition(carry, eqx.is_array)

    def _step(arrays, *xs):
        c, a, m, learned = train_step(eqx.combine(arrays, static), *xs)
        return eqx.filter(c, eqx.is_array), a, m, learned

    return arrays, static, jax.jit(_step, donate_argnums=(0,))


def _episode_counts(env, terminated: bool, ep_len: int) -> tuple[int, float, int]:
    """An ending episode's (falls, progress, steps upright); a bare test environment has none of them."""
    return getattr(env, "falls", int(terminated)), getattr(env, "progress", 0.0), getattr(env, "up_steps", ep_len + 1)


def _log_episode(csv: Path, log: TrainLog, ep_return: float, ep_len: int, falls: int, moved: float, up: int) -> None:
    """Count an ended episode in ``log`` and append its line to ``train.csv``."""
    log.episodes += 1
    log.falls += int(falls)
    log.returns.append((log.step, ep_return, ep_len, int(falls), float(moved), up / ep_len))
    with open(csv, "a") as f:
        f.write(f"{log.step},{log.episodes},{ep_return:.4f},{ep_len},{falls},{moved:.4f},{up / ep_len:.4f}\n")


def _save_checkpoint(out: Path, carry: TrainCarry, cfg: SACConfig, log: TrainLog, host: dict, seed: int,
                     robot: str) -> None:
    """``out/checkpoint.npz`` (to resume from) and this step's actor."""
    _write_checkpoint(out / CKPT_NAME, carry, cfg, log, host)
    _snapshot_actor(out, carry, cfg, log, seed, robot)


def _snapshot_actor(out: Path, carry: TrainCarry, cfg: SACConfig, log: TrainLog, seed: int, robot: str) -> None:
    """The actor at this checkpoint as ``out/actors/actor-STEP.npz``, to evaluate and choose among."""
    save_actor(out / "actors" / f"actor-{log.step:08d}.npz", carry.sac.params.actor, cfg, _meta(log, seed), robot)


def _meta(log: TrainLog, seed: int) -> dict:
    return dict(
        step=log.step,
        episodes=log.episodes,
        falls=log.falls,
        wall_s=log.wall,
        recent_return=log.recent_return(),
        seed=seed,
    )


def _finish(out: Path, carry: TrainCarry, cfg: SACConfig, log: TrainLog, seed: int, robot: str) -> None:
    save_actor(out / EXPERT_NAME, carry.sac.params.actor, cfg, _meta(log, seed), robot)
    _snapshot_actor(out, carry, cfg, log, seed, robot)  # the last one too (training may stop mid-episode)


def _finished_log(out: Path, cfg: SACConfig, seed: int, steps: int) -> TrainLog | None:
    """The log of a finished run in ``out`` (``expert.npz`` trained for at least ``steps`` with this config and
    seed), rebuilt from ``train.csv``; None when training has to run."""
    path = out / EXPERT_NAME
    if not path.exists():
        return None
    doc, _ = _read_npz(path, ("expert",), MAX_EXPERT_BYTES)
    meta = doc.get("meta", {})
    if not _same_cfg(doc["cfg"], cfg) or meta.get("step", 0) < steps or meta.get("seed") != seed:
        return None
    log = TrainLog(step=meta["step"], episodes=meta["episodes"], falls=meta["falls"], wall=meta["wall_s"])
    csv = out / "train.csv"
    if csv.exists():
        for line in csv.read_text().splitlines()[1:]:
            st, _, ret, length, falls, moved, up = line.split(",")
            if int(st) <= log.step:
                log.returns.append((int(st), float(ret), int(length), int(falls), float(moved), float(up)))
    return log


def evaluate_expert(
    actor: TanhGaussianActor,
    *,
    episodes: int = 50,
    seed: int = 1000,
    max_steps: int = 1000,
    progress: Callable[[int, int], None] | None = None,
    robot: str = "ant",
) -> dict:
    """Deterministic (``tanh(mean)``) direction-following episodes in lockstep: per episode the return (the
    wrapper's rewards), the progress along ``z`` (the displacement along the direction in force, summed), length,
    falls and the fraction of steps the robot is up (``DirectionalRobot``); means over episodes and each episode's,
    with the weights' digest (``NumpyExpert.digest``) and the seed."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 2]))
    envs = [DirectionalRobot(robot, np.random.default_rng(rng.integers(2**63))) for _ in range(episodes)]
    obs = np.stack([e.reset() for e in envs])
    act = jax.jit(lambda a, o: a.mode(o))
    returns = np.zeros(episodes)
    lengths = np.zeros(episodes, int)
    alive = np.ones(episodes, bool)
    for t in range(max_steps):
        actions = np.asarray(act(actor, jnp.asarray(obs, jnp.float32)), np.float64)
        for i, e in enumerate(envs):
            if not alive[i]:
                continue
            o, r, term, trunc = e.step(actions[i])
            obs[i] = o
            returns[i] += r
            lengths[i] += 1
            if term or trunc:
                alive[i] = False
        if progress is not None and ((t + 1) % 50 == 0 or not alive.any()):
            progress(max_steps if not alive.any() else t + 1, max_steps)
        if not alive.any():
            break
    moved = np.array([e.progress for e in envs])
    falls = np.array([e.falls for e in envs])
    up = np.array([e.up_steps for e in envs]) / np.maximum(lengths, 1)
    return dict(
        robot=robot,
        expert_sha256=NumpyExpert(actor).digest(),
        seed=seed,
        episodes=episodes,
        mean_return=float(returns.mean()),
        std_return=float(returns.std()),
        min_return=float(returns.min()),
        mean_progress=float(moved.mean()),
        std_progress=float(moved.std()),
        falls=int(falls.sum()),
        falls_per_episode=float(falls.mean()),
        up_fraction=float(up.mean()),
        mean_length=float(lengths.mean()),
        returns=returns.tolist(),
        progress=moved.tolist(),
        falls_each=falls.tolist(),
        up_each=up.tolist(),
    )


def write_json(path: Path, doc: dict) -> None:
    """Atomically, as strictly valid JSON (non-finite numbers as null)."""
    atomic_write_text(path, dumps(doc, indent=2) + "\n")


def evaluate_expert_maze(
    policy: NumpyExpert,
    env_id: str = "antmaze-medium-v0",
    *,
    tasks: tuple[int, ...] = (1, 2, 3, 4, 5),
    episodes: int = 10,
    noise: float = 0.2,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """The expert as the data generator drives it, on the maze's evaluation tasks: action = expert on
    ``[observation without xy, unit direction to the BFS oracle subgoal]`` + N(0, noise^2), clipped; success
    when the robot comes within the task's goal radius before the episode's step limit. An ant that turns upside
    down never gets up: its episode stops there as a failure (``flipped`` counts them per task); a humanoid can
    get up, so its episode goes on (``falls`` counts its falls per task, as ``DirectionalRobot``)."""
    env = make_gym_env(env_id)
    humanoid = env_id.startswith("humanoid")
    per_task, steps, flips, falls = {}, {}, {}, {}
    done_n, total = 0, len(tasks) * episodes
    for task in tasks:
        wins, arrivals, flipped, fell = 0, [], 0, 0
        for ep in range(episodes):
            ep_seed = int(np.random.SeedSequence([seed, task, ep]).generate_state(1)[0])
            rng = np.random.default_rng(ep_seed)
            seed_env(env, ep_seed)
            ob, _ = env.reset(seed=ep_seed, options=dict(task_id=task))
            done, t, up = False, 0, False
            while not done:
                a = policy(np.concatenate([ob[2:], oracle_direction(env)]))
                a = np.clip(a + rng.normal(0.0, noise, a.shape), -1.0, 1.0)
                ob, _, terminated, truncated, info = env.step(a)
                t += 1
                done = terminated or truncated
                if info["success"]:
                    wins += 1
                    arrivals.append(t)
                    break
                if humanoid:
                    up, down = humanoid_up(up, float(env.unwrapped.data.xpos[2, 2]), t)
                    fell += int(down)
                elif upside_down(env.unwrapped.data.qpos):  # it never gets up again
                    flipped += 1
                    break
            done_n += 1
            if progress is not None:
                progress(done_n, total)
        per_task[task] = wins / episodes
        steps[task] = float(np.mean(arrivals)) if arrivals else None
        flips[task] = flipped
        falls[task] = fell
    env.close()
    return dict(
        env_id=env_id,
        expert_sha256=policy.digest(),
        seed=seed,
        episodes_per_task=episodes,
        noise=noise,
        success=per_task,
        mean_steps=steps,
        **(dict(falls=falls) if humanoid else dict(flipped=flips)),
        overall=float(np.mean(list(per_task.values()))),
    )
