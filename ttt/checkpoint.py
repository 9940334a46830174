"""The checkpoint format, in one module: the files of a `ttt.train_state.TrainState`, their verification and
compatibility, and the `Checkpoint` value that the rest of the package takes.

A checkpoint directory holds `meta.json` (what was trained: agent, backbone config, sampler, dataset and its content
hash, sizes, seeds, step, the state file's sha256; for an imported agent also its source) and one
`state-<step>.eqx` (Equinox-serialised leaves of the seed-stacked `TrainState`). `open_checkpoint(dir)` reads and
verifies it once (the state file read once: its sha256 and, on `Checkpoint.load()`, its arrays come from the same
bytes) and returns a frozen `Checkpoint`, the one loader.
`save_checkpoint` writes both files atomically (the state first, then the metadata naming it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import os
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ttt.agents import get_backbone
from ttt.agents.common import Backbone
from ttt.data.dataset import Dataset
from ttt.data.sampler import GoalMix, SamplerConfig
from ttt.errors import TttError
from ttt.presets import check_config_value
from ttt.safe_files import MAX_JSON_BYTES, loads_json, read_bytes, read_text, show
from ttt.storage import atomic_write_bytes, atomic_write_json, file_sha256
from ttt.train_state import TrainState, init_state
from ttt.train_state import make_optimizer as make_optimizer  # re-exported: its home is ttt.train_state

MAX_STATE_BYTES = 64 << 30
"""Cap of a checkpoint's state file before it is hashed or read (its leaves are then checked against the shapes the
metadata implies, one by one)."""

CKPT_FORMAT = 1


def config_dict(cfg) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=list))


def package_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("ttt", "jax", "jaxlib", "equinox", "optax", "ogbench", "mujoco", "numpy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "missing"
    return out


def compute_info() -> dict:
    """What this process computes on: the device kind (e.g. 'cpu' or 'NVIDIA H100 80GB HBM3'), the CPUs it may use and
    the XLA flags of its environment (XLA reads them when it starts: set them before the process, not during it).
    CPU results depend on them (XLA's kernels round differently with one thread than with two, and GC-TTT's 1,000
    steps amplify it), so records and checkpoints say which; equal settings on another `compute` need not give equal
    bits."""
    import jax

    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        cpus = os.cpu_count() or 0
    return dict(device=str(jax.devices()[0].device_kind), cpus=cpus, xla_flags=os.environ.get("XLA_FLAGS", ""))


def dataset_hash(data: Dataset) -> str:
    h = hashlib.sha256()
    for name in ("observations", "actions", "ep_end"):
        a = np.asarray(getattr(data, name))
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def new_meta(agent: str, backbone: str, cfg, sampler: SamplerConfig, dataset: str, data: Dataset, seeds: int,
             seed: int, profile: str, **extra) -> dict:
    """The metadata a new checkpoint starts with (`save_checkpoint` adds the step and the state file's digest)."""
    return dict(agent=agent, backbone=backbone, config=config_dict(cfg), sampler=config_dict(sampler), dataset=dataset,
                dataset_hash=dataset_hash(data), obs_dim=data.obs_dim, action_dim=data.action_dim, seeds=seeds,
                seed=seed, profile=profile, versions=package_versions(), **extra)  # fmt: skip


def save_checkpoint(out: Path, states: TrainState, meta: dict) -> dict:
    """Write `state-<step>.eqx` (Equinox serialised leaves) then `meta.json` pointing at it, both atomically;
    returns the metadata written.

    A crash at any moment leaves `meta.json` naming a complete state file (the previous one or the new one).
    """
    out.mkdir(parents=True, exist_ok=True)
    step = int(np.asarray(states.step).reshape(-1)[0])
    name = f"state-{step:09d}.eqx"
    atomic_write_bytes(out / name, lambda f: eqx.tree_serialise_leaves(f, states))
    meta = {
        **meta,
        "format": CKPT_FORMAT,
        "step": step,
        "state_file": name,
        "state_sha256": file_sha256(out / name),
        "saved": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    atomic_write_json(out / "meta.json", meta)
    for old in out.glob("state-*.eqx"):
        if old.name != name:
            old.unlink(missing_ok=True)
    return meta


def read_meta(out: str | os.PathLike) -> dict:
    path = Path(out) / "meta.json"
    if not path.exists():
        raise TttError(f"{Path(out)}: no checkpoint here (no meta.json); pre-train one with `ttt pretrain`")
    text = read_text(path, MAX_JSON_BYTES, "checkpoint metadata")
    meta = loads_json(text, f"{path}: unreadable checkpoint metadata")
    if not isinstance(meta, dict):
        raise TttError(f"{path}: checkpoint metadata must be a JSON object, got {type(meta).__name__}")
    for k in META_REQUIRED:
        if k not in meta:
            raise TttError(f"{path}: checkpoint metadata lacks '{k}'")
    _check_meta_types(meta, path)
    return meta


# The metadata keys a checkpoint is rebuilt from, each with its type, declared once: the first nine are required,
# `step` and `sampler` checked when present.
_META_TYPES = {"agent": str, "backbone": str, "config": dict, "dataset": str, "dataset_hash": str, "obs_dim": int,
               "action_dim": int, "seeds": int, "state_file": str, "step": int, "sampler": dict}  # fmt: skip
META_REQUIRED = tuple(k for k in _META_TYPES if k not in ("step", "sampler"))


def _check_meta_types(meta: dict, path: Path) -> None:
    """Types and ranges of the metadata a checkpoint is rebuilt from (a hand-edited or hostile meta.json is named,
    not followed): counts are positive integers, the state file a plain name inside the checkpoint folder."""
    for k, kind in _META_TYPES.items():
        v = meta.get(k)
        if k in meta and (not isinstance(v, kind) or isinstance(v, bool)):
            raise TttError(f"{path}: checkpoint metadata '{k}' must be {kind.__name__}, got "
                           f"{show(json.dumps(v), 60)}; the file was altered: pre-train it again")  # fmt: skip
    for k in ("obs_dim", "action_dim", "seeds"):
        if meta[k] < 1:
            raise TttError(f"{path}: checkpoint metadata '{k}' must be >= 1, got {meta[k]}")
    if meta.get("step", 0) < 0:
        raise TttError(f"{path}: checkpoint metadata 'step' must be >= 0, got {meta['step']}")
    name = meta["state_file"]
    if Path(name).name != name or name in ("", ".", ".."):
        raise TttError(f"{path}: checkpoint metadata 'state_file' must be a file name in the checkpoint folder (a "
                       f"state-<step>.eqx), got {show(repr(name))}")  # fmt: skip


def meta_backbone(meta: dict) -> Backbone:
    """The `Backbone` record a checkpoint's metadata names (the one place a checkpoint's backbone name is looked
    up)."""
    return get_backbone(meta["backbone"])


def backbone_config(meta: dict, backbone: Backbone | None = None):
    """Rebuild the backbone Config saved in a checkpoint's metadata (`backbone`: its record, when already known)."""
    backbone = meta_backbone(meta) if backbone is None else backbone
    cfg = meta["config"]

    types = {f.name: str(f.type) for f in dataclasses.fields(backbone.Config)}
    try:
        unknown = sorted(set(cfg) - set(types))
        if unknown:
            raise TttError(f"unknown key(s) {', '.join(unknown)}")
        return backbone.Config(**{k: check_config_value(meta["backbone"], k, types[k], v) for k, v in cfg.items()})
    except (TypeError, ValueError, TttError) as e:
        raise TttError(f"checkpoint metadata 'config' is not a valid {meta['backbone']} config ({e}); the file was "
                       "altered or comes from another version: pre-train the checkpoint again") from None


def sampler_config(meta: dict) -> SamplerConfig:
    """Rebuild the SamplerConfig saved in a checkpoint's metadata."""
    d = dict(meta["sampler"])
    d["value"], d["actor"] = GoalMix(**d["value"]), GoalMix(**d["actor"])
    return SamplerConfig(**d)


def load_checkpoint(out: str | os.PathLike, meta: dict | None = None) -> tuple[TrainState, dict]:
    """The seed-stacked TrainState and metadata of a checkpoint directory: a shorthand of
    `ck = open_checkpoint(out, meta)`, `ck.load()`, `ck.meta` (the one loader)."""
    ck = open_checkpoint(out, meta)
    return ck.load(), dict(ck.meta)


def _read_state(path: Path, state: bytes, meta: dict, backbone: Backbone, cfg: Any) -> TrainState:
    """The seed-stacked `TrainState` from the state file's bytes (`state`, read once by `open_checkpoint`). Sizes
    the metadata declares are checked against the bytes there are before anything of that size is made."""
    if meta["seeds"] > len(state) // 4:  # every seed holds at least its int32 step
        raise TttError(f"{path}: cannot read checkpoint state: the metadata's {meta['seeds']} seeds do not fit in its "
                       f"{len(state)} bytes (the file does not match its metadata)")  # fmt: skip
    keys = jax.random.split(jax.random.key(0), meta["seeds"])
    # Only the structure, shapes and dtypes are needed: traced, not run (running it op by op compiles every op).
    init = eqx.filter_vmap(lambda k: init_state(k, backbone, meta["obs_dim"], meta["action_dim"], cfg))
    template = eqx.filter_eval_shape(init, keys)
    need = sum(math.prod(x.shape) * getattr(x.dtype, "itemsize", 0) for x in jax.tree.leaves(template)
               if isinstance(x, jax.ShapeDtypeStruct))  # fmt: skip
    if need > len(state):
        raise TttError(f"{path}: cannot read checkpoint state: the metadata's sizes need {need} bytes, the file holds "
                       f"{len(state)} (the file does not match its metadata)")  # fmt: skip
    try:
        return eqx.tree_deserialise_leaves(io.BytesIO(state), template, filter_spec=_read_leaf)
    except Exception as e:  # noqa: BLE001  (a corrupt .npy record: ValueError, EOFError, ...; JAX wraps a leaf's)
        cause = e
        while cause is not None and not isinstance(cause, TttError | ValueError | EOFError):
            cause = cause.__cause__ or cause.__context__
        cause = cause or e
        what = str(cause) if isinstance(cause, TttError) else f"{type(cause).__name__}: {show(str(cause), 120)}"
        raise TttError(f"{path}: cannot read checkpoint state: {what}") from None


def _read_leaf(f, like: Any) -> Any:
    """One leaf of a state file (Equinox writes each array as an .npy record): its header must declare exactly the
    dtype and shape the template has; then exactly that many bytes are read. No pickle, no size from the file."""
    if not isinstance(like, jax.Array | jax.ShapeDtypeStruct | np.ndarray | np.generic):
        return like
    want_dtype, want_shape = np.dtype(like.dtype), tuple(like.shape)
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f, max_header_size=10000)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f, max_header_size=10000)
    else:
        raise TttError(f"a leaf of .npy version {version}")
    if dtype != want_dtype or tuple(shape) != want_shape or fortran:
        raise TttError(f"a leaf of {show(str(dtype), 40)} {tuple(shape)[:8]}, expected {want_dtype} {want_shape} (the "
                       "file does not match its metadata)")  # fmt: skip
    n = int(np.prod(want_shape, dtype=np.int64)) * want_dtype.itemsize
    data = f.read(n)
    if len(data) != n:
        raise TttError("truncated (a leaf's data ends early)")
    a = np.frombuffer(data, want_dtype).reshape(want_shape)
    if isinstance(like, jax.Array | jax.ShapeDtypeStruct):
        return jnp.asarray(a)
    if isinstance(like, np.generic):
        return type(like)(a.item())
    return a.copy()


