"""Does antmaze data depend on NumPy's OpenBLAS kernel? Generate the first episodes of antmaze-medium-navigate (seed 0,
train split, the committed 1M-step expert) and print each array's digest and the kernel that ran.

    python benchmarks/analyses/blas_kernel_probe.py --episodes 1 --out /tmp/default.npz
    OPENBLAS_CORETYPE=Prescott python benchmarks/analyses/blas_kernel_probe.py --episodes 1 --out /tmp/prescott.npz
    python benchmarks/analyses/blas_kernel_probe.py --compare /tmp/default.npz /tmp/prescott.npz

`--compare` prints the first observation row where two runs differ and how far apart the episodes end (the README's
"antmaze" section quotes row 64 and 7.9 for `OPENBLAS_CORETYPE=Prescott`, which OpenBLAS runs as
its `Katmai` kernel, against this machine's `SkylakeX`).
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=1)
    ap.add_argument("--out", type=Path, help="save the arrays here (.npz)")
    ap.add_argument("--compare", type=Path, nargs=2, metavar=("A", "B"), help="compare two saved runs only")
    args = ap.parse_args()
    if args.compare:
        if missing := [str(p) for p in args.compare if not p.is_file()]:
            raise SystemExit(f"blas_kernel_probe.py: no saved run at {', '.join(missing)} (make it with --out)")
        a, b = (np.load(p)["observations"] for p in args.compare)
        n = min(len(a), len(b))
        gap = np.abs(a[:n] - b[:n]).max(1)
        first = int(np.argmax(gap > 0)) if (gap > 0).any() else None
        print(f"first differing row: {first}; largest coordinate gap at the last row: {gap[-1]:.3f}")
        return
    if args.episodes < 1:
        raise SystemExit("blas_kernel_probe.py: --episodes must be >= 1")
    from ttt.data.expert import NumpyExpert, blas_kernel, load_actor
    from ttt.data.generate import generate_episodes
    from ttt.data.specs import get_spec

    expert = NumpyExpert(load_actor(ROOT / "benchmarks" / "results" / "expert" / "ant-1m.npz")[0])
    arr = generate_episodes(get_spec("antmaze-medium-navigate-v0"), 0, 0, range(args.episodes), expert=expert)
    print(f"kernel: {blas_kernel()}")
    for k in sorted(arr):
        print(k, hashlib.sha256(np.ascontiguousarray(arr[k]).tobytes()).hexdigest()[:12])
    if args.out:
        np.savez(args.out, **arr)


if __name__ == "__main__":
    main()
