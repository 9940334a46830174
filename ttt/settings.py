"""The one declaration of every setting of a run (docs/reference.md, "Pipelines"): `SETTINGS`, one `Setting` each
(kind, default, meaning, valid values, which variants read it, whether it enters an evaluation's content key, its
`ttt eval` option). Derived from it: the pipelines' run keys and TOML checks (`ttt.pipeline.config.RUN_KEYS`), the
options of `ttt eval` (`ttt.cli.common.setting_options`), the checks and defaults of `ttt.make_setup`
(`setup_settings`), the evaluation keys (`ttt.pipeline.keys`) and docs/reference.md's table (`markdown`).

Adding a setting is one `Setting` here, plus its use (where the evaluation reads it)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from ttt.errors import TttError

# base policy; GC-TTT ranking by the critic; GC-TTT without a critic; test-time graph search (no training); GC-TTT
# (critic) fine-tuned towards TTGS's subgoal each round
VARIANTS = ("base", "ttt", "ttt-mc", "ttgs", "ttt+ttgs")
TTT_VARIANTS = ("ttt", "ttt-mc", "ttt+ttgs")  # the variants that fine-tune (GC-TTT)
CRITIC_VARIANTS = ("ttt", "ttt+ttgs")  # GC-TTT ranking by the critic
GRAPH_VARIANTS = ("ttgs", "ttt+ttgs")  # test-time graph search
SELECTIONS = ("both", "relevant", "optimal", "random", "random-rank")
MAX_COUNT = 2**30  # the largest count (K, N, batch, h_min, ...) the compiled program's 32-bit integers hold safely


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting: its kind (`int`, `float`, `str`, `bool`, `list[int]`, `table`), default and meaning; `nullable`
    (null allowed), `choices` (a tuple, or a function returning one), `check` and `valid` (a range and its words);
    `what`: the short name range errors give in brackets, `note` what they add; `stage`: `row`, `data`, `train` or
    `eval`; `variants`: the variants that read it; `key`: in an evaluation's content key (`late`: only when not the
    default, added after records existed); `option`: its `ttt eval` option (None: `--name`, '' none); `setup`: a
    keyword of `ttt.make_setup`. (The names a registry declares, datasets, agents and profiles, are its choices:
    added by `ttt.pipeline.config.RUN_KEYS`, so this module imports nothing above it.)"""

    kind: str
    default: Any
    help: str
    nullable: bool = False
    choices: tuple | Callable[[], tuple] | None = None
    check: Callable[[Any], bool] | None = None
    valid: str = ""
    what: str = ""
    note: str = ""
    stage: str = "eval"
    variants: tuple[str, ...] = VARIANTS
    key: bool = False
    late: bool = False
    option: str | None = ""
    setup: bool = False

    def choice_list(self) -> tuple | None:
        return self.choices() if callable(self.choices) else self.choices


_pos = dict(check=lambda x: x >= 1, valid=">= 1")
_nonneg = dict(check=lambda x: x >= 0, valid=">= 0")
_fin_pos = dict(check=lambda x: x > 0, valid="a finite number > 0")
_fin_nonneg = dict(check=lambda x: x >= 0, valid="a finite number >= 0")
_unit = dict(check=lambda x: 0 <= x <= 1, valid="in [0, 1]")
_row, _data, _train = dict(stage="row"), dict(stage="data"), dict(stage="train")
_opt = dict(option=None)  # a `ttt eval` option named after the setting
_ttt = dict(variants=TTT_VARIANTS, key=True, option=None, setup=True)  # a GC-TTT setting of `make_setup`
_base = dict(key=True, option=None)  # what every evaluation, a base row's too, depends on

