"""The plan of one pipeline run: a run's keys (one row of `ttt.pipeline.config`, a flat dict) resolved ONCE into a
typed, immutable `RunPlan`, checked when it is made, which every stage then consumes:

    run (dict) --plan_run--> RunPlan(data: DataPlan, train: TrainPlan, eval: EvalPlan)
        ensure_data(plan)                          -> the dataset's directory
        load_data(plan)                            -> the Dataset
        ensure_checkpoint(plan, data, data_hash)   -> the `ttt.checkpoint.Checkpoint` (read and verified once)
        evaluate_run(plan, checkpoint, data)       -> the record (results.json's row)

A plan holds resolved values, not names: the dataset's `DatasetSpec`, the `Backbone` record and its configs, the
validated `EvalSetup` (made once, by `ttt.setups.make_setup`, which checks every evaluation setting) and the driver.
What a plan cannot know before the stages run is the dataset's content hash and the checkpoint's content: the
checkpoint key and the evaluation key are functions of the plan and those (`ttt.pipeline.keys`). `plan_run` makes
every check that needs no data or training (what `ttt run --dry-run` checks, and `ttt run` before the first stage).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ttt.agents.common import Backbone
from ttt.data.generate import generation_bytes
from ttt.data.sampler import SamplerConfig
from ttt.data.specs import DatasetSpec, get_spec
from ttt.envs import resolve_driver
from ttt.envs.gym import max_episode_steps
from ttt.episode import Transforms
from ttt.errors import TttError
from ttt.evaluation import EvalSetup, check_eval_memory
from ttt.pipeline.config import Pipeline, effective_rule
from ttt.pipeline.keys import cache_root, data_dir, eval_settings
from ttt.pipeline.settings import relevance_everywhere, select_random_rank
from ttt.presets import agent_configs, get_profile
from ttt.settings import setup_names
from ttt.setups import make_setup
from ttt.storage import check_memory


@dataclasses.dataclass(frozen=True)
class DataPlan:
    """Stage 1, the dataset: which one, how many episodes of which seed, and where it lives."""

    spec: DatasetSpec
    episodes: int  # training episodes (the run's data_episodes, else OGBench's full size)
    seed: int
    directory: Path  # the run's data_dir, OGBench's directory at full size, else the cache's
    cached: bool  # it lives in the cache: a corrupt copy is generated again (else it is the user's: reported)
    expert: str | None  # antmaze / humanoidmaze: the expert that generates it

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def what(self) -> str:
        return f"{self.name} ({self.episodes} episodes, seed {self.seed})"


@dataclasses.dataclass(frozen=True)
class TrainPlan:
    """Stage 2, pre-training: the agent, its backbone record and resolved configs, the steps and seeds."""

    agent: str
    backbone: Backbone
    profile: str
    cfg: Any  # the backbone's Config (profile, preset and the run's agent_config applied)
    sampler: SamplerConfig
    steps: int  # the run's steps, else the profile's
    seeds: int
    seed: int
    chunk: int  # steps per compiled chunk / checkpoint
    checkpoint: Path | None  # a checkpoint the run names (the user's); None: the cache's, keyed by content
    root: Path  # where the cache keeps checkpoints of this dataset: ROOT/AGENT-PROFILE-<checkpoint key>


@dataclasses.dataclass(frozen=True)
class EvalPlan:
    """Stage 3, evaluation: the variant, its validated `EvalSetup`, and the episodes."""

    variant: str
    setup: EvalSetup  # made once by `ttt.setups.make_setup` from the train plan's backbone and configs
    driver: str  # 'compiled' or 'host' (the run's 'auto' resolved)
    episodes: int  # per task and seed
    tasks: tuple[int, ...]
    seed: int
    chunk: int  # episodes per compiled call
    figure: bool  # save the data selected during one episode
    key: Mapping[str, Any]  # the settings the evaluation's content key depends on (`keys.eval_settings`)


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """One run of a pipeline, resolved: its name, the row it came from (kept in its record) and its three stages."""

    name: str
    run: Mapping[str, Any]
    data: DataPlan
    train: TrainPlan
    eval: EvalPlan


def plan_run(run: dict, cache: str | Path | None = None, *, where: str | None = None, label=None) -> RunPlan:
    """Resolve a run (a row of a loaded pipeline) into its `RunPlan`, making every check that needs no data or
    training: the backbone config overrides (keys, types, ranges), sizes the machine's memory cannot hold, and every
    evaluation setting (`make_setup`'s checks: the period K against the episode length, the need for a value
    function, fine-tuning's settings, ...). `cache`: the cache directory (default: `cache_root()`)."""
    where = f"run {run['name']}"
    cache = cache_root(cache)
    spec = get_spec(run["dataset"])
    train = _train_plan(run, spec, cache, where)
    max_steps = max_episode_steps(spec.env_id)
    data = _data_plan(run, spec, cache, where)
    evaluation = _eval_plan(run, spec, train, max_steps, where, label)
    return RunPlan(run["name"], MappingProxyType(dict(run)), data, train, evaluation)


def plan_pipeline(pipe: Pipeline, cache: str | Path | None = None) -> tuple[RunPlan, ...]:
    """The plan of every run of `pipe`, in order (`plan_run`)."""
    return tuple(plan_run(run, cache) for run in pipe.runs)


def validate_run(run: dict) -> None:
    """Every check of a run that needs no data or training (`plan_run`'s); `ttt run --dry-run` runs it on every run."""
    plan_run(run)


def _train_plan(run: dict, spec: DatasetSpec, cache: Path, where: str) -> TrainPlan:
    checkpoint = None if run["checkpoint"] is None else Path(run["checkpoint"]).expanduser()
    if checkpoint is not None:  # the configs are the checkpoint's (an imported one has no preset or profile)
        from ttt.checkpoint import backbone_config, meta_backbone, read_meta, sampler_config

        try:
            meta = read_meta(checkpoint)
            backbone = meta_backbone(meta)
            cfg, sampler = backbone_config(meta, backbone), sampler_config(meta)
        except TttError as e:
            raise TttError(f"{where}: checkpoint: {e}") from None
        return TrainPlan(meta["agent"], backbone, str(meta.get("profile") or run["profile"]), cfg, sampler,
                         meta.get("step", 0), meta["seeds"], run["train_seed"], run["train_chunk"], checkpoint,
                         cache / "ckpt" / spec.name)  # fmt: skip
    try:
        backbone, cfg, sampler = agent_configs(run["agent"], spec, run["profile"], dict(run["agent_config"]))
    except TttError as e:
        raise TttError(f"{where}: agent_config: {e}") from None
    steps = get_profile(run["profile"]).steps if run["steps"] is None else run["steps"]
    return TrainPlan(run["agent"], backbone, run["profile"], cfg, sampler, steps, run["seeds"],
                     run["train_seed"], run["train_chunk"], checkpoint, cache / "ckpt" / spec.name)  # fmt: skip


def _data_plan(run: dict, spec: DatasetSpec, cache: Path, where: str) -> DataPlan:
    if run["data_episodes"] is not None:
        check_memory(generation_bytes(spec, run["data_episodes"]), f"{where}: data_episodes = {run['data_episodes']}",
                     f"ask for fewer (OGBench's size: {spec.episodes})")  # fmt: skip
    episodes = spec.episodes if run["data_episodes"] is None else run["data_episodes"]
    cached = run["data_dir"] is None and run["data_episodes"] is not None
    return DataPlan(spec, episodes, run["data_seed"], data_dir(run, cache), cached, run["expert"])


def _eval_plan(run: dict, spec: DatasetSpec, train: TrainPlan, max_steps: int, where: str, label=None) -> EvalPlan:
    n = run["seeds"] * len(run["tasks"]) * run["episodes"]
    check_memory(eval_bytes_of(n, max_steps, spec), f"{where}: episodes = {run['episodes']} ({n} episodes with "
                 "every seed and task)", "ask for fewer episodes")  # fmt: skip
    settings: dict[str, Any] = dict(backend=run["backend"], transforms=Transforms())
    if run["variant"] not in ("base", "ttgs"):
        settings.update(_ttt_settings(run))
    if run["variant"] in ("ttgs", "ttt+ttgs"):  # graph search's settings, checked against the backbone
        settings["ttgs"] = dict(run["ttgs"])
    try:  # the evaluation's setup, made and checked once (every setting's type and range, against the backbone and
        # the episode length), and the memory of one compiled call (fine-tuning batches, TTGS graphs)
        setup = make_setup(run["variant"], train.backbone, train.cfg, train.sampler, spec, max_steps,
                           label=label or str, **settings)  # fmt: skip
        check_eval_memory(setup, n, run["chunk"])
        say = {} if label is None else dict(say=lambda name, value: f"{label(name)} {value}")
        driver = resolve_driver(run["driver"], run["backend"], spec.env_id, **say)
    except TttError as e:
        raise TttError(f"{where}: {e}") from None
    key = MappingProxyType(eval_settings(run, spec.env_id))
    return EvalPlan(run["variant"], setup, driver, run["episodes"], tuple(run["tasks"]),
                    run["eval_seed"], run["chunk"], run["figure"], key)  # fmt: skip


def eval_bytes_of(n: int, max_steps: int, spec: DatasetSpec) -> int:
    """The host memory the results of `n` episodes take (`ttt.evaluation.eval_bytes`), before any setup exists."""
    return 2 * n * max_steps * spec.ob_dim * 4


def _ttt_settings(run: dict) -> dict[str, Any]:
    """`make_setup`'s keywords of a TTT row; the selection controls (`selection`) as q and transforms."""
    transforms = Transforms()
    if run["selection"] in ("optimal", "random"):
        transforms = dataclasses.replace(transforms, relevance=relevance_everywhere)
    if run["selection"] == "random-rank":
        transforms = dataclasses.replace(transforms, select=select_random_rank)
    settings = {k: run[k] for k in setup_names()}  # every GC-TTT setting the declaration gives make_setup
    settings.update(q=1.0 if run["selection"] in ("relevant", "random") else run["q"], rule=effective_rule(run))
    return dict(settings, bucket="auto" if run["bucket"] is None else run["bucket"] or None, transforms=transforms)
