"""Where a run's artifacts live, keyed by content (never by path), so that a changed setting rebuilds only what it
touches and a moved run directory keeps its evaluations.

- data: `data_dir` of the run, OGBench's directory at full size, else `CACHE/data/NAME-e<episodes>-s<seed>/`;
- pre-training: `CACHE/ckpt/DATASET/AGENT-PROFILE-<checkpoint_key>/`, the key over the agent, the resolved backbone
  and sampler configs (a `TrainPlan`'s), the dataset's content hash, steps, seeds and seed;
- evaluation: `OUT/evals/NAME-<eval_key>.json`, the key over the checkpoint's content (`checkpoint_identity`) and the
  settings the row depends on (a base row: `BASE_EVAL_KEYS` only).
"""

from __future__ import annotations

import os
from pathlib import Path

from ttt.checkpoint import config_dict
from ttt.data.files import default_cache, default_dir
from ttt.graph import TTGSConfig
from ttt.pipeline.config import EVAL_KEYS, LATE_EVAL_KEYS, RUN_KEYS, effective_rule
from ttt.pipeline.records import local_path, portable_path
from ttt.storage import digest, file_sha256


def cache_root(cache: str | os.PathLike | None = None) -> Path:
    return Path(cache).expanduser() if cache else default_cache()


def data_dir(run: dict, cache: Path) -> Path:
    """Where the run's dataset lives: `data_dir`, OGBench's directory at full size, else the cache."""
    if run["data_dir"] is not None:
        return Path(run["data_dir"]).expanduser()
    if run["data_episodes"] is None:
        return default_dir()
    return cache / "data" / f"{run['dataset']}-e{run['data_episodes']}-s{run['data_seed']}"


def checkpoint_key(train, dataset: str, data_hash: str) -> str:
    """The content key of pre-training `train` (a `ttt.pipeline.plan.TrainPlan`) on `dataset` of content
    `data_hash`."""
    return digest(
        dict(
            agent=train.agent,
            config=config_dict(train.cfg),
            sampler=config_dict(train.sampler),
            dataset=dataset,
            dataset_hash=data_hash,
            steps=train.steps,
            seeds=train.seeds,
            seed=train.seed,
        )
    )


def checkpoint_dir(train, dataset: str, data_hash: str) -> Path:
    """The checkpoint of `train` (a `TrainPlan`): the one the run names, else the cache's, by content key."""
    if train.checkpoint is not None:
        return train.checkpoint
    return train.root / f"{train.agent}-{train.profile}-{checkpoint_key(train, dataset, data_hash)}"


# all that a base row depends on (episodes, tasks, eval_seed, driver, backend): the declaration's settings that every
# variant reads
BASE_EVAL_KEYS = tuple(k for k in EVAL_KEYS if "base" in RUN_KEYS[k].variants)


def checkpoint_identity(ckpt: Path, meta: dict) -> dict:
    """What a checkpoint is, by content: the sha256 of its state file (not its path: a moved run directory keeps
    its evaluations), its step and the data it was trained on."""
    state = meta.get("state_sha256") or file_sha256(Path(ckpt) / meta["state_file"])
    return dict(state=state, step=meta["step"], dataset_hash=meta.get("dataset_hash"))


def checkpoint_ref(ckpt: str | os.PathLike, root: str | os.PathLike | None = None) -> str:
    """How a record names its checkpoint: `DATASET/AGENT-PROFILE-<checkpoint key>` for one in the cache's checkpoint
    folder `root` (default: `cache_root() / "ckpt"`; the same name on every machine, which `resolve_checkpoint` finds
    under this machine's cache), else the path the run named as `ttt.pipeline.records.portable_path` writes it (no
    machine's path). The content itself is the record's `checkpoint_sha256`."""
    path = Path(ckpt)
    root = Path(root) if root is not None else cache_root() / "ckpt"
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return portable_path(ckpt, root.parent)


def resolve_checkpoint(ref: str, cache: str | os.PathLike | None = None) -> Path:
    """The directory a record's `checkpoint` names: a cache key under this machine's cache (`TTT_CACHE`), else the
    path `checkpoint_ref` wrote (`ttt.pipeline.records.local_path`)."""
    path = local_path(ref, cache)
    if path.is_absolute() or path.exists():
        return path
    return cache_root(cache) / "ckpt" / ref


def eval_settings(run: dict, env_id: str) -> dict:
    """The settings a run's evaluation key depends on (a base row does not depend on the TTT settings; a `ttgs` row
    on the base settings and its `ttgs` table)."""
    keys = {"base": BASE_EVAL_KEYS, "ttgs": BASE_EVAL_KEYS + ("ttgs",)}.get(run["variant"], EVAL_KEYS)
    settings = {k: run[k] for k in keys if k not in LATE_EVAL_KEYS or run[k] != RUN_KEYS[k].default}
    if "rule" in settings:  # the rule in force, not `null`: a changed default is another evaluation
        settings["rule"] = effective_rule(run)
    if run["variant"] in ("ttgs", "ttt+ttgs"):
        # what follows a path's last held vertex, in force (`TTGSConfig.path`); the committed 'cut' rows made before
        # it entered the key have keys without it (and say `ttgs_path: "cut"`), so no current run reuses them
        settings["ttgs_path"] = (run["ttgs"] or {}).get("path", TTGSConfig.path)
    if not env_id.startswith("pointmaze"):
        # Antmaze and cube episodes are drawn from the evaluation keys on both drivers since the compiled ant and
        # cube (before: the gym env's seeded reset on the host driver): another set of episodes, another evaluation.
        settings["episodes_from"] = "keys"
    return settings


def record_ttgs_path(rec: dict) -> str | None:
    """What followed a long path's last held vertex in a record's graph search (`TTGSConfig.path`): its `ttgs_path`
    (every graph-search record of schema 2 has one); None for a row without graph search. A record of schema 1
    without it ran 'cut' (`benchmarks/migrations/records_schema2.py` writes that into it)."""
    if (rec.get("run") or {}).get("variant") not in ("ttgs", "ttt+ttgs"):
        return None
    return rec.get("ttgs_path") or "cut"


def eval_key(plan, ckpt: Path, meta: dict) -> str:
    """The evaluation's content key: the checkpoint's content (`ckpt`, whose metadata is `meta`) and the settings
    the run (a `ttt.pipeline.plan.RunPlan`) depends on."""
    ck = checkpoint_identity(ckpt, meta)
    return digest(dict(checkpoint=ck, variant=plan.eval.variant, dataset=plan.data.name, **plan.eval.key))
