"""From a run's keys to what is evaluated: `validate_run` (every check that needs no data or training, run before
the first stage and by `--dry-run`), `make_eval_setup` (the run's `EvalSetup`), and the selection controls that
pipelines name (`selection = "optimal"`, `"random"`, `"random-rank"`)."""

from __future__ import annotations

import dataclasses

from ttt.envs.gym import max_episode_steps
from ttt.errors import TttError
from ttt.pipeline.config import effective_rule
from ttt.pipeline.keys import train_configs


def relevance_everywhere(ctx):
    """Selection ablation 'optimal only' / 'random': every eligible row counts as relevant."""
    return ctx.tables.eligible


def select_random_rank(ctx):
    """Selection control 'random-rank': the same relevant rows and the same number kept, ranked by random scores
    instead of returns."""
    import jax

    from ttt.select import select

    k_score, k_sel = jax.random.split(ctx.key)
    tables = ctx.tables
    scores = jax.random.uniform(k_score, tables.returns.shape, tables.returns.dtype)
    return select(k_sel, dataclasses.replace(tables, returns=scores), ctx.relevant, ctx.cfg, ctx.params)


def make_eval_setup(run: dict, meta: dict, max_steps: int):
    """The `EvalSetup` of a run (None TTT config for variant 'base')."""
    from ttt.data.specs import get_spec
    from ttt.episode import Transforms, TTTConfig
    from ttt.evaluate import EvalSetup
    from ttt.finetune import FinetuneConfig, finetune_backbone_config
    from ttt.pretrain import backbone_config, sampler_config
    from ttt.select import SelectConfig

    spec = get_spec(run["dataset"])
    cfg, sampler = backbone_config(meta), sampler_config(meta)
    where = f"run {run['name']}"
    ttt, transforms = None, Transforms()
    if run["variant"] == "ttgs":
        from ttt.setups import ttgs_config

        ttgs = ttgs_config(meta["backbone"], cfg, run["ttgs"], lambda _: f"{where}: ttgs")
        return EvalSetup(meta["backbone"], cfg, sampler, spec, None, max_steps, run["backend"], transforms, ttgs)
    if run["variant"] != "base":
        from ttt.agents import get_backbone

        if not 1 <= run["K"] <= max_steps:
            raise TttError(
                f"{where}: K must be in [1, {max_steps}] (the episode length of {spec.env_id}), got {run['K']}"
            )
        critic = run["variant"] in ("ttt", "ttt+ttgs")
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
                                        reuse_opt_state=run["reuse_adam"], train=run["ft_train"],
                                        alpha=run["ft_alpha"]),
                critic=run["critic"],
                reset_after_horizon=run["reset_after_horizon"],
            )  # fmt: skip
            finetune_backbone_config(meta["backbone"], cfg, ttt.finetune)
        except ValueError as e:
            raise TttError(f"{where}: {e}") from None
    graph = None
    if run["variant"] == "ttt+ttgs":
        from ttt.setups import ttgs_config

        graph = ttgs_config(meta["backbone"], cfg, run["ttgs"], lambda _: f"{where}: ttgs")
    return EvalSetup(meta["backbone"], cfg, sampler, spec, ttt, max_steps, run["backend"], transforms, graph)


def validate_run(run: dict) -> None:
    """Everything about a run that can be checked before any data or training: the backbone config overrides
    (keys, types, ranges), and for TTT rows the period K against the episode length and the need for a value
    function. `ttt run --dry-run` runs it on every run, and `ttt run` before the first stage."""
    from ttt.agents import get_backbone
    from ttt.data.specs import get_spec
    from ttt.finetune import FinetuneConfig, finetune_backbone_config

    where = f"run {run['name']}"
    try:
        cfg, _ = train_configs(run)
    except TttError as e:
        raise TttError(f"{where}: agent_config: {e}") from None
    spec = get_spec(run["dataset"])
    max_steps = max_episode_steps(spec.env_id)
    _check_sizes(run, spec, max_steps, where)
    if run["variant"] == "base":
        return
    if run["variant"] == "ttgs":
        from ttt.setups import ttgs_config

        ttgs_config(get_agent_backbone(run["agent"]), cfg, run["ttgs"], lambda _: f"{where}: ttgs")
        return
    if not 1 <= run["K"] <= max_steps:
        raise TttError(f"{where}: K must be in [1, {max_steps}] (the episode length of {spec.env_id}), got {run['K']}")
    backbone = get_backbone(get_agent_backbone(run["agent"]))
    if run["variant"] == "ttt+ttgs":
        from ttt.setups import ttgs_config

        ttgs_config(backbone.name, cfg, run["ttgs"], lambda _: f"{where}: ttgs")
    if (run["variant"] in ("ttt", "ttt+ttgs") or run["relevance"] == "value") and not backbone.has_value(cfg):
        raise TttError(f"{where}: variant {run['variant']} needs a value function, which {run['agent']} lacks; use "
                       "variant ttt-mc with relevance 'distance'")  # fmt: skip
    try:  # the one check of ft_alpha against the backbone (fine-tuning's own)
        finetune_backbone_config(backbone.name, cfg, FinetuneConfig(alpha=run["ft_alpha"]))
    except ValueError:
        raise TttError(f"{where}: ft_alpha is the BC weight of a DDPG+BC or AWR actor loss; {run['agent']} has none "
                       "(valid for gciql, gciql-awr, qrl)") from None  # fmt: skip
    if run["batch"] is not None and run["batch"] < 1:
        raise TttError(f"{where}: batch must be >= 1, got {run['batch']}")


def _check_sizes(run: dict, spec, max_steps: int, where: str) -> None:
    """Sizes the machine's memory cannot hold (data_episodes, episodes x tasks x seeds), refused before any stage."""
    from ttt.data.generate import generation_bytes
    from ttt.storage import check_memory

    if run["data_episodes"] is not None:
        check_memory(generation_bytes(spec, run["data_episodes"]), f"{where}: data_episodes = {run['data_episodes']}",
                     f"ask for fewer (OGBench's size: {spec.episodes})")  # fmt: skip
    n = run["seeds"] * len(run["tasks"]) * run["episodes"]
    check_memory(2 * n * max_steps * spec.ob_dim * 4, f"{where}: episodes = {run['episodes']} ({n} episodes with "
                 "every seed and task)", "ask for fewer episodes")  # fmt: skip


def get_agent_backbone(agent: str) -> str:
    from ttt.presets import get_agent

    return get_agent(agent).backbone
