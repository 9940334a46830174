"""The host driver of `ttt run`: data -> pre-training -> evaluation for every run of a pipeline, with artifacts
cached by content and every stage resumable.

- data: `NAME.npz` of (dataset, data_episodes, data_seed). Full size lives in OGBench's directory (checked against
  its `NAME.json` sidecar), smaller sets in `CACHE/data/NAME-e<episodes>-s<seed>/`. Generation resumes by block.
- pre-training: `CACHE/ckpt/DATASET/AGENT-PROFILE-<key>/`, key = sha256 of the agent, the resolved backbone and
  sampler configs, the dataset's content hash, steps, seeds and seed. `pretrain` checkpoints every chunk and
  resumes.
- evaluation: `OUT/evals/NAME-<key>.json`, key = sha256 of the checkpoint key and every evaluation setting. Tasks
  are evaluated one at a time and each finished task is kept (`OUT/evals/.partial-<key>/task<T>.npz`), so an
  interrupted evaluation resumes at the task it stopped in. Episode keys depend on (seed, task, episode) only, so
  the split changes nothing.

Then `OUT/results.json`, `OUT/results.csv` and the report (`ttt.report`). All writes are atomic.
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

import numpy as np

from ttt.config import EVAL_KEYS, Pipeline, effective_rule
from ttt.errors import TttError
from ttt.storage import atomic_write_bytes, atomic_write_text, dumps, read_json  # noqa: F401

STAGES = ("data", "pretrain", "eval")
Echo = Callable[[str], None]
BarFactory = Callable[[str, str], Any]  # (description, unit) -> context manager, callable(done, total)


def cache_root(cache: str | os.PathLike | None = None) -> Path:
    return Path(cache or os.environ.get("TTT_CACHE") or "~/.cache/ttt").expanduser()


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def atomic_save_npz(path: Path, **arrays) -> None:
    atomic_write_bytes(path, lambda f: np.savez(f, **arrays))


def _load_npz(path: Path) -> dict | None:
    """A cached .npz's arrays, or None when it is truncated or corrupt (its zip checksums fail)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception:  # noqa: BLE001  (any failure to read a cache entry means: rebuild it)
        return None


# ---------------------------------------------------------------------------------------------------- data


def data_dir(run: dict, cache: Path) -> Path:
    """Where the run's dataset lives: `data_dir`, OGBench's directory at full size, else the cache."""
    from ttt.data.files import default_dir

    if run["data_dir"] is not None:
        return Path(run["data_dir"]).expanduser()
    if run["data_episodes"] is None:
        return default_dir()
    return cache / "data" / f"{run['dataset']}-e{run['data_episodes']}-s{run['data_seed']}"


def ensure_data(run: dict, cache: Path, generate: bool, bar: BarFactory, echo: Echo) -> Path:
    from ttt.data.specs import get_spec

    spec = get_spec(run["dataset"])
    episodes = spec.episodes if run["data_episodes"] is None else run["data_episodes"]
    d = data_dir(run, cache)
    npz, sidecar = d / f"{run['dataset']}.npz", d / f"{run['dataset']}.json"
    what = f"{run['dataset']} ({episodes} episodes, seed {run['data_seed']})"
    if npz.exists() and (d / f"{run['dataset']}-val.npz").exists():
        meta = read_json(sidecar) if sidecar.exists() else None
        if isinstance(meta, dict):  # a corrupt sidecar: loading reports it (and regenerates a cached dataset)
            if (meta.get("episodes"), meta.get("seed")) != (episodes, run["data_seed"]):
                raise TttError(
                    f"{npz} holds {meta.get('episodes')} episodes of seed {meta.get('seed')}, but the run asks for "
                    f"{what}; set data_dir to another directory or change data_episodes / data_seed"
                )
            if run["expert"] is not None and meta.get("expert_sha256") not in (None, _expert_digest(run["expert"])):
                raise TttError(
                    f"{npz} was generated with another expert than {run['expert']}; set data_dir to another "
                    "directory, or drop the expert key to use the existing data"
                )
        return d
    expert = f" --expert {run['expert']}" if run["expert"] else ""
    if not generate:
        raise TttError(
            f"dataset {what} is missing from {d}; the 'data' stage produces it (add data to --stages, or run "
            f"`ttt data generate {run['dataset']} --episodes {episodes} --seed {run['data_seed']} --dir {d}{expert}`)"
        )
    if spec.needs_expert and run["expert"] is None:
        raise TttError(
            f"dataset {what} is missing from {d} and is generated with an ant expert: set the run key expert to "
            "an expert.pkl (train one with `ttt expert train ant`)"
        )
    from ttt.data.generate import generate as gen

    echo(f"  data: generating {what} into {d}")
    d.mkdir(parents=True, exist_ok=True)
    with bar(f"generate {run['dataset']}", "episodes") as b:
        gen(run["dataset"], episodes=episodes, seed=run["data_seed"], directory=d, progress=b, expert=run["expert"])
    return d


