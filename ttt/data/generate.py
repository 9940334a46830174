"""Offline generation of OGBench datasets with OGBench's own environments and oracles.

Follows OGBench's `data_gen_scripts/generate_locomaze.py` (pointmaze: action = unit direction to the BFS
oracle subgoal + N(0, noise^2), clipped to [-1, 1]; navigate re-draws the goal among junction/dead-end
cells when reached; stitch aims at a cell exactly 4 BFS steps away) and `generate_manipspace.py`
(cube-single play: OGBench's CubePlanOracle with noise 0.1 and smoothing 0.5, a new target when the plan
is done). Episodes never terminate early (`terminate_at_goal=False`), so every episode has
`episode_rows` rows and `terminals` is True at its last row only.

Reproducibility: OGBench seeds nothing; here every episode draws from its own seed
`SeedSequence([seed, split, episode])` (numpy's global RNG, the env's RNG and its action space), so the
arrays do not depend on how many worker processes generate them, and the `-val` split (split 1) uses a
different stream from training (split 0). Finished blocks of episodes are cached so an interrupted run
resumes where it stopped; the final files appear atomically.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing as mp
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ttt._version import __version__
from ttt.data.files import resolve_dir
from ttt.data.specs import DatasetSpec, get_spec
from ttt.envs.gym import make_gym_env, oracle_direction, seed_env, upside_down
from ttt.errors import TttError
from ttt.safe_files import read_json, safe_load_npz
from ttt.storage import (
    array_digest,
    atomic_save_npz,
    atomic_write_text,
    check_free_space,
    check_memory,
    locked,
    writable_dir,
)

KEYS = ("observations", "actions", "terminals", "qpos", "qvel")
BLOCK_EPISODES = 25  # episodes per cached block (resume granularity)


def _make_env(spec: DatasetSpec):
    kwargs = dict(terminate_at_goal=False, max_episode_steps=spec.episode_rows)
    if spec.family == "cube":
        kwargs["mode"] = "data_collection"
    return make_gym_env(spec.env_id, **kwargs)


def _episode_seed(seed: int, split: int, episode: int) -> int:
    return int(np.random.SeedSequence([seed, split, episode]).generate_state(1)[0])


def maze_cells(maze_map: np.ndarray) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Free cells, and the free cells that are not straight hallway cells (junctions, corners, dead ends)."""
    free, vertex = [], []
    for i in range(maze_map.shape[0]):
        for j in range(maze_map.shape[1]):
            if maze_map[i, j] != 0:
                continue
            free.append((i, j))
            vertical = maze_map[i - 1, j] == 0 and maze_map[i + 1, j] == 0
            horizontal = maze_map[i, j - 1] == 0 and maze_map[i, j + 1] == 0
            if vertical and maze_map[i, j - 1] == 1 and maze_map[i, j + 1] == 1:
                continue
            if horizontal and maze_map[i - 1, j] == 1 and maze_map[i + 1, j] == 1:
                continue
            vertex.append((i, j))
    return free, vertex


def cells_at_bfs_distance(maze_map: np.ndarray, start: tuple[int, int], steps: int) -> list[tuple[int, int]]:
    """Free cells exactly `steps` BFS moves from `start` (4-connected), in BFS discovery order."""
    dist = -np.ones(maze_map.shape, dtype=np.int64)
    dist[start] = 0
    queue, found = [start], []
    while queue:
        i, j = queue.pop(0)
        for di, dj in ((-1, 0), (0, -1), (1, 0), (0, 1)):
            ni, nj = i + di, j + dj
            inside = 0 <= ni < maze_map.shape[0] and 0 <= nj < maze_map.shape[1]
            if inside and maze_map[ni, nj] == 0 and dist[ni, nj] == -1:
                dist[ni, nj] = dist[i, j] + 1
                queue.append((ni, nj))
                if dist[ni, nj] == steps:
                    found.append((ni, nj))
    return found


