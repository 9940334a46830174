"""The three stages of a pipeline run, each consuming the run's `RunPlan` (`ttt.pipeline.plan`) and producing an
artifact by content key (`ttt.pipeline.keys`) or finding it cached, and each resumable: `ensure_data` (generation
resumes by block), `ensure_checkpoint` (pre-training resumes at its last chunk), `evaluate_run` (evaluation resumes
at its last finished task). A corrupt cache entry is reported through `echo` and rebuilt; the user's own files (a
`data_dir`, a `checkpoint`) are reported, not overwritten."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ttt.checkpoint import Checkpoint, check_compatible, compute_info, config_dict, open_checkpoint, read_meta
from ttt.data.expert import NumpyExpert, load_actor
from ttt.data.files import load
from ttt.data.generate import generate as gen
from ttt.envs import make_env
from ttt.errors import TttError
from ttt.evaluation import evaluate, ttgs_cost_note
from ttt.pipeline.artifacts import load_npz, nan_to_none, save_selection_figure
from ttt.pipeline.keys import checkpoint_dir, checkpoint_ref, eval_key
from ttt.pipeline.plan import RunPlan, TrainPlan
from ttt.pipeline.records import SCHEMA, portable_run
from ttt.pretrain import pretrain
from ttt.safe_files import MAX_JSON_BYTES, loads_json, read_text
from ttt.stats import mean_se
from ttt.storage import atomic_save_npz, atomic_write_bytes, atomic_write_text, dumps, file_name, locked, read_json

Echo = Callable[[str], None]
BarFactory = Callable[[str, str], Any]  # (description, unit) -> context manager, callable(done, total)


def ensure_data(plan: RunPlan, generate: bool, bar: BarFactory, echo: Echo) -> Path:
    """The directory holding the plan's dataset, generated there first when missing (and `generate`)."""
    p, d = plan.data, plan.data.directory
    npz, sidecar = d / f"{p.name}.npz", d / f"{p.name}.json"
    if npz.exists() and (d / f"{p.name}-val.npz").exists():
        meta = read_json(sidecar) if sidecar.exists() else None
        if isinstance(meta, dict):  # a corrupt sidecar: loading reports it (and regenerates a cached dataset)
            if (meta.get("episodes"), meta.get("seed")) != (p.episodes, p.seed):
                raise TttError(
                    f"{npz} holds {meta.get('episodes')} episodes of seed {meta.get('seed')}, but the run asks for "
                    f"{p.what}; set data_dir to another directory or change data_episodes / data_seed"
                )
            if p.expert is not None and meta.get("expert_sha256") not in (None, _expertdigest(p.expert)):
                raise TttError(
                    f"{npz} was generated with another expert than {p.expert}; set data_dir to another "
                    "directory, or drop the expert key to use the existing data"
                )
        return d
    expert = f" --expert {p.expert}" if p.expert else ""
    if not generate:
        raise TttError(
            f"dataset {p.what} is missing from {d}; the 'data' stage produces it (add data to --stages, or run "
            f"`ttt data generate {p.name} --episodes {p.episodes} --seed {p.seed} --dir {d}{expert}`)"
        )
    if p.spec.needs_expert and p.expert is None:
        raise TttError(
            f"dataset {p.what} is missing from {d} and is generated with a {p.spec.robot} expert: set the run key "
            f"expert to an expert.npz (train one with `ttt expert train {p.spec.robot}`)"
        )
    echo(f"  data: generating {p.what} into {d}")
    d.mkdir(parents=True, exist_ok=True)
    with bar(f"generate {p.name}", "episodes") as b:
        gen(p.name, episodes=p.episodes, seed=p.seed, directory=d, progress=b, expert=p.expert)
    return d


def _expertdigest(path: str) -> str:
    return NumpyExpert(load_actor(path)[0]).digest()


def load_data(plan: RunPlan, generate: bool, bar: BarFactory, echo: Echo):
    """Load the run's dataset; a corrupt copy in the cache (unreadable, or its checksum differs) is reported and
    generated again. Datasets outside the cache (data_dir, OGBench's directory) are the user's: an error."""
    p = plan.data
    try:
        return load(p.spec, p.directory)
    except TttError as e:
        if not (p.cached and generate):
            raise
        echo(f"  data: cached dataset is corrupt ({e}); generating it again")
    with bar(f"generate {p.name}", "episodes") as b:
        gen(p.name, episodes=p.episodes, seed=p.seed, directory=p.directory, progress=b, expert=p.expert, force=True)
    return load(p.spec, p.directory)


