"""Where a run's artifacts live, keyed by content (never by path), so that a changed setting rebuilds only what it
touches and a moved run directory keeps its evaluations.

- data: `data_dir` of the run, OGBench's directory at full size, else `CACHE/data/NAME-e<episodes>-s<seed>/`;
- pre-training: `CACHE/ckpt/DATASET/AGENT-PROFILE-<checkpoint_key>/`, the key over the agent, the resolved backbone
  and sampler configs, the dataset's content hash, steps, seeds and seed;
- evaluation: `OUT/evals/NAME-<eval_key>.json`, the key over the checkpoint's content (`checkpoint_identity`) and the
  settings the row depends on (a base row: `BASE_EVAL_KEYS` only).
"""

from __future__ import annotations

import os
from pathlib import Path

from ttt.pipeline.config import EVAL_KEYS, LATE_EVAL_KEYS, RUN_KEYS, effective_rule
from ttt.storage import digest


def cache_root(cache: str | os.PathLike | None = None) -> Path:
    return Path(cache or os.environ.get("TTT_CACHE") or "~/.cache/ttt").expanduser()


def data_dir(run: dict, cache: Path) -> Path:
    """Where the run's dataset lives: `data_dir`, OGBench's directory at full size, else the cache."""
    from ttt.data.files import default_dir

    if run["data_dir"] is not None:
        return Path(run["data_dir"]).expanduser()
    if run["data_episodes"] is None:
        return default_dir()
    return cache / "data" / f"{run['dataset']}-e{run['data_episodes']}-s{run['data_seed']}"


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
    return digest(
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
    keys = {"base": BASE_EVAL_KEYS, "ttgs": BASE_EVAL_KEYS + ("ttgs",)}.get(run["variant"], EVAL_KEYS)
    settings = {k: run[k] for k in keys if k not in LATE_EVAL_KEYS or run[k] != RUN_KEYS[k].default}
    if "rule" in settings:  # the rule in force, not `null`: a changed default is another evaluation
        settings["rule"] = effective_rule(run)
    if not env_id(run).startswith("pointmaze"):
        # Antmaze and cube episodes are drawn from the evaluation keys on both drivers since the compiled ant and
        # cube (before: the gym env's seeded reset on the host driver): another set of episodes, another evaluation.
        settings["episodes_from"] = "keys"
    return digest(dict(checkpoint=ck, variant=run["variant"], dataset=run["dataset"], **settings))


def env_id(run: dict) -> str:
    from ttt.data.specs import get_spec

    return get_spec(run["dataset"]).env_id