def _maze_episode(env, spec: DatasetSpec, rng_seed: int, noise: float, expert=None) -> dict[str, np.ndarray]:
    """One maze episode. pointmaze: action = oracle direction + noise; antmaze: action = the expert's
    deterministic action on ``[observation without xy, oracle direction]`` + noise (OGBench's
    ``generate_locomaze.py``); both clipped to [-1, 1]."""
    maze_map = env.unwrapped.maze_map
    free, vertex = maze_cells(maze_map)
    init_ij = free[np.random.randint(len(free))]
    if spec.kind == "navigate":
        goal_ij = vertex[np.random.randint(len(vertex))]
    else:
        adjacent = cells_at_bfs_distance(maze_map, init_ij, 4)
        goal_ij = adjacent[np.random.randint(len(adjacent))] if adjacent else init_ij
    ob, _ = env.reset(seed=rng_seed, options=dict(task_info=dict(init_ij=init_ij, goal_ij=goal_ij)))
    rows = {k: [] for k in KEYS}
    reached, first = 0, -1  # goals reached (navigate re-draws); first step (1-based) at the goal
    done = False
    while not done:
        direction = oracle_direction(env)
        if expert is None:
            action = direction
        else:
            action = expert(np.concatenate([ob[2:], direction]))
        action = np.clip(action + np.random.normal(0, noise, action.shape), -1, 1)
        next_ob, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        if info["success"]:
            first = len(rows["actions"]) + 1 if first < 0 else first
            if spec.kind == "navigate":
                reached += 1
                env.unwrapped.set_goal(vertex[np.random.randint(len(vertex))])
            else:
                reached = 1
        for k, v in zip(KEYS, (ob, action, done, info["prev_qpos"], info["prev_qvel"]), strict=True):
            rows[k].append(v)
        ob = next_ob
    rows["ep_reached"], rows["ep_first"] = [reached], [first]
    return rows


def _cube_episode(env, spec: DatasetSpec, rng_seed: int, noise: float, oracle) -> dict[str, np.ndarray]:
    ob, info = env.reset(seed=rng_seed)
    oracle.reset(ob, info)
    rows = {k: [] for k in KEYS}
    done = False
    while not done:
        action = np.clip(np.asarray(oracle.select_action(ob, info)), -1, 1)
        next_ob, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        if oracle.done:
            new_ob, new_info = env.unwrapped.set_new_target(p_stack=0.0)
            oracle.reset(new_ob, new_info)
        for k, v in zip(KEYS, (ob, action, done, info["prev_qpos"], info["prev_qvel"]), strict=True):
            rows[k].append(v)
        ob = next_ob
    return rows


def _stack(rows: dict[str, list]) -> dict[str, np.ndarray]:
    def dtype(k):
        return bool if k == "terminals" else np.int64 if k.startswith("ep_") else np.float32

    return {k: np.asarray(v, dtype=dtype(k)) for k, v in rows.items()}


def generate_episodes(
    spec: DatasetSpec, seed: int, split: int, episodes: range, noise: float | None = None, expert=None
) -> dict[str, np.ndarray]:
    """Generate the given episodes of one split (0 train, 1 val) and return them concatenated. ``expert``
    (antmaze only): the deterministic locomotion policy, e.g. ``ttt.data.expert.NumpyExpert``."""
    noise = spec.noise if noise is None else noise
    if spec.needs_expert and expert is None:
        raise TttError(f"{spec.name} is generated with a {spec.robot} expert: pass one (`--expert PATH`)")
    env = _make_env(spec)
    oracle = None
    if spec.family == "cube":
        from ogbench.manipspace.oracles.plan.cube_plan import CubePlanOracle

        oracle = CubePlanOracle(env=env, noise=noise, noise_smoothing=spec.noise_smoothing)
    parts = []
    for ep in episodes:
        s = _episode_seed(seed, split, ep)
        seed_env(env, s)
        if spec.is_maze:
            parts.append(_stack(_maze_episode(env, spec, s, noise, expert)))
        else:
            parts.append(_stack(_cube_episode(env, spec, s, noise, oracle)))
    env.close()
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _block_job(args):
    spec_name, seed, split, start, stop, noise, expert = args
    arrays = generate_episodes(get_spec(spec_name), seed, split, range(start, stop), noise, expert)
    return split, start, stop, arrays


# The antmaze datasets of this project's results (seed 0, default size and noise, the 1M-step expert
# benchmarks/results/expert/ant-1m.npz), by `array_digest`; reproduced bit for bit where NumPy's OpenBLAS runs its
# SkylakeX kernel (AVX-512). Another kernel gives another, equally valid draw of the data
# (see `ttt.data.expert.blas_kernel`).
REFERENCE_EXPERT = "72f653ed41b125edb558d55256845db58b4c3648c670567e90a98cc15edf6974"
REFERENCE_KERNEL = "SkylakeX"
REFERENCE_ARRAYS = {
    ("antmaze-medium-navigate-v0", "train"): "84f02570aa03b609a52abdcd3ff31018c272c20b563d4b9dade3f0d1f9c8d46f",
    ("antmaze-medium-navigate-v0", "val"): "fa318624261b2f32817e0faa09cadc398b7ea48b90fe6175d6ed7b09302091ea",
    ("antmaze-medium-stitch-v0", "train"): "7fbdeca27e8e3a8250bec50d1ae9871209efcec313ebc0a10c0f14121f0cfb13",
    ("antmaze-medium-stitch-v0", "val"): "aa7ee315a353368b7a6ff1edb55c8a3073f2ad49ea42ab5cdb16bd380e7de0e2",
}