SETTINGS: dict[str, Setting] = {
    # What the row is.
    "name": Setting("str", None, "row name, unique in the pipeline (default: agent-variant-dataset)", True, **_row),
    "group": Setting("str", "main", "report section the row belongs to", **_row),
    "dataset": Setting("str", "pointmaze-medium-navigate-v0", "OGBench dataset (ttt eval: default the checkpoint's)",
                       stage="train", option=None),  # its choices: the datasets' registry (`ttt.data.specs`)
    "agent": Setting("str", "gcbc", "backbone preset", **_train),  # choices: the presets' registry
    "variant": Setting("str", "base", "base (no TTT), ttt (GC-TTT, critic returns), ttt-mc (no critic), ttgs "
                       "(test-time graph search), ttt+ttgs (ttt towards TTGS's subgoal)", choices=VARIANTS, **_row),
    "paper": Setting("float", None, "the paper's success rate for this row (shown beside ours)", True, **_row),
    "paper_se": Setting("float", None, "the paper's standard error for this row", True, **_row),
    "paper_ref": Setting("str", None, "where the paper's figure comes from (e.g. 'Table 1')", True, **_row),
    "paper_dataset": Setting("str", None, "the dataset the paper's figure is for: a row on another dataset shows none",
                             True, **_row),
    # Stage 1: data.
    "data_episodes": Setting("int", None, "training episodes to generate (null: OGBench's full size)", True, **_pos,
                             **_data),
    "data_seed": Setting("int", 0, "generation seed", **_nonneg, **_data),
    "data_dir": Setting("str", None, "dataset directory (null: OGBench's for full size, else the cache)", True,
                        stage="data", option="--dir"),
    "expert": Setting("str", None, "antmaze / humanoidmaze: the expert that generates the data (`ttt expert train "
                      "ROBOT`'s expert.npz)", True, **_data),
    # Stage 2: pre-training.
    "profile": Setting("str", "cpu", "network/batch/steps profile", **_train),  # choices: the presets' registry
    "steps": Setting("int", None, "pre-training steps (null: the profile's)", True, **_pos, **_train),
    "seeds": Setting("int", 3, "training seeds (one program trains all)", **_pos, **_train),
    "train_seed": Setting("int", 0, "root seed of pre-training", **_nonneg, **_train),
    "train_chunk": Setting("int", 1000, "pre-training steps per compiled chunk / checkpoint", **_pos, **_train),
    "agent_config": Setting("table", {}, "backbone config overrides, e.g. { actor_hidden_dims = [512, 512] }",
                            **_train),
    "checkpoint": Setting("str", None, "use this checkpoint, not a pre-trained one (null: the cache's); the row's "
                          "dataset, agent, profile, steps and seeds are the checkpoint's", True, **_train),
    # Stage 3: evaluation.
    "episodes": Setting("int", 10, "evaluation episodes per task and seed", **_pos, **_base),
    "tasks": Setting("list[int]", [1, 2, 3, 4, 5], "evaluation tasks", check=lambda t: all(1 <= x <= 5 for x in t)
                     and len(t) > 0 and len(set(t)) == len(t), valid="distinct task ids in 1..5", **_base),
    "eval_seed": Setting("int", 0, "evaluation seed (start/goal noise, TTT keys)", check=lambda x: 0 <= x < 2**63,
                         valid="in [0, 2^63)", key=True, option="--seed"),
    "K": Setting("int", 100, "TTT period: environment steps per round", valid="in [1, the episode length]", **_ttt),
    "N": Setting("int", 100, "fine-tuning steps per round", **_pos, what="fine-tuning steps per round",
                 note="for no fine-tuning evaluate variant 'base'", **_ttt),
    "lr": Setting("float", 3e-4, "fine-tuning learning rate", **_fin_pos, **_ttt),
    "q": Setting("float", 0.05, "fraction of relevant sub-trajectories kept", check=lambda x: 0 < x <= 1,
                 valid="in (0, 1]", what="fraction of relevant sub-trajectories kept", **_ttt),
    "eps": Setting("float", None, "relevance radius (null: the environment's goal threshold)", True, **_fin_pos,
                   what="relevance radius", **_ttt),
    "h_min": Setting("int", 10, "shortest sub-trajectory with a critic", **_pos, **_ttt),
    "H": Setting("int", None, "fixed return horizon in rows (null: dynamic, the paper's)", True,
                 check=lambda x: x >= 2, valid=">= 2 rows", what="fixed return horizon", **_ttt),
    "mix": Setting("float", 0.0, "fraction of TTT batches drawn uniformly from the dataset", **_unit, **_ttt),
    "noise_alpha": Setting("float", 0.0, "value-noise scale alpha (returns += N(0, (alpha mean|G|)^2))",
                           **_fin_nonneg, **_ttt),
    "relevance": Setting("str", "distance", "relevance criterion", choices=("distance", "value"), **_ttt),
    "c_rel": Setting("float", None, "value-relevance threshold C (relevance = 'value')", True, **_ttt),
    "selection": Setting("str", "both", "selection: both, relevant only, optimal only, random, random-rank (relevant "
                         "rows ranked by random scores; rule paper)", choices=SELECTIONS, variants=TTT_VARIANTS,
                         key=True, option=None),
    "rule": Setting("str", None, "selection rule: paper (the paper's text), episodes (the published code's critic "
                    "rule), mc-episodes (its critic-free rule); null: episodes for variant ttt, paper for ttt-mc; "
                    "docs/algorithm.md", True, choices=("paper", "episodes", "mc-episodes"), **_ttt),
    "critic": Setting("str", "learned", "values for selection: learned, or oracle (maze shortest paths; point mazes)",
                      choices=("learned", "oracle"), **{**_ttt, "variants": CRITIC_VARIANTS}),
    "n_episodes": Setting("int", 10, "rule episodes: dataset episodes kept per round", **_pos, **_ttt),
    "slack": Setting("int", 10, "rule mc-episodes: rows kept past the goal row", **_nonneg, **_ttt),
    "once": Setting("bool", False, "fine-tune once, at the episode's start (K = the episode length)", **_ttt),
    "reset_after_horizon": Setting("bool", False, "act with the pre-trained agent once a round has run longer than its "
                                   "longest kept span", **_ttt),
    "reuse_adam": Setting("bool", False, "fine-tune from the pre-training Adam state (else a fresh one each round)",
                          **_ttt),
    "batch": Setting("int", None, "TTT batch size (null: the pre-training one)", True, **_pos, **_ttt),
    "ft_train": Setting("str", "all", "networks fine-tuning moves: all (value, critic, actor), actor (the policy only)",
                        choices=("all", "actor"), late=True, **_ttt),
    "ft_alpha": Setting("float", None, "the backbone's BC weight alpha during fine-tuning (null: the checkpoint's)",
                        True, **_fin_nonneg, late=True, **_ttt),
    "ttgs": Setting("table", {}, "variants ttgs and ttt+ttgs: test-time graph search settings (ttt.graph.TTGSConfig "
                    "fields), e.g. { n_vertices = 1000, tau = 24, threshold = 48 }; {}: the published defaults",
                    variants=GRAPH_VARIANTS, key=True, late=True, option=None),
    "driver": Setting("str", "auto", "episode driver: compiled (whole episodes as one program), host (OGBench's gym "
                      "env), auto", choices=("auto", "compiled", "host"), **_base),
    "backend": Setting("str", "mujoco", "physics of the in-program env: C MuJoCo via a callback (fast on CPU) or MJX "
                       "(pointmaze; for GPUs)", choices=("mujoco", "mjx"), **_base),
    "chunk": Setting("int", 25, "episodes per compiled program call, at most (calls split evenly)", **_pos, **_opt),
    "bucket": Setting("int", None, "episodes of a compiled call fine-tuned together each round (0: the whole call, for "
                      "a GPU; null: 1 on a CPU, 0 elsewhere); speed only, not in the evaluation's key", True,
                      check=lambda x: x >= 0, valid=">= 1 episodes, or 0 for the whole call at once", **_opt),
    "figure": Setting("bool", False, "save the data selected during one episode (the paper's Figure 2)"),
}  # fmt: skip