def _expert_digest(path: str) -> str:
    from ttt.expert import NumpyExpert, load_actor

    return NumpyExpert(load_actor(path)[0]).digest()


# ----------------------------------------------------------------------------------------------- pretrain


def train_configs(run: dict):
    from ttt.data.specs import get_spec
    from ttt.presets import make_configs

    return make_configs(run["agent"], get_spec(run["dataset"]), run["profile"], dict(run["agent_config"]))


def train_steps(run: dict) -> int:
    from ttt.presets import get_profile

    return get_profile(run["profile"]).steps if run["steps"] is None else run["steps"]


def checkpoint_key(run: dict, data_hash: str) -> str:
    from ttt.pretrain import config_dict

    cfg, sampler = train_configs(run)
    return _digest(
        dict(
            agent=run["agent"],
            config=config_dict(cfg),
            sampler=config_dict(sampler),
            dataset=run["dataset"],
            dataset_hash=data_hash,
            steps=train_steps(run),
            seeds=run["seeds"],
            seed=run["train_seed"],
        )
    )


def checkpoint_dir(run: dict, cache: Path, data_hash: str) -> Path:
    if run["checkpoint"] is not None:
        return Path(run["checkpoint"]).expanduser()
    key = checkpoint_key(run, data_hash)
    return cache / "ckpt" / run["dataset"] / f"{run['agent']}-{run['profile']}-{key}"


def ensure_checkpoint(run: dict, cache: Path, data, data_hash: str, train: bool, bar: BarFactory, echo: Echo) -> Path:
    from ttt.pretrain import check_compatible, pretrain, read_meta

    out = checkpoint_dir(run, cache, data_hash)
    steps = train_steps(run)
    if run["checkpoint"] is not None:
        if not (out / "meta.json").exists():
            raise TttError(
                f"checkpoint {out} (run {run['name']}) does not exist; `ttt pretrain --out {out}` produces one, or "
                "remove `checkpoint` to let the 'pretrain' stage train and cache it"
            )
        meta = read_meta(out)
        check_compatible(meta, run["dataset"], data.obs_dim, data.action_dim, str(out), data_hash)
        return out
    if (out / "meta.json").exists():
        from ttt.pretrain import verify_checkpoint

        try:
            verify_checkpoint(out)
            if read_meta(out).get("step", 0) >= steps:
                return out
        except TttError as e:  # a cache entry: report it and train it again
            import shutil

            echo(f"  pretrain: cached checkpoint is corrupt ({str(e).split('; delete')[0]}); training it again")
            shutil.rmtree(out)
    if not train:
        raise TttError(
            f"no checkpoint of {run['agent']} on {run['dataset']} ({run['profile']} profile, {steps} steps, "
            f"{run['seeds']} seeds) in {out}; the 'pretrain' stage produces it (add pretrain to --stages)"
        )
    cfg, sampler = train_configs(run)
    at = read_meta(out).get("step", 0) if (out / "meta.json").exists() else 0
    resuming = f" (resuming at step {at})" if at else ""
    echo(f"  pretrain: {run['agent']} on {run['dataset']}, {run['seeds']} seeds x {steps} steps -> {out}{resuming}")
    with bar(f"pretrain {run['agent']}", "steps") as b:
        pretrain(
            run["agent"],
            run["dataset"],
            data,
            cfg,
            sampler,
            steps,
            run["seeds"],
            out,
            chunk_steps=run["train_chunk"],
            seed=run["train_seed"],
            profile=run["profile"],
            progress=lambda done, total, means, rate: b(done, total),
        )
    return out