def reference_check(plan: GenerationPlan, split: str, sha256_arrays: str) -> str | None:
    """``'equal'`` or ``'differs'`` against the reference generation of this plan (`REFERENCE_ARRAYS`), None where
    the project has no reference for it (another dataset, seed, size, noise or expert)."""
    want = REFERENCE_ARRAYS.get((plan.spec.name, split))
    default = plan.episodes == plan.spec.episodes and plan.noise == plan.spec.noise and plan.seed == 0
    if want is None or not default or plan.expert != REFERENCE_EXPERT:
        return None
    return "equal" if sha256_arrays == want else "differs"


@dataclasses.dataclass(frozen=True)
class GenerationPlan:
    spec: DatasetSpec
    episodes: int
    seed: int
    noise: float
    expert: str | None = None  # content digest of the expert's weights (antmaze)

    @property
    def val_episodes(self) -> int:
        return self.spec.val_episodes(self.episodes)

    def fingerprint(self) -> str:
        """Content key of what this plan produces (used for the resume cache)."""
        key = json.dumps(
            dict(
                name=self.spec.name,
                episodes=self.episodes,
                seed=self.seed,
                noise=self.noise,
                rows=self.spec.episode_rows,
                version=__version__,
                **({"expert": self.expert} if self.expert else {}),
            ),
            sort_keys=True,
        )
        return hashlib.sha256(key.encode()).hexdigest()[:12]

    def blocks(self) -> list[tuple[int, int, int]]:
        out = []
        for split, n in ((0, self.episodes), (1, self.val_episodes)):
            out += [(split, a, min(a + BLOCK_EPISODES, n)) for a in range(0, n, BLOCK_EPISODES)]
        return out