def ensure_checkpoint(plan: RunPlan, data, data_hash: str, train: bool, bar: BarFactory, echo: Echo) -> Checkpoint:
    """The plan's checkpoint: the one the run names (checked against the data), else the cache's, trained there
    first (or continued from a shorter one) when missing or short (and `train`)."""
    t, dataset = plan.train, plan.data.name
    out = checkpoint_dir(t, dataset, data_hash)
    if t.checkpoint is not None:
        if not (out / "meta.json").exists():
            raise TttError(
                f"checkpoint {out} (run {plan.name}) does not exist; `ttt pretrain --out {out}` produces one, or "
                "remove `checkpoint` to let the 'pretrain' stage train and cache it"
            )
        ck = open_checkpoint(out)
        ck.check_compatible(dataset, data.obs_dim, data.action_dim, str(out), data_hash)
        return ck
    cached = _cached_checkpoint(out, echo)
    if cached is not None and cached.meta.get("step", 0) >= t.steps:
        echo(f"  pretrain: from the cache ({out})")
        return cached
    meta = None if cached is None else cached.meta
    if not train:
        raise TttError(
            f"no checkpoint of {t.agent} on {dataset} ({t.profile} profile, {t.steps} steps, "
            f"{t.seeds} seeds) in {out}; the 'pretrain' stage produces it (add pretrain to --stages)"
        )
    if meta is None:
        shorter = shorter_checkpoint(t, out, data_hash)
        if shorter is not None:
            echo(f"  pretrain: continuing the {shorter.meta['step']}-step checkpoint {shorter.path}")
            copy_checkpoint(shorter, out)
            meta = shorter.meta
    at = 0 if meta is None else meta.get("step", 0)
    resuming = f" (resuming at step {at})" if at else ""
    echo(f"  pretrain: {t.agent} on {dataset}, {t.seeds} seeds x {t.steps} steps -> {out}{resuming}")
    with bar(f"pretrain {t.agent}", "steps") as b:
        result = pretrain(t.agent, dataset, data, t.cfg, t.sampler, t.steps, t.seeds, out, chunk_steps=t.chunk,
                          seed=t.seed, profile=t.profile,
                          progress=lambda done, total, means, rate: b(done, total))  # fmt: skip
    return open_checkpoint(out, result.meta)


def check_checkpoint_data(plan: RunPlan) -> str:
    """For a row that names a checkpoint: its metadata readable, and the dataset it would evaluate on, when it exists
    already, the copy the checkpoint was trained on (same content hash), checked without generating or training
    anything (`ttt run --dry-run`, and `ttt run` before its first stage); a mismatch is one line naming both. Returns
    what was checked, for the dry run's listing ('' for a row without a checkpoint)."""
    t, p = plan.train, plan.data
    if t.checkpoint is None:
        return ""
    try:
        meta = read_meta(t.checkpoint)
    except TttError as e:
        raise TttError(f"run {plan.name}: {e}") from None
    where = f"run {plan.name}: checkpoint {t.checkpoint}"
    spec = p.spec
    check_compatible(meta, p.name, spec.ob_dim, spec.action_dim, where)
    if not ((p.directory / f"{p.name}.npz").exists() and (p.directory / f"{p.name}-val.npz").exists()):
        return (f"checkpoint {t.checkpoint} (step {meta.get('step')}); its data {p.what} is not in {p.directory} yet: "
                "the data stage generates it, then its content is checked against the checkpoint's")  # fmt: skip
    from ttt.checkpoint import dataset_hash

    data = load(p.name, p.directory)
    try:
        check_compatible(meta, p.name, data.obs_dim, data.action_dim, where, dataset_hash(data))
    except TttError as e:
        raise TttError(f"{e} (the data in {p.directory}; set data_dir, data_episodes and data_seed to the copy it "
                       "was trained on)") from None  # fmt: skip
    return f"checkpoint {t.checkpoint} (step {meta.get('step')}) matches its data in {p.directory}"


def _cached_checkpoint(out: Path, echo: Echo) -> Checkpoint | None:
    """The cache's checkpoint in `out`, read and verified; None when there is none. A corrupt one is reported and
    removed (the cache's own: it is trained again)."""
    if not (out / "meta.json").exists():
        return None
    try:
        return open_checkpoint(out)
    except TttError as e:  # a cache entry: report it and train it again
        echo(f"  pretrain: cached checkpoint is corrupt ({str(e).split('; delete')[0]}); training it again")
        shutil.rmtree(out)
        return None


