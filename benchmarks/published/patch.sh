#!/usr/bin/env bash
# Runtime patches to the authors' checkout (antoniomari/meta-gc-rl @ 434aa5e), applied in place with sed.
# Idempotent: running it twice changes nothing more. Nothing of theirs is copied into this repository.
#
#   benchmarks/published/patch.sh CHECKOUT
#
# 1. utils/log_utils.py: setup_wandb() hard-codes wandb's online mode (main.py never passes `mode`), which needs a
#    W&B account and the internet. Make it read WANDB_MODE (run.sh sets WANDB_MODE=disabled).
set -euo pipefail
co="${1:?usage: patch.sh CHECKOUT (a meta-gc-rl checkout)}"
f="$co/utils/log_utils.py"
[ -f "$f" ] || { echo "patch.sh: $f not found: is '$co' a meta-gc-rl checkout?" >&2; exit 2; }
if ! grep -q "os.environ.get('WANDB_MODE'" "$f"; then
    sed -i "s/^        mode=mode,$/        mode=os.environ.get('WANDB_MODE', mode),/" "$f"
fi
grep -q "mode=os.environ.get('WANDB_MODE', mode)," "$f" || { echo "patch.sh: could not patch $f (unexpected revision?)" >&2; exit 1; }
echo "patched $f (wandb mode from WANDB_MODE)"