def generate(
    name: str,
    episodes: int | None = None,
    seed: int = 0,
    directory: str | os.PathLike | None = None,
    workers: int | None = None,
    noise: float | None = None,
    force: bool = False,
    progress: Callable[[int, int], None] | None = None,
    expert: str | os.PathLike | None = None,
) -> tuple[Path, Path]:
    """Generate NAME.npz and NAME-val.npz; returns their paths.

    ``expert``: the trained expert (``expert.npz`` or its folder) for the antmaze / humanoidmaze datasets; its weights'
    digest enters the resume key and the metadata, so the same seed and expert give the same files.

    `progress(done_episodes, total_episodes)` is called as blocks finish. Finished blocks are cached in a
    hidden `.NAME.partial-<key>` folder beside the output, so a rerun after an interruption resumes.
    """
    spec = get_spec(name)
    episodes = spec.episodes if episodes is None else episodes
    if isinstance(episodes, bool) or not isinstance(episodes, int | np.integer) or episodes < 1:
        raise TttError(f"episodes (--episodes) must be an int >= 1, got {episodes!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= seed < 2**32:
        raise TttError(f"seed (--seed) must be an int in [0, 2^32), got {seed!r}")
    noise = spec.noise if noise is None else noise
    if not noise >= 0 or not np.isfinite(noise):
        raise TttError(f"noise (--noise) must be a finite number >= 0, got {noise}")
    nbytes = generation_bytes(spec, episodes)
    check_memory(nbytes, f"{name} with {episodes} episodes",
                 f"ask for fewer episodes (OGBench's size: {spec.episodes})")  # fmt: skip
    if directory is not None:
        writable_dir(directory, "the dataset directory (--dir)")
    out_dir = resolve_dir(directory, create_default=True, writable=True)
    with locked(out_dir / f".{name}.lock", f"{name} in {out_dir}"):  # a second writer waits, then finds it done
        return _generate(spec, episodes, seed, out_dir, workers, noise, force, progress, expert, nbytes)


def generation_bytes(spec: DatasetSpec, episodes: int) -> int:
    """A lower bound on the bytes of the train and val arrays of `episodes` episodes (observations, actions,
    terminals): what generation holds in memory at the end and writes as uncompressed blocks on the way."""
    rows = (episodes + spec.val_episodes(episodes)) * spec.episode_rows
    return rows * ((spec.ob_dim + spec.action_dim) * 4 + 1)


def _generate(spec, episodes, seed, out_dir, workers, noise, force, progress, expert, nbytes) -> tuple[Path, Path]:
    name = spec.name
    train_path, val_path = out_dir / f"{name}.npz", out_dir / f"{name}-val.npz"
    existing = [p for p in (train_path, val_path) if p.exists()]

    policy, expert_digest, kernel = _expert_policy(spec, expert)
    plan = GenerationPlan(spec, episodes, seed, noise, expert_digest)
    cache = out_dir / f".{name}.partial-{plan.fingerprint()}"
    if existing and not force and not cache.exists():  # (with the plan's partial folder: its own unfinished output)
        if _generated_by(plan, train_path, val_path):
            return train_path, val_path  # a rerun after the files were written: nothing to do
        raise TttError(f"{existing[0]} already exists; pass --force to overwrite it")
    if force:  # start over: finished blocks of an earlier run are not reused either
        shutil.rmtree(cache, ignore_errors=True)
    done_bytes = sum(f.stat().st_size for f in cache.glob("split*.npz")) if cache.exists() else 0
    check_free_space(out_dir, max(0, nbytes - done_bytes), f"generating {name} ({episodes} episodes)")
    try:
        atomic_write_text(cache / "plan.json", json.dumps(dataclasses.asdict(plan), default=str))
    except BaseException:  # (a full disk): leave no empty partial folder behind
        if not any(cache.glob("split*.npz")):
            shutil.rmtree(cache, ignore_errors=True)
        raise
    blocks = plan.blocks()
    total = episodes + plan.val_episodes

    def block_file(split: int, start: int) -> Path:
        return cache / f"split{split}-{start:07d}.npz"

    for s_, a_, _ in blocks:  # a block that does not read back (truncated, altered) is reported and made again
        f = block_file(s_, a_)
        if f.exists() and not _block_ok(f):
            print(f"warning: {f}: corrupt cached block (unreadable); generating it again", file=sys.stderr)
            f.unlink()
    todo = [b for b in blocks if not block_file(b[0], b[1]).exists()]
    done_eps = sum(b[2] - b[1] for b in blocks if b not in todo)
    if progress:
        progress(done_eps, total)
    jobs = [(name, seed, split, a, b, noise, policy) for split, a, b in todo]
    try:
        for split, start, stop, arrays in _run_jobs(jobs, workers):
            atomic_save_npz(block_file(split, start), arrays, compress=False)
            done_eps += stop - start
            if progress:
                progress(done_eps, total)
    except BaseException:
        if not any(cache.glob("split*.npz")):  # nothing finished: leave no partial folder behind
            shutil.rmtree(cache, ignore_errors=True)
        raise

    for split, path in ((0, train_path), (1, val_path)):
        _write_split(plan, split, path, [safe_load_npz(block_file(s, a)) for s, a, _ in blocks if s == split], kernel)
    shutil.rmtree(cache, ignore_errors=True)
    return train_path, val_path


def _expert_policy(spec: DatasetSpec, expert) -> tuple[Any, str | None, str | None]:
    """(the expert's NumPy policy, its weights' digest, this machine's BLAS kernel) for a dataset generated with a
    trained expert; (None, None, None) for OGBench's oracles, which take no ``expert``."""
    name = spec.name
    if not spec.needs_expert:
        if expert is not None:
            raise TttError(
                f"{name} is generated by OGBench's oracle; --expert is for the antmaze and humanoidmaze datasets"
            )
        return None, None, None
    if expert is None:
        raise TttError(
            f"{name} is generated with a trained {spec.robot} expert: pass --expert PATH "
            f"(train one with `ttt expert train {spec.robot}`)"
        )
    from ttt.data.expert import NumpyExpert, blas_kernel, load_actor  # (JAX only for the expert's datasets)

    actor, _, meta = load_actor(expert)
    robot = meta.get("robot") or "ant"  # (experts saved before they named their robot are ants)
    if robot != spec.robot:
        raise TttError(f"{name} is generated with a {spec.robot} expert; {str(expert)[:200]!r} is a {robot}'s")
    policy = NumpyExpert(actor)
    # (the workers are started on this machine with this environment: the same kernel)
    return policy, policy.digest(), blas_kernel()


def _write_split(plan: GenerationPlan, split: int, path: Path, parts: list, kernel: str | None) -> None:
    """Split ``split``'s blocks ``parts`` joined into ``path`` (compressed) and its metadata ``path.json``; a
    warning when they are not the project's reference generation bit for bit."""
    spec, expert_digest = plan.spec, plan.expert
    arrays = {k: np.concatenate([p[k] for p in parts]) for k in KEYS}
    stats = _episode_stats(spec, parts) | _flip_stats(spec, arrays)
    atomic_save_npz(path, arrays, compress=True)
    sha = array_digest(arrays)
    ref = reference_check(plan, "val" if split else "train", sha)
    if ref == "differs":
        print(f"warning: {path.name}: not bit-equal to this project's reference generation (reproduced where "
              f"NumPy's OpenBLAS runs its {REFERENCE_KERNEL} kernel; here: {kernel or 'another BLAS'}): the ant "
              "expert's float64 products differ in the last bit and the rollouts amplify it, so this is another "
              "draw of the same dataset; results on it compare with the project's records in distribution, not "
              "episode by episode", file=sys.stderr)  # fmt: skip
    meta = dict(
        name=spec.name,
        split="val" if split else "train",
        seed=plan.seed,
        noise=plan.noise,
        episodes=len(arrays["terminals"]) // spec.episode_rows,
        rows=len(arrays["terminals"]),
        episode_rows=spec.episode_rows,
        env_id=spec.env_id,
        sha256_arrays=sha,
        **({"expert_sha256": expert_digest, "blas_kernel": kernel} if expert_digest else {}),
        **({"reference": ref} if ref else {}),
        **stats,
        generator=f"ttt {__version__}",
        created=time.strftime("%Y-%m-%dT%H:%M:%S"),
    )
    atomic_write_text(path.with_suffix(".json"), json.dumps(meta, indent=1))


def _generated_by(plan: GenerationPlan, train_path: Path, val_path: Path) -> bool:
    """Whether both files exist and their sidecars say this plan made them (episodes, seed, noise, expert)."""
    for split, path in ((0, train_path), (1, val_path)):
        try:
            meta = read_json(path.with_suffix(".json"))  # the user's directory: a regular file, capped, bounded
        except TttError:
            return False
        if not isinstance(meta, dict):
            return False
        want = dict(seed=plan.seed, noise=plan.noise, episodes=plan.val_episodes if split else plan.episodes)
        if not path.exists() or any(meta.get(k) != v for k, v in want.items()):
            return False
        if meta.get("expert_sha256") != plan.expert:
            return False
    return True


def _block_ok(path: Path) -> bool:
    try:
        z = safe_load_npz(path)  # reading checks the zip CRCs
    except TttError:  # any failure to read a cache entry means: rebuild it
        return False
    return all(k in z for k in KEYS)


def _episode_stats(spec: DatasetSpec, parts: list) -> dict:
    """How the behaviour policy did, from the per-episode records (maze datasets): goals reached per navigate
    episode; share of stitch episodes at their goal and the step of first arrival."""
    if not spec.is_maze or not all("ep_reached" in p for p in parts):
        return {}
    reached = np.concatenate([p["ep_reached"] for p in parts])
    first = np.concatenate([p["ep_first"] for p in parts])
    if spec.kind == "navigate":
        return dict(
            goals_reached_mean=float(reached.mean()),
            goals_reached_min=int(reached.min()),
            episodes_without_goal=int((reached == 0).sum()),
        )
    hit = first > 0
    return dict(
        goal_reached_fraction=float(hit.mean()),
        first_arrival_median=float(np.median(first[hit])) if hit.any() else None,
        first_arrival_p90=float(np.percentile(first[hit], 90)) if hit.any() else None,
    )


def _flip_stats(spec: DatasetSpec, arrays: dict) -> dict:
    """Ant datasets: how many episodes hold an upside-down ant (the maze does not end an episode when the ant
    turns over, and it never gets up again) and the share of such rows."""
    if spec.family != "antmaze":
        return {}
    flipped = upside_down(arrays["qpos"]).reshape(-1, spec.episode_rows)
    return dict(flipped_episodes=int(flipped.any(1).sum()), flipped_rows_fraction=float(flipped.mean()))


def _worker_init() -> None:
    """Workers leave SIGINT to the parent (which ends them), so Ctrl-C prints no traceback per worker."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_jobs(jobs: list, workers: int | None) -> Iterator:
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs) or 1))
    if workers == 1:
        for job in jobs:
            yield _block_job(job)
        return
    ctx = mp.get_context("spawn")
    with ctx.Pool(workers, initializer=_worker_init) as pool:
        yield from pool.imap_unordered(_block_job, jobs)