def shorter_checkpoint(train: TrainPlan, out: Path, data_hash: str) -> Checkpoint | None:
    """The cached checkpoint of the same training run stopped earlier (most steps below `steps`), if any.

    Pre-training's step `t` draws from `fold_in(seed_key, t)` and nothing depends on the total number of steps, so
    continuing a 10k-step checkpoint to 30k gives the 30k-step checkpoint itself (tested bit for bit): a learning
    curve pays for its longest point only. Same agent, configs, sampler, seeds, seed and data content are required.
    """
    want = dumps(dict(agent=train.agent, config=config_dict(train.cfg), sampler=config_dict(train.sampler),
                      seeds=train.seeds, seed=train.seed, dataset_hash=data_hash), sort_keys=True)  # fmt: skip
    best = None
    for d in out.parent.glob(f"{train.agent}-*"):
        if d == out or not (d / "meta.json").exists():
            continue
        try:
            m = read_meta(d)
            have = dumps({k: m[k] for k in ("agent", "config", "sampler", "seeds", "seed", "dataset_hash")},
                         sort_keys=True)  # fmt: skip
            best_step = 0 if best is None else best.meta["step"]
            if have != want or not best_step < m.get("step", 0) < train.steps:
                continue
            best = open_checkpoint(d, m)
        except (TttError, KeyError):
            continue  # unreadable or corrupt: not a starting point
    return best