# ---------------------------------------------------------------------------------------------- evaluation


BASE_EVAL_KEYS = ("episodes", "tasks", "eval_seed", "driver", "backend")  # all that a base row depends on


def checkpoint_identity(ckpt: Path, meta: dict) -> dict:
    """What a checkpoint is, by content: the sha256 of its state file (not its path: a moved run directory keeps
    its evaluations), its step and the data it was trained on."""
    from ttt.storage import file_sha256

    state = meta.get("state_sha256") or file_sha256(Path(ckpt) / meta["state_file"])
    return dict(state=state, step=meta["step"], dataset_hash=meta.get("dataset_hash"))


def eval_key(run: dict, ckpt: Path) -> str:
    """The evaluation's content key: the checkpoint's content and the settings the row depends on (a base row
    does not depend on the TTT settings)."""
    from ttt.pretrain import read_meta

    ck = checkpoint_identity(ckpt, read_meta(ckpt))
    keys = BASE_EVAL_KEYS if run["variant"] == "base" else EVAL_KEYS
    return _digest(dict(checkpoint=ck, variant=run["variant"], dataset=run["dataset"], **{k: run[k] for k in keys}))


def relevance_everywhere(tables, data, state_xy, cfg, goal_eps, row_values=None):
    """Selection ablation 'optimal only' / 'random': every eligible row counts as relevant."""
    return tables.eligible


def select_random_rank(key, tables, rel, cfg):
    """Selection control 'random-rank': the same relevant rows and the same number kept, ranked by random scores
    instead of returns."""
    import dataclasses as dc

    import jax

    from ttt.select import select

    k_score, k_sel = jax.random.split(key)
    scores = jax.random.uniform(k_score, tables.returns.shape, tables.returns.dtype)
    return select(k_sel, dc.replace(tables, returns=scores), rel, cfg)


def make_eval_setup(run: dict, meta: dict, max_steps: int):
    """The `EvalSetup` of a run (None TTT config for variant 'base')."""
    from ttt.data.specs import get_spec
    from ttt.episode import Transforms, TTTConfig
    from ttt.evaluate import EvalSetup
    from ttt.finetune import FinetuneConfig
    from ttt.pretrain import backbone_config, sampler_config
    from ttt.select import SelectConfig

    spec = get_spec(run["dataset"])
    cfg, sampler = backbone_config(meta), sampler_config(meta)
    where = f"run {run['name']}"
    ttt, transforms = None, Transforms()
    if run["variant"] != "base":
        from ttt.agents import get_backbone

        if not 1 <= run["K"] <= max_steps:
            raise TttError(
                f"{where}: K must be in [1, {max_steps}] (the episode length of {spec.env_id}), got {run['K']}"
            )
        critic = run["variant"] == "ttt"
        if (critic or run["relevance"] == "value") and not get_backbone(meta["backbone"]).has_value(cfg):
            raise TttError(f"{where}: variant {run['variant']} needs a value function, which this {meta['agent']} "
                           "checkpoint lacks; use variant ttt-mc with relevance 'distance'")  # fmt: skip
        mode = "fixed" if run["H"] is not None else ("critic" if critic else "mc")
        q = 1.0 if run["selection"] in ("relevant", "random") else run["q"]
        if run["selection"] in ("optimal", "random"):
            transforms = dataclasses.replace(transforms, relevance=relevance_everywhere)
        if run["selection"] == "random-rank":
            transforms = dataclasses.replace(transforms, select=select_random_rank)
        try:
            ttt = TTTConfig(
                K=max_steps if run["once"] else run["K"],
                select=SelectConfig(q=q, eps_rel=run["eps"], h_min=run["h_min"], mode=mode, H=run["H"],
                                    mix=run["mix"], noise_alpha=run["noise_alpha"], relevance=run["relevance"],
                                    c_rel=run["c_rel"], rule=effective_rule(run), n_episodes=run["n_episodes"],
                                    slack=run["slack"]),
                finetune=FinetuneConfig(steps=run["N"], lr=run["lr"], batch_size=run["batch"],
                                        reuse_opt_state=run["reuse_adam"]),
                critic=run["critic"],
                reset_after_horizon=run["reset_after_horizon"],
            )  # fmt: skip
        except ValueError as e:
            raise TttError(f"{where}: {e}") from None
    return EvalSetup(meta["backbone"], cfg, sampler, spec, ttt, max_steps, run["backend"], transforms)


