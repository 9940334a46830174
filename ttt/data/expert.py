"""The ant locomotion expert that OGBench's antmaze datasets are generated with, trained here with our SAC.

OGBench (``data_gen_scripts/main_sac.py --env_name=online-ant-xy-v0 --train_steps=400000``) trains SAC on
``online-ant-v0`` (OGBench's ant: restricted joint ranges, 10 Hz control, 1000-step episodes, terminated when
the torso height leaves [0.2, 1.0]) wrapped by ``GymXYWrapper``: the observation is the ant's ``qpos[2:]`` and
``qvel`` (27 numbers) followed by a random unit direction ``z`` (2 numbers), redrawn at reset and every 100
steps, and the reward is the torso's xy displacement along ``z`` in that step (nothing else). This module
holds that environment (``DirectionalAnt``, host MuJoCo), the host training loop (``train_expert``: the
environment on the host, everything else one jitted call per step, see ``ttt.data.sac.make_train_step``),
checkpoints that resume exactly, the deterministic evaluation (``evaluate_expert``), and a NumPy copy of the
deterministic actor (``NumpyExpert``) for data-generation workers that should not start JAX.

Checkpoints are written at the end of an episode once ``checkpoint_every`` steps have passed since the last
one: the agent, the optimiser, the replay buffer, the key, the environment's random state and the ant's
initial state of the next episode, so a resumed run continues the same run (the same numbers as an
uninterrupted one, up to floating-point reduction order).
"""

from __future__ import annotations

import dataclasses
import pickle
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
from ttt.storage import atomic_write_pickle, atomic_write_text, dumps

ANT_OBS_DIM = 29  # qpos[2:] (13) + qvel (14) + direction (2)
ANT_ACTION_DIM = 8
CKPT_NAME = "checkpoint.pkl"


def _make_ant():
    quiet()
    import gymnasium
    import ogbench.online_locomotion  # noqa: F401  (registers online-ant-v0)

    return gymnasium.make("online-ant-v0")


def unit_direction(rng: np.random.Generator) -> np.ndarray:
    """A uniformly random unit vector in the plane (a normalised standard normal draw, as OGBench)."""
    z = rng.standard_normal(2)
    return z / np.linalg.norm(z)


class DirectionalAnt:
    """``online-ant-v0`` with OGBench's direction-following wrapper (``GymXYWrapper``, resample 100).

    ``reset() -> obs``; ``step(action) -> (obs, reward, terminated, truncated)``. The observation is the ant's
    27 numbers followed by ``z``; the reward is ``(xy_after - xy_before) . z`` with ``xy = qpos[:2]`` and the
    ``z`` in force during the step; ``z`` is redrawn after every ``resample_interval`` steps. All randomness
    (reset noise, directions) comes from ``rng``, so a seed fixes the whole stream.
    """

    obs_dim = ANT_OBS_DIM
    action_dim = ANT_ACTION_DIM

    def __init__(self, rng: np.random.Generator, resample_interval: int = 100, env=None):
        self.env = _make_ant() if env is None else env
        self.rng = rng
        self.resample_interval = resample_interval
        self.z = np.zeros(2)
        self.steps = 0

    @property
    def mj(self):
        return self.env.unwrapped

    def reset(self) -> np.ndarray:
        ob, _ = self.env.reset(seed=int(self.rng.integers(2**31 - 1)))
        self.z = unit_direction(self.rng)
        self.steps = 0
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
        self.mj.set_state(snap["qpos"], snap["qvel"])
        self.rng.bit_generator.state = snap["rng_state"]
        self.z = np.asarray(snap["z"], np.float64)
        self.steps = 0
        return np.concatenate([self.mj._get_obs(), self.z])

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool]:
        before = self.mj.data.qpos[:2].copy()
        ob, _, terminated, truncated, _ = self.env.step(action)
        after = self.mj.data.qpos[:2].copy()
        reward = float((after - before) @ self.z)
        self.steps += 1
        if self.steps % self.resample_interval == 0:
            self.z = unit_direction(self.rng)
        return np.concatenate([ob, self.z]), reward, bool(terminated), bool(truncated)


