#!/usr/bin/env bash
# Set up the authors' published code (antoniomari/meta-gc-rl, last runnable revision 434aa5e) beside, never inside,
# this repository: the checkout, its own virtual environment with the versions that run it on a CPU, and the runtime
# patches (patch.sh). Their repository has no licence: it is run from its own checkout, never copied here.
#
#   PUBLISHED_ROOT=/work/cache/published benchmarks/published/setup.sh [--git-dir BARE_GIT_DIR]
#
# Without --git-dir the checkout is cloned from GitHub. With --git-dir (a bare mirror, e.g. the `fetch` tool's
# /work/.mirror/antoniomari+meta-gc-rl/repo) the revision's files are written blob by blob; blobs the mirror lacks
# (one manipulation mesh at the time of writing: universal_robots_ur5e/assets/upperarm_3.obj, unused by the mazes)
# are skipped with a notice.
set -euo pipefail
rev=434aa5eef42dfdab93b1eed39b0bd78d6e8115fe
root="${PUBLISHED_ROOT:-$HOME/meta-gc-rl-published}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
git_dir=""
if [ "${1:-}" = "--git-dir" ]; then git_dir="${2:?--git-dir needs a path}"; fi
co="$root/meta-gc-rl"
mkdir -p "$root"

if [ ! -f "$co/main.py" ]; then
    if [ -z "$git_dir" ]; then
        git clone https://github.com/antoniomari/meta-gc-rl "$co"
        git -C "$co" checkout "$rev"
    else
        git --git-dir="$git_dir" cat-file -e "$rev^{commit}" || { echo "setup.sh: $git_dir lacks commit $rev" >&2; exit 2; }
        mkdir -p "$co"
        git --git-dir="$git_dir" ls-tree -r "$rev" | while read -r _mode _type sha path; do
            mkdir -p "$co/$(dirname "$path")"
            git --git-dir="$git_dir" cat-file blob "$sha" > "$co/$path" 2>/dev/null \
                || { echo "setup.sh: blob of $path missing in the mirror, skipped"; rm -f "$co/$path"; }
        done
        echo "$rev" > "$co/REVISION"
    fi
fi

if [ ! -x "$root/venv/bin/python" ]; then
    # Python 3.11. Their requirements.txt pins nothing and asks for jax[cuda12]; these versions run it on a CPU.
    # rustworkx is imported by utils/datasets.py but missing from requirements.txt.
    python3.11 -m venv "$root/venv"
    "$root/venv/bin/pip" install "jax==0.5.3" "jaxlib==0.5.3" "flax==0.10.4" "optax==0.2.4" "wandb==0.19.8" \
        "mujoco==3.3.0" "dm_control==1.0.28" "distrax==0.1.5" "numpy==2.2.6" rustworkx ml_collections matplotlib \
        moviepy gymnasium pyyaml tqdm
fi

"$here/patch.sh" "$co"
echo "published code ready under $root (checkout meta-gc-rl/, venv venv/); run benchmarks/published/run.sh"