def eval_key_names() -> tuple[str, ...]:
    """The settings an evaluation's content key may depend on, in declaration order."""
    return tuple(k for k, s in SETTINGS.items() if s.key)


def setup_names() -> tuple[str, ...]:
    """The settings `ttt.make_setup` takes by keyword (besides `backend`, `transforms`, `ttgs`, `bucket`)."""
    return tuple(k for k, s in SETTINGS.items() if s.setup)


def show(v: Any) -> str:
    """A value as errors quote it (as Python writes it)."""
    return repr(v)


def check_range(name: str, value: Any, label: Callable[[str], str] = str) -> None:
    """Refuse a value of the setting's kind outside its valid range or choices: one line naming the setting (as
    `label` writes it), what is valid and what it got."""
    s = SETTINGS[name]
    if value is None and s.nullable:
        return
    choices = s.choice_list()
    if choices is not None and value not in choices:
        raise TttError(f"{label(name)} must be one of {', '.join(choices)}, got {show(value)}")
    if s.kind == "float" and not math.isfinite(value):
        raise TttError(f"{label(name)}{f' ({s.what})' if s.what else ''} must be {s.valid or 'a finite number'}, got "
                       f"{show(value)}")  # fmt: skip
    if s.check is not None and not s.check(value):
        raise TttError(f"{label(name)}{f' ({s.what})' if s.what else ''} must be {s.valid}, got {show(value)}"
                       f"{f'; {s.note}' if s.note else ''}")  # fmt: skip