def verify_checkpoint(out: str | os.PathLike, meta: dict | None = None) -> str:
    """The state file's sha256; raise TttError when the file is missing or its sha256 differs from the one recorded
    at save time (a truncated or altered file). `open_checkpoint` verifies; this is its check alone."""
    out = Path(out)
    meta = read_meta(out) if meta is None else meta
    return _state_bytes(out, meta)[1]


def _state_bytes(out: Path, meta: dict) -> tuple[bytes, str]:
    """The state file's bytes and their sha256, read once (a regular file of at most `MAX_STATE_BYTES`), checked
    against the sha256 recorded at save time."""
    path = out / meta["state_file"]
    if not path.exists():
        raise TttError(f"{path}: the checkpoint's state file is missing; delete {out} to train from scratch")
    state = read_bytes(path, MAX_STATE_BYTES, "checkpoint state")
    want, got = meta.get("state_sha256"), hashlib.sha256(state).hexdigest()
    if want is not None and got != want:
        raise TttError(
            f"{path}: corrupt checkpoint state (sha256 differs from the one saved in meta.json); delete {out} to "
            "train from scratch"
        )
    return state, got


def check_compatible(meta: dict, dataset: str, obs_dim: int, action_dim: int, where: str, data_hash: str | None = None):
    """Refuse a checkpoint trained on another dataset or observation size, naming both.

    Sizes come first (known from the dataset's spec before anything loads); `data_hash`, when given, must match
    the content hash of the data the checkpoint was trained on.
    """
    if meta["obs_dim"] != obs_dim or meta["action_dim"] != action_dim:
        raise TttError(
            f"{where}: checkpoint was trained on {meta['dataset']} (observation size {meta['obs_dim']}, action "
            f"size {meta['action_dim']}), but {dataset} has observation size {obs_dim} and action size {action_dim}"
        )
    if meta["dataset"] != dataset:
        raise TttError(f"{where}: checkpoint was trained on {meta['dataset']}, not on {dataset}")
    if data_hash is not None and meta["dataset_hash"] != data_hash:
        raise TttError(
            f"{where}: checkpoint was trained on a different copy of {dataset} (content hash "
            f"{meta['dataset_hash']} vs {data_hash}); regenerate it with the same seed or retrain"
        )


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A checkpoint directory read and verified once: its metadata, the backbone record, the backbone and sampler
    configs rebuilt from the metadata, and the state file's sha256 (its digest, as records name it).

    Build it with `open_checkpoint(dir)`; `load()` returns the seed-stacked `TrainState` from the bytes that were
    hashed (the state file is read once: no second read, no second verification).
    """

    path: Path
    meta: MappingProxyType
    backbone: Backbone
    cfg: Any
    sampler: SamplerConfig
    digest: str
    state: bytes = dataclasses.field(default=b"", repr=False, compare=False)  # the state file's verified bytes

    @property
    def agent_name(self) -> str:
        return self.meta["agent"]

    @property
    def dataset(self) -> str:
        return self.meta["dataset"]

    @property
    def seeds(self) -> int:
        return self.meta["seeds"]

    def load(self) -> TrainState:
        """The seed-stacked `TrainState` (leading axis: seeds)."""
        return _read_state(self.path / self.meta["state_file"], self.state, dict(self.meta), self.backbone, self.cfg)

    def check_compatible(self, dataset: str, obs_dim: int, action_dim: int, where: str, data_hash: str | None = None):
        """`check_compatible` with this checkpoint's metadata."""
        check_compatible(dict(self.meta), dataset, obs_dim, action_dim, where, data_hash)