@dataclasses.dataclass
class TrainLog:
    """Host-side statistics of a training run (saved with every checkpoint)."""

    step: int = 0
    episodes: int = 0
    falls: int = 0
    returns: list = dataclasses.field(default_factory=list)  # (step, return, length, fell) per episode
    wall: float = 0.0  # seconds of training, over every session

    def recent_return(self, n: int = 10) -> float:
        r = [x[1] for x in self.returns[-n:]]
        return float(np.mean(r)) if r else float("nan")


def _read_pickle(path: Path) -> dict:
    """A file written by this module; anything else is a one-line error."""
    try:
        with open(path, "rb") as f:
            doc = pickle.load(f)
    except (pickle.UnpicklingError, EOFError, AttributeError, ValueError, ImportError, IndexError) as e:
        raise TttError(f"{path} is not a file written by `ttt expert train` ({type(e).__name__}: {e})") from None
    if not isinstance(doc, dict):
        raise TttError(f"{path} is not a file written by `ttt expert train`")
    return doc


def _to_numpy(tree):
    return jax.tree.map(lambda x: np.asarray(jax.random.key_data(x)) if _is_key(x) else np.asarray(x), tree)


def _is_key(x) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def save_actor(path: Path, actor: TanhGaussianActor, cfg: SACConfig, meta: dict) -> None:
    """The expert's actor alone (what data generation needs), with its config and training record."""
    leaves = [np.asarray(x) for x in jax.tree.leaves(eqx.filter(actor, eqx.is_array))]
    obs_dim, action_dim = actor.trunk.layers[0].weight.shape[0], actor.mean_head.weight.shape[1]
    doc = dict(
        kind="ant-expert",
        cfg=dataclasses.asdict(cfg),
        leaves=leaves,
        meta=meta,
        obs_dim=obs_dim,
        action_dim=action_dim,
    )
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_pickle(Path(path), doc)


def load_actor(path: str | Path) -> tuple[TanhGaussianActor, SACConfig, dict]:
    """An expert actor saved by ``save_actor`` (or the actor of a training checkpoint)."""
    path = Path(path)
    if path.is_dir():
        path = path / "expert.pkl" if (path / "expert.pkl").exists() else path / CKPT_NAME
    if not path.exists():
        raise TttError(f"no expert at {path}: train one with `ttt expert train ant --out DIR`")
    doc = _read_pickle(path)
    if doc.get("kind") == "ant-expert-checkpoint":
        dims = {k: doc["host"][k] for k in ("obs_dim", "action_dim") if k in doc["host"]}
        doc = dict(cfg=doc["cfg"], leaves=doc["actor_leaves"], meta=dict(step=doc["log"].step), **dims)
    elif doc.get("kind") != "ant-expert":
        raise TttError(f"{path} is not an ant expert (expert.pkl or checkpoint.pkl from `ttt expert train`)")
    cfg = SACConfig(**doc["cfg"])
    obs_dim, action_dim = doc.get("obs_dim", ANT_OBS_DIM), doc.get("action_dim", ANT_ACTION_DIM)
    like = TanhGaussianActor(
        jax.random.key(0), obs_dim, action_dim, cfg.actor_hidden_dims, final_init_scale=cfg.actor_fc_scale
    )
    arrays, static = eqx.partition(like, eqx.is_array)
    leaves, treedef = jax.tree.flatten(arrays)
    shapes = [np.shape(x) for x in doc["leaves"]]
    if [a.shape for a in leaves] != shapes:
        raise TttError(f"{path}: the saved actor does not match a {cfg.actor_hidden_dims} actor")
    actor = eqx.combine(jax.tree.unflatten(treedef, [jnp.asarray(x) for x in doc["leaves"]]), static)
    return actor, cfg, doc["meta"]


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


