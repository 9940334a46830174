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
import math
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

# base policy; GC-TTT ranking by the critic; GC-TTT without a critic; test-time graph search (no training); GC-TTT
# (critic) fine-tuned towards TTGS's subgoal each round
VARIANTS = ("base", "ttt", "ttt-mc", "ttgs", "ttt+ttgs")


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
    K: int = 100,
    N: int = 100,
    lr: float = 3e-4,
    q: float = 0.05,
    eps: float | None = None,
    h_min: int = 10,
    mix: float = 0.0,
    batch: int | None = None,
    rule: str | None = None,
    critic: str = "learned",
    n_episodes: int = 10,
    slack: int = 10,
    once: bool = False,
    reset_after_horizon: bool = False,
    reuse_adam: bool = False,
    ft_train: str = "all",
    ft_alpha: float | None = None,
    H: int | None = None,
    noise_alpha: float = 0.0,
    relevance: str = "distance",
    c_rel: float | None = None,
    ttgs: TTGSConfig | dict | None = None,
    bucket: int | None | str = "auto",
    label: Callable[[str], str] = str,
) -> EvalSetup:
    """The `EvalSetup` of one variant (`VARIANTS`) of a `backbone` (a `ttt.agents.Backbone` record, e.g.
    `ttt.get_backbone("gcbc")` or a checkpoint's `open_checkpoint(dir).backbone`) with config `cfg`.

    **Arguments** (the defaults are `ttt eval`'s):
    - `variant`: 'base' (no TTT: the settings below are ignored), 'ttt' (GC-TTT, the backbone's critic ranks the
      data) or 'ttt-mc' (GC-TTT without a critic);
    - `K` steps per round, `N` fine-tuning steps per round at learning rate `lr` and batch `batch` (None: the
      pre-training batch), `q` the fraction of relevant sub-trajectories kept, `eps` the relevance radius (None:
      the environment's goal threshold), `h_min`, `mix`, `rule`, `critic`, `n_episodes`, `slack`, `once`,
      `reset_after_horizon`, `reuse_adam`: as `ttt eval --help` describes them (docs/algorithm.md);
    - `ft_train`: the networks fine-tuning moves, 'all' or 'actor' (the policy only); `ft_alpha`: the backbone's BC
      weight alpha during fine-tuning (None: the checkpoint's);
    - `H` a fixed return horizon in rows (None: the dynamic one; a number makes the sub-trajectories fixed-length),
      `noise_alpha` the value-noise scale, `relevance` 'distance' or 'value' (`V(s | s_j) > c_rel`): the ablations
      of docs/algorithm.md (rule 'paper');
    - `ttgs` (variant 'ttgs'): test-time graph search's settings, a `ttt.graph.TTGSConfig` or a dict of its fields
      (None: the published defaults; `distance` defaults to 'value' where the backbone has a value function, else
      'l2'); the GC-TTT settings above are then ignored, as for 'base'; variant 'ttt+ttgs' takes both: variant
      'ttt' (the critic) whose selection and fine-tuning aim, each round, at TTGS's subgoal at the round's start;
    - `bucket`: how many of a batch's live episodes fine-tune together each round (`TTTConfig.bucket`; 1 suits a
      CPU; None: the whole batch at once, which fills a GPU; 'auto', the default: `default_bucket()`, 1 on a CPU
      and None elsewhere); speed only, the results do not depend on it beyond float rounding;
    - `transforms`: the selection's pieces (`ttt.episode.Transforms`, None: the defaults), to swap in your own;
    - `label(name)`: how error messages name a setting (the command line passes its option names).

    **Returns** the `EvalSetup`. A setting out of range raises `TttError` naming it, the value and the valid range.
    """
    transforms = Transforms() if transforms is None else transforms
    n = _Numbers(label)
    K, N, h_min, n_episodes, slack = (n.int(k, v) for k, v in
                                      (("K", K), ("N", N), ("h_min", h_min), ("n_episodes", n_episodes),
                                       ("slack", slack)))  # fmt: skip
    batch, H = n.int("batch", batch, none=True), n.int("H", H, none=True)
    lr, q, mix, noise_alpha = (n.float(k, v) for k, v in (("lr", lr), ("q", q), ("mix", mix),
                                                          ("noise_alpha", noise_alpha)))  # fmt: skip
    eps, ft_alpha, c_rel = (n.float(k, v, none=True) for k, v in (("eps", eps), ("ft_alpha", ft_alpha),
                                                                  ("c_rel", c_rel)))  # fmt: skip
    once, reset_after_horizon, reuse_adam = (n.bool(k, v) for k, v in (("once", once), ("reset_after_horizon",
                                             reset_after_horizon), ("reuse_adam", reuse_adam)))  # fmt: skip
    if bucket != "auto":
        bucket = n.int("bucket", bucket, none=True)
    if variant not in VARIANTS:
        raise TttError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    if variant == "base":
        return EvalSetup(backbone, cfg, sampler, spec, None, max_steps, backend, transforms)

    graph = ttgs_config(backbone, cfg, ttgs, label, spec.name) if variant in ("ttgs", "ttt+ttgs") else None
    if variant == "ttgs":
        return EvalSetup(backbone, cfg, sampler, spec, None, max_steps, backend, transforms, graph)
    variant = "ttt" if variant == "ttt+ttgs" else variant  # its GC-TTT part is variant ttt's

    if bucket == "auto":
        bucket = default_bucket()
    if bucket is not None and not (isinstance(bucket, int) and not isinstance(bucket, bool) and bucket >= 1):
        raise TttError(f"{label('bucket')} must be an int >= 1, None (the whole batch) or 'auto', got {bucket!r}")
    if not 1 <= K <= max_steps:
        raise TttError(f"{label('K')} must be in [1, {max_steps}] (the episode length of {spec.env_id}), got {K}")
    if N < 1:
        raise TttError(f"{label('N')} (fine-tuning steps per round) must be >= 1, got {N}; for no fine-tuning "
                       "evaluate variant 'base'")  # fmt: skip
    if not 0 < q <= 1:
        raise TttError(f"{label('q')} (fraction of relevant sub-trajectories kept) must be in (0, 1], got {q}")
    if eps is not None and not (eps > 0 and math.isfinite(eps)):
        raise TttError(f"{label('eps')} (relevance radius) must be a finite number > 0, got {eps}")
    if not (lr > 0 and math.isfinite(lr)):
        raise TttError(f"{label('lr')} must be a finite number > 0, got {lr}")
    if not 0 <= mix <= 1:
        raise TttError(f"{label('mix')} must be in [0, 1], got {mix}")
    if h_min < 1:
        raise TttError(f"{label('h_min')} must be >= 1, got {h_min}")
    if batch is not None and batch < 1:
        raise TttError(f"{label('batch')} must be >= 1, got {batch}")
    if n_episodes < 1:
        raise TttError(f"{label('n_episodes')} must be >= 1, got {n_episodes}")
    if ft_alpha is not None and not (math.isfinite(ft_alpha) and ft_alpha >= 0):
        raise TttError(f"{label('ft_alpha')} must be a finite number >= 0, got {ft_alpha}")
    if ft_train not in ("all", "actor"):
        raise TttError(f"{label('ft_train')} must be one of all, actor, got {ft_train!r}")
    if slack < 0:
        raise TttError(f"{label('slack')} must be >= 0, got {slack}")
    if H is not None and H < 2:
        raise TttError(f"{label('H')} (fixed return horizon) must be >= 2 rows, got {H}")
    if not (math.isfinite(noise_alpha) and noise_alpha >= 0):
        raise TttError(f"{label('noise_alpha')} must be a finite number >= 0, got {noise_alpha}")
    if relevance not in ("distance", "value"):
        raise TttError(f"{label('relevance')} must be one of distance, value, got {relevance!r}")
    if relevance == "value" and c_rel is None:
        raise TttError(f"{label('relevance')} 'value' needs {label('c_rel')} (the value threshold C, e.g. -18.0)")
    if rule == "episodes" and variant != "ttt":
        rule = None  # the critic rule applies to variant ttt; ttt-mc keeps its default critic-free rule
    if rule == "mc-episodes" and variant != "ttt-mc":
        rule = None
    mode = "fixed" if H is not None else ("critic" if variant == "ttt" else "mc")
    try:
        ttt = TTTConfig(
            K=max_steps if once else K,
            select=SelectConfig(q=q, eps_rel=eps, h_min=h_min, mode=mode, H=H, mix=mix, noise_alpha=noise_alpha,
                                relevance=relevance, c_rel=c_rel, rule=rule, n_episodes=n_episodes, slack=slack,
                                gamma=float(getattr(cfg, "discount", 0.99))),
            finetune=FinetuneConfig(steps=N, lr=lr, batch_size=batch, reuse_opt_state=reuse_adam, train=ft_train,
                                    alpha=ft_alpha),
            critic=critic if variant == "ttt" else "learned",
            reset_after_horizon=reset_after_horizon,
            bucket=bucket,
        )  # fmt: skip
        finetune_backbone_config(backbone, cfg, ttt.finetune)
    except ValueError as e:
        raise TttError(str(e)) from None

    check_transforms(transforms, ttt.select)  # the episode's own rules, checked now, before anything compiles
    check_value_function(backbone, cfg, ttt)
    return EvalSetup(backbone, cfg, sampler, spec, ttt, max_steps, backend, transforms, graph)


