#!/usr/bin/env bash
# Export -> the reference's restore_agent, for every parity fixture: each case's init.pkl and final.pkl are imported
# into `ttt` (without a dataset: reference_states + save_checkpoint), exported again with `ttt.export_checkpoint`,
# and restored by the reference code itself (restore_check.py, strict: the keys, shapes and dtypes of a fresh
# reference agent); its forwards must equal the fixture's.
#
#   PUBLISHED_ROOT=/work/cache/published benchmarks/published/export_check.sh [OUT_DIR]
set -euo pipefail
root="${PUBLISHED_ROOT:-$HOME/meta-gc-rl-published}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:-$(mktemp -d)}"
mkdir -p "$out"
python - "$repo" "$out" <<'PY'
import sys
from pathlib import Path
repo, out = Path(sys.argv[1]), Path(sys.argv[2])
sys.path.insert(0, str(repo / "tests"))
import parity_cases as pc
from ttt.checkpoint import config_dict, save_checkpoint
from ttt.interop import export_checkpoint, read_reference, reference_states
import jax
for name in pc.CASES:
    case = pc.load_case(name)
    for which in ("init", "final"):
        preset, cfg, sampler, states = reference_states([read_reference(case.dir / f"{which}.pkl")], case.backbone,
                                                        dict(case.meta["config"]))
        st = jax.tree.map(lambda x: x[None], states[0].state)
        ck = out / f"{name}-{which}"
        meta = dict(agent=preset, backbone=case.backbone, config=config_dict(cfg), sampler=config_dict(sampler),
                    dataset="none", dataset_hash="0" * 16, obs_dim=case.meta["obs_dim"],
                    action_dim=case.meta["action_dim"], seeds=1, seed=0, profile="imported")
        save_checkpoint(ck, st, meta)
        export_checkpoint(ck, out / f"{name}-{which}.pkl")
PY
status=0
for case in "$repo"/tests/fixtures/parity/*/; do
    name="$(basename "$case")"
    for which in init final; do
        if "$root/venv/bin/python" "$here/restore_check.py" --case "$case" --pkl "$out/$name-$which.pkl" \
            --out "$out/$name-$which-fwd.npz" > "$out/$name-$which.log" 2>&1; then
            echo "$name $which: restored by the reference; $(tail -1 "$out/$name-$which.log")"
        else
            echo "$name $which: FAILED: $(tail -1 "$out/$name-$which.log")"; status=1
        fi
    done
done
exit $status
