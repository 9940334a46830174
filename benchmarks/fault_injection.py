"""Fault injection: kill `ttt data generate`, `ttt pretrain` and `ttt run` at random moments, many times, and check
that reruns finish with results identical to an uninterrupted run.

For each command: one uninterrupted reference run (its wall time T), then a faulty copy in a fresh directory:
start the command, send a random signal (SIGKILL, SIGTERM or SIGINT) after a random delay in [0.3, T] s, rerun,
... until `--kills` signals have landed on a running process; then a last rerun without a signal. A kill point is
survived when the process stopped as promised (SIGKILL: at once; SIGTERM / SIGINT: exit 143 / 130 within 10 s with
the one-line message, no traceback) and the final results equal the reference's: the dataset arrays
(sha256), the checkpoint's state file (sha256) and step, the pipeline's per-episode successes and steps.

    python benchmarks/fault_injection.py --kills 10          # writes benchmarks/results/fault_injection.json

Sizes are tiny (a 60-episode dataset, 8x8 networks, a two-row pipeline) so that many kills fit in minutes of CPU;
what is exercised is the resume logic, not the models.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CODE = "import sys; from ttt.cli import main; sys.exit(main(sys.argv[1:]))"
DATASET = "pointmaze-medium-stitch-v0"
TINY = ["--set", "actor_hidden_dims=[8,8]", "--set", "value_hidden_dims=[8,8]", "--set", "batch_size=8"]
PIPE = """
name = "fault"
[defaults]
dataset = "pointmaze-medium-stitch-v0"
data_episodes = 30
agent = "gcbc"
agent_config = { actor_hidden_dims = [8, 8], value_hidden_dims = [8, 8], batch_size = 8 }
steps = 40
train_chunk = 10
seeds = 2
episodes = 1
tasks = [1, 2, 3]
K = 500
N = 2
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
SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}
EXPECTED_RC = {"SIGKILL": -9, "SIGTERM": 143, "SIGINT": 130}


def argv_of(command: str, root: Path, ref_data: Path) -> list[str]:
    if command == "data":
        return ["data", "generate", DATASET, "--episodes", "60", "--seed", "0", "--dir", str(root / "data"),
                "--workers", "1"]  # fmt: skip
    if command == "pretrain":
        return ["pretrain", "--dataset", DATASET, "--agent", "gcbc", "--steps", "60", "--chunk", "10", "--seeds", "2",
                "--out", str(root / "ck"), "--dir", str(ref_data), *TINY]  # fmt: skip
    (root / "fault.toml").write_text(PIPE)
    return ["run", str(root / "fault.toml"), "--out", str(root / "out"), "--cache", str(root / "cache")]


def outcome(command: str, root: Path) -> str:
    """A digest of what the command produced (equal digests: identical results)."""
    import numpy as np

    h = hashlib.sha256()
    if command == "data":
        from ttt.data.generate import array_digest

        for name in (f"{DATASET}.npz", f"{DATASET}-val.npz"):
            with np.load(root / "data" / name) as z:
                h.update(array_digest({k: z[k] for k in z.files}).encode())
    elif command == "pretrain":
        meta = json.loads((root / "ck" / "meta.json").read_text())
        h.update(str(meta["step"]).encode())
        h.update((root / "ck" / meta["state_file"]).read_bytes())
    else:
        doc = json.loads((root / "out" / "results.json").read_text())
        for rec in doc["records"]:
            h.update(json.dumps([rec["run"]["name"], rec["success"], rec["steps"], rec["per_seed"]]).encode())
    return h.hexdigest()


