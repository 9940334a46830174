"""Named agents and training profiles: which backbone, with which OGBench hyper-parameters, on which dataset.

Agents (the names `ttt pretrain --agent` takes):

- `gcbc`: GC-BC, with a GCIVL-style value trained beside the actor for GC-TTT's selection ("GC-BC + TTT
  with critic"); the actor never sees it, so base and critic-free runs use the same checkpoint.
- `gciql`: GC-IQL with DDPG+BC policy extraction (alpha: pointmaze 0.003, antmaze 0.3, humanoidmaze 0.1, cube 1.0).
- `gciql-awr`: GC-IQL with AWR policy extraction (alpha 10).
- `saw`: SAW (policy bootstrapping from subgoal-conditioned policies; humanoidmaze subgoal_steps 100).
- `qrl`: QRL (IQE quasimetric; DDPG+BC alpha pointmaze 0.0003, humanoidmaze 0.001, cube 0.3).

On the giant mazes and on every humanoid maze every agent with a discount trains at 0.995, as OGBench's tuned commands
do (`GIANT_DISCOUNT`, `LONG_HORIZON_FAMILIES`).
Goal sampling follows each OGBench agent's defaults; on stitch datasets OGBench's tuned commands set the actor
goals to half trajectory, half random for every agent but GC-BC (`impls/hyperparameters.sh`).

Profiles:

- `paper`: OGBench defaults: 512x3 MLPs, batch 1024, 1,000,000 steps (for a GPU).
- `cpu`: 256x2 MLPs, batch 256, 10,000 steps, QRL latent 128 (instead of 512): what fits a 2-core CPU, where
  one seed-vmapped update of 3 seeds takes about 20 ms (GC-BC) to 100 ms (SAW); see benchmarks/studies/rows.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ttt.agents import get_backbone
from ttt.agents.common import Backbone
from ttt.data.sampler import GoalMix, SamplerConfig
from ttt.data.specs import DatasetSpec
from ttt.errors import TttError


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    hidden_dims: tuple[int, ...]
    batch_size: int
    steps: int
    description: str
    backbone_overrides: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()

    def overrides_for(self, backbone: str) -> dict[str, Any]:
        return dict(dict(self.backbone_overrides).get(backbone, ()))


PROFILES: dict[str, Profile] = {
    "paper": Profile("paper", (512, 512, 512), 1024, 1_000_000, "OGBench defaults: 512x3 MLPs, batch 1024, 1M steps"),
    "cpu": Profile(
        "cpu",
        (256, 256),
        256,
        10_000,
        "256x2 MLPs, batch 256, 10k steps, QRL latent 128 (fits a 2-core CPU)",
        backbone_overrides=(("qrl", (("latent_dim", 128),)),),
    ),
}


@dataclasses.dataclass(frozen=True)
class AgentPreset:
    name: str
    backbone: str
    overrides: tuple[tuple[str, Any], ...] = ()  # Config fields fixed by the preset
    value_mix: GoalMix = GoalMix(0.2, 0.5, 0.3, True)
    stitch_actor_mix: bool = True  # OGBench's tuned stitch commands: actor goals 0.5 trajectory / 0.5 random
    gc_negative: bool = True


AGENTS: dict[str, AgentPreset] = {
    "gcbc": AgentPreset("gcbc", "gcbc", (("with_critic", True),), stitch_actor_mix=False),
    "gciql": AgentPreset("gciql", "gciql", (("actor_loss", "ddpgbc"),)),
    "gciql-awr": AgentPreset("gciql-awr", "gciql", (("actor_loss", "awr"), ("alpha", 10.0))),
    "saw": AgentPreset("saw", "saw"),
    "qrl": AgentPreset("qrl", "qrl", value_mix=GoalMix(0.0, 0.0, 1.0, True), gc_negative=False),
}

# Per-environment-family hyper-parameters of OGBench's tuned commands (and SAW's paper for saw).
FAMILY_OVERRIDES: dict[tuple[str, str], dict[str, Any]] = {
    ("gciql", "pointmaze"): {"alpha": 0.003},
    ("gciql", "cube"): {"alpha": 1.0},
    ("qrl", "pointmaze"): {"alpha": 0.0003},
    ("qrl", "cube"): {"alpha": 0.3},
    ("saw", "cube"): {"expectile": 0.9, "subgoal_steps": 10, "kl_alpha": 0.3},
    # humanoidmaze (medium, large, giant alike). GC-IQL (DDPG+BC) alpha 0.1 and QRL alpha 0.001: OGBench
    # impls/hyperparameters.sh, "humanoidmaze-*-{navigate,stitch}-v0 (GCIQL)" / "(QRL)" lines (`--agent.alpha=0.1`,
    # `--agent.alpha=0.001`); the GC-TTT authors' humanoidmaze sweep pre-trains GC-IQL with the same alpha 0.1
    # (github.com/antoniomari/meta-gc-rl, grids/humanoidmaze.yaml).
    ("gciql", "humanoidmaze"): {"alpha": 0.1},
    ("qrl", "humanoidmaze"): {"alpha": 0.001},
    # SAW subgoal_steps 100: SAW's commands (humanoidmaze-*-navigate-v0: `--agent.discount=0.995
    # --agent.subgoal_steps=100`, the "SAW commands" of meta-gc-rl's hyperparameters.sh) and the GC-TTT authors' SAW
    # sweep (meta-gc-rl grids/saw.yaml, humanoidmaze-medium-{navigate,stitch}-v0: expectile 0.7, kl_alpha 3.0, discount
    # 0.995, subgoal_steps 100; expectile and kl_alpha are saw.Config's defaults). The discount: the rule below.
    ("saw", "humanoidmaze"): {"subgoal_steps": 100},
}

# OGBench's tuned commands train every value-based agent on the giant mazes with discount 0.995 (GCIVL, GCIQL, QRL,
# CRL, HIQL; TTGS's commands and SAW's paper too); GC-BC's actor has no discount, its critic is GCIVL's.
GIANT_DISCOUNT = 0.995
# ... and on every humanoid maze (medium, large, giant; `--agent.discount=0.995` on each humanoidmaze GCIVL, GCIQL,
# QRL, CRL and HIQL line of OGBench's impls/hyperparameters.sh; SAW's humanoidmaze commands and the GC-TTT authors'
# GC-IQL and SAW humanoidmaze sweeps too). GC-BC's critic follows GCIVL's 0.995; the GC-TTT authors' own GC-BC sweep
# (meta-gc-rl grids/humanoidmaze.yaml, the `bc` rows) kept a GC-IQL critic at its default 0.99 instead: set
# `agent_config = { discount = 0.99 }` on a gcbc row for a critic at that discount.
LONG_HORIZON_FAMILIES = ("humanoidmaze",)


def get_profile(name: str) -> Profile:
    if name not in PROFILES:
        raise TttError(f"unknown profile '{name}'; valid: {', '.join(PROFILES)}")
    return PROFILES[name]


def get_agent(name: str) -> AgentPreset:
    if name not in AGENTS:
        raise TttError(f"unknown agent '{name}'; valid: {', '.join(AGENTS)}")
    return AGENTS[name]


def agent_backbone(agent: str) -> Backbone:
    """The `Backbone` record of an agent preset (the one place a preset's backbone name is looked up)."""
    return get_backbone(get_agent(agent).backbone)


# Ranges of backbone config fields (by name, over every backbone); fields not listed only have their type checked.
_RANGES: dict[str, tuple[Any, str]] = {
    "lr": (lambda x: x > 0, "> 0"),
    "batch_size": (lambda x: x >= 1, ">= 1"),
    "discount": (lambda x: 0 < x < 1, "in (0, 1)"),
    "tau": (lambda x: 0 < x <= 1, "in (0, 1]"),
    "expectile": (lambda x: 0 < x < 1, "in (0, 1)"),
    "eps": (lambda x: x > 0, "> 0"),
    "alpha": (lambda x: x >= 0, ">= 0"),
    "awr_alpha": (lambda x: x >= 0, ">= 0"),
    "kl_alpha": (lambda x: x >= 0, ">= 0"),
    "low_alpha": (lambda x: x >= 0, ">= 0"),
    "latent_dim": (lambda x: x >= 1, ">= 1"),
    "dim_per_component": (lambda x: x >= 1, ">= 1"),
    "rep_dim": (lambda x: x >= 1, ">= 1"),
    "subgoal_steps": (lambda x: x >= 1, ">= 1"),
}


def check_config_value(backbone: str, key: str, kind: str, v: Any) -> Any:
    """One backbone config override checked against its field's type (`float`, `int`, `bool`, `str`,
    `tuple[int, ...]`) and range; returns it normalised (ints as floats, lists as tuples), else a one-line
    TttError naming the key, what it got and what is valid."""
    import math

    def bad(valid: str):
        raise TttError(f"{backbone} config key {key} must be {valid}, got {v!r}")

    is_int = isinstance(v, int) and not isinstance(v, bool)
    if kind == "float":
        if not (is_int or isinstance(v, float)) or not math.isfinite(v):
            bad("a finite number")
        v = float(v)
    elif kind == "int":
        if not is_int:
            bad("an integer")
    elif kind == "bool":
        if not isinstance(v, bool):
            bad("true or false")
    elif kind == "str":
        if not isinstance(v, str):
            bad("a string")
    elif kind.startswith("tuple[int"):
        if (
            not isinstance(v, list | tuple)
            or not v
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in v)
        ):
            bad("a non-empty list of layer widths >= 1, e.g. [256, 256]")
        return tuple(v)
    if key in _RANGES and not _RANGES[key][0](v):
        bad(_RANGES[key][1])
    return v


