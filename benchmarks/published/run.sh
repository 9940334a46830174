#!/usr/bin/env bash
# Pre-train the authors' published GC-IQL-DDPG on a `ttt`-generated dataset and evaluate base and GC-TTT with their
# critic rule, writing one record per row under benchmarks/results/published/ (README.md in this folder).
#
#   PUBLISHED_ROOT=/work/cache/published benchmarks/published/run.sh --dataset pointmaze-medium-navigate-v0 \
#       --seeds 0,1 --steps 10000 --tasks 1-5 --episodes 3 --variants base,ttt
#
# PUBLISHED_ROOT holds meta-gc-rl/ (their checkout at 434aa5e, patched), venv/ (their packages) and runs/
# (checkpoints and per-episode logs); setup.sh makes the first two. Any other argument goes to adapter.py.
set -euo pipefail
root="${PUBLISHED_ROOT:-$HOME/meta-gc-rl-published}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="$root/venv/bin/python"
if [ ! -d "$root/meta-gc-rl" ]; then
    echo "run.sh: the published checkout '$root/meta-gc-rl' is missing; set PUBLISHED_ROOT or run benchmarks/published/setup.sh" >&2
    exit 2
fi
if [ ! -x "$py" ]; then
    echo "run.sh: the published code's venv '$root/venv' is missing; set PUBLISHED_ROOT or run benchmarks/published/setup.sh" >&2
    exit 2
fi
export WANDB_MODE=disabled WANDB_SILENT=true
# Their env_utils sets MUJOCO_GL=egl; nothing is rendered here (no videos), so no GL context is ever made.
exec "$py" "$here/adapter.py" --code "$root/meta-gc-rl" --work "$root/runs" "$@"
