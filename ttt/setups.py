"""From a checkpoint to an evaluation: `make_setup` builds a variant's `EvalSetup` from plain settings, each checked
against its valid range; `checkpoint_setup` is the one resolver from a checkpoint's metadata to its `EvalSetup` (used
by `load_run`, `ttt eval` and the pipeline's evaluation stage); `load_run` loads a checkpoint with its dataset and
environment in one call.

    import ttt

    setup, agents, data, env = ttt.load_run("runs/gcbc", data_dir="data", variant="ttt", K=100, N=50)
    result = ttt.evaluate(setup, agents, data, episodes=10, tasks=(1, 2), env=env)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from ttt.agents.common import Backbone
from ttt.checkpoint import Checkpoint, check_compatible, dataset_hash, open_checkpoint
from ttt.checks import check_transforms
from ttt.data.files import load
from ttt.data.specs import get_spec
from ttt.envs import has_jax_env, make_env
from ttt.envs.gym import max_episode_steps
from ttt.episode import Transforms, TTTConfig, check_value_function
from ttt.errors import TttError
from ttt.evaluation import EvalSetup
from ttt.finetune import FinetuneConfig, finetune_backbone_config
from ttt.graph import TTGSConfig, published_tau_threshold
from ttt.select import IGNORED_BY_RULE, SelectConfig
from ttt.settings import GRAPH_VARIANTS, VARIANTS, as_int, integer, real, setup_names, setup_settings


def default_bucket() -> int | None:
    """`make_setup`'s `bucket='auto'`: 1 (episodes fine-tune one after another) on a CPU, where one episode's update
    already fills the cores; None (a call's live episodes in one vmapped update) on a GPU or TPU, where one update
    leaves the device mostly idle (an H200 ran a paper-profile critic episode in 0.50 s instead of 0.97 s,
    docs/algorithm.md, "Where each default comes from")."""
    import jax

    return 1 if jax.default_backend() == "cpu" else None


def make_setup(
    variant: str,
    backbone: Backbone,
    cfg: Any,
    sampler,
    spec,
    max_steps: int,
    *,
    backend: str = "mujoco",
    transforms: Transforms | None = None,
    ttgs: TTGSConfig | dict | None = None,
    bucket: int | None | str = "auto",
    label: Callable[[str], str] = str,
    **settings,
) -> EvalSetup:
    """The `EvalSetup` of one variant (`VARIANTS`) of a `backbone` (a `ttt.agents.Backbone` record, e.g.
    `ttt.get_backbone("gcbc")` or a checkpoint's `open_checkpoint(dir).backbone`) with config `cfg`.

    **Arguments:**
    - `variant`: 'base' (no TTT: the settings below are ignored), 'ttt' (GC-TTT, the backbone's critic ranks the
      data), 'ttt-mc' (GC-TTT without a critic), 'ttgs' (test-time graph search) or 'ttt+ttgs' (variant 'ttt' whose
      selection and fine-tuning aim, each round, at TTGS's subgoal at the round's start);
    - `**settings`: GC-TTT's settings by name (`ttt.settings.setup_names()`: `K`, `N`, `lr`, `q`, `eps`, `h_min`,
      `H`, `mix`, `noise_alpha`, `relevance`, `c_rel`, `rule`, `critic`, `n_episodes`, `slack`, `once`,
      `reset_after_horizon`, `reuse_adam`, `batch`, `ft_train`, `ft_alpha`), each declared once in
      `ttt.settings.SETTINGS` with its default, meaning and valid range (docs/reference.md's settings table;
      docs/algorithm.md); Python, NumPy and 0-d JAX numbers alike;
    - `ttgs` (variants 'ttgs', 'ttt+ttgs'): test-time graph search's settings, a `ttt.graph.TTGSConfig` or a dict of
      its fields (None: the published defaults; `distance` defaults to 'value' where the backbone has a value
      function, else 'l2');
    - `bucket`: how many of a batch's live episodes fine-tune together each round (`TTTConfig.bucket`; 1 suits a
      CPU; None: the whole batch at once, which fills a GPU; 'auto', the default: `default_bucket()`); speed only;
    - `transforms`: the selection's pieces (`ttt.episode.Transforms`, None: the defaults), to swap in your own;
    - `label(name)`: how error messages name a setting (the command line passes its option names).

    **Returns** the `EvalSetup`. A setting out of range raises `TttError` naming it, the value and the valid range.
    """
    transforms = Transforms() if transforms is None else transforms
    s = setup_settings(settings, label)  # every setting of its kind and in its declared range, defaults filled in
    if variant not in VARIANTS:
        raise TttError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    if variant == "base":
        return EvalSetup(backbone, cfg, sampler, spec, None, max_steps, backend, transforms)
    graph = ttgs_config(backbone, cfg, ttgs, label, spec.name) if variant in GRAPH_VARIANTS else None
    if variant == "ttgs":
        return EvalSetup(backbone, cfg, sampler, spec, None, max_steps, backend, transforms, graph)
    variant = "ttt" if variant == "ttt+ttgs" else variant  # its GC-TTT part is variant ttt's
    bucket = _bucket(bucket, label)
    if not 1 <= s["K"] <= max_steps:
        raise TttError(f"{label('K')} must be in [1, {max_steps}] (the episode length of {spec.env_id}), got {s['K']}")
    if s["relevance"] == "value" and s["c_rel"] is None:
        raise TttError(f"{label('relevance')} 'value' needs {label('c_rel')} (the value threshold C, e.g. -18.0)")
    rule = s["rule"]
    if (rule == "episodes" and variant != "ttt") or (rule == "mc-episodes" and variant != "ttt-mc"):
        rule = None  # the critic rule applies to variant ttt, the critic-free one to ttt-mc: the variant's default
    mode = "fixed" if s["H"] is not None else ("critic" if variant == "ttt" else "mc")
    try:
        ttt = TTTConfig(
            K=max_steps if s["once"] else s["K"],
            select=SelectConfig(q=s["q"], eps_rel=s["eps"], h_min=s["h_min"], mode=mode, H=s["H"], mix=s["mix"],
                                noise_alpha=s["noise_alpha"], relevance=s["relevance"], c_rel=s["c_rel"], rule=rule,
                                n_episodes=s["n_episodes"], slack=s["slack"],
                                gamma=float(getattr(cfg, "discount", 0.99))),
            finetune=FinetuneConfig(steps=s["N"], lr=s["lr"], batch_size=s["batch"], reuse_opt_state=s["reuse_adam"],
                                    train=s["ft_train"], alpha=s["ft_alpha"]),
            critic=s["critic"] if variant == "ttt" else "learned",
            reset_after_horizon=s["reset_after_horizon"],
            bucket=bucket,
        )  # fmt: skip
        finetune_backbone_config(backbone, cfg, ttt.finetune)
    except ValueError as e:
        raise TttError(str(e)) from None
    check_transforms(transforms, ttt.select)  # the episode's own rules, checked now, before anything compiles
    check_value_function(backbone, cfg, ttt)
    return EvalSetup(backbone, cfg, sampler, spec, ttt, max_steps, backend, transforms, graph)


def _bucket(bucket: int | None | str, label: Callable[[str], str]) -> int | None:
    """`make_setup`'s `bucket`: 'auto' as `default_bucket()`; else None (the whole batch) or an int >= 1."""
    if bucket == "auto":
        return default_bucket()
    if bucket is not None:
        bucket = as_int(label("bucket"), bucket, none=True)
    if bucket is not None and bucket < 1:
        raise TttError(f"{label('bucket')} must be an int >= 1, None (the whole batch) or 'auto', got {bucket!r}")
    return bucket