def _checkpoint_doc(carry: TrainCarry, cfg: SACConfig, log: TrainLog, host: dict) -> dict:
    n = int(carry.replay.size)
    replay = {
        k: np.asarray(getattr(carry.replay, k)[:n])
        for k in ("observations", "actions", "rewards", "masks", "next_observations")
    }
    sac_leaves = [np.array(x, copy=True) for x in jax.tree.leaves(carry.sac)]  # copies: the next step donates
    actor_leaves = [np.array(x, copy=True) for x in jax.tree.leaves(eqx.filter(carry.sac.params.actor, eqx.is_array))]
    return dict(
        kind="ant-expert-checkpoint",
        cfg=dataclasses.asdict(cfg),
        sac_leaves=sac_leaves,
        actor_leaves=actor_leaves,
        replay=replay,
        key=np.asarray(jax.random.key_data(carry.key)),
        log=log,
        host=host,
    )


def _restore_carry(doc: dict, cfg: SACConfig, capacity: int, obs_dim: int, action_dim: int) -> TrainCarry:
    like = init_sac(jax.random.key(0), obs_dim, action_dim, cfg)
    leaves, treedef = jax.tree.flatten(like)
    if len(leaves) != len(doc["sac_leaves"]):
        raise TttError("the checkpoint does not match this SAC configuration")
    sac = jax.tree.unflatten(treedef, [jnp.asarray(x) for x in doc["sac_leaves"]])
    replay = Replay.empty(capacity, obs_dim, action_dim)
    n = len(doc["replay"]["rewards"])
    replay = Replay(
        *(
            getattr(replay, k).at[:n].set(jnp.asarray(doc["replay"][k]))
            for k in ("observations", "actions", "rewards", "masks", "next_observations")
        ),
        jnp.asarray(n, jnp.int32),
    )
    return TrainCarry(sac, replay, jax.random.wrap_key_data(jnp.asarray(doc["key"])))