MAX_COUNT = 2**30  # the largest count (K, N, batch, h_min, ...) the compiled program's 32-bit integers hold safely


def _integer(value: Any) -> int | None:
    """`value` as a Python int when it is an integer of any kind (int, a NumPy integer, a 0-d NumPy or JAX integer
    array), else None (a bool is not an integer here)."""
    import numpy as np

    if isinstance(value, bool | np.bool_):
        return None
    if isinstance(value, int | np.integer):
        return int(value)
    if hasattr(value, "dtype") and hasattr(value, "shape") and tuple(value.shape) == () and not _traced(value):
        if np.issubdtype(np.dtype(value.dtype), np.integer):
            return int(value)
    return None


def _real(value: Any) -> float | None:
    """`value` as a Python float when it is a real number of any kind (int, float, NumPy scalars, 0-d NumPy or JAX
    arrays of integers or floats), else None (a bool or a string is not a number here)."""
    import numpy as np

    if isinstance(value, bool | np.bool_):
        return None
    if isinstance(value, int | float | np.integer | np.floating):
        return float(value)
    if hasattr(value, "dtype") and hasattr(value, "shape") and tuple(value.shape) == () and not _traced(value):
        kind = np.dtype(value.dtype)
        if np.issubdtype(kind, np.integer) or np.issubdtype(kind, np.floating):
            return float(value)
    return None


