"""The command that wrote a record, reconstructed from the record's content and its pipeline's declaration."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from ttt.graph import TTGSConfig
from ttt.pipeline.keys import record_ttgs_path

from .paths import ROOT

# Run keys left out of the reconstructed command: those that do not change a record's numbers (labels, chunking), and
# `expert`, a file path whose format may change under the record (the data it generated are known by their digest).
_NO_EFFECT = {"group", "paper", "paper_se", "paper_ref", "chunk", "train_chunk", "figure", "grid", "driver", "bucket",
              "expert"}


def command(path: Path, d: dict) -> str:
    """For a pipeline record (``OUT/evals/NAME-KEY.json``), ``ttt run PIPELINE --only NAME --out OUT`` with a
    ``--set`` for every key on which the record's run differs from the pipeline file's (e.g. ``episodes=2`` for a
    30-episode screen); a record of another machine says which; a ``ttt eval --json`` file, the script that ran it.
    A graph-search record of an earlier path default says so (the command now runs the current one)."""
    ttgs = record_ttgs_path(d)
    old = ttgs is not None and ttgs != TTGSConfig.path
    note = f" (TTGS path '{ttgs}', before commit 14febb1: add path = \"{ttgs}\" to the row's ttgs table)" if old else ""
    return _command(path, d) + note


def _command(path: Path, d: dict) -> str:
    rel = path.relative_to(ROOT).as_posix()
    if path.parent.name != "evals" or "run" not in d:
        return f"`python benchmarks/studies/ttt_rows.py` ({rel})"
    out = path.parent.parent
    name = d["run"]["name"]
    try:
        from ttt.pipeline.config import effective_rule

        meta, runs = _pipeline(out)
        ref = next(r for r in runs if r["name"] == name)
    except (OSError, KeyError, StopIteration, ValueError, ImportError) as e:  # a renamed run, no pipeline.json
        return f"{rel} ({type(e).__name__}: no pipeline run to name)"
    sets = sorted(f"{k}={_set_value(v)}" for k, v in d["run"].items()
                  if k not in _NO_EFFECT and k in ref and ref[k] != v)  # fmt: skip
    # Records without `rule_used` predate it, when every variant's default rule was 'paper'.
    used = d.get("rule_used") or d["run"].get("rule") or "paper"
    if ref["variant"] != "base" and used != effective_rule(ref) and not any(x.startswith("rule=") for x in sets):
        sets.append(f"rule={used}")
    cmd = " ".join(["ttt run", meta["name"], *(f"--set {s}" for s in sets), f'--only "{name}"',
                    f"--out {out.relative_to(ROOT).as_posix()}"])  # fmt: skip
    device = d.get("device")
    where = f" (ran on an {device.replace('NVIDIA ', '').split()[0]})" if device and device != "cpu" else ""
    return f"`{cmd}`{where}"


@cache
def _pipeline(out: Path) -> tuple[dict, tuple]:
    """An output folder's ``pipeline.json`` and its pipeline's declared runs (read once per folder)."""
    from ttt.pipeline.config import find_pipeline, load_pipeline

    meta = json.loads((out / "pipeline.json").read_text())
    return meta, tuple(load_pipeline(find_pipeline(meta["name"])).runs)


def _set_value(v) -> str:
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return str(v)