def open_checkpoint(path: str | os.PathLike, meta: dict | None = None) -> Checkpoint:
    """Read `path/meta.json` (or take `meta`), read the state file once and verify its sha256, and rebuild the
    configs."""
    path = Path(path)
    meta = read_meta(path) if meta is None else meta
    state, digest = _state_bytes(path, meta)
    backbone = meta_backbone(meta)
    cfg = backbone_config(meta, backbone)
    return Checkpoint(path, MappingProxyType(dict(meta)), backbone, cfg, sampler_config(meta), digest, state)


def load_policy(checkpoint: str | os.PathLike | Checkpoint, seed: int = 0):
    """`act(observations, goals) -> actions`: seed `seed` of a checkpoint as a batched, deterministic policy.

    The reference's `sample_actions(observations, goals, temperature=0.0)`: the actor's mean, clipped to [-1, 1].
    Takes any number of leading batch axes (one row or many); jitted. Works for every checkpoint, imported or not.
    """
    ck = checkpoint if isinstance(checkpoint, Checkpoint) else open_checkpoint(checkpoint)
    if not 0 <= seed < ck.seeds:
        raise TttError(f"seed must be in [0, {ck.seeds}) for this checkpoint of {ck.seeds} seed(s), got {seed}")
    agent = jax.tree.map(lambda x: x[seed], ck.load().agent)
    act_fn, obs_dim = ck.backbone.act, ck.meta["obs_dim"]

    @eqx.filter_jit
    def _act(agent, observations, goals):
        return act_fn(agent, observations, goals, jax.random.key(0), 0.0)

    def act(observations, goals):
        observations = jnp.asarray(observations, jnp.float32)
        goals = jnp.asarray(goals, jnp.float32)
        if observations.shape[-1:] != (obs_dim,) or goals.shape[-1:] != (obs_dim,):
            raise TttError(f"observations and goals must end in the observation size {obs_dim}, got shapes "
                           f"{observations.shape} and {goals.shape}")  # fmt: skip
        return _act(agent, observations, goals)

    return act