def _traced(value: Any) -> bool:
    import jax

    return isinstance(value, jax.core.Tracer)


class _Numbers:
    """`make_setup`'s settings as plain Python numbers: integers and reals of every kind accepted alike (NumPy
    scalars, 0-d JAX arrays), anything else (a string, a list, a bool for a number) refused with one line naming
    the setting, what it got and what is valid."""

    def __init__(self, label: Callable[[str], str]):
        self.label = label

    def int(self, name: str, value: Any, none: bool = False) -> int | None:
        if value is None and none:
            return None
        v = _integer(value)
        if v is None:
            real = _real(value)
            hint = f"; write {int(real)}" if real is not None and math.isfinite(real) and real == int(real) else ""
            raise TttError(f"{self.label(name)} must be an integer{' or None' if none else ''}{hint}, got "
                           f"{value!r} ({type(value).__name__})")  # fmt: skip
        if abs(v) > MAX_COUNT:
            raise TttError(f"{self.label(name)} = {v} is too large: at most {MAX_COUNT} (2^30; the compiled "
                           "program counts in 32-bit integers)")  # fmt: skip
        return v

    def float(self, name: str, value: Any, none: bool = False) -> float | None:
        if value is None and none:
            return None
        v = _real(value)
        if v is None:
            hint = ""
            if isinstance(value, str):
                try:
                    hint = f"; write the number itself, {name}={float(value)!r}, not a string"
                except ValueError:
                    pass
            raise TttError(f"{self.label(name)} must be a number{' or None' if none else ''}, got {value!r} "
                           f"({type(value).__name__}){hint}")  # fmt: skip
        return v

    def bool(self, name: str, value: Any) -> bool:
        import numpy as np

        if not isinstance(value, bool | np.bool_):
            raise TttError(f"{self.label(name)} must be True or False, got {value!r} ({type(value).__name__})")
        return bool(value)


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
            if _integer(v) is not None and not isinstance(v, int):
                fields[k] = _integer(v)
            elif _real(v) is not None and not isinstance(v, int | float):
                fields[k] = _real(v)
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
    import inspect

    kinds = inspect.signature(make_setup).parameters.values()
    return tuple(p.name for p in kinds if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in ("label",))


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
