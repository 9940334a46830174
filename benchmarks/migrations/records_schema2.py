"""One-time migration of the committed records to schema 2 (`ttt.pipeline.records`): no absolute path of the machine
that made them, in any JSON, CSV, text or markdown file under benchmarks/results, docs and pipelines.

    python benchmarks/migrations/records_schema2.py [--check] [PATH ...]  # default: benchmarks/results docs pipelines
    python benchmarks/migrations/records_schema2.py --keys OUT.json       # each pipeline record's key, recomputed

What it rewrites:

- a pipeline's evaluation record (`evals/*.json`, and the copies in `results.json`'s `records`) gains `"schema": 2`,
  and a graph-search row written before `ttgs_path` was recorded gains `"ttgs_path": "cut"` (what it ran). Nothing
  else in it changes: not its `eval_key`, its file name, its `run` or its digests, so every content key stays what
  it was (`--keys` recomputes them: run it before and after and compare).
- a checkpoint a record names by path (a field `checkpoint` / `ckpt`, a CSV column `checkpoint`) that lies in a
  ttt cache (`.../ckpt/DATASET/NAME`) becomes its cache key `DATASET/NAME` (`ttt.pipeline.keys.checkpoint_ref`),
  and gains `checkpoint_sha256` where the pipeline records of that key agree on one digest.
- every other absolute path, in commands, argv, log tails and pytest output alike: the repository (`/work/main`)
  becomes relative to it (`.` for itself), the ttt cache (`/root/.cache/ttt`) `$TTT_CACHE`, the published code's
  run folders (`/work/cache/i37pub`, `/work/cache/published`) `$PUBLISHED_ROOT` (benchmarks/published/README.md),
  a home directory `~`, the temporary directory `$TMPDIR`, and the machine's scratch volume (`/work`) `$WORK`.

JSON files are written back in the layout they had (checked: each re-serializes to its original text before any
change). `--check` writes nothing and exits 1 when a file would change.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ("benchmarks/results", "docs", "pipelines")
SUFFIXES = (".json", ".csv", ".txt", ".md")
SKIP = {"benchmarks/README.md", "benchmarks/RESULTS.md"}  # generated pages (benchmarks/report.py)

_B, _E = r"(?<![\w.~$/-])", r"(?![\w.-])"  # a path's start: not inside a word or another path
RULES = [
    (re.compile(_B + r"/work/main/"), ""),
    (re.compile(_B + r"/work/main" + _E), "."),
    (re.compile(_B + r"/root/\.cache/ttt" + _E), "$TTT_CACHE"),
    (re.compile(_B + r"/work/cache/(?:i37pub|published)" + _E), "$PUBLISHED_ROOT"),
    (re.compile(_B + r"(?:/root|/home/[^/\s\"'`]+)" + _E), "~"),
    (re.compile(_B + r"/tmp" + _E), "$TMPDIR"),
    (re.compile(_B + r"/work" + _E), "$WORK"),
]
CACHE_CKPT = re.compile(r"^(?:/|~|\$|\.).*?/ckpt/([^/]+/[^/]+?)/?$")
CKPT_FIELDS = ("checkpoint", "ckpt")


def scrub(text: str) -> str:
    """`text` with every absolute path of the machine replaced (the rules above, in order)."""
    for pat, rep in RULES:
        text = pat.sub(rep, text)
    return text


def _is_record(d) -> bool:
    return isinstance(d, dict) and isinstance(d.get("run"), dict) and "eval_key" in d and "success" in d


def upgrade_record(rec: dict) -> dict:
    """A pipeline evaluation record at schema 2: `schema` first, `ttgs_path` on a graph-search row; else unchanged."""
    out = {"schema": 2, **{k: v for k, v in rec.items() if k != "schema"}}
    if rec["run"].get("variant") in ("ttgs", "ttt+ttgs") and not rec.get("ttgs_path"):
        out["ttgs_path"] = "cut"  # written before the record said it: the path rule then in force
    return out


def known_digests(files: list[Path]) -> dict[str, str]:
    """Cache key -> the state sha256 that every pipeline record of that checkpoint key carries (keys whose records
    disagree, e.g. the same configuration trained on two machines, are left out)."""
    seen = defaultdict(set)
    for p in files:
        if p.suffix != ".json":
            continue
        d = json.loads(p.read_text())
        for r in [d, *(d.get("records") or [])] if isinstance(d, dict) else []:
            if _is_record(r) and r.get("checkpoint_sha256") and isinstance(r.get("checkpoint"), str):
                seen[r["checkpoint"]].add(r["checkpoint_sha256"])
    return {k: next(iter(v)) for k, v in seen.items() if len(v) == 1}


def _transform(x, digests: dict[str, str]):
    """Every string of a JSON value scrubbed; cache checkpoints by key (and digest where known)."""
    if isinstance(x, dict):
        if _is_record(x):
            x = upgrade_record(x)
        out = {}
        for k, v in x.items():
            if k in CKPT_FIELDS and isinstance(v, str) and CACHE_CKPT.match(v):
                key = CACHE_CKPT.match(v).group(1)
                out[k] = key
                if key in digests and not x.get("checkpoint_sha256") and k == "checkpoint":
                    out["checkpoint_sha256"] = digests[key]
            else:
                out[k] = _transform(v, digests)
        return out
    if isinstance(x, list):
        return [_transform(v, digests) for v in x]
    if isinstance(x, str):
        return scrub(x)
    return x


def _layout(text: str, d) -> callable:
    """The serializer that gives back `text` from `d` exactly."""
    from ttt.pipeline.report import results_text
    from ttt.storage import dumps

    cands = [lambda o: dumps(o)]
    if isinstance(d, dict) and isinstance(d.get("rows"), list) and isinstance(d.get("records"), list):
        cands.insert(0, lambda o: results_text(o["rows"], o["records"]))
    for ind in (1, 2, 4, None):
        for nl in ("", "\n"):
            cands.append(lambda o, ind=ind, nl=nl: json.dumps(o, indent=ind) + nl)
    for f in cands:
        if f(d) == text:
            return f
    raise SystemExit("cannot re-serialize its layout; migrate it by hand")


def migrate_text(p: Path, text: str, digests: dict[str, str]) -> str:
    if p.suffix == ".json":
        d = json.loads(text)
        return _layout(text, d)(_transform(d, digests))
    if p.suffix == ".csv":
        rows = list(csv.reader(io.StringIO(text)))
        if rows and "checkpoint" in rows[0]:
            i, hit = rows[0].index("checkpoint"), False
            for r in rows[1:]:
                m = CACHE_CKPT.match(r[i]) if i < len(r) else None
                if m:
                    r[i], hit = m.group(1), True
            if hit:
                buf = io.StringIO(newline="")
                csv.writer(buf, lineterminator="\r\n" if "\r\n" in text else "\n").writerows(rows)
                text = buf.getvalue()
    return scrub(text)


def files(paths) -> list[Path]:
    out = []
    for a in paths:
        p = (ROOT / a) if not Path(a).is_absolute() else Path(a)
        for f in [p] if p.is_file() else sorted(p.rglob("*")):
            rel = f.relative_to(ROOT).as_posix() if f.is_relative_to(ROOT) else str(f)
            if f.is_file() and f.suffix in SUFFIXES and rel not in SKIP:
                out.append(f)
    return out


def key_report(fs: list[Path]) -> dict:
    """For each pipeline record (a file under evals/, or an entry of a results.json): its stored `eval_key`, whether
    its file name carries it, and what the current code's key gives (`ttt.pipeline.keys.eval_settings`) for the
    checkpoint identity it carries: 'match', 'match-without-ttgs_path' (a 'cut' row made before the path entered the
    key), 'differs', or 'no-digest' (the record carries no checkpoint digest: not recomputable here)."""
    from ttt.data.specs import get_spec
    from ttt.pipeline.config import RUN_KEYS
    from ttt.pipeline.keys import eval_settings
    from ttt.storage import digest

    def status(r: dict) -> str:
        run = {**{k: v.default for k, v in RUN_KEYS.items()}, **r["run"]}
        s = eval_settings(run, get_spec(run["dataset"]).env_id)
        if not r.get("checkpoint_sha256"):
            return "no-digest"
        tries = [("match", s)] + [("match-without-ttgs_path", {k: v for k, v in s.items() if k != "ttgs_path"})]
        for name, ss in tries[: 2 if "ttgs_path" in s else 1]:
            for dh in (r.get("dataset_hash"), None):
                ck = dict(state=r["checkpoint_sha256"], step=r["checkpoint_step"], dataset_hash=dh)
                if digest(dict(checkpoint=ck, variant=run["variant"], dataset=run["dataset"], **ss)) == r["eval_key"]:
                    return name
        return "differs"

    out = {}
    for p in fs:
        if p.suffix != ".json":
            continue
        d = json.loads(p.read_text())
        rel = p.relative_to(ROOT).as_posix()
        if p.parent.name == "evals" and _is_record(d):
            out[rel] = dict(eval_key=d["eval_key"], in_name=p.stem.endswith("-" + d["eval_key"]), status=status(d))
        elif isinstance(d, dict) and isinstance(d.get("records"), list):
            for i, r in enumerate(d["records"]):
                if _is_record(r):
                    out[f"{rel}#{i}"] = dict(eval_key=r["eval_key"], in_name=None, status=status(r))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=list(DEFAULT))
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file would change")
    ap.add_argument("--keys", metavar="OUT", help="write each pipeline record's key report to OUT (JSON) and stop")
    args = ap.parse_args()
    fs = files(args.paths)
    if args.keys:
        rep = key_report(fs)
        Path(args.keys).write_text(json.dumps(rep, indent=1, sort_keys=True) + "\n")
        counts = defaultdict(int)
        for v in rep.values():
            counts[v["status"]] += 1
        print(f"{len(rep)} pipeline records: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
        return 0
    digests = known_digests(fs)
    changed = []
    for p in fs:
        text = p.read_text()
        try:
            new = migrate_text(p, text, digests)
        except SystemExit as e:
            print(f"{p.relative_to(ROOT)}: {e}", file=sys.stderr)
            return 2
        if new != text:
            changed.append(p)
            if not args.check:
                p.write_text(new)
    print(f"{len(fs)} files read; {len(changed)} {'would change' if args.check else 'changed'}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