def train_expert(
    out: str | Path,
    *,
    steps: int = 400_000,
    seed: int = 0,
    cfg: SACConfig | None = None,
    checkpoint_every: int = 20_000,
    progress: Callable[[TrainLog, float], None] | None = None,
    env_factory: Callable[[np.random.Generator], DirectionalAnt] | None = None,
    stop_after_s: float | None = None,
) -> TrainLog:
    """Train (or resume) the ant expert in ``out`` for ``steps`` environment steps in all.

    ``env_factory(rng)`` makes the environment (default: ``DirectionalAnt``); any object with ``obs_dim``,
    ``action_dim``, ``reset``, ``step``, ``snapshot`` and ``restore`` as ``DirectionalAnt`` will do.

    Writes ``out/checkpoint.pkl`` (resumable state), ``out/train.csv`` (one line per episode) and, when done,
    ``out/expert.pkl`` (the actor). ``progress(log, steps_per_s)`` is called every 1000 steps.
    ``stop_after_s`` checkpoints and returns after that many seconds (at the next episode end).
    """
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TttError(f"cannot use {out} as the run directory ({e.strerror}); give a directory") from None
    cfg = dataclasses.replace(cfg or SACConfig(), total_steps=steps)
    capacity = min(cfg.replay_size, steps)
    make_env = env_factory or (lambda rng: DirectionalAnt(rng))
    ckpt = out / CKPT_NAME
    csv = out / "train.csv"
    env = make_env(np.random.default_rng(np.random.SeedSequence([seed, 1])))
    obs_dim, action_dim = env.obs_dim, env.action_dim
    train_step = make_train_step(cfg, action_dim)

    done_log = _finished_log(out, cfg, seed, steps)
    if done_log is not None:  # already trained this far: nothing to do
        return done_log
    if ckpt.exists():
        doc = _read_pickle(ckpt)
        if doc.get("kind") != "ant-expert-checkpoint":
            raise TttError(f"{ckpt} is not an ant expert checkpoint")
        saved = {k: v for k, v in doc["cfg"].items() if k != "total_steps"}
        now = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "total_steps"}
        if saved != now or doc["host"]["seed"] != seed:
            raise TttError(f"{ckpt} was trained with other settings (seed {doc['host']['seed']}); use another --out")
        capacity = max(capacity, len(doc["replay"]["rewards"]))
        carry = _restore_carry(doc, cfg, capacity, obs_dim, action_dim)
        log: TrainLog = doc["log"]
        host = doc["host"]
        obs = env.restore(host)
        action = np.asarray(host["action"])
        if csv.exists():  # episodes logged after the checkpoint are run again: drop their lines
            lines = csv.read_text().splitlines()
            kept = [lines[0]] + [ln for ln in lines[1:] if int(ln.split(",")[0]) <= log.step]
            csv.write_text("\n".join(kept) + "\n")
    else:
        key = jax.random.key(seed)
        k_init, k_carry = jax.random.split(key)
        carry = TrainCarry(
            init_sac(k_init, obs_dim, action_dim, cfg), Replay.empty(capacity, obs_dim, action_dim), k_carry
        )
        log = TrainLog()
        obs = env.reset()
        action = env.rng.uniform(-1.0, 1.0, action_dim)
        host = dict(seed=seed, capacity=capacity, obs_dim=obs_dim, action_dim=action_dim)

    if log.step >= steps:
        _finish(out, carry, cfg, log, seed)
        return log

    arrays, static = eqx.partition(carry, eqx.is_array)

    def _step(arrays, *xs):
        c, a, m, learned = train_step(eqx.combine(arrays, static), *xs)
        return eqx.filter(c, eqx.is_array), a, m, learned

    step_jit = jax.jit(_step, donate_argnums=(0,))
    if not csv.exists():
        csv.write_text("step,episode,return,length,fell\n")
    ep_return, ep_len = 0.0, 0
    last_ckpt = log.step
    t0, t_last, s_last = time.perf_counter(), time.perf_counter(), log.step
    wall0 = log.wall
    zero_obs = np.zeros(obs_dim, np.float32)
    while log.step < steps:
        next_obs, reward, terminated, truncated = env.step(action)
        done = terminated or truncated
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
            log.episodes += 1
            log.falls += int(terminated)
            log.returns.append((log.step, ep_return, ep_len, bool(terminated)))
            with open(csv, "a") as f:
                f.write(f"{log.step},{log.episodes},{ep_return:.4f},{ep_len},{int(terminated)}\n")
            ep_return, ep_len = 0.0, 0
            elapsed = time.perf_counter() - t0
            if (
                log.step - last_ckpt >= checkpoint_every
                or log.step >= steps
                or (stop_after_s is not None and elapsed >= stop_after_s)
            ):
                log.wall = wall0 + elapsed
                host.update(env.snapshot(), action=action.copy())  # the next episode's start
                carry = eqx.combine(arrays, static)
                atomic_write_pickle(ckpt, _checkpoint_doc(carry, cfg, log, host))
                _snapshot_actor(out, carry, cfg, log, seed)
                last_ckpt = log.step
                if stop_after_s is not None and elapsed >= stop_after_s:
                    break
        if progress is not None and log.step % 1000 == 0:
            now = time.perf_counter()
            progress(log, (log.step - s_last) / max(now - t_last, 1e-9))
            t_last, s_last = now, log.step
    carry = eqx.combine(arrays, static)
    if log.step >= steps:
        _finish(out, carry, cfg, log, seed)
    return log


def _snapshot_actor(out: Path, carry: TrainCarry, cfg: SACConfig, log: TrainLog, seed: int) -> None:
    """The actor at this checkpoint as ``out/actors/actor-STEP.pkl`` (0.3 MB), to evaluate and choose among."""
    save_actor(out / "actors" / f"actor-{log.step:07d}.pkl", carry.sac.params.actor, cfg, _meta(log, seed))


def _meta(log: TrainLog, seed: int) -> dict:
    return dict(
        step=log.step,
        episodes=log.episodes,
        falls=log.falls,
        wall_s=log.wall,
        recent_return=log.recent_return(),
        seed=seed,
    )


def _finish(out: Path, carry: TrainCarry, cfg: SACConfig, log: TrainLog, seed: int) -> None:
    save_actor(out / "expert.pkl", carry.sac.params.actor, cfg, _meta(log, seed))
    _snapshot_actor(out, carry, cfg, log, seed)  # the last one too (training may stop mid-episode)


