"""Pre-training: a scan-compiled update loop run in chunks, vmapped over seeds, with atomic checkpoints.

Pure part: `make_chunk(...)` returns `chunk(states, seed_keys, data) -> (states, metrics)`, one jitted program
that runs `chunk_steps` updates (sample batch, whole backbone loss, Adam, target update) for every seed at
once. The step's key is `fold_in(seed_key, step)`, so results do not depend on the chunk length, on
interruptions, or on how many seeds train together. Host part: `pretrain(...)` drives chunks, shows
progress, stops on a non-finite loss naming the step and term, and checkpoints after every chunk.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Int, PRNGKeyArray

from ttt.agents import get_backbone
from ttt.data.dataset import Dataset
from ttt.data.sampler import GoalMix, SamplerConfig, sample_rows
from ttt.errors import TttError
from ttt.presets import check_config_value, get_agent
from ttt.storage import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    check_memory,
    file_sha256,
    locked,
    writable_dir,
)

CKPT_FORMAT = 1


class TrainState(eqx.Module):
    """One seed's agent, optimiser state and step (stacked along a leading seed axis when vmapped)."""

    agent: Any
    opt_state: Any
    step: Int[Array, ""]


def make_optimizer(cfg) -> optax.GradientTransformation:
    return optax.adam(cfg.lr)


def init_state(key: PRNGKeyArray, backbone_name: str, obs_dim: int, action_dim: int, cfg) -> TrainState:
    """A fresh TrainState (vmap it over seed keys for several seeds)."""
    agent = get_backbone(backbone_name).init(key, obs_dim, action_dim, cfg)
    opt_state = make_optimizer(cfg).init(eqx.filter(agent, eqx.is_array))
    return TrainState(agent, opt_state, jnp.zeros((), jnp.int32))


def make_update(backbone_name: str, cfg, sampler: SamplerConfig):
    """`update(state, seed_key, data) -> (state, loss, metrics)`: one gradient step of the whole loss."""
    backbone = get_backbone(backbone_name)
    batch_fn = backbone.batch_fn
    opt = make_optimizer(cfg)

    def update(state: TrainState, seed_key: PRNGKeyArray, data: Dataset):
        k_rows, k_goals, k_loss = jax.random.split(jax.random.fold_in(seed_key, state.step), 3)
        batch = batch_fn(k_goals, data, sample_rows(k_rows, data, sampler.batch_size), sampler, cfg)
        (loss, metrics), grads = eqx.filter_value_and_grad(backbone.loss, has_aux=True)(state.agent, batch, k_loss, cfg)
        # Target networks only enter the loss under stop_gradient: their gradients are zero, and Adam leaves
        # zero-gradient leaves exactly unchanged; target_update then moves them.
        updates, opt_state = opt.update(grads, state.opt_state, eqx.filter(state.agent, eqx.is_array))
        agent = backbone.target_update(eqx.apply_updates(state.agent, updates), cfg)
        return TrainState(agent, opt_state, state.step + 1), loss, metrics

    return update


def make_chunk(backbone_name: str, cfg, sampler: SamplerConfig, chunk_steps: int, max_traces: int | None = None):
    """The jitted, seed-vmapped chunk: `(states, seed_keys, data) -> (states, summary)`.

    `summary` holds per seed the chunk means of the loss and every metric, and for each step whether the loss
    and each metric were finite (to name the first step and term that went non-finite). `max_traces` guards
    against retracing (`eqx.debug.assert_max_traces`).
    """
    update = make_update(backbone_name, cfg, sampler)

    def one_seed(state: TrainState, seed_key: PRNGKeyArray, data: Dataset):
        def body(st, _):
            st, loss, metrics = update(st, seed_key, data)
            metrics = {"loss": loss, **metrics}
            finite = jnp.stack([jnp.isfinite(v).all() for v in metrics.values()])
            return st, (metrics, finite)

        state, (metrics, finite) = jax.lax.scan(body, state, None, length=chunk_steps)
        return state, {"mean": jax.tree.map(jnp.mean, metrics), "finite": finite}

    chunk = eqx.filter_vmap(one_seed, in_axes=(0, 0, None))
    if max_traces is not None:
        chunk = eqx.debug.assert_max_traces(chunk, max_traces=max_traces)
    return eqx.filter_jit(chunk)