def copy_checkpoint(src: Checkpoint, out: Path) -> None:
    """Copy a checkpoint's state file, then its meta.json (written last: a copy cut short is no checkpoint)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(src.path / src.meta["state_file"], "rb") as f_in:
        atomic_write_bytes(out / src.meta["state_file"], lambda f: shutil.copyfileobj(f_in, f))
    atomic_write_text(out / "meta.json", read_text(src.path / "meta.json", MAX_JSON_BYTES, "checkpoint metadata"))


class EnvCache:
    """In-program envs built once per (env_id, backend), so every evaluation reuses the compiled programs."""

    def __init__(self):
        self._envs: dict = {}

    def get(self, env_id: str, backend: str):
        if (env_id, backend) not in self._envs:
            self._envs[(env_id, backend)] = make_env(env_id, backend=backend)
        return self._envs[(env_id, backend)]


def _reused_record(plan: RunPlan, key: str, out: Path, shared: Path | None, echo: Echo) -> dict | None:
    """A finished record of the same evaluation (same content key) under another row name of this output, or in
    the shared cache `shared` (another pipeline's), with this row's run settings; None if there is none."""
    places = sorted((out / "evals").glob(f"*-{key}.json")) + ([shared / f"{key}.json"] if shared else [])
    for p in places:
        rec = read_json(p) if p.exists() else None
        if isinstance(rec, dict) and rec.get("eval_key") == key and "mean" in rec:
            echo(f"  reused: {plan.name} is the same evaluation as {rec['run']['name']} ({p})")
            root = plan.train.root.parent  # the cache's checkpoint folder
            ck = checkpoint_ref(rec["checkpoint"], root) if isinstance(rec.get("checkpoint"), str) else None
            return {"schema": SCHEMA, **rec, "checkpoint": ck, "run": portable_run(plan.run, root.parent)}
    return None


def evaluate_run(
    plan: RunPlan,
    checkpoint: Checkpoint,
    data,
    out: Path,
    bar: BarFactory,
    echo: Echo,
    envs: EnvCache,
    shared: Path | None = None,
    cached: list[str] | None = None,
    say_result: bool = True,
) -> dict:
    """Evaluate one run, task by task, resuming from finished tasks; returns its record (also saved).

    A record of the same evaluation (same content key) already in `out` under another name, or in `shared` (a
    cache directory of records that every pipeline writes to), is reused instead of evaluated again; the row's name
    is then appended to `cached`. Two processes on one evaluation (`ttt run --only` twice into one --out) do not
    both compute it: the second waits for the first, then finds its record. `say_result=False`: no result line
    for a fresh evaluation (a caller that prints its own summary)."""
    key = eval_key(plan, checkpoint.path, dict(checkpoint.meta))
    with locked(out / "evals" / f".{key}.lock", f"the evaluation of {plan.name}"):
        return _evaluate_run(plan, checkpoint, data, out, bar, echo, envs, key, shared, cached, say_result)


def _evaluate_run(plan: RunPlan, checkpoint: Checkpoint, data, out: Path, bar: BarFactory, echo: Echo,
                  envs: EnvCache, key: str, shared: Path | None, cached: list[str] | None,
                  say_result: bool) -> dict:  # fmt: skip
    """`evaluate_run`'s work, under its lock."""
    ev, meta = plan.eval, dict(checkpoint.meta)
    record_path = out / "evals" / f"{file_name(plan.name, 'run name')}-{key}.json"
    if record_path.exists():
        record = read_json(record_path)
        if isinstance(record, dict) and record.get("eval_key") == key and "mean" in record:
            echo(f"  eval: {plan.name}: from the cache ({record_path.name}: same checkpoint and settings), success "
                 f"{record['mean']:.3f}")  # fmt: skip
            if cached is not None:
                cached.append(plan.name)
            return record
        echo(f"  eval: {record_path} is corrupt (truncated or not a record); evaluating {plan.name} again")
        record_path.unlink()
    reused = _reused_record(plan, key, out, shared, echo)
    if reused is not None:
        atomic_write_text(record_path, dumps(reused))
        if cached is not None:
            cached.append(plan.name)
        return reused
    setup, driver = _checked_setup(plan, checkpoint), ev.driver
    states = checkpoint.load()
    partial = out / "evals" / f".partial-{key}"
    reuse = states.opt_state if setup.ttt is not None and setup.ttt.finetune.reuse_opt_state else None
    per_task = []
    per_chunk = meta["seeds"] * ev.episodes
    total = per_chunk * len(ev.tasks)
    finished = {}  # tasks a previous process finished: read first, so the bar's rate counts only new work
    for t in ev.tasks:
        f = partial / f"task{t}.npz"
        if f.exists():
            finished[t] = load_npz(f)
            if finished[t] is None:
                echo(f"  eval: {f} is corrupt (unreadable); evaluating task {t} again")
                f.unlink()
    kept = sum(part is not None for part in finished.values())
    done = per_chunk * kept
    if kept:  # said at once: a log shows nothing else until the next task finishes, minutes later
        echo(f"  eval: {plan.name} resuming at {done} of {total} episodes ({kept} of {len(ev.tasks)} tasks kept in "
             f"{partial})")
    note = ttgs_cost_note(setup, total - done)
    if note:
        echo(f"  {note}")
    with bar(f"eval {plan.name}", "episodes") as b:
        b(done, total)
        for t in ev.tasks:
            f = partial / f"task{t}.npz"
            part = finished.get(t)
            if part is None:
                res = evaluate(
                    setup,
                    states.agent,
                    data,
                    opt_states=reuse,
                    episodes=ev.episodes,
                    tasks=(t,),
                    seed=ev.seed,
                    driver=driver,
                    batch_size=ev.chunk,
                    progress=lambda d, n, base=done: b(base + d, total),
                    env=envs.get(setup.spec.env_id, setup.backend) if driver == "compiled" else None,
                )
                arrays = _task_arrays(res, setup.spec.is_maze)
                atomic_save_npz(f, arrays, compress=False)
                fig = out / "figures" / f"{file_name(plan.name, 'run name')}.npz"
                wanted = t == ev.tasks[0] or not all(fig.with_suffix(f".{o}.npz").exists()
                                                     for o in ("success", "failure"))  # fmt: skip
                if ev.figure and wanted and setup.ttt is not None and "xy" in arrays:
                    save_selection_figure(ev, setup, states.agent, data, res, fig, task=t)
                part = load_npz(f)
                done += per_chunk
                b(done, total)
            per_task.append(part)
    cat = lambda k: np.concatenate([p[k] for p in per_task], axis=1)  # noqa: E731  (seeds, tasks, episodes, ...)
    success = cat("success")
    record = _record(plan, checkpoint, setup, key, per_task, cat)
    if "xy" in per_task[0]:
        trajectories = dict(xy=cat("xy"), start=cat("start_xy"), goal=cat("goal_xy"), success=success,
                            steps=cat("steps"))  # fmt: skip
        if all("final_obs" in p for p in per_task):  # parts written before it was kept have none
            trajectories["final_obs"] = cat("final_obs")
        path = out / "trajectories" / f"{file_name(plan.name, 'run name')}.npz"
        atomic_save_npz(path, trajectories, compress=False)
    atomic_write_text(record_path, dumps(record))
    if shared is not None:
        atomic_write_text(shared / f"{key}.json", dumps(record))
    spread = " (one seed: no s.e.)" if record["se"] is None else f" +- {record['se']:.3f}"
    if say_result:
        echo(f"  eval: {plan.name}: success {record['mean']:.3f}{spread} "
             f"({record['seeds']} seeds, {record['n_episodes']} episodes, {record['wall_s']:.0f} s)")  # fmt: skip
    return record


def _record(plan: RunPlan, checkpoint: Checkpoint, setup, key: str, per_task: list[dict], cat) -> dict:
    """A row's record from its tasks' parts (`cat(name)`: the parts' arrays joined over tasks): what ran, on what,
    the per-seed rates, their mean and standard error (`ttt.stats.mean_se`), and every episode's success, steps and
    round metrics."""
    run, ev, meta = dict(plan.run), plan.eval, dict(checkpoint.meta)
    success = cat("success")
    rates = success.mean(axis=(1, 2))
    compute = _compute(per_task, ev.tasks)
    return dict(
        schema=SCHEMA,  # ttt.pipeline.records: no machine's paths
        run=portable_run(run, plan.train.root.parent.parent),
        checkpoint=checkpoint_ref(checkpoint.path, plan.train.root.parent),  # the cache key, not this machine's path
        checkpoint_step=meta["step"],
        # the state's sha256 and the training data's digest: the same configuration pre-trained on another machine can
        # differ (XLA's CPU code depends on the CPU), so rows compare as paired only on the same digests (ttt.stats)
        checkpoint_sha256=checkpoint.digest,
        dataset_hash=meta.get("dataset_hash"),
        profile=meta.get("profile"),
        rule_used=None if setup.ttt is None else setup.ttt.select.rule_used,
        ttgs_path=None if setup.ttgs is None else setup.ttgs.path,  # what follows a path past max_hops
        driver=ev.driver,
        device=compute["device"] if isinstance(compute, dict) else None,
        compute=compute,  # the CPUs and XLA flags too: CPU records reproduce bit for bit only on equal ones
        eval_key=key,
        written=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),  # which of two records is newer (no file times)
        seeds=int(success.shape[0]),
        n_episodes=int(success.size),
        per_seed=rates.tolist(),
        mean=float(rates.mean()),
        se=mean_se(rates)[1] if len(rates) > 1 else None,  # JSON has no NaN: one seed, no s.e.
        per_task=success.mean(axis=(0, 2)).tolist(),
        success=success.astype(int).tolist(),
        steps=cat("steps").tolist(),
        wall_s=float(sum(float(p["wall_s"]) for p in per_task)),
        rounds={k[6:]: nan_to_none(cat(k)) for k in per_task[0] if k.startswith("round_")},
    )