def ttgs_config(
    backbone: Backbone,
    cfg: Any,
    ttgs: TTGSConfig | dict | None,
    label: Callable[[str], str] = str,
    dataset: str | None = None,
):
    """The checked `TTGSConfig` of `ttgs` (a config, taken as it is; or a dict of its fields, or None: the defaults)
    for a backbone on `dataset`: distance 'value' by default where it has a value function, else 'l2'; `tau` and
    `threshold` by default the published ones for the dataset (`ttt.graph.published_tau_threshold`); a bad field
    raises `TttError`."""
    has_value = backbone.has_value(cfg)
    if not isinstance(ttgs, TTGSConfig):
        fields = dict(ttgs or {})
        unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(TTGSConfig)})
        if unknown:
            raise TttError(f"{label('ttgs')}: unknown field(s) {', '.join(unknown)}; valid: "
                           f"{', '.join(f.name for f in dataclasses.fields(TTGSConfig))}")  # fmt: skip
        for k, v in fields.items():  # NumPy / 0-d JAX numbers as Python's (the config checks Python types)
            if integer(v) is not None and not isinstance(v, int):
                fields[k] = integer(v)
            elif real(v) is not None and not isinstance(v, int | float):
                fields[k] = real(v)
        fields.setdefault("distance", "value" if has_value else "l2")
        tau, threshold = published_tau_threshold(backbone.name, dataset)
        fields.setdefault("tau", tau)
        fields.setdefault("threshold", threshold)
        try:
            ttgs = TTGSConfig(**fields)
        except (TypeError, ValueError) as e:
            raise TttError(f"{label('ttgs')}: {e}") from None
    if ttgs.distance == "value" and not has_value:
        raise TttError(f"{label('ttgs')}: distance 'value' needs a value function, which this {backbone.name} "
                       "agent lacks; use distance 'l2'")  # fmt: skip
    return ttgs


