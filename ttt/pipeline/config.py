"""Declarative TOML pipelines: the schema of a run, loading, `--set` overrides and validation.

A pipeline file is::

    name = "quickstart"                 # optional; default: the file name
    description = "..."                 # optional
    [defaults]                          # run keys shared by every run (optional)
    dataset = "pointmaze-medium-navigate-v0"
    [[run]]                             # one evaluated row each: dataset x agent x variant x settings
    name = "gcbc-ttt"
    agent = "gcbc"
    variant = "ttt"
    grid = { N = [50, 100], lr = [3e-4, 3e-5] }   # optional: one run per combination, named name-N50-lr0.0003

Every run is resolved to a flat dict holding EVERY key of `RUN_KEYS` (defaults filled in), so the results say
exactly what ran. Unknown keys (in the file, a run, a grid, or `--set`) are errors that list the valid keys; wrong
types and out-of-range values name the key. `--set key=value` overrides the key in every run (after the file).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ttt.data.specs import SPECS
from ttt.errors import TttError
from ttt.presets import AGENTS, PROFILES
from ttt.safe_files import MAX_TOML_BYTES, TooDeep, loads_toml, read_text, show
from ttt.select import IGNORED_BY_RULE
from ttt.settings import CRITIC_VARIANTS, SETTINGS, Setting, check_range, eval_key_names, markdown
from ttt.storage import file_name

# A run's keys: the settings' one declaration (`ttt.settings`), with the choices their registries declare.
_REGISTRIES = {"dataset": lambda: tuple(SPECS), "agent": lambda: tuple(AGENTS), "profile": lambda: tuple(PROFILES)}
RUN_KEYS = {k: dataclasses.replace(s, choices=_REGISTRIES[k]) if k in _REGISTRIES else s for k, s in SETTINGS.items()}
Key = Setting

TOP_KEYS = ("name", "description", "defaults", "run")
EVAL_KEYS = eval_key_names()
# Evaluation keys added after records existed: they enter an evaluation's content key only when they differ from
# their default, so the records made before them keep their keys.
LATE_EVAL_KEYS = tuple(k for k, v in SETTINGS.items() if v.late)
TRAIN_KEYS = ("dataset", "agent", "profile", "steps", "seeds", "train_seed", "agent_config")


@dataclasses.dataclass(frozen=True)
class Pipeline:
    name: str
    description: str
    runs: tuple[dict, ...]
    source: str  # the file it came from


def keys_markdown() -> str:
    """The run keys as docs/reference.md's markdown table, from the declaration itself (`ttt.settings.markdown`)."""
    return markdown()


def _kind_ok(kind: str, v: Any) -> bool:
    if kind == "int":
        return isinstance(v, int) and not isinstance(v, bool)
    if kind == "float":
        return isinstance(v, int | float) and not isinstance(v, bool)
    if kind == "str":
        return isinstance(v, str)
    if kind == "bool":
        return isinstance(v, bool)
    if kind == "list[int]":
        return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
    if kind == "table":
        return isinstance(v, dict)
    raise AssertionError(kind)


_KIND_NAMES = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "true or false",
    "list[int]": "a list of integers",
    "table": "a table",
}


def _unknown(keys, valid, where: str) -> None:
    bad = sorted(set(keys) - set(valid))
    if bad:
        raise TttError(f"{where}: unknown key(s) {', '.join(bad)}; valid keys: {', '.join(valid)}")