def _task_arrays(res, is_maze: bool) -> dict:
    """One task's part: success, steps, the wall time and the compute that ran it, the round metrics, and on a maze
    the trajectories for plots (xy, float16) and each episode's last observation."""
    arrays = dict(success=res.success, steps=res.steps, wall_s=np.float64(res.wall_s),
                  compute=np.asarray(json.dumps(compute_info(), sort_keys=True)))  # who ran this task
    arrays.update({f"round_{k}": v for k, v in (res.rounds or {}).items()})
    if is_maze:
        arrays["xy"] = res.observations[..., :2].astype(np.float16)
        arrays["final_obs"] = res.observations[..., -1, :]
        arrays["start_xy"] = res.starts[..., :2]
        arrays["goal_xy"] = res.goals[..., :2]
    return arrays


def _compute_of(part: dict) -> dict | None:
    """A part's compute info (a JSON string it keeps), read with bounded nesting; None when absent or unreadable."""
    if "compute" not in part:
        return None
    try:
        return loads_json(str(part["compute"]), "compute")
    except TttError:
        return None


def _compute(parts: list[dict], tasks) -> dict | list:
    """What computed an evaluation (`ttt.checkpoint.compute_info`): one dict where every task's part says the same,
    else each task's (None for a part written before parts recorded it: a run resumed across machines or core
    counts says so instead of claiming one)."""
    each = [_compute_of(p) for p in parts]
    if all(c is not None and c == each[0] for c in each):
        return each[0]
    return [dict(task=int(t), compute=c) for t, c in zip(tasks, each, strict=True)]

def _checked_setup(plan: RunPlan, checkpoint: Checkpoint):
    """The plan's `EvalSetup`, made with the plan's backbone and configs: the checkpoint's must be the same (a
    checkpoint the run names was read when the plan was made; one replaced since then is refused, not evaluated with
    the wrong networks)."""
    t = plan.train
    if (checkpoint.backbone, checkpoint.cfg, checkpoint.sampler) != (t.backbone, t.cfg, t.sampler):
        raise TttError(f"run {plan.name}: checkpoint {checkpoint.path} holds a {checkpoint.backbone.name} agent of "
                       f"another config than the run was planned with (it changed since); run the pipeline again")
    return plan.eval.setup