def metric_names(backbone_name: str, cfg, sampler: SamplerConfig, obs_dim: int, action_dim: int) -> list[str]:
    """Names of the summary's metrics in the order of its `finite` columns."""
    update = make_update(backbone_name, cfg, sampler)
    state = eqx.filter_eval_shape(init_state, jax.random.key(0), backbone_name, obs_dim, action_dim, cfg)
    data = jax.eval_shape(lambda: _dummy_dataset(obs_dim, action_dim))
    _, _, metrics = eqx.filter_eval_shape(update, state, jax.random.key(0), data)
    return ["loss", *metrics.keys()]


def _dummy_dataset(obs_dim: int, action_dim: int) -> Dataset:
    return Dataset.from_arrays(
        np.zeros((4, obs_dim), np.float32), np.zeros((4, action_dim), np.float32), np.array([0, 1, 0, 1], bool)
    )


# ----------------------------------------------------------------------------------------------- checkpoints


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


def dataset_hash(data: Dataset) -> str:
    h = hashlib.sha256()
    for name in ("observations", "actions", "ep_end"):
        a = np.asarray(getattr(data, name))
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def _atomic_write(path: Path, write: Callable[[Any], None], mode: str = "wb") -> None:
    (atomic_write_bytes if "b" in mode else lambda p, w: atomic_write_text(p, _text_of(w)))(path, write)


def _text_of(write: Callable[[Any], None]) -> str:
    import io

    buf = io.StringIO()
    write(buf)
    return buf.getvalue()


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
    try:
        meta = json.loads(path.read_text())
    except ValueError as e:
        raise TttError(f"{path}: unreadable checkpoint metadata: {e}") from None
    if not isinstance(meta, dict):
        raise TttError(f"{path}: checkpoint metadata must be a JSON object, got {type(meta).__name__}")
    for k in ("agent", "backbone", "config", "dataset", "dataset_hash", "obs_dim", "action_dim", "seeds", "state_file"):
        if k not in meta:
            raise TttError(f"{path}: checkpoint metadata lacks '{k}'")
    _check_meta_types(meta, path)
    return meta


_META_TYPES = {"agent": str, "backbone": str, "config": dict, "dataset": str, "dataset_hash": str, "obs_dim": int,
               "action_dim": int, "seeds": int, "state_file": str, "step": int, "sampler": dict}  # fmt: skip


def _check_meta_types(meta: dict, path: Path) -> None:
    """Types and ranges of the metadata a checkpoint is rebuilt from (a hand-edited or hostile meta.json is named,
    not followed): counts are positive integers, the state file a plain name inside the checkpoint folder."""
    for k, kind in _META_TYPES.items():
        v = meta.get(k)
        if k in meta and (not isinstance(v, kind) or isinstance(v, bool)):
            raise TttError(f"{path}: checkpoint metadata '{k}' must be {kind.__name__}, got {json.dumps(v)}; the "
                           "file was altered: pre-train the checkpoint again")  # fmt: skip
    for k in ("obs_dim", "action_dim", "seeds"):
        if meta[k] < 1:
            raise TttError(f"{path}: checkpoint metadata '{k}' must be >= 1, got {meta[k]}")
    if meta.get("step", 0) < 0:
        raise TttError(f"{path}: checkpoint metadata 'step' must be >= 0, got {meta['step']}")
    name = meta["state_file"]
    if Path(name).name != name or name in ("", ".", ".."):
        raise TttError(f"{path}: checkpoint metadata 'state_file' must be a file name in the checkpoint folder (a "
                       f"state-<step>.eqx), got {name!r}")  # fmt: skip