def checkpoint_setup(
    checkpoint: Checkpoint,
    variant: str = "base",
    *,
    dataset: str | None = None,
    where: str | None = None,
    **settings,
) -> EvalSetup:
    """The `EvalSetup` of `variant` for a `Checkpoint` (`ttt.open_checkpoint`): its backbone record and configs as
    the checkpoint holds them, the dataset's spec and episode length, then `make_setup`. The resolver from a
    checkpoint to an evaluation for `load_run` and `ttt eval` (a pipeline row's setup is made once, in its plan).

    **Arguments:** `dataset`: evaluate on another dataset of the same sizes (default: the checkpoint's); `where`:
    how errors name the checkpoint (default: its dataset); `**settings`: `make_setup`'s keywords (K, N, ...,
    `backend`, `transforms`, `label`)."""
    dataset = checkpoint.dataset if dataset is None else dataset
    spec = get_spec(dataset)
    where = where or f"the checkpoint of {checkpoint.dataset}"
    checkpoint.check_compatible(dataset, spec.ob_dim, spec.action_dim, where)
    return make_setup(variant, checkpoint.backbone, checkpoint.cfg, checkpoint.sampler, spec,
                      max_episode_steps(spec.env_id), **settings)  # fmt: skip


def load_run(
    checkpoint: str | os.PathLike,
    data_dir: str | os.PathLike | None = None,
    *,
    dataset: str | None = None,
    variant: str = "base",
    backend: str = "mujoco",
    transforms: Transforms | None = None,
    **settings,
):
    """A checkpoint, ready to evaluate: `(setup, agents, data, env)`.

    **Arguments:**
    - `checkpoint`: a `ttt pretrain` checkpoint directory; `data_dir`: where its dataset lives (default:
      OGBench's directory); `dataset`: evaluate on another dataset of the same sizes (default: the checkpoint's);
    - `variant`, `backend`, `transforms` and `**settings` (K, N, lr, q, ...): as `make_setup` takes them.

    **Returns** `setup` (`EvalSetup`, its backbone and configs read from the checkpoint), `agents` (seed-stacked:
    every array has a leading seed axis), `data` (the `Dataset`, checked against the checkpoint's data hash) and
    `env` (the in-program `Env`, or None where the environment runs on the host driver). Then
    `ttt.evaluate(setup, agents, data, episodes=..., tasks=..., env=env)`.

    A setting that is not one of `make_setup`'s, or that the variant's selection rule does not read (`q` under
    rule 'episodes', ...: `ttt.select.IGNORED_BY_RULE`), raises `TttError` naming it and the valid ones.
    """
    _check_settings(settings)
    ck = open_checkpoint(checkpoint)
    meta = dict(ck.meta)
    setup = checkpoint_setup(ck, variant, dataset=dataset, where=str(checkpoint), backend=backend,
                             transforms=transforms, **settings)  # fmt: skip
    dataset, spec = setup.spec.name, setup.spec
    check_read_by_rule(setup, settings)
    from ttt.evaluation import check_eval_memory

    check_eval_memory(setup, 1)  # one episode's fine-tuning batches or TTGS graph, before loading anything
    if settings.get("rule") is not None and setup.ttt is not None and setup.ttt.select.rule_used != settings["rule"]:
        raise TttError(f"rule {settings['rule']!r} does not apply to variant {variant!r} (rule 'episodes' needs "
                       "variant 'ttt', a critic; 'mc-episodes' needs 'ttt-mc')")  # fmt: skip
    data, _ = checkpoint_data(meta, dataset, data_dir)
    check_compatible(meta, dataset, data.obs_dim, data.action_dim, str(checkpoint), dataset_hash(data))
    states = ck.load()
    env = make_env(spec.env_id, backend=backend) if has_jax_env(spec.env_id) else None
    return setup, states.agent, data, env