def _checkpoint_seed(out: Path) -> int | None:
    """The seed of the run in ``out`` (for experts saved before their meta held it)."""
    return _read_pickle(out / CKPT_NAME)["host"]["seed"] if (out / CKPT_NAME).exists() else None


def _finished_log(out: Path, cfg: SACConfig, seed: int, steps: int) -> TrainLog | None:
    """The log of a finished run in ``out`` (``expert.pkl`` trained for at least ``steps`` with this config and
    seed), rebuilt from ``train.csv``; None when training has to run."""
    path = out / "expert.pkl"
    if not path.exists():
        return None
    doc = _read_pickle(path)
    meta = doc.get("meta", {})
    same = {k: v for k, v in doc["cfg"].items() if k != "total_steps"} == {
        k: v for k, v in dataclasses.asdict(cfg).items() if k != "total_steps"
    }
    if not same or meta.get("step", 0) < steps:
        return None
    if (meta["seed"] if "seed" in meta else _checkpoint_seed(out)) != seed:
        return None
    log = TrainLog(step=meta["step"], episodes=meta["episodes"], falls=meta["falls"], wall=meta["wall_s"])
    csv = out / "train.csv"
    if csv.exists():
        for line in csv.read_text().splitlines()[1:]:
            st, _, ret, length, fell = line.split(",")
            if int(st) <= log.step:
                log.returns.append((int(st), float(ret), int(length), bool(int(fell))))
    return log


def evaluate_expert(
    actor: TanhGaussianActor,
    *,
    episodes: int = 50,
    seed: int = 1000,
    max_steps: int = 1000,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """Deterministic (``tanh(mean)``) direction-following episodes in lockstep: per-episode return along
    ``z`` (the sum of the wrapper's rewards), length, and whether the ant fell (terminated)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 2]))
    envs = [DirectionalAnt(np.random.default_rng(rng.integers(2**63))) for _ in range(episodes)]
    obs = np.stack([e.reset() for e in envs])
    act = jax.jit(lambda a, o: a.mode(o))
    returns = np.zeros(episodes)
    lengths = np.zeros(episodes, int)
    fell = np.zeros(episodes, bool)
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
                fell[i] = term
        if progress is not None and ((t + 1) % 50 == 0 or not alive.any()):
            progress(max_steps if not alive.any() else t + 1, max_steps)
        if not alive.any():
            break
    return dict(
        episodes=episodes,
        mean_return=float(returns.mean()),
        std_return=float(returns.std()),
        min_return=float(returns.min()),
        falls=int(fell.sum()),
        mean_length=float(lengths.mean()),
        returns=returns.tolist(),
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
    when the ant comes within the task's goal radius (0.5) before the episode's step limit; an episode whose ant
    turns upside down stops there as a failure (``flipped`` counts them per task)."""
    env = make_gym_env(env_id)
    per_task, steps, flips = {}, {}, {}
    done_n, total = 0, len(tasks) * episodes
    for task in tasks:
        wins, arrivals, flipped = 0, [], 0
        for ep in range(episodes):
            ep_seed = int(np.random.SeedSequence([seed, task, ep]).generate_state(1)[0])
            rng = np.random.default_rng(ep_seed)
            seed_env(env, ep_seed)
            ob, _ = env.reset(seed=ep_seed, options=dict(task_id=task))
            done = False
            t = 0
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
                if upside_down(env.unwrapped.data.qpos):  # it never gets up again
                    flipped += 1
                    break
            done_n += 1
            if progress is not None:
                progress(done_n, total)
        per_task[task] = wins / episodes
        steps[task] = float(np.mean(arrivals)) if arrivals else None
        flips[task] = flipped
    env.close()
    return dict(
        env_id=env_id,
        episodes_per_task=episodes,
        noise=noise,
        success=per_task,
        mean_steps=steps,
        flipped=flips,
        overall=float(np.mean(list(per_task.values()))),
    )