def backbone_config(meta: dict):
    """Rebuild the backbone Config saved in a checkpoint's metadata."""
    backbone = get_backbone(meta["backbone"])
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
    """The seed-stacked TrainState and metadata of a checkpoint directory."""
    out = Path(out)
    meta = read_meta(out) if meta is None else meta
    cfg = backbone_config(meta)
    keys = jax.random.split(jax.random.key(0), meta["seeds"])
    # Only the structure, shapes and dtypes are needed: traced, not run (running it op by op compiles every op).
    init = eqx.filter_vmap(lambda k: init_state(k, meta["backbone"], meta["obs_dim"], meta["action_dim"], cfg))
    template = eqx.filter_eval_shape(init, keys)
    path = out / meta["state_file"]
    verify_checkpoint(out, meta)
    try:
        with open(path, "rb") as f:
            states = eqx.tree_deserialise_leaves(f, template)
    except (OSError, ValueError, RuntimeError) as e:
        raise TttError(f"{path}: cannot read checkpoint state: {e}") from None
    return states, meta


def verify_checkpoint(out: str | os.PathLike, meta: dict | None = None) -> None:
    """Raise TttError when the checkpoint's state file is missing or its sha256 differs from the one recorded at
    save time (a truncated or altered file)."""
    out = Path(out)
    meta = read_meta(out) if meta is None else meta
    path = out / meta["state_file"]
    if not path.exists():
        raise TttError(f"{path}: the checkpoint's state file is missing; delete {out} to train from scratch")
    want = meta.get("state_sha256")
    if want is not None and file_sha256(path) != want:
        raise TttError(
            f"{path}: corrupt checkpoint state (sha256 differs from the one saved in meta.json); delete {out} to "
            "train from scratch"
        )


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


# --------------------------------------------------------------------------------------------------- driver


@dataclasses.dataclass(frozen=True)
class PretrainResult:
    states: TrainState
    meta: dict
    steps_per_s: float  # updates per second per seed, excluding the first (compiling) chunk; nan if none ran
    history: list[dict]
    start_step: int = 0  # the step it resumed at (0: from scratch)


MAX_STEPS = 2**31 - 1  # the train state's step counter is int32


