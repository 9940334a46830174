"""From a checkpoint to an evaluation: `make_setup` builds a variant's `EvalSetup` from plain settings, each checked
against its valid range, and `load_run` loads a checkpoint with its dataset and environment in one call.

    setup, agents, data, env = ttt.load_run("runs/gcbc", data_dir="data", variant="ttt", K=100, N=50)
    result = ttt.evaluate(setup, agents, data, episodes=10, tasks=(1, 2), env=env)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ttt.episode import Transforms, TTTConfig
from ttt.errors import TttError
from ttt.evaluate import EvalSetup
from ttt.finetune import FinetuneConfig, finetune_backbone_config
from ttt.select import SelectConfig

VARIANTS = ("base", "ttt", "ttt-mc")  # base policy; GC-TTT ranking by the critic; GC-TTT without a critic


def make_setup(
    variant: str,
    backbone: str,
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
    label: Callable[[str], str] = str,
) -> EvalSetup:
    """The `EvalSetup` of one variant (`VARIANTS`) of a `backbone` with config `cfg`.

    **Arguments** (the defaults are `ttt eval`'s):
    - `variant`: 'base' (no TTT: the settings below are ignored), 'ttt' (GC-TTT, the backbone's critic ranks the
      data) or 'ttt-mc' (GC-TTT without a critic);
    - `K` steps per round, `N` fine-tuning steps per round at learning rate `lr` and batch `batch` (None: the
      pre-training batch), `q` the fraction of relevant sub-trajectories kept, `eps` the relevance radius (None:
      the environment's goal threshold), `h_min`, `mix`, `rule`, `critic`, `n_episodes`, `slack`, `once`,
      `reset_after_horizon`, `reuse_adam`: as `ttt eval --help` describes them (docs/algorithm.md);
    - `ft_train`: the networks fine-tuning moves, 'all' or 'actor' (the policy only); `ft_alpha`: the backbone's BC
      weight alpha during fine-tuning (None: the checkpoint's);
    - `transforms`: the selection's pieces (`ttt.episode.Transforms`, None: the defaults), to swap in your own;
    - `label(name)`: how error messages name a setting (the command line passes its option names).

    **Returns** the `EvalSetup`. A setting out of range raises `TttError` naming it, the value and the valid range.
    """
    transforms = Transforms() if transforms is None else transforms
    if variant not in VARIANTS:
        raise TttError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    if variant == "base":
        return EvalSetup(backbone, cfg, sampler, spec, None, max_steps, backend, transforms)
    from ttt.agents import get_backbone

    if not 1 <= K <= max_steps:
        raise TttError(f"{label('K')} must be in [1, {max_steps}] (the episode length of {spec.env_id}), got {K}")
    if N < 0:
        raise TttError(f"{label('N')} (fine-tuning steps per round) must be >= 0, got {N}")
    if not 0 < q <= 1:
        raise TttError(f"{label('q')} (fraction of relevant sub-trajectories kept) must be in (0, 1], got {q}")
    if eps is not None and not eps > 0:
        raise TttError(f"{label('eps')} (relevance radius) must be > 0, got {eps}")
    if not lr > 0:
        raise TttError(f"{label('lr')} must be > 0, got {lr}")
    if not 0 <= mix <= 1:
        raise TttError(f"{label('mix')} must be in [0, 1], got {mix}")
    if h_min < 1:
        raise TttError(f"{label('h_min')} must be >= 1, got {h_min}")
    if batch is not None and batch < 1:
        raise TttError(f"{label('batch')} must be >= 1, got {batch}")
    if n_episodes < 1:
        raise TttError(f"{label('n_episodes')} must be >= 1, got {n_episodes}")
    if slack < 0:
        raise TttError(f"{label('slack')} must be >= 0, got {slack}")
    if rule == "episodes" and variant != "ttt":
        rule = None  # the critic rule applies to variant ttt; ttt-mc keeps its default critic-free rule
    if rule == "mc-episodes" and variant != "ttt-mc":
        rule = None
    try:
        ttt = TTTConfig(
            K=max_steps if once else K,
            select=SelectConfig(q=q, eps_rel=eps, h_min=h_min, mode="critic" if variant == "ttt" else "mc", mix=mix,
                                rule=rule, n_episodes=n_episodes, slack=slack),
            finetune=FinetuneConfig(steps=N, lr=lr, batch_size=batch, reuse_opt_state=reuse_adam, train=ft_train,
                                    alpha=ft_alpha),
            critic=critic if variant == "ttt" else "learned",
            reset_after_horizon=reset_after_horizon,
        )  # fmt: skip
        finetune_backbone_config(backbone, cfg, ttt.finetune)
    except ValueError as e:
        raise TttError(str(e)) from None
    if variant == "ttt" and not get_backbone(backbone).has_value(cfg):
        raise TttError(f"variant ttt needs a value function, which this {backbone} agent lacks; use ttt-mc")
    return EvalSetup(backbone, cfg, sampler, spec, ttt, max_steps, backend, transforms)


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
    """
    from ttt.data.files import load
    from ttt.data.specs import get_spec
    from ttt.envs import has_jax_env, make_env
    from ttt.envs.gym import max_episode_steps
    from ttt.pretrain import backbone_config, check_compatible, dataset_hash, load_checkpoint, read_meta, sampler_config

    meta = read_meta(checkpoint)
    dataset = meta["dataset"] if dataset is None else dataset
    spec = get_spec(dataset)
    check_compatible(meta, dataset, spec.ob_dim, spec.action_dim, str(checkpoint))
    cfg, sampler = backbone_config(meta), sampler_config(meta)
    max_steps = max_episode_steps(spec.env_id)
    setup = make_setup(variant, meta["backbone"], cfg, sampler, spec, max_steps, backend=backend, transforms=transforms,
                       **settings)  # fmt: skip
    data = load(dataset, data_dir)
    check_compatible(meta, dataset, data.obs_dim, data.action_dim, str(checkpoint), dataset_hash(data))
    states, _ = load_checkpoint(checkpoint, meta)
    env = make_env(spec.env_id, backend=backend) if has_jax_env(spec.env_id) else None
    return setup, states.agent, data, env