def checkpoint_data(meta: dict, dataset: str, data_dir: str | os.PathLike | None = None):
    """`(data, directory)`: the dataset a checkpoint (metadata `meta`) is evaluated on. From `data_dir` when given;
    else from OGBench's directory when it holds the copy the checkpoint was trained on (same content hash), else
    from the `ttt run` cache (`ttt.data.files.default_cache()`: a pipeline's checkpoint was trained on the cache's
    copy), else OGBench's directory's error (or copy, which `check_compatible` then names)."""
    from pathlib import Path

    from ttt.data.files import default_cache

    if data_dir is not None:
        return load(dataset, data_dir), Path(data_dir)
    try:
        data, error = load(dataset, None), None
        if dataset != meta["dataset"] or dataset_hash(data) == meta["dataset_hash"]:
            return data, None
    except TttError as e:
        data, error = None, e
    if dataset == meta["dataset"]:
        for d in sorted((default_cache() / "data").glob(f"{dataset}-e*-s*")):
            if not (d / f"{dataset}.npz").is_file():
                continue
            try:
                found = load(dataset, d)
            except TttError:
                continue  # a corrupt cache entry: not this checkpoint's data
            if dataset_hash(found) == meta["dataset_hash"]:
                return found, d
    if error is not None:
        raise error
    return data, None


def setting_names() -> tuple[str, ...]:
    """The evaluation settings `make_setup` (and `load_run`) take by keyword."""
    return ("backend", "transforms", "ttgs", "bucket", *setup_names())


def _check_settings(settings: dict) -> None:
    unknown = sorted(set(settings) - set(setting_names()))
    if unknown:
        raise TttError(f"load_run: unknown setting(s) {', '.join(unknown)}; valid: checkpoint, data_dir, dataset, "
                       f"variant, {', '.join(setting_names())}")  # fmt: skip


def check_read_by_rule(setup: EvalSetup, names, label: Callable[[str], str] = str) -> None:
    """Refuse settings in `names` that the setup's selection rule does not read (they would silently change
    nothing): `q` under rule 'episodes', `n_episodes` under 'paper', ... (`ttt.select.IGNORED_BY_RULE`)."""
    if setup.ttt is None:
        return
    rule = setup.ttt.select.rule_used
    ignored = [n for n in names if n in IGNORED_BY_RULE[rule]]
    if ignored:
        why = "" if setup.ttt.select.rule is not None else " (the default of this variant)"
        raise TttError(f"{', '.join(label(n) for n in ignored)}: rule {rule!r}{why} does not read "
                       f"{'it' if len(ignored) == 1 else 'them'}, so {'it' if len(ignored) == 1 else 'they'} would "
                       f"change nothing; leave {'it' if len(ignored) == 1 else 'them'} out or choose the rule that "
                       "reads it (rule='paper' or 'mc-episodes' read q; docs/algorithm.md)")  # fmt: skip
