"""Pre-training: a scan-compiled update loop run in chunks, vmapped over seeds, with atomic checkpoints.

Pure part: `make_chunk(...)` returns `chunk(states, seed_keys, data) -> (states, metrics)`, one jitted program
that runs `chunk_steps` updates (sample batch, whole backbone loss, Adam, target update) for every seed at
once. The step's key is `fold_in(seed_key, step)`, so results do not depend on the chunk length, on
interruptions, or on how many seeds train together. Host part: `pretrain(...)` drives chunks, shows
progress, stops on a non-finite loss naming the step and term, and checkpoints after every chunk.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PRNGKeyArray

from ttt.agents.common import Backbone, step_targets
from ttt.checkpoint import (
    check_compatible,
    compute_info,
    config_dict,  # noqa: F401  (also importable from here)
    load_checkpoint,  # noqa: F401  (also importable from here)
    new_meta,
    open_checkpoint,
    read_meta,
    save_checkpoint,
)
from ttt.data.dataset import Dataset
from ttt.data.sampler import SamplerConfig, sample_rows
from ttt.errors import TttError
from ttt.presets import agent_backbone
from ttt.storage import check_memory, locked, writable_dir
from ttt.train_state import TrainState, init_state, make_optimizer  # noqa: F401  (public here: training's state)


def make_step(backbone: Backbone, cfg):
    """`step(state, batch, key) -> (state, loss, metrics)`: one gradient step of the whole loss on a given batch
    (`key` drives the loss's own sampling), then the target networks' Polyak step from the pre-step online networks
    (OGBench's order: `common.step_targets`)."""
    opt = make_optimizer(cfg)

    def step(state: TrainState, batch, key: PRNGKeyArray):
        (loss, metrics), grads = eqx.filter_value_and_grad(backbone.loss, has_aux=True)(state.agent, batch, key, cfg)
        # Target networks only enter the loss under stop_gradient: their gradients are zero, and Adam leaves
        # zero-gradient leaves exactly unchanged; step_targets then moves them.
        updates, opt_state = opt.update(grads, state.opt_state, eqx.filter(state.agent, eqx.is_array))
        agent = step_targets(backbone, cfg, state.agent, eqx.apply_updates(state.agent, updates))
        return TrainState(agent, opt_state, state.step + 1), loss, metrics

    return step


def make_update(backbone: Backbone, cfg, sampler: SamplerConfig):
    """`update(state, seed_key, data) -> (state, loss, metrics)`: one gradient step of the whole loss on a batch
    drawn from `data` with the key `fold_in(seed_key, step)`."""
    batch_fn = backbone.batch_fn
    step = make_step(backbone, cfg)

    def update(state: TrainState, seed_key: PRNGKeyArray, data: Dataset):
        k_rows, k_goals, k_loss = jax.random.split(jax.random.fold_in(seed_key, state.step), 3)
        batch = batch_fn(k_goals, data, sample_rows(k_rows, data, sampler.batch_size), sampler, cfg)
        return step(state, batch, k_loss)

    return update


def make_chunk(backbone: Backbone, cfg, sampler: SamplerConfig, chunk_steps: int, max_traces: int | None = None):
    """The jitted, seed-vmapped chunk: `(states, seed_keys, data) -> (states, summary)`.

    `summary` holds per seed the chunk means of the loss and every metric, and for each step whether the loss
    and each metric were finite (to name the first step and term that went non-finite). `max_traces` guards
    against retracing (`eqx.debug.assert_max_traces`).
    """
    update = make_update(backbone, cfg, sampler)

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


def metric_names(backbone: Backbone, cfg, sampler: SamplerConfig, obs_dim: int, action_dim: int) -> list[str]:
    """Names of the summary's metrics in the order of its `finite` columns."""
    update = make_update(backbone, cfg, sampler)
    state = eqx.filter_eval_shape(init_state, jax.random.key(0), backbone, obs_dim, action_dim, cfg)
    data = jax.eval_shape(lambda: _dummy_dataset(obs_dim, action_dim))
    _, _, metrics = eqx.filter_eval_shape(update, state, jax.random.key(0), data)
    return ["loss", *metrics.keys()]


def _dummy_dataset(obs_dim: int, action_dim: int) -> Dataset:
    return Dataset.from_arrays(
        np.zeros((4, obs_dim), np.float32), np.zeros((4, action_dim), np.float32), np.array([0, 1, 0, 1], bool)
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
    backbone = agent_backbone(agent)  # an unknown agent: the valid ones are listed
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
        return _pretrain(agent, backbone, dataset, data, cfg, sampler, steps, seeds, out, chunk_steps, seed,
                         profile, progress)  # fmt: skip


def _pretrain(agent, backbone: Backbone, dataset, data, cfg, sampler, steps, seeds, out, chunk_steps, seed, profile,
              progress):  # fmt: skip
    meta = new_meta(agent, backbone.name, cfg, sampler, dataset, data, seeds, seed, profile)

    one = eqx.filter_eval_shape(init_state, jax.random.key(0), backbone, data.obs_dim, data.action_dim, cfg)
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
        states = open_checkpoint(out, old).load()
    else:
        init_keys = jax.vmap(lambda k: jax.random.fold_in(k, 2**31 - 1))(seed_keys)
        states = eqx.filter_vmap(lambda k: init_state(k, backbone, data.obs_dim, data.action_dim, cfg))(init_keys)
    names = metric_names(backbone, cfg, sampler, data.obs_dim, data.action_dim)
    done = start = int(np.asarray(states.step)[0])
    # which compute trained which steps: one segment per change (a run resumed on another machine, or pinned to
    # another number of cores); steps before the first segment were trained before checkpoints recorded it
    segments = list(old.get("compute", [])) if old is not None else []
    here = compute_info()
    if not segments or {k: v for k, v in segments[-1].items() if k != "from_step"} != here:
        segments.append({"from_step": start, **here})
    meta["compute"] = segments
    history: list[dict] = []
    chunk_fns: dict[int, Callable] = {}
    rate_steps, rate_time = 0, 0.0
    first, saved = True, old  # `saved`: the metadata of the last checkpoint written (or found, when already done)
    while done < steps:
        n = min(chunk_steps, steps - done)
        fn = chunk_fns.setdefault(n, make_chunk(backbone, cfg, sampler, n))
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