def check_value(key: str, v: Any, where: str, label: Callable[[str], str] = str) -> Any:
    """Validate one run value (its kind here, its range by the declaration: `ttt.settings.check_range`); returns it
    normalised (ints as floats for float keys). `label(key)`: how the error names the key."""
    spec, name = RUN_KEYS[key], label(key)
    if v is None:
        if spec.nullable:
            return None
        raise TttError(f"{where}: {name} must be {_KIND_NAMES[spec.kind]} ({spec.help}), got null")
    if not _kind_ok(spec.kind, v):
        raise TttError(f"{where}: {name} must be {_KIND_NAMES[spec.kind]} ({spec.help}), got {json.dumps(v)}")
    if spec.kind == "float":
        v = float(v)
        if not math.isfinite(v):
            raise TttError(f"{where}: {name} must be a finite number ({spec.help}), got {v}")
    choices = spec.choice_list()
    if choices is not None and v not in choices:
        raise TttError(f"{where}: {name} = {json.dumps(v)} is not valid; valid: {', '.join(choices)}")
    try:
        check_range(key, v, label)
    except TttError as e:
        raise TttError(f"{where}: {e}") from None
    return v


def parse_sets(pairs: tuple[str, ...] | list[str]) -> dict:
    """`key=value` pairs; values parse as TOML values (numbers, strings, lists, tables, booleans), else as strings."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise TttError(f"--set expects key=value, got '{pair}'")
        k, v = (s.strip() for s in pair.split("=", 1))
        try:
            out[k] = loads_toml(f"v = {v}", f"--set {show(k)}")["v"]
        except TooDeep:  # (tomllib recurses: refused, not a RecursionError)
            raise
        except TttError:
            out[k] = v
        if v == "null":
            out[k] = None
    _unknown(out, RUN_KEYS, "--set")
    return out


def _toml_nulls(d: dict) -> dict:
    """TOML has no null: the string "null" stands for it in pipeline files."""
    return {k: (None if v == "null" else v) for k, v in d.items()}


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def expand_grid(run: dict, where: str) -> list[dict]:
    grid = run.pop("grid", None)
    if grid is None:
        return [run]
    if not isinstance(grid, dict) or not grid:
        raise TttError(f"{where}: grid must be a table of key = [values], got {json.dumps(grid)}")
    _unknown(grid, RUN_KEYS, f"{where} grid")
    for k, vs in grid.items():
        if not isinstance(vs, list) or not vs:
            raise TttError(f"{where}: grid.{k} must be a non-empty list of values, got {json.dumps(vs)}")
    keys = list(grid)
    out = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        r = dict(run, **dict(zip(keys, combo, strict=True)))
        suffix = "-".join(f"{k}{_fmt(v)}" for k, v in zip(keys, combo, strict=True))
        r["name"] = f"{run['name']}-{suffix}" if run.get("name") else None
        r["_grid"] = keys
        out.append(r)
    return out


def resolve_run(raw: dict, defaults: dict, sets: dict, where: str, label: Callable[[str], str] = str) -> dict:
    """Defaults <- file defaults <- the run <- --set, every value checked; the full flat dict of the run. `label`:
    how errors name a key (`ttt eval` names its options)."""
    merged = {k: v.default for k, v in RUN_KEYS.items()}
    merged.update(defaults)
    merged.update(raw)
    merged.update(sets)
    grid_keys = merged.pop("_grid", [])
    out = {}
    for k in RUN_KEYS:
        out[k] = check_value(k, merged[k], where, label)
    if out["checkpoint"] is not None:  # first: the name and every check below use the checkpoint's values
        # Every key the user wrote counts, [defaults] included: a value that the checkpoint contradicts is refused,
        # never silently replaced.
        _from_checkpoint(out, (set(raw) | set(defaults) | set(sets)) - {"_grid", "grid"}, where)
    if out["name"] is None:
        out["name"] = f"{out['agent']}-{out['variant']}-{out['dataset'].removesuffix('-v0')}"
        if grid_keys:
            out["name"] += "-" + "-".join(f"{k}{_fmt(out[k])}" for k in grid_keys)
    out["grid"] = list(grid_keys)
    file_name(out["name"], f"{where}: run name")  # it names the row's files (evals/NAME-KEY.json, ...)
    _check_combination(out, where)
    _check_read_by_rule(out, (set(raw) | set(defaults)) - set(sets) - {"_grid", "grid"}, set(raw), where)
    if out["variant"] not in ("base", "ttgs"):  # `--set` of a key this row's rule ignores leaves the row as it was
        for k in set(sets) & set(IGNORED_BY_RULE[effective_rule(out)]):
            out[k] = check_value(k, raw.get(k, defaults.get(k, RUN_KEYS[k].default)), where, label)
    return out


# The keys a checkpoint fixes, with how its metadata names them.
CHECKPOINT_KEYS = {"dataset": "dataset", "agent": "agent", "profile": "profile", "steps": "step", "seeds": "seeds"}


def _from_checkpoint(r: dict, stated: set, where: str) -> None:
    """A row that names a checkpoint evaluates that checkpoint: its dataset, agent, profile, steps and seeds come
    from the checkpoint's metadata (so the row's labels are the checkpoint's), and a row, [defaults] or `--set`
    (`stated`) that states one of them differently is refused, naming both values: a setting the user wrote is
    never dropped. The checkpoint must exist and its metadata be readable (`--dry-run` too)."""
    from ttt.checkpoint import read_meta

    path = r["checkpoint"]
    if not path.strip():
        raise TttError(f"{where}: checkpoint is empty; give a checkpoint directory (`ttt pretrain --out`'s), or leave "
                       "checkpoint out (or \"null\") to pre-train one in the cache")  # fmt: skip
    try:
        meta = read_meta(Path(path).expanduser())
    except TttError as e:
        raise TttError(f"{where}: checkpoint: {e}") from None
    for key, field in CHECKPOINT_KEYS.items():
        value = meta.get(field)
        if value is None:
            continue  # (a checkpoint without a profile, e.g. one made before profiles were recorded)
        if key in stated and r[key] != value:
            raise TttError(f"{where}: {key} = {json.dumps(r[key])}, but checkpoint {show(path, 200)} has "
                           f"{key} {show(json.dumps(value), 80)} ({show(meta['agent'], 40)} on "
                           f"{show(meta['dataset'], 80)}, {show(str(meta.get('profile')), 40)} profile, step "
                           f"{meta.get('step')}, {meta['seeds']} seeds); leave {key} out of the row and [defaults] "
                           "(it comes from the checkpoint) or name another checkpoint")  # fmt: skip
        if (key == "profile" and value not in PROFILES) or (key == "agent" and value not in AGENTS):
            continue  # (an imported checkpoint's profile 'imported': not a preset, the row keeps its label)
        r[key] = value


def _check_read_by_rule(r: dict, given: set, in_row: set, where: str) -> None:
    """A selection setting that the row's rule does not read (`q` under rule 'episodes', ...:
    `ttt.select.IGNORED_BY_RULE`), stated in the row or in [defaults], would change nothing yet be shown as the
    row's setting: refuse it, as `ttt eval` and `ttt.load_run` do. (`--set` is checked over the whole pipeline:
    `load_pipeline`.)"""
    if r["variant"] in ("base", "ttgs"):
        return
    rule = effective_rule(r)
    ignored = [k for k in IGNORED_BY_RULE[rule] if k in given]
    if ignored:
        k = ignored[0]
        place = "this row" if k in in_row else "[defaults] (every row inherits it)"
        why = f" (the default of variant {r['variant']})" if r["rule"] is None else ""
        readers = [n for n, keys in IGNORED_BY_RULE.items() if k not in keys]
        raise TttError(f"{where}: {k} = {json.dumps(r[k])} changes nothing: rule {rule!r}{why} does not read it; "
                       f"remove it from {place}, or set rule = {' / '.join(repr(n) for n in readers)}, which read "
                       f"{k} (docs/algorithm.md)")  # fmt: skip


def _check_combination(r: dict, where: str) -> None:
    """Cross-key rules that no single key can check."""
    if r["relevance"] == "value" and r["c_rel"] is None:
        raise TttError(f"{where}: relevance = 'value' needs c_rel (the value threshold C, e.g. -18.0)")
    if r["ttgs"] and r["variant"] not in ("ttgs", "ttt+ttgs"):
        raise TttError(f"{where}: ttgs (test-time graph search settings) applies to variant 'ttgs' or 'ttt+ttgs', got "
                       f"{r['variant']!r}")  # fmt: skip
    if r["H"] is not None and r["variant"] == "base":
        raise TttError(f"{where}: H (fixed return horizon) applies to ttt / ttt-mc runs, not variant 'base'")
    if r["rule"] == "episodes" and r["variant"] not in CRITIC_VARIANTS:
        raise TttError(f"{where}: rule 'episodes' ranks by a critic: it needs variant 'ttt', got {r['variant']!r}")
    if r["rule"] == "mc-episodes" and r["variant"] != "ttt-mc":
        raise TttError(f"{where}: rule 'mc-episodes' is critic-free: it needs variant 'ttt-mc', got {r['variant']!r}")
    if r["critic"] == "oracle" and r["variant"] not in CRITIC_VARIANTS:
        raise TttError(f"{where}: critic 'oracle' replaces the learned critic of variant 'ttt', got {r['variant']!r}")
    rule = effective_rule(r)
    if rule != "paper" and (r["H"] is not None or r["noise_alpha"] > 0 or r["selection"] != "both"):
        why = " (the default of variant ttt)" if r["rule"] is None else ""
        raise TttError(f"{where}: H, noise_alpha and selection ablations apply to rule 'paper', got rule "
                       f"{rule!r}{why}; set rule = 'paper'")  # fmt: skip
    _check_grid_read(r, rule, where)  # the driver and backend: checked with the plan (`ttt.envs.resolve_driver`)


def _check_grid_read(r: dict, rule: str, where: str) -> None:
    """A grid over a key the row never reads (a TTT setting of a base row, a selection setting its rule ignores)
    would give identical rows under different names: refuse it."""
    unread = [k for k in r["grid"] if k in EVAL_KEYS and k not in ("episodes", "tasks", "eval_seed", "driver",
                                                                      "backend", "chunk")]  # fmt: skip
    if r["variant"] not in ("base", "ttgs"):
        unread = [k for k in unread if k in IGNORED_BY_RULE[rule]]
    if unread:
        why = (f"variant {r['variant']!r} reads no TTT setting" if r["variant"] in ("base", "ttgs") else
               f"rule {rule!r}{' (the default of variant ttt)' if r['rule'] is None else ''} does not read "
               f"{', '.join(unread)}")  # fmt: skip
        raise TttError(f"{where}: grid over {', '.join(unread)}: {why}, so every grid row would be the same; drop it "
                       "from the grid or set a rule that reads it (docs/algorithm.md)")  # fmt: skip


def effective_rule(r: dict) -> str:
    """The selection rule a run uses: its `rule`, else its variant's default (ttt: 'episodes', the published
    code's critic rule; ttt-mc and fixed-H runs: 'paper'; base: 'paper', unused)."""
    if r["rule"] is not None:
        return r["rule"]
    return "episodes" if r["variant"] in CRITIC_VARIANTS and r["H"] is None else "paper"


