"""Records by key: every cell of a study names the record(s) it reads, and this module finds exactly that record.

A reference is a string:

- ``OUT:RUN@KEY``: a pipeline evaluation record under ``benchmarks/results/OUT/evals/`` whose run name (``run.name``)
  is RUN and whose evaluation key (``eval_key``: the digest of the checkpoint's content and every setting the row
  depends on) is KEY;
- ``OUT:DATASET/AGENT#VARIANT``: a ``ttt eval --json`` file under ``benchmarks/results/OUT/`` (``dataset``, ``agent``,
  ``variant`` a key of ``variants``);
- ``OUT:DATASET/AGENT#VARIANT@STEP``: a record of the published code (``variant``, ``step``);
- ``OUT:DATASET/AGENT@STEP``: a base-row record (``ttt pretrain`` then ``ttt eval --json``, no variant field).

A reference matches on the record's content fields, never on a file name, its time or its episode count, and it must
match exactly one record (else `RecordError`). No field holding a machine's path (``checkpoint``, ``command``,
``argv``, ``log_tail``) is read to find or pair a record.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import numpy as np

from .paths import ROOT  # (re-exported: callers read records.ROOT)

RES = ROOT / "benchmarks" / "results"

_PIPE = re.compile(r"^(?P<out>[\w./+-]+):(?P<run>[\w.+-]+)@(?P<key>[0-9a-f]{12})$")
_EVAL = re.compile(r"^(?P<out>[\w./+-]+):(?P<dataset>[\w.-]+)/(?P<agent>[\w-]+)(?:#(?P<variant>[\w.+-]+))?"
                   r"(?:@(?P<step>\d+))?$")


class RecordError(LookupError):
    """A reference that names no record, or more than one."""


@cache
def _folder(out: str) -> tuple[tuple[Path, dict], ...]:
    """Every JSON object record of one output folder (``OUT/evals/*.json`` for a pipeline folder, else
    ``OUT/*.json``)."""
    base = RES / out
    files = sorted((base / "evals").glob("*.json")) if (base / "evals").is_dir() else sorted(base.glob("*.json"))
    found = []
    for f in files:
        try:
            d = json.loads(f.read_text())
        except ValueError:
            continue
        if isinstance(d, dict):
            found.append((f, d))
    return tuple(found)


def _matches(ref: str) -> tuple[list[tuple[Path, dict]], str | None]:
    m = _PIPE.match(ref)
    if m:
        hits = [(f, d) for f, d in _folder(m["out"])
                if (d.get("run") or {}).get("name") == m["run"] and d.get("eval_key") == m["key"]]  # fmt: skip
        return hits, None
    m = _EVAL.match(ref)
    if m:
        hits, v = [], m["variant"]
        for f, d in _folder(m["out"]):
            if d.get("dataset") != m["dataset"] or d.get("agent") != m["agent"]:
                continue
            if m["step"] is not None and str(d.get("step")) != m["step"]:
                continue
            if v in (d.get("variants") or {}) or (v is not None and d.get("variant") == v) or (
                    v is None and "variant" not in d and "variants" not in d):  # fmt: skip
                hits.append((f, d))
        within = bool(hits) and all(v in (d.get("variants") or {}) for _, d in hits)
        return hits, (v if within else None)
    raise RecordError(f"{ref!r}: not a record reference (OUT:RUN@KEY, OUT:DATASET/AGENT[#VARIANT][@STEP])")


@cache
def raw(ref: str) -> tuple[Path, dict, str | None]:
    """The one record a reference names: (its file, its content, the variant of a ``variants`` file)."""
    hits, variant = _matches(ref)
    if len(hits) != 1:
        where = ", ".join(f.relative_to(ROOT).as_posix() for f, _ in hits)
        raise RecordError(f"{ref}: {'no record' if not hits else f'{len(hits)} records ({where})'} match")
    f, d = hits[0]
    return f, d, variant


def exists(ref: str) -> bool:
    try:
        raw(ref)
    except RecordError:
        return False
    return True


@cache
def load(ref: str) -> dict:
    """One record as the tables read it: per-seed and per-(seed, task) rates, episodes, shape, the pre-training step,
    the digests (``rec``, what `ttt.stats.compare_records` pairs by), its command, and the record itself (``raw``)."""
    from .commands import command

    path, d, variant = raw(ref)
    r = d["variants"][variant] if variant is not None else d
    s = np.asarray(r["success"], float)  # (seeds, tasks, episodes)
    digests = {k: d.get(k) for k in ("checkpoint_sha256", "dataset_hash") if d.get(k)}
    return {"per_seed": s.reshape(s.shape[0], -1).mean(1), "per_task": s.reshape(s.shape[0], s.shape[1], -1).mean(2),
            "episodes": s.reshape(-1), "n": s.size, "shape": "x".join(str(k) for k in s.shape),
            "command": command(path, d), "step": d.get("checkpoint_step") or d.get("step"),
            "sha": d.get("checkpoint_sha256"), "path": path, "raw": d, "ref": ref,
            "rec": {"success": s, "run": d.get("run"), **digests}}  # fmt: skip


def maybe(ref: str | None) -> dict | None:
    """`load`, or None where no reference is declared (a row not run yet)."""
    return None if not ref else load(ref)