def validate_run(run: dict) -> None:
    """Everything about a run that can be checked before any data or training: the backbone config overrides
    (keys, types, ranges), and for TTT rows the period K against the episode length and the need for a value
    function. `ttt run --dry-run` runs it on every run, and `ttt run` before the first stage."""
    from ttt.agents import get_backbone
    from ttt.data.specs import get_spec

    where = f"run {run['name']}"
    try:
        cfg, _ = train_configs(run)
    except TttError as e:
        raise TttError(f"{where}: agent_config: {e}") from None
    if run["variant"] == "base":
        return
    spec = get_spec(run["dataset"])
    max_steps = env_max_steps(spec.env_id)
    if not 1 <= run["K"] <= max_steps:
        raise TttError(f"{where}: K must be in [1, {max_steps}] (the episode length of {spec.env_id}), got {run['K']}")
    backbone = get_backbone(get_agent_backbone(run["agent"]))
    if (run["variant"] == "ttt" or run["relevance"] == "value") and not backbone.has_value(cfg):
        raise TttError(f"{where}: variant {run['variant']} needs a value function, which {run['agent']} lacks; use "
                       "variant ttt-mc with relevance 'distance'")  # fmt: skip
    if run["batch"] is not None and run["batch"] < 1:
        raise TttError(f"{where}: batch must be >= 1, got {run['batch']}")


def get_agent_backbone(agent: str) -> str:
    from ttt.presets import get_agent

    return get_agent(agent).backbone


def env_max_steps(env_id: str) -> int:
    import gymnasium
    import ogbench  # noqa: F401

    return int(gymnasium.spec(env_id).max_episode_steps)


class _Envs:
    """In-program envs built once per (env_id, backend), so every evaluation reuses the compiled programs."""

    def __init__(self):
        self._envs: dict = {}

    def get(self, env_id: str, backend: str):
        from ttt.envs import make_env

        if (env_id, backend) not in self._envs:
            self._envs[(env_id, backend)] = make_env(env_id, backend=backend)
        return self._envs[(env_id, backend)]