def setup_settings(settings: Mapping[str, Any], label: Callable[[str], str] = str) -> dict[str, Any]:
    """`make_setup`'s keywords: every one of `setup_names()` (the declaration's default where not given), each as a
    plain Python value of its kind (NumPy and 0-d JAX numbers accepted) and checked against its range; an unknown
    name is refused, listing the valid ones."""
    unknown = sorted(set(settings) - set(setup_names()))
    if unknown:
        raise TttError(f"unknown setting(s) {', '.join(unknown)}; valid: {', '.join(setup_names())}")
    out = {}
    for name in setup_names():
        s = SETTINGS[name]
        value = settings.get(name, s.default)
        out[name] = value = _coerce(s, label(name), value)
        check_range(name, value, label)
    return out


def _coerce(s: Setting, name: str, value: Any) -> Any:
    """`value` as the Python value of the setting's kind; one line naming the setting when it is not one."""
    if value is None and s.nullable:
        return None
    if s.kind == "int":
        return as_int(name, value, s.nullable)
    if s.kind == "float":
        return as_float(name, value, s.nullable)
    if s.kind == "bool":
        import numpy as np

        if not isinstance(value, bool | np.bool_):
            raise TttError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
        return bool(value)
    if s.kind == "str" and not isinstance(value, str):
        raise TttError(f"{name} must be a string{' or None' if s.nullable else ''}, got {value!r}")
    return value


def as_int(name: str, value: Any, none: bool = False) -> int:
    """An integer of any kind (NumPy, 0-d arrays) as a Python int, at most `MAX_COUNT`; else one line."""
    v = integer(value)
    if v is None:
        r = real(value)
        hint = f"; write {int(r)}" if r is not None and math.isfinite(r) and r == int(r) else ""
        raise TttError(f"{name} must be an integer{' or None' if none else ''}{hint}, got {value!r} "
                       f"({type(value).__name__})")  # fmt: skip
    if abs(v) > MAX_COUNT:
        raise TttError(f"{name} = {v} is too large: at most {MAX_COUNT} (2^30; the compiled program counts in 32-bit "
                       "integers)")  # fmt: skip
    return v


def as_float(name: str, value: Any, none: bool = False) -> float:
    """A real number of any kind as a Python float; else one line (a string: a hint to write the number)."""
    v = real(value)
    if v is None:
        hint = ""
        if isinstance(value, str):
            try:
                hint = f"; write the number itself, {name}={float(value)!r}, not a string"
            except ValueError:
                pass
        raise TttError(f"{name} must be a number{' or None' if none else ''}, got {value!r} ({type(value).__name__})"
                       f"{hint}")  # fmt: skip
    return v


def integer(value: Any) -> int | None:
    """`value` as a Python int when it is an integer of any kind (int, a NumPy integer, a 0-d NumPy or JAX integer
    array), else None (a bool is not an integer here)."""
    import numpy as np

    if isinstance(value, bool | np.bool_):
        return None
    if isinstance(value, int | np.integer):
        return int(value)
    if _scalar(value) and np.issubdtype(np.dtype(value.dtype), np.integer):
        return int(value)
    return None


def real(value: Any) -> float | None:
    """`value` as a Python float when it is a real number of any kind (int, float, NumPy scalars, 0-d NumPy or JAX
    arrays of integers or floats), else None (a bool or a string is not a number here)."""
    import numpy as np

    if isinstance(value, bool | np.bool_):
        return None
    if isinstance(value, int | float | np.integer | np.floating):
        return float(value)
    if _scalar(value):
        kind = np.dtype(value.dtype)
        if np.issubdtype(kind, np.integer) or np.issubdtype(kind, np.floating):
            return float(value)
    return None


def _scalar(value: Any) -> bool:
    """A 0-d array with a concrete value (not a tracer)."""
    if not (hasattr(value, "dtype") and hasattr(value, "shape") and tuple(value.shape) == ()):
        return False
    import jax

    return not isinstance(value, jax.core.Tracer)


def markdown() -> str:
    """The settings as docs/reference.md's table (key, type, default, meaning, `ttt eval` option)."""
    lines = ["| key | type | default | meaning | `ttt eval` |", "|---|---|---|---|---|"]
    for name, s in SETTINGS.items():
        meaning = s.help.replace("|", "\\|")
        opt = option_name(name)
        lines.append(f"| `{name}` | {s.kind} | {json.dumps(s.default)} | {meaning} | {f'`{opt}`' if opt else ''} |")
    return "\n".join(lines)


def option_name(name: str) -> str:
    """A setting's `ttt eval` option ('' for none)."""
    s = SETTINGS[name]
    return "--" + name.replace("_", "-") if s.option is None else s.option
