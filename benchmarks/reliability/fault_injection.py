"""Fault injection: kill `ttt data generate`, `ttt pretrain` and `ttt run` at random moments, many times, and check
that reruns finish with results identical to an uninterrupted run.

For each command: one uninterrupted reference run (its wall time T), then a faulty copy in a fresh directory:
start the command, send a random signal (SIGKILL, SIGTERM or SIGINT) after a random delay in [0.3, T] s, rerun,
... until `--kills` signals have landed on a running process; then a last rerun without a signal. A kill point is
survived when the process stopped as promised (SIGKILL: at once; SIGTERM / SIGINT: exit 143 / 130 within 10 s with
the one-line message, no traceback) and the final results equal the reference's: the dataset arrays
(sha256), the checkpoint's state file (sha256) and step, the pipeline's per-episode successes and steps.

    python benchmarks/reliability/fault_injection.py --kills 10    # writes benchmarks/results/fault_injection.json

Two more faults, for real (`--faults disk,concurrent`, the default; `--faults ""` skips them):

- disk: a full disk. A 3 MB tmpfs is mounted (root only; elsewhere the case is reported as not run, and
  tests/test_faults.py simulates it) and filled to the last byte; `data generate --dir`, `pretrain --out`,
  `eval --json`, `run --cache` and `run --out` into it must each exit 2 with one line naming the path, the space
  needed and the space free (before any work where the size is known in advance: generation), no traceback, no
  half file, and `eval --json` must keep its results elsewhere and say where.
- concurrent: two processes at once: two `data generate` into one folder, two `ttt run` of one pipeline into one
  fresh cache, and `ttt run --only a` beside `--only b` into one --out. Both must succeed, the dataset must be
  listed once and complete, and results.json must hold both rows.

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

REPO = Path(__file__).resolve().parents[2]
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


def one_line(err: str) -> str | None:
    """The `error: ...` line of a refused command's stderr (progress lines before it allowed), None if there is
    no such last line or a traceback."""
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    if not lines or "Traceback" in err or not lines[-1].startswith("error: "):
        return None
    return lines[-1]


def _fill(directory: Path) -> None:
    """Write a filler file until the file system of `directory` is full."""
    with open(directory / "filler", "wb", buffering=0) as f:
        for size in (1 << 16, 1 << 10, 1):  # down to the last byte
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                pass


def _half_files(root: Path) -> list[str]:
    """Files a failed write left behind: temporary files and anything but the filler and lock files."""
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != "filler"
            and not p.name.endswith(".lock") and p.name != ".lock" and p.stat().st_size > 0]  # fmt: skip


def disk_probe(work: Path, log=print) -> dict:
    """Every writing command into a full 3 MB tmpfs: exit 2, one line naming the path and the space, no half file."""
    mnt = work / "tmpfs"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True,
                             text=True)  # fmt: skip
    if mounted.returncode != 0:
        why = (mounted.stderr or mounted.stdout).strip().splitlines()[-1:] or ["refused"]
        log(f"disk: cannot mount a tmpfs here ({why[0]}); not run (tests/test_faults.py simulates a full disk)")
        return dict(run=False, why=why[0], cases=[])
    data = work / "data-ref" / "data"
    if not (data / f"{DATASET}.npz").exists():
        assert attempt(argv_of("data", work / "data-ref", data), None, "SIGKILL")["rc"] == 0
    ck = work / "disk-ck"
    train = ["pretrain", "--dataset", DATASET, "--agent", "gcbc", "--steps", "10", "--chunk", "10", "--seeds", "2",
             "--dir", str(data), *TINY]  # fmt: skip
    assert attempt([*train, "--out", str(ck)], None, "SIGKILL")["rc"] == 0
    (work / "disk").mkdir(exist_ok=True)
    (work / "disk" / "fault.toml").write_text(PIPE)
    cases = {
        "data generate --dir FULL": ["data", "generate", DATASET, "--episodes", "30", "--dir", str(mnt / "d"),
                                     "--workers", "1"],
        "pretrain --out FULL": [*train, "--out", str(mnt / "ck")],
        "eval --json FULL": ["eval", str(ck), "--dir", str(data), "--episodes", "1", "--tasks", "1", "--variants",
                             "base", "--json", str(mnt / "e.json")],
        "run --cache FULL": ["run", str(work / "disk" / "fault.toml"), "--out", str(work / "disk" / "out"), "--cache",
                             str(mnt / "cache")],
        "run --out FULL": ["run", str(work / "disk" / "fault.toml"), "--out", str(mnt / "out"), "--cache",
                           str(work / "disk" / "cache")],
    }  # fmt: skip
    out = []
    try:
        for name, argv in cases.items():
            for p in list(mnt.iterdir()):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
            _fill(mnt)
            a = attempt(argv, None, "SIGKILL")
            line = one_line(a["err"])
            kept = None
            if name.startswith("eval") and line and "kept in " in line:
                kept = Path(line.split("kept in ")[1].split(" instead")[0])
            ok = (a["rc"] == 2 and line is not None and str(mnt) in line and "needs" in line and " free" in line
                  and not _half_files(mnt)
                  and (not name.startswith("eval") or (kept is not None and kept.exists())))  # fmt: skip
            out.append(dict(case=name, rc=a["rc"], line=line or a["err"][-400:], half_files=_half_files(mnt),
                            kept=str(kept) if kept else None, ok=ok))  # fmt: skip
            log(f"disk: {name}: exit {a['rc']}: {line or a['err'][-300:]}{'' if ok else '  NOT AS PROMISED'}")
            if kept is not None:
                kept.unlink(missing_ok=True)
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
    return dict(run=True, cases=out, ok=all(c["ok"] for c in out))


def _together(argvs: list[list[str]]) -> list[dict]:
    """Start the commands at the same moment; wait for all."""
    procs = [start(a) for a in argvs]
    res = []
    for p in procs:
        o, e = p.communicate(timeout=900)
        res.append(dict(rc=p.returncode, out=o[-2000:], err=e[-2000:]))
    return res


def concurrent_probe(work: Path, log=print) -> dict:
    """Two writers at once into one folder / cache / output: both succeed and nothing is lost or listed twice."""
    root = work / "concurrent"
    root.mkdir()
    out = []
    # 1. two `data generate` into one folder
    d = root / "data"
    gen_argv = ["data", "generate", DATASET, "--episodes", "100", "--seed", "0", "--dir", str(d), "--workers", "1"]
    res = _together([gen_argv, gen_argv])
    listing = subprocess.run([sys.executable, "-c", CODE, "data", "list", "--dir", str(d)], cwd=REPO,
                             capture_output=True, text=True).stdout  # fmt: skip
    rows = [ln for ln in listing.splitlines() if DATASET in ln]
    ok = all(r["rc"] == 0 and "Traceback" not in r["err"] for r in res) and len(rows) == 1 and "partial" not in listing
    out.append(dict(case="two data generate into one --dir", rcs=[r["rc"] for r in res], listed=rows, ok=ok,
                    waited=any("waiting: another ttt process" in r["err"] for r in res)))  # fmt: skip
    # 2. two `ttt run` of one pipeline into one fresh cache (and one --out)
    (root / "fault.toml").write_text(PIPE)
    run_argv = ["run", str(root / "fault.toml"), "--out", str(root / "out"), "--cache", str(root / "cache")]
    res = _together([run_argv, run_argv])
    doc = json.loads((root / "out" / "results.json").read_text()) if (root / "out" / "results.json").exists() else {}
    names = sorted(r["run"]["name"] for r in doc.get("records", []))
    ok = all(r["rc"] == 0 and "Traceback" not in r["err"] for r in res) and names == ["base", "mc"]
    out.append(dict(case="two ttt run into one fresh --cache", rcs=[r["rc"] for r in res], rows=names, ok=ok,
                    waited=any("waiting: another ttt process" in r["err"] for r in res)))  # fmt: skip
    # 3. --only base and --only mc into one --out at once (the cache is warm: both evaluate at the same time)
    only = [[*run_argv[:3], str(root / "out2"), *run_argv[4:], "--only", n] for n in ("base", "mc")]
    res = _together(only)
    doc = json.loads((root / "out2" / "results.json").read_text()) if (root / "out2" / "results.json").exists() else {}
    names = sorted(r["run"]["name"] for r in doc.get("records", []))
    ok = all(r["rc"] == 0 and "Traceback" not in r["err"] for r in res) and names == ["base", "mc"]
    out.append(dict(case="ttt run --only base and --only mc into one --out", rcs=[r["rc"] for r in res], rows=names,
                    ok=ok))  # fmt: skip
    for c in out:
        log(f"concurrent: {c['case']}: exits {c['rcs']}, {c.get('listed') or c.get('rows')}"
            f"{'' if c['ok'] else '  NOT AS PROMISED: ' + json.dumps(res)[-600:]}")  # fmt: skip
    return dict(run=True, cases=out, ok=all(c["ok"] for c in out))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=10, help="signals to land per command (0: none)")
    ap.add_argument("--commands", default="data,pretrain,run")
    ap.add_argument("--faults", default="disk,concurrent", help="also: disk (a full tmpfs), concurrent (two writers)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "fault_injection.json"))
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    faults = [f for f in args.faults.split(",") if f]
    with tempfile.TemporaryDirectory(prefix="ttt-fault-") as tmp:
        results = [inject(c, args.kills, rng, Path(tmp)) for c in args.commands.split(",")] if args.kills else []
        extra = {}
        if "disk" in faults:
            extra["disk"] = disk_probe(Path(tmp))
        if "concurrent" in faults:
            extra["concurrent"] = concurrent_probe(Path(tmp))
    doc = dict(
        kills=sum(r["kills"] for r in results),
        survived=sum(r["survived"] for r in results),
        all_identical=all(r["identical"] for r in results),
        faults_ok=all(e.get("ok", True) for e in extra.values()),
        wall_s=round(time.perf_counter() - t0, 1),
        commands=results,
        **extra,
    )
    print(f"kill points survived: {doc['survived']} of {doc['kills']}; reruns identical: {doc['all_identical']}"
          + "".join(f"; {k}: {'ok' if e.get('ok') else ('not run' if not e['run'] else 'FAILED')}"
                    for k, e in extra.items()))  # fmt: skip
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=1))
    return doc


if __name__ == "__main__":
    doc = main()
    sys.exit(0 if doc["survived"] == doc["kills"] and doc["all_identical"] and doc["faults_ok"] else 1)
