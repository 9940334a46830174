"""Issue 19's table re-run: every row's command (on a tiny dataset, checkpoint and pipeline made here) with its exit
status and what it printed (the error line, or the lines that show the new behaviour).

    python benchmarks/issue19_table.py > benchmarks/results/issue19_table.md
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CODE = "import sys; from ttt.cli import main; sys.exit(main(sys.argv[1:]))"
DS = "pointmaze-medium-stitch-v0"
TINY = ["--set", "actor_hidden_dims=[8,8]", "--set", "value_hidden_dims=[8,8]", "--set", "batch_size=8"]
PIPE = """
name = "tiny"
[defaults]
dataset = "pointmaze-medium-stitch-v0"
data_episodes = 4
agent = "gcbc"
agent_config = { actor_hidden_dims = [8, 8], value_hidden_dims = [8, 8], batch_size = 8 }
steps = 4
train_chunk = 2
seeds = 2
episodes = 1
tasks = [2]
K = 500
N = 1
q = 0.5
eps = 3.0
h_min = 3
[[run]]
name = "base"
variant = "base"
[[run]]
name = "mc"
variant = "ttt-mc"
"""


def ttt(*args: str, signal_after: float | None = None, keep: str | None = None) -> None:
    """Run `ttt ARGS`, print the command, its exit status and its last lines (or those containing `keep`)."""
    shown = " ".join(a if " " not in a else repr(a) for a in args)
    print(f"\n$ ttt {shown}")
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", CODE, *args], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)  # fmt: skip
    if signal_after is not None:
        time.sleep(signal_after)
        p.send_signal(signal.SIGINT)
        t1 = time.perf_counter()
    out, err = p.communicate()
    lines = [ln for ln in (out + err).splitlines() if ln.strip() and "elapsed" not in ln]
    if keep:
        lines = [ln for ln in lines if any(k in ln for k in keep.split("|"))]
    for ln in lines[-6:]:
        print(f"    {ln[:300]}")
    extra = f", stopped {time.perf_counter() - t1:.1f} s after SIGINT" if signal_after is not None else ""
    print(f"    -> exit {p.returncode} in {time.perf_counter() - t0:.0f} s{extra}; traceback: {'Traceback' in err}")


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="ttt-issue19-"))
    d, ck = tmp / "data", tmp / "ck"
    print(f"# Issue 19's table after the fixes (work directory {tmp})")
    print("\n## setup")
    ttt("data", "generate", DS, "--episodes", "4", "--dir", str(d), "--workers", "1")
    ttt("pretrain", "--dataset", DS, "--agent", "gcbc", "--steps", "4", "--chunk", "2", "--seeds", "2", "--out",
        str(ck), "--dir", str(d), *TINY)  # fmt: skip
    ev = ["eval", str(ck), "--dir", str(d), "--episodes", "1", "--tasks", "2"]
    (tmp / "a-file").write_text("x")
    pipe = tmp / "tiny.toml"
    pipe.write_text(PIPE)
    run = ["run", str(pipe), "--out", str(tmp / "out"), "--cache", str(tmp / "cache")]

    print("\n## 1 eval --json to a missing directory / a bad path")
    ttt(*ev, "--variants", "base", "--json", str(tmp / "does/not/exist/out.json"))
    print(f"    ({tmp / 'does/not/exist/out.json'} exists: {(tmp / 'does/not/exist/out.json').exists()})")
    ttt(*ev, "--variants", "base", "--json", str(tmp / "a-file" / "out.json"))

    print("\n## 2 SIGINT during a compiled TTT batch; the rerun keeps the finished variant")
    long = ["eval", str(ck), "--dir", str(d), "--episodes", "40", "--tasks", "1,2,3,4,5", "--variants", "base,ttt-mc",
            "--chunk", "200", "--json", str(tmp / "e.json")]  # fmt: skip
    ttt(*long, signal_after=60.0)
    ttt(*long, keep="kept from|interrupted", signal_after=40.0)

    print("\n## 3 dry run: K longer than the episode, bad agent_config keys / types")
    ttt(*run, "--dry-run", "--set", "K=2000")
    ttt(*run, "--dry-run", "--set", "agent_config={ lr_max = 1 }")
    ttt(*run, "--dry-run", "--set", "agent_config={ lr = 'abc' }")
    ttt(*run, "--set", "agent_config={ batch_size = 0 }")

    print("\n## 4 change only a TTT setting and rerun")
    ttt(*run, keep="eval:|pretrain:|data:")
    ttt(*run, "--set", "N=2", keep="eval:|pretrain:|data:")

    print("\n## 5 pretrain --out naming a file; unwritable --out / --cache; report --out unwritable")
    ttt("pretrain", "--dataset", DS, "--agent", "gcbc", "--out", str(tmp / "a-file"), "--dir", str(d))
    ttt("pretrain", "--dataset", DS, "--agent", "gcbc", "--out", "/sys/ttt-ck", "--dir", str(d))
    ttt("run", str(pipe), "--out", "/sys/ttt-out", "--cache", str(tmp / "cache"))
    ttt("run", str(pipe), "--out", str(tmp / "out"), "--cache", "/sys/ttt-cache")
    ttt("report", str(tmp / "out"), str(tmp / "out"), "--out", "/sys/ttt-report")

    print("\n## 6 data generate --seed -1")
    ttt("data", "generate", DS, "--episodes", "1", "--seed", "-1", "--dir", str(tmp / "d6"))
    print(f"    (partial folders left: {list((tmp / 'd6').glob('.*partial*')) if (tmp / 'd6').exists() else []})")

    print("\n## 7 pretrain --set lr=abc / batch_size=0 / lr=-1")
    for s in ("lr=abc", "batch_size=0", "lr=-1"):
        ttt("pretrain", "--dataset", DS, "--agent", "gcbc", "--out", str(tmp / "ck7"), "--dir", str(d), "--set", s)

    print("\n## 8 a truncated cache file; --force")
    rec = next((tmp / "out" / "evals").glob("mc-*.json"))
    rec.write_text(rec.read_text()[:40])
    (state,) = (tmp / "cache" / "ckpt").rglob("state-*.eqx")
    state.write_bytes(state.read_bytes()[:-9])
    ttt(*run, keep="corrupt|eval:|pretrain:")
    d8 = tmp / "d8"
    d8.mkdir()
    ttt("data", "generate", DS, "--episodes", "30", "--dir", str(d8), "--workers", "1", signal_after=12.0)
    for b in d8.glob(".*partial*/split*.npz"):
        b.write_bytes(b.read_bytes()[:100])
    ttt("data", "generate", DS, "--episodes", "30", "--dir", str(d8), "--workers", "1")

    print("\n## 9 data check on changed bytes")
    import numpy as np

    d9 = tmp / "d9"
    shutil.copytree(d, d9)
    arrays = dict(np.load(d9 / f"{DS}.npz"))
    arrays["actions"][5] *= 0.5
    np.savez_compressed(d9 / f"{DS}.npz", **arrays)
    ttt("data", "check", DS, "--dir", str(d9))

    print("\n## 10 pretrain --steps below / equal to the checkpoint's step; resuming")
    base = ["pretrain", "--dataset", DS, "--agent", "gcbc", "--chunk", "2", "--seeds", "2", "--out", str(ck),
            "--dir", str(d), *TINY]  # fmt: skip
    ttt(*base, "--steps", "2")
    ttt(*base, "--steps", "4")
    ttt(*base, "--steps", "6")

    print("\n## 11 a non-finite loss")
    ttt("pretrain", "--dataset", DS, "--agent", "gcbc", "--steps", "4", "--chunk", "2", "--out", str(tmp / "ck11"),
        "--dir", str(d), *TINY, "--set", "lr=1e30")  # fmt: skip

    print("\n## 12 ttt run --only X")
    ttt(*run, "--only", "mc", "--set", "N=3", keep="eval:|report:")
    rows = json.loads((tmp / "out" / "results.json").read_text())["rows"]
    print(f"    (results.json rows: {[r['name'] for r in rows]})")

    print("\n## 13 a directory or a binary file as the pipeline")
    ttt("run", str(tmp))
    (tmp / "bin.toml").write_bytes(bytes(range(256)))
    ttt("run", str(tmp / "bin.toml"))

    print("\n## smaller items")
    bad = tmp / "bad.toml"
    bad.write_text("[[run]]\nK = 'ten'\n")
    ttt("run", str(bad), "--dry-run")
    ttt(*ev, "--tasks", "1,1")
    ttt(*ev, "--driver", "host", "--backend", "mjx")
    files = [*tmp.rglob("*.json")]
    nan = [str(f) for f in files if "NaN" in f.read_text() or "Infinity" in f.read_text()]
    print(f"\n    strict JSON: {len(files)} JSON files written, with bare NaN / Infinity: {nan or 'none'}")
    moved = tmp / "moved-cache"
    shutil.copytree(tmp / "cache", moved)
    ttt("run", str(pipe), "--out", str(tmp / "out"), "--cache", str(moved), keep="eval:|pretrain:|data:|done")


if __name__ == "__main__":
    main()