def pretrain(
    agent: str,
    dataset: str,
    data: Dataset,
    cfg,
    sampler: SamplerConfig,
    steps: int,
    seeds: int,
    out: str | os.PathLike,
    chunk_steps: int = 1000,
    seed: int = 0,
    profile: str = "custom",
    progress: Callable[[int, int, dict, float], None] | None = None,
) -> PretrainResult:
    """Train `seeds` seeds for `steps` updates, resuming from `out` when it holds a matching checkpoint."""
    backbone_name = get_agent(agent).backbone  # an unknown agent: the valid ones are listed
    if steps < 1 or seeds < 1 or chunk_steps < 1:
        raise TttError(f"steps, seeds and chunk size must be >= 1, got {steps}, {seeds}, {chunk_steps}")
    if steps > MAX_STEPS:
        raise TttError(f"steps must be at most {MAX_STEPS} (the step counter is a 32-bit integer), got {steps}")
    if not 0 <= seed < 2**63:
        raise TttError(f"seed must be in [0, 2^63), got {seed}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise TttError(f"out (--out) {out} is a file, not a directory; give a checkpoint directory (created when "
                       "missing)")  # fmt: skip

    writable_dir(out, "out (--out)")
    with locked(out / ".lock", f"the checkpoint {out}"):  # a second trainer waits, then resumes (or finds it done)
        return _pretrain(agent, backbone_name, dataset, data, cfg, sampler, steps, seeds, out, chunk_steps, seed,
                         profile, progress)  # fmt: skip


def _pretrain(agent, backbone_name, dataset, data, cfg, sampler, steps, seeds, out, chunk_steps, seed, profile,
              progress):  # fmt: skip
    meta = dict(
        agent=agent,
        backbone=backbone_name,
        config=config_dict(cfg),
        sampler=config_dict(sampler),
        dataset=dataset,
        dataset_hash=dataset_hash(data),
        obs_dim=data.obs_dim,
        action_dim=data.action_dim,
        seeds=seeds,
        seed=seed,
        profile=profile,
        versions=package_versions(),
    )

    one = eqx.filter_eval_shape(init_state, jax.random.key(0), backbone_name, data.obs_dim, data.action_dim, cfg)
    nbytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(one) if hasattr(x, "dtype"))
    check_memory(2 * seeds * nbytes, f"training {seeds} seeds (networks and optimiser state of each)",
                 "train fewer seeds at once")  # fmt: skip
    seed_keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.arange(seeds))
    old = None  # the metadata of the checkpoint found in `out`, if any
    if (out / "meta.json").exists():
        old = read_meta(out)
        for k in ("agent", "config", "sampler", "seeds", "seed"):
            if old[k] != meta[k]:
                raise TttError(
                    f"{out}: holds a checkpoint with another {k} ({old[k]} vs {meta[k]}); "
                    "use another --out or delete it"
                )
        check_compatible(old, dataset, data.obs_dim, data.action_dim, str(out), meta["dataset_hash"])
        if old["step"] > steps:
            raise TttError(
                f"{out} holds a checkpoint at step {old['step']}, past the {steps} steps asked for; ask for at least "
                f"{old['step']} steps to continue it, or give another --out"
            )
        states, _ = load_checkpoint(out, old)
    else:
        init_keys = jax.vmap(lambda k: jax.random.fold_in(k, 2**31 - 1))(seed_keys)
        states = eqx.filter_vmap(lambda k: init_state(k, backbone_name, data.obs_dim, data.action_dim, cfg))(init_keys)
    names = metric_names(backbone_name, cfg, sampler, data.obs_dim, data.action_dim)
    done = start = int(np.asarray(states.step)[0])
    history: list[dict] = []
    chunk_fns: dict[int, Callable] = {}
    rate_steps, rate_time = 0, 0.0
    first, saved = True, old  # `saved`: the metadata of the last checkpoint written (or found, when already done)
    while done < steps:
        n = min(chunk_steps, steps - done)
        fn = chunk_fns.setdefault(n, make_chunk(backbone_name, cfg, sampler, n))
        t0 = time.perf_counter()
        new_states, summary = fn(states, seed_keys, data)
        finite = np.asarray(summary["finite"])  # (seeds, n, terms)
        dt = time.perf_counter() - t0
        if not finite.all():
            raise TttError(_non_finite_message(finite, names, done, out, cfg))
        states, done = new_states, done + n
        means = {k: float(np.mean(v)) for k, v in summary["mean"].items()}
        history.append({"step": done, **means})
        if not first:
            rate_steps, rate_time = rate_steps + n, rate_time + dt
        first = False
        rate = rate_steps / rate_time if rate_time else n / dt
        saved = save_checkpoint(out, states, {**meta, "updates_per_s": rate})
        if progress:
            progress(done, steps, means, rate)
    return PretrainResult(states, saved, rate_steps / rate_time if rate_time else float("nan"), history, start)


def _non_finite_message(finite: np.ndarray, names: list[str], done: int, out: Path, cfg) -> str:
    """Name the first step that went non-finite, its seed, its non-finite loss terms, and what is kept."""
    bad = ~finite  # (seeds, steps, terms)
    t = int(np.flatnonzero(bad.any(axis=(0, 2)))[0])
    s = int(np.flatnonzero(bad[:, t].any(axis=1))[0])
    terms = [n for n, b in zip(names, bad[s, t], strict=True) if b]
    parts = [n for n in terms if n.endswith("_loss")] or terms  # a loss term first
    kept = (
        f"the last good checkpoint (step {done}) is kept in {out}"
        if done > 0
        else f"no checkpoint was saved ({out} holds none)"
    )
    lr = getattr(cfg, "lr", None)
    hint = f"; try a lower lr (now {lr:g})" if lr is not None else ""
    return (
        f"non-finite {parts[0]} at step {done + t + 1} (seed {s}; non-finite there: {', '.join(terms)}){hint}; "
        f"stopped, {kept}"
    )