def load_pipeline(path: str | Path, sets: dict | None = None) -> Pipeline:
    """Read and validate a pipeline file; `sets` (from `parse_sets`) override every run."""
    path = Path(path)
    if path.is_dir():
        raise TttError(
            f"pipeline {path} is a directory; give a .toml file or a name ({', '.join(available_pipelines())})"
        )
    if not path.exists():
        raise TttError(f"pipeline file {show(str(path), 300)} does not exist")
    text = read_text(path, MAX_TOML_BYTES, "pipeline file")  # a regular file, capped; a BOM is skipped
    doc = loads_toml(text, show(str(path), 300))
    _unknown(doc, TOP_KEYS, str(path))
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        raise TttError(f"{path}: [defaults] must be a table")
    defaults = _toml_nulls(defaults)
    _unknown(defaults, RUN_KEYS, f"{path} [defaults]")
    raw_runs = doc.get("run", [])
    if not isinstance(raw_runs, list) or not raw_runs:
        raise TttError(f"{path}: no runs: add at least one [[run]] table")
    sets = sets or {}
    runs: list[dict] = []
    for i, raw in enumerate(raw_runs):
        where = f"{path} run {i + 1}" + (f" ({raw['name']})" if isinstance(raw.get("name"), str) else "")
        raw = _toml_nulls(dict(raw))
        _unknown(raw, [*RUN_KEYS, "grid"], where)
        for r in expand_grid(raw, where):
            runs.append(resolve_run(r, defaults, sets, where))
    _check_sets_read(runs, sets, str(path))
    names = [r["name"] for r in runs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise TttError(f"{path}: run names must be unique; repeated: {', '.join(dup)}")
    name = doc.get("name", path.stem)
    desc = doc.get("description", "")
    if not isinstance(name, str) or not isinstance(desc, str):
        raise TttError(f"{path}: name and description must be strings")
    file_name(name, f"{path}: pipeline name")  # the default output directory is runs/NAME
    return Pipeline(name=name, description=desc, runs=tuple(runs), source=str(path))


def _check_sets_read(runs: list[dict], sets: dict, where: str) -> None:
    """`--set KEY=...` of a selection setting that no GC-TTT row's rule reads would change nothing: refuse it (as
    `ttt eval --q` with only variants whose rule ignores q). Where some rows read it, it applies to those only
    (`resolve_run`)."""
    ttt_rows = [r for r in runs if r["variant"] not in ("base", "ttgs")]
    for k in sorted(set(sets) & {k for keys in IGNORED_BY_RULE.values() for k in keys}):
        if ttt_rows and all(k in IGNORED_BY_RULE[effective_rule(r)] for r in ttt_rows):
            rules = ", ".join(sorted({effective_rule(r) for r in ttt_rows}))
            raise TttError(f"--set {k}: no row of {where} reads it (their rule: {rules}), so it would change nothing; "
                           "leave it out, or set a rule that reads it (docs/algorithm.md)")  # fmt: skip


def select_runs(pipe: Pipeline, only: str | None) -> Pipeline:
    """The runs whose names match any of the comma-separated glob patterns `only` (all runs if None)."""
    import fnmatch

    if not only:
        return pipe
    pats = [p.strip() for p in only.split(",") if p.strip()]
    runs = tuple(r for r in pipe.runs if any(fnmatch.fnmatchcase(r["name"], p) for p in pats))
    if not runs:
        names = ", ".join(r["name"] for r in pipe.runs)
        raise TttError(f"--only {only!r} matches no run; the runs are: {names}")
    return dataclasses.replace(pipe, runs=runs)


def pipeline_dirs() -> list[Path]:
    """Where pipeline names are looked up: ./pipelines, then the repository's pipelines/."""
    repo = Path(__file__).resolve().parents[2] / "pipelines"
    return [Path("pipelines"), repo]


def available_pipelines() -> list[str]:
    names: list[str] = []
    for d in pipeline_dirs():
        if d.is_dir():
            names += [p.stem for p in sorted(d.glob("*.toml")) if p.stem not in names]
    return names


def find_pipeline(name_or_path: str) -> Path:
    """A pipeline file path, or a name looked up in `pipeline_dirs()`; unknown names list the available ones."""
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        if not p.exists():
            raise TttError(f"pipeline file {p} does not exist")
        if p.is_dir():
            raise TttError(
                f"pipeline {p} is a directory; give a .toml file or a name ({', '.join(available_pipelines())})"
            )
        return p
    for d in pipeline_dirs():
        if (d / f"{name_or_path}.toml").exists():
            return d / f"{name_or_path}.toml"
    raise TttError(f"unknown pipeline '{name_or_path}'; available: {', '.join(available_pipelines()) or '(none)'}")