def evaluate_run(run: dict, ckpt: Path, data, out: Path, bar: BarFactory, echo: Echo, envs: _Envs) -> dict:
    """Evaluate one run, task by task, resuming from finished tasks; returns its record (also saved)."""
    from ttt.envs import has_jax_env
    from ttt.evaluate import evaluate
    from ttt.pretrain import load_checkpoint, read_meta

    key = eval_key(run, ckpt)
    record_path = out / "evals" / f"{run['name']}-{key}.json"
    if record_path.exists():
        record = read_json(record_path)
        if isinstance(record, dict) and record.get("eval_key") == key and "mean" in record:
            return record
        echo(f"  eval: {record_path} is corrupt (truncated or not a record); evaluating {run['name']} again")
        record_path.unlink()
    meta = read_meta(ckpt)
    setup = make_eval_setup(run, meta, env_max_steps(_env_id(run)))
    driver = run["driver"]
    if driver == "auto":
        driver = "compiled" if has_jax_env(setup.spec.env_id) else "host"
    states, meta = load_checkpoint(ckpt, meta)
    partial = out / "evals" / f".partial-{key}"
    reuse = states.opt_state if setup.ttt is not None and setup.ttt.finetune.reuse_opt_state else None
    per_task = []
    total = meta["seeds"] * len(run["tasks"]) * run["episodes"]
    done = 0
    with bar(f"eval {run['name']}", "episodes") as b:
        b(0, total)
        for t in run["tasks"]:
            f = partial / f"task{t}.npz"
            part = _load_npz(f) if f.exists() else None
            if f.exists() and part is None:
                echo(f"  eval: {f} is corrupt (unreadable); evaluating task {t} again")
                f.unlink()
            if part is None:
                res = evaluate(
                    setup,
                    states.agent,
                    data,
                    opt_states=reuse,
                    episodes=run["episodes"],
                    tasks=(t,),
                    seed=run["eval_seed"],
                    driver=driver,
                    batch_size=run["chunk"],
                    progress=lambda d, n, base=done: b(base + d, total),
                    env=envs.get(setup.spec.env_id, run["backend"]) if driver == "compiled" else None,
                )
                arrays = dict(success=res.success, steps=res.steps, wall_s=np.float64(res.wall_s))
                arrays.update({f"round_{k}": v for k, v in (res.rounds or {}).items()})
                if setup.spec.is_maze:  # trajectories for plots (xy, float16)
                    arrays["xy"] = res.observations[..., :2].astype(np.float16)
                    arrays["start_xy"] = res.starts[..., :2]
                    arrays["goal_xy"] = res.goals[..., :2]
                atomic_save_npz(f, **arrays)
                if run["figure"] and t == run["tasks"][0] and setup.ttt is not None and "xy" in arrays:
                    save_selection_figure(run, setup, states.agent, data, res, out / "figures" / f"{run['name']}.npz")
                part = _load_npz(f)
            per_task.append(part)
            done += meta["seeds"] * run["episodes"]
            b(done, total)
    cat = lambda k: np.concatenate([p[k] for p in per_task], axis=1)  # noqa: E731  (seeds, tasks, episodes, ...)
    success = cat("success")
    rates = success.mean(axis=(1, 2))
    record = dict(
        run=run,
        checkpoint=str(ckpt),
        checkpoint_step=meta["step"],
        profile=meta.get("profile"),
        rule_used=None if setup.ttt is None else setup.ttt.select.rule_used,
        driver=driver,
        eval_key=key,
        seeds=int(success.shape[0]),
        n_episodes=int(success.size),
        per_seed=rates.tolist(),
        mean=float(rates.mean()),
        se=float(rates.std(ddof=1) / np.sqrt(len(rates))) if len(rates) > 1 else None,
        per_task=success.mean(axis=(0, 2)).tolist(),
        success=success.astype(int).tolist(),
        steps=cat("steps").tolist(),
        wall_s=float(sum(float(p["wall_s"]) for p in per_task)),
        rounds={k[6:]: _nan_to_none(cat(k)) for k in per_task[0] if k.startswith("round_")},
    )
    if "xy" in per_task[0]:
        atomic_save_npz(out / "trajectories" / f"{run['name']}.npz", xy=cat("xy"), start=cat("start_xy"),
                        goal=cat("goal_xy"), success=success, steps=cat("steps"))  # fmt: skip
    atomic_write_text(record_path, dumps(record))
    echo(
        f"  eval: {run['name']}: success {record['mean']:.3f} +- {_se(record['se']):.3f} "
        f"({record['seeds']} seeds, {record['n_episodes']} episodes, {record['wall_s']:.0f} s)"
    )
    return record


def _se(se: float | None) -> float:
    return float("nan") if se is None else se


def _nan_to_none(x: np.ndarray):
    x = np.asarray(x)
    if x.dtype.kind == "f":
        return np.where(np.isnan(x), None, np.round(x.astype(np.float64), 6)).tolist()
    return x.astype(int).tolist() if x.dtype.kind == "b" else x.tolist()


def _env_id(run: dict) -> str:
    from ttt.data.specs import get_spec

    return get_spec(run["dataset"]).env_id