def start(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CODE, *argv], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def attempt(argv: list[str], delay: float | None, sig: str) -> dict:
    """Run the command; after `delay` s (None: never) send `sig` if it still runs."""
    p = start(argv)
    t0 = time.perf_counter()
    try:
        p.wait(timeout=delay)
        out, err = p.communicate()
        return dict(killed=False, rc=p.returncode, err=err[-2000:], wall=time.perf_counter() - t0)
    except subprocess.TimeoutExpired:
        pass
    p.send_signal(SIGNALS[sig])
    t1 = time.perf_counter()
    out, err = p.communicate(timeout=120)
    done = any(m in out for m in ("done in", "saved ", "nothing to train"))  # the signal came after the work
    return dict(killed=not done, sig=sig, at=delay, rc=p.returncode, stop_s=time.perf_counter() - t1,
                err=err[-2000:])  # fmt: skip


def survived(a: dict) -> bool:
    """The process stopped as promised for its signal."""
    if a["rc"] != EXPECTED_RC[a["sig"]]:
        return False
    if a["sig"] == "SIGKILL":
        return True
    return a["stop_s"] < 10 and "finished work is saved" in a["err"] and "Traceback" not in a["err"]


def inject(command: str, kills: int, rng: random.Random, work: Path, log=print) -> dict:
    ref, faulty = work / f"{command}-ref", work / f"{command}-faulty"
    for d in (ref, faulty):
        d.mkdir(parents=True, exist_ok=True)
    ref_data = work / "data-ref" / "data"
    if command != "data" and not (ref_data / f"{DATASET}.npz").exists():
        inject_ref = attempt(argv_of("data", work / "data-ref", ref_data), None, "SIGKILL")
        assert inject_ref["rc"] == 0, inject_ref["err"]
    a = attempt(argv_of(command, ref, ref_data), None, "SIGKILL")
    assert a["rc"] == 0, a["err"]
    wall = a["wall"]
    want = outcome(command, ref)
    # (for command data, the reference run's directory is ref_data itself: the other commands read it)
    landed, attempts = [], 0
    while len(landed) < kills and attempts < 4 * kills + 4:
        attempts += 1
        sig = rng.choice(list(SIGNALS))
        a = attempt(argv_of(command, faulty, ref_data), rng.uniform(0.3, wall), sig)
        if not a["killed"]:  # it finished before the signal: start over to find more kill points
            assert a["rc"] == 0 or "sig" in a, a["err"]
            shutil.rmtree(faulty)
            faulty.mkdir()
            continue
        a["survived"] = survived(a)
        landed.append(a)
        log(f"  {command}: {sig} after {a['at']:.1f} s: exit {a['rc']}, stopped in {a['stop_s']:.2f} s"
            f"{'' if a['survived'] else '  NOT AS PROMISED: ' + a['err'][-300:]}")  # fmt: skip
    final = attempt(argv_of(command, faulty, ref_data), None, "SIGKILL")
    assert final["rc"] == 0, final["err"]
    same = outcome(command, faulty) == want
    log(f"{command}: {len(landed)} kill points, reference {wall:.1f} s; rerun results identical: {same}")
    return dict(command=command, reference_s=round(wall, 1), kills=len(landed),
                survived=sum(a["survived"] for a in landed), identical=same,
                points=[{k: (round(v, 2) if isinstance(v, float) else v) for k, v in a.items() if k != "err"}
                        for a in landed])  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=10, help="signals to land per command")
    ap.add_argument("--commands", default="data,pretrain,run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "fault_injection.json"))
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ttt-fault-") as tmp:
        results = [inject(c, args.kills, rng, Path(tmp)) for c in args.commands.split(",")]
    doc = dict(
        kills=sum(r["kills"] for r in results),
        survived=sum(r["survived"] for r in results),
        all_identical=all(r["identical"] for r in results),
        wall_s=round(time.perf_counter() - t0, 1),
        commands=results,
    )
    print(f"kill points survived: {doc['survived']} of {doc['kills']}; reruns identical: {doc['all_identical']}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=1))
    return doc


if __name__ == "__main__":
    doc = main()
    sys.exit(0 if doc["survived"] == doc["kills"] and doc["all_identical"] else 1)
