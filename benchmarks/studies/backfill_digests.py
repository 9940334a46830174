"""Backfill the checkpoint and dataset digests of the evaluation records under benchmarks/results/, and name
each cached checkpoint by its cache key instead of the absolute path of the machine that made it.

    python benchmarks/studies/backfill_digests.py [--check]

A pipeline record's file key (`eval_key`) is the digest of its checkpoint's identity (the state file's sha256, the
step, the training data's digest) and the row's settings (`ttt.pipeline.keys.eval_key`). The checkpoints are not kept
with the repository, but their identities are, in two places: the records that already carry `checkpoint_sha256`
(since 27 Nov 2026) and the GPU queue's checkpoint metadata (`results/gpu/*/pretrain/*.json`, with `dataset_hash`).
A record is backfilled only where one of those identities, with one of the known data digests (or none), recomputes
its `eval_key` exactly; it then gains `checkpoint_sha256` and `dataset_hash` and `digests_from: "eval_key"`. Nothing is
guessed: every other record keeps no digest, and `ttt.stats.pairable` never pairs it ("unpaired" in every table).

Paths: `.../ckpt/DATASET/NAME` becomes `DATASET/NAME` (the cache key; `ttt.pipeline.keys.resolve_checkpoint` finds it
under this machine's cache); other paths (a user's checkpoint folder) stay as they are. The records inside each
pipeline's `results.json` get the same changes. With `--check`, nothing is written: exit 1 when a file would change.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from ttt.data.specs import get_spec
from ttt.pipeline.keys import eval_settings
from ttt.pipeline.report import results_text
from ttt.storage import digest, dumps

ROOT = Path(__file__).resolve().parents[2]
RES = ROOT / "benchmarks" / "results"
_CACHE_PATH = re.compile(r"^(?:/|~).*?/ckpt/([^/]+/[^/]+)/?$")


def identities() -> tuple[set[tuple[str, int]], set[str]]:
    """The known checkpoint states (sha256, step) and training-data digests: from every record that carries one and
    from the GPU queue's checkpoint metadata."""
    states, data = set(), set()
    for p in RES.rglob("*.json"):
        d = _read(p)
        if not isinstance(d, dict):
            continue
        if "state_sha256" in d and "step" in d:  # a checkpoint's meta.json, kept by the GPU queue
            states.add((d["state_sha256"], int(d["step"])))
            if d.get("dataset_hash"):
                data.add(d["dataset_hash"])
        for r in [d, *(d.get("records") or [])] if isinstance(d.get("records", []), list) else [d]:
            if isinstance(r, dict) and r.get("checkpoint_sha256") and r.get("checkpoint_step") is not None:
                states.add((r["checkpoint_sha256"], int(r["checkpoint_step"])))
                if r.get("dataset_hash"):
                    data.add(r["dataset_hash"])
    return states, data


def verify(rec: dict, states: set, data: set) -> tuple[str, str | None] | None:
    """The (state sha256, dataset digest) whose identity recomputes the record's `eval_key`; None where none does."""
    run, key, step = rec.get("run"), rec.get("eval_key"), rec.get("checkpoint_step")
    if not isinstance(run, dict) or not key or step is None:
        return None
    try:
        settings = eval_settings(run, get_spec(run["dataset"]).env_id)
    except Exception:  # noqa: BLE001 - a record of a run whose keys this version no longer knows: not verifiable
        return None
    own = rec.get("checkpoint_sha256")
    for sha, st in sorted(states):
        if st != step or (own and sha != own):
            continue
        for dh in (*sorted(data), None):
            ck = dict(state=sha, step=step, dataset_hash=dh)
            if digest(dict(checkpoint=ck, variant=run["variant"], dataset=run["dataset"], **settings)) == key:
                return sha, dh
    return None


def backfill(rec: dict, states: set, data: set) -> bool:
    """Digests and the checkpoint's name for one record, in place; True when it changed."""
    before = json.dumps(rec, sort_keys=True)
    found = verify(rec, states, data)
    if found is not None:
        sha, dh = found
        if not rec.get("checkpoint_sha256"):
            rec["checkpoint_sha256"] = sha
            rec["digests_from"] = "eval_key"
        if dh and not rec.get("dataset_hash"):
            rec["dataset_hash"] = dh
    ck = rec.get("checkpoint")
    if isinstance(ck, str):
        m = _CACHE_PATH.match(ck)
        if m:
            rec["checkpoint"] = m.group(1)
    return json.dumps(rec, sort_keys=True) != before


def _read(p: Path):
    try:
        return json.loads(p.read_text())
    except (ValueError, OSError):
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file would change")
    args = ap.parse_args()
    states, data = identities()
    changed, counts = [], dict(records=0, with_digest=0, backfilled=0)
    for p in sorted(RES.rglob("*.json")):
        d = _read(p)
        if not isinstance(d, dict):
            continue
        if p.parent.name == "evals" and "run" in d and "success" in d:
            had = bool(d.get("checkpoint_sha256"))
            if backfill(d, states, data):
                changed.append(p)
                if not args.check:
                    p.write_text(dumps(d))
            counts["records"] += 1
            counts["with_digest"] += bool(d.get("checkpoint_sha256"))
            counts["backfilled"] += bool(d.get("checkpoint_sha256")) and not had
        elif p.name == "results.json" and isinstance(d.get("records"), list) and isinstance(d.get("rows"), list):
            hit = [backfill(r, states, data) for r in d["records"] if isinstance(r, dict)]
            for row in d["rows"]:
                m = _CACHE_PATH.match(str(row.get("checkpoint", "")))
                if m:
                    row["checkpoint"] = m.group(1)
                    hit.append(True)
            if any(hit):
                changed.append(p)
                if not args.check:
                    p.write_text(results_text(d["rows"], d["records"]))
    print(f"{counts['records']} pipeline records: {counts['with_digest']} carry a checkpoint digest "
          f"({counts['backfilled']} backfilled from their eval_key), {counts['records'] - counts['with_digest']} "
          f"unpaired; {len(changed)} files {'would change' if args.check else 'changed'}")  # fmt: skip
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