def save_selection_figure(run: dict, setup, agents, data, res, path: Path, max_segments: int = 150) -> None:
    """The data selected in each round of two episodes of seed 0 on the first task, its first success and its
    first failure (where it has them), side by side in the report: `PATH.success.npz` and `PATH.failure.npz`
    (`path` names `figures/NAME.npz`). Each is recomputed with the episode's own keys and checked against the
    round metrics the episode recorded, plus the maze walls."""
    for old in (path, path.with_suffix(".success.npz"), path.with_suffix(".failure.npz")):
        old.unlink(missing_ok=True)
    for outcome, hit in (("success", True), ("failure", False)):
        eps = np.flatnonzero((res.success[0, 0] > 0) == hit)
        if len(eps):
            _save_episode_selection(run, setup, agents, data, res, int(eps[0]),
                                    path.with_suffix(f".{outcome}.npz"), max_segments)  # fmt: skip


def _save_episode_selection(run: dict, setup, agents, data, res, e: int, path: Path, max_segments: int) -> None:
    import jax
    import jax.numpy as jnp

    from ttt.episode import make_round_fns, round_keys
    from ttt.evaluate import episode_batch, make_env

    ttt = setup.ttt
    prepare, _, _ = make_round_fns(setup.backbone, setup.cfg, setup.sampler, setup.spec, ttt, setup.transforms)
    agent0 = jax.tree.map(lambda x: x[0] if hasattr(x, "shape") and x.ndim > 0 else x, agents)
    n_seeds, _, n_eps = res.success.shape
    eb = episode_batch(run["eval_seed"], n_seeds, (run["tasks"][0],), n_eps)
    ttt_key = eb.ttt_keys[e * n_seeds]  # the grid is episode-major, seed fastest
    start, goal = jnp.asarray(res.starts[0, 0, e]), jnp.asarray(res.goals[0, 0, e])
    from ttt.envs.oracle import has_oracle, maze_oracle

    oracle = maze_oracle(setup.spec.env_id) if has_oracle(setup.spec.env_id) else None
    tables = jax.jit(prepare)(agent0, data, goal, oracle)
    steps = int(res.steps[0, 0, e])
    obs = res.observations[0, 0, e]
    sel = ttt.select
    goal_xy = setup.spec.goal_coords(goal)

    @jax.jit
    def round_mask(key, tables, data, state):  # the dataset is an argument, never a captured constant
        from ttt.select import round_spans

        rel = setup.transforms.relevance(tables, data, setup.spec.goal_coords(state), sel, setup.spec.goal_eps, None)
        return round_spans(key, tables, data, rel, sel, setup.transforms.select)

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
    env = make_env(setup.spec.env_id)
    u = env.unwrapped
    walls = [(j * u._maze_unit - u._offset_x, i * u._maze_unit - u._offset_y) for i, j in np.argwhere(u.maze_map)]
    bg_eps = rng.choice(int(np.asarray(data.ep_id).max()) + 1, size=min(100, int(np.asarray(data.ep_id).max()) + 1),
                        replace=False)  # fmt: skip
    ep_id = np.asarray(data.ep_id)
    bg = [np.asarray(data.observations)[ep_id == e, :2][::5] for e in bg_eps]
    lens = np.array([len(s) for s in segs], np.int32)
    atomic_save_npz(
        path,
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


# --------------------------------------------------------------------------------------------------- driver


@dataclasses.dataclass
class RunOutcome:
    records: list[dict]
    out: Path
    wall_s: float


def run_pipeline(
    pipe: Pipeline,
    out: str | os.PathLike,
    cache: str | os.PathLike | None = None,
    stages: tuple[str, ...] = STAGES,
    bar: BarFactory | None = None,
    echo: Echo = print,
    all_names: list[str] | None = None,
) -> RunOutcome:
    """Run every run of `pipe` through the stages (cached / resumed), then write results and the report.

    `all_names`: the names of every run of the pipeline when `pipe` holds only some of them (`--only`): the rows of
    the others already in `OUT/results.json` are kept there, in the pipeline's order."""
    from ttt.pretrain import dataset_hash
    from ttt.storage import writable_dir

    bad = [s for s in stages if s not in STAGES]
    if bad:
        raise TttError(f"unknown stage(s) {', '.join(bad)}; valid: {', '.join(STAGES)}")
    for run in pipe.runs:  # every check that needs no data or training, before any stage starts
        validate_run(run)
    bar = bar or _null_bar
    out = writable_dir(out, "--out")
    cache = cache_root(cache)
    if "data" in stages or "pretrain" in stages:
        writable_dir(cache, "--cache")
    kept = _kept_records(out, pipe, all_names)
    doc = dict(name=pipe.name, description=pipe.description, source=pipe.source, runs=list(pipe.runs))
    atomic_write_text(out / "pipeline.json", dumps(doc, indent=1))
    t0 = time.perf_counter()
    datasets: dict[tuple, tuple] = {}
    envs = _Envs()
    records = []
    for i, run in enumerate(pipe.runs):
        echo(f"[{i + 1}/{len(pipe.runs)}] {run['name']}: {run['agent']} {run['variant']} on {run['dataset']}")
        d = ensure_data(run, cache, "data" in stages, bar, echo)
        dkey = (str(d), run["dataset"])
        if dkey not in datasets:
            data = _load_data(run, d, cache, "data" in stages, bar, echo)
            datasets[dkey] = (data, dataset_hash(data))
        data, dhash = datasets[dkey]
        ckpt = ensure_checkpoint(run, cache, data, dhash, "pretrain" in stages, bar, echo)
        if "eval" not in stages:
            continue
        records.append(evaluate_run(run, ckpt, data, out, bar, echo, envs))
        from ttt.report import write_results

        # After every run: an interrupted pipeline leaves its finished rows (and the other rows kept).
        write_results(_merge(records, kept, all_names), out)
    if "eval" in stages:
        from ttt.report import rows, table_md, write_report

        echo(table_md(rows(records)))
        write_report(out, echo=echo)
    return RunOutcome(records, out, time.perf_counter() - t0)


def _kept_records(out: Path, pipe: Pipeline, all_names: list[str] | None) -> list[dict]:
    """Records in `OUT/results.json` of runs of the pipeline that this invocation does not run (`--only`)."""
    if not all_names:
        return []
    doc = read_json(out / "results.json")
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        return []
    running = {r["name"] for r in pipe.runs}
    names = set(all_names) - running
    return [r for r in doc["records"] if isinstance(r, dict) and r.get("run", {}).get("name") in names]


def _merge(records: list[dict], kept: list[dict], all_names: list[str] | None) -> list[dict]:
    """This invocation's records and the kept ones, in the pipeline's order."""
    if not kept:
        return records
    order = {n: i for i, n in enumerate(all_names or [])}
    return sorted([*records, *kept], key=lambda r: order.get(r["run"]["name"], len(order)))


def _load_data(run: dict, d: Path, cache: Path, generate: bool, bar: BarFactory, echo: Echo):
    """Load the run's dataset; a corrupt copy in the cache (unreadable, or its checksum differs) is reported and
    generated again. Datasets outside the cache (data_dir, OGBench's directory) are the user's: an error."""
    from ttt.data.files import load

    try:
        return load(run["dataset"], d)
    except TttError as e:
        in_cache = run["data_dir"] is None and run["data_episodes"] is not None
        if not (in_cache and generate):
            raise
        echo(f"  data: cached dataset is corrupt ({e}); generating it again")
    from ttt.data.generate import generate as gen
    from ttt.data.specs import get_spec

    spec = get_spec(run["dataset"])
    episodes = spec.episodes if run["data_episodes"] is None else run["data_episodes"]
    with bar(f"generate {run['dataset']}", "episodes") as b:
        gen(run["dataset"], episodes=episodes, seed=run["data_seed"], directory=d, progress=b, expert=run["expert"],
            force=True)  # fmt: skip
    return load(run["dataset"], d)


class _null_bar:
    def __init__(self, *a):
        pass

    def __call__(self, done, total):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None
