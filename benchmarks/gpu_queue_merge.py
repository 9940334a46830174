"""Merge the queue.json that an earlier call on a warm device machine kept (`.gpu-queue/results/queue.json`) into the
one the working tree brought: per step, the entry updated last wins, so that a committed, older queue.json does not
hide the seconds and states an earlier call recorded. Used by benchmarks/gpu_queue.sh.

    python benchmarks/gpu_queue_merge.py KEPT TREE     # TREE is rewritten atomically
"""

from __future__ import annotations

import json
import os
import sys


def merge(kept: dict, tree: dict) -> dict:
    """`tree` with each step of `kept` whose `updated` stamp is later (or that `tree` lacks)."""
    steps = dict(tree.get("steps", {}))
    for name, s in kept.get("steps", {}).items():
        t = steps.get(name)
        if t is None or s.get("updated", "") > t.get("updated", ""):
            steps[name] = s
    return {**kept, **tree, "steps": steps}


def _read(path: str) -> dict:
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"gpu_queue_merge: cannot read {path}: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("steps", {}), dict):
        raise SystemExit(f"gpu_queue_merge: {path} is not a queue.json (expected {{'steps': {{name: entry}}}})")
    return doc


def main(kept_path: str, tree_path: str) -> None:
    kept = _read(kept_path)
    tree = _read(tree_path) if os.path.exists(tree_path) else {}
    tmp = tree_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(merge(kept, tree), f, indent=1)
    os.replace(tmp, tree_path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: gpu_queue_merge.py KEPT TREE")
    main(*sys.argv[1:])