def make_configs(agent: str, spec: DatasetSpec, profile: str, overrides: dict[str, Any] | None = None):
    """The backbone `Config` and `SamplerConfig` for an agent preset on a dataset under a profile."""
    return agent_configs(agent, spec, profile, overrides)[1:]


def agent_configs(agent: str, spec: DatasetSpec, profile: str, overrides: dict[str, Any] | None = None):
    """`(backbone, cfg, sampler)`: the agent preset's `Backbone` record (looked up once), its `Config` and its
    `SamplerConfig` on a dataset under a profile (`overrides`: config fields, each checked)."""
    preset, prof, backbone = get_agent(agent), get_profile(profile), agent_backbone(agent)
    fields = {f.name for f in dataclasses.fields(backbone.Config)}
    values: dict[str, Any] = {"batch_size": prof.batch_size}
    for k in ("actor_hidden_dims", "value_hidden_dims"):
        if k in fields:
            values[k] = prof.hidden_dims
    values.update(prof.overrides_for(preset.backbone))
    values.update(dict(preset.overrides))
    if preset.name != "gciql-awr":
        values.update(FAMILY_OVERRIDES.get((preset.backbone, spec.family), {}))
    if "discount" in fields and (spec.family in LONG_HORIZON_FAMILIES or (spec.is_maze and spec.maze_type == "giant")):
        values["discount"] = GIANT_DISCOUNT
    values.update(overrides or {})
    unknown = sorted(set(values) - fields)
    if unknown:
        raise TttError(
            f"unknown {preset.backbone} config key(s) {', '.join(unknown)}; valid: {', '.join(sorted(fields))}"
        )
    types = {f.name: str(f.type) for f in dataclasses.fields(backbone.Config)}
    for k, v in (overrides or {}).items():
        values[k] = check_config_value(preset.backbone, k, types[k], v)
    try:
        cfg = backbone.Config(**values)
    except (TypeError, ValueError) as e:
        raise TttError(f"{preset.backbone} config: {e}") from None
    actor_mix = GoalMix(0.0, 1.0, 0.0, False)
    if spec.kind == "stitch" and preset.stitch_actor_mix:
        actor_mix = GoalMix(0.0, 0.5, 0.5, False)
    sampler = SamplerConfig(
        batch_size=cfg.batch_size,
        discount=getattr(cfg, "discount", 0.99),
        value=preset.value_mix,
        actor=actor_mix,
        gc_negative=preset.gc_negative,
    )
    return backbone, cfg, sampler
