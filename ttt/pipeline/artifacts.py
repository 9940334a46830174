"""The arrays a pipeline keeps beside its results: per-task evaluation parts (read back with `load_npz`, which
treats a corrupt file as missing) and the selection figures (the data selected in each round of one episode,
recomputed with the episode's own keys and checked against what the episode recorded)."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np

from ttt.checks import check_transforms
from ttt.envs.gym import make_gym_env
from ttt.envs.oracle import has_oracle, maze_oracle
from ttt.episode import make_round_fns, round_keys
from ttt.errors import TttError
from ttt.evaluation import episode_batch
from ttt.safe_files import safe_load_npz
from ttt.select import Context, round_spans
from ttt.storage import atomic_save_npz


def load_npz(path: Path) -> dict | None:
    """A cached .npz's arrays, or None when it is truncated or corrupt (its zip checksums fail)."""
    try:
        return safe_load_npz(path)
    except TttError:  # any failure to read a cache entry means: rebuild it
        return None


def nan_to_none(x: np.ndarray):
    x = np.asarray(x)
    if x.dtype.kind == "f":
        return np.where(np.isnan(x), None, np.round(x.astype(np.float64), 6)).tolist()
    return x.astype(int).tolist() if x.dtype.kind == "b" else x.tolist()


def save_selection_figure(ev, setup, agents, data, res, path: Path, max_segments: int = 150,
                          task: int | None = None) -> None:  # fmt: skip
    """The data selected in each round of two episodes of seed 0, a success and a failure, side by side in the
    report: `PATH.success.npz` and `PATH.failure.npz` (`path` names `figures/NAME.npz`). `ev` is the run's
    `ttt.pipeline.plan.EvalPlan`; `res` holds the episodes of one task, `task` (default: the run's first, whose call
    starts the figure afresh); a later task's call fills only the outcome still missing, so the figure shows both
    wherever the run has both. Each is recomputed with the episode's own keys and checked against the round metrics
    the episode recorded, plus the maze walls."""
    task = ev.tasks[0] if task is None else task
    if task == ev.tasks[0]:
        for old in (path, path.with_suffix(".success.npz"), path.with_suffix(".failure.npz")):
            old.unlink(missing_ok=True)
    for outcome, hit in (("success", True), ("failure", False)):
        eps = np.flatnonzero((res.success[0, 0] > 0) == hit)
        if len(eps) and not path.with_suffix(f".{outcome}.npz").exists():
            _save_episode_selection(ev.seed, setup, agents, data, res, int(eps[0]),
                                    path.with_suffix(f".{outcome}.npz"), max_segments, task)  # fmt: skip


@functools.lru_cache(maxsize=4)
def _jitted_prepare(setup):
    """The setup's jitted `prepare`, built once for every figure of a row (the setup is hashable and immutable)."""
    import jax

    return jax.jit(make_round_fns(setup.backbone, setup.cfg, setup.sampler, setup.spec, setup.ttt,
                                  setup.transforms)[0])  # fmt: skip


def _save_episode_selection(seed: int, setup, agents, data, res, e: int, path: Path, max_segments: int,
                            task: int) -> None:  # fmt: skip
    import jax
    import jax.numpy as jnp

    ttt = setup.ttt
    prepare = _jitted_prepare(setup)
    agent0 = jax.tree.map(lambda x: x[0] if hasattr(x, "shape") and x.ndim > 0 else x, agents)
    n_seeds, _, n_eps = res.success.shape
    eb = episode_batch(seed, n_seeds, (task,), n_eps)
    ttt_key = eb.ttt_keys[e * n_seeds]  # the grid is episode-major, seed fastest
    start, goal = jnp.asarray(res.starts[0, 0, e]), jnp.asarray(res.goals[0, 0, e])

    oracle = maze_oracle(setup.spec.env_id) if has_oracle(setup.spec.env_id) else None
    tables = prepare(agent0, data, goal, oracle)
    steps = int(res.steps[0, 0, e])
    obs = res.observations[0, 0, e]
    sel = ttt.select
    goal_xy = setup.spec.goal_coords(goal)

    transforms = check_transforms(setup.transforms, sel)

    @jax.jit
    def round_mask(key, tables, data, state):  # the dataset is an argument, never a captured constant
        ctx = Context(data=data, goal_eps=setup.spec.goal_eps, cfg=sel, goal_xy=goal_xy, goal=goal, obs=state,
                      state_xy=setup.spec.goal_coords(state), key=key, tables=tables)  # fmt: skip
        ctx = dataclasses.replace(ctx, relevant=transforms.relevance(ctx))
        return round_spans(ctx, transforms.select)[0]

    rng = np.random.default_rng(0)
    segs, seg_round, round_start, n_sel = [], [], [], []
    r = 0
    while r * ttt.K < max(steps, 1):
        state = start if r == 0 else jnp.asarray(obs[r * ttt.K - 1])
        k_adapt, _ = round_keys(ttt_key, r)
        k_sel, _ = jax.random.split(k_adapt)
        s = round_mask(k_sel, tables, data, state)
        rows = np.flatnonzero(np.asarray(s.mask))
        ends = np.asarray(s.ends)
        n_sel.append(len(rows))
        round_start.append(np.asarray(state)[:2])
        for j in rng.choice(rows, size=min(max_segments, len(rows)), replace=False) if len(rows) else []:
            segs.append(np.asarray(data.observations[j : ends[j] + 1, :2]))
            seg_round.append(r)
        r += 1
    recorded = np.asarray(res.rounds["n_selected"][0, 0, e][: len(n_sel)])
    env = make_gym_env(setup.spec.env_id)
    u = env.unwrapped
    walls = [(j * u._maze_unit - u._offset_x, i * u._maze_unit - u._offset_y) for i, j in np.argwhere(u.maze_map)]
    bg_eps = rng.choice(int(np.asarray(data.ep_id).max()) + 1, size=min(100, int(np.asarray(data.ep_id).max()) + 1),
                        replace=False)  # fmt: skip
    ep_id = np.asarray(data.ep_id)
    bg = [np.asarray(data.observations)[ep_id == e, :2][::5] for e in bg_eps]
    lens = np.array([len(s) for s in segs], np.int32)
    arrays = dict(
        traj=np.concatenate([np.asarray(start)[None, :2], obs[:steps, :2]]),
        goal=np.asarray(goal_xy),
        success=res.success[0, 0, e],
        episode=np.int32(e),
        K=ttt.K,
        round_start=np.array(round_start),
        n_selected=np.array(n_sel),
        n_selected_recorded=recorded,
        seg_xy=np.concatenate(segs) if segs else np.zeros((0, 2), np.float32),
        seg_len=lens,
        seg_round=np.array(seg_round, np.int32),
        walls=np.array(walls, np.float32),
        maze_unit=np.float32(u._maze_unit),
        bg_xy=np.concatenate(bg),
        bg_len=np.array([len(b) for b in bg], np.int32),
    )
    atomic_save_npz(path, arrays, compress=False)
