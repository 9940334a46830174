"""How often one pipeline row re-derives what it already knows: per row, how many times each resolver ran (dataset
spec, backbone lookup and config, fine-tune and TTGS configs, driver, eval set-up, checkpoint verification and
metadata) and how many times each file was opened (meta.json, the state file, the dataset, the eval records).

    python benchmarks/analyses/rederivation.py --cache CACHE --reference OUT [--pipeline quickstart]
        [--rows ttt,ttt-no-critic] [--scenarios cached,eval] [--set key=value ...] [--json PATH] [--markdown]

Each (row, scenario) runs in a fresh Python process (`--child`), which calls the CLI's own entry
(`ttt.cli.app.main(["run", PIPELINE, "--only", ROW, "--out", OUT, "--cache", CACHE])`, as `ttt run` does) under two
counters: `sys.setprofile` / `threading.setprofile` count the calls of the functions in RESOLVERS, matched by their
code object (the function's name and a file inside the `ttt` package, so a function that moves to another module
still counts; a name that no longer exists counts 0), and `sys.addaudithook` counts the 'open' events by file
(FILES: by base name; a write, an atomic write's temporary file included, apart from a read). Counts are split into
`planning` (before the first stage function, STAGE_MARKERS, is entered: the CLI, `plan_pipeline`,
`check_checkpoint_data`) and `stages` (from then on: the data, pre-training and evaluation stages, results and
report). For every resolver the call sites are kept (the caller as file:function, and the chain of `ttt` frames above
it), the to-do list of a refactor that wants each resolver to run once.

The scenarios, both from an existing full run (`ttt run PIPELINE --out REFERENCE --cache CACHE`, left untouched):
- `cached`: REFERENCE is copied to a scratch --out and the row run again there with --cache CACHE: its checkpoint and
  its evaluation record both come from the cache (`evaluate_run` finds `OUT/evals/ROW-KEY.json`).
- `eval`: a scratch cache holding copies of CACHE/ckpt and CACHE/data only (no `evals/`: the shared records cache
  `CACHE/evals` that `run_pipeline` passes to `evaluate_run` as `shared` is empty, so nothing is reused) and an empty
  --out: the checkpoint comes from the cache, the evaluation runs. Copies, not links: nothing can write into CACHE.
  With `--reference`, the new record is compared field by field with the reference's record of the same name
  (benchmarks/analyses/compare_records.py): a refactor that keeps the row's result bit for bit says `identical`.

`--set key=value` (repeatable) is passed to every run, e.g. `--set episodes=1` for a cheaper `eval` scenario (the
records then differ from the reference's: no comparison). Profiling every Python call slows the run (the eval
scenario's tracing most): the wall times here are not speed figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

# What a row resolves, by function name (the name the counter matches; a function of that name anywhere in the ttt
# package counts) -> what it resolves. Extend here.
RESOLVERS: dict[str, str] = {
    "get_spec": "dataset spec",
    "get_backbone": "backbone lookup (by name)",
    "agent_backbone": "backbone record of a preset (by name)",
    "meta_backbone": "backbone record of a checkpoint (by name)",
    "backbone_config": "backbone config (from checkpoint meta)",
    "make_configs": "backbone config (from presets)",
    "finetune_backbone_config": "fine-tune config",
    "ttgs_config": "TTGS config",
    "has_jax_env": "driver 'auto' (inline check)",
    "resolve_driver": "driver resolution",
    "make_setup": "eval setup",
    "checkpoint_setup": "eval setup (from a checkpoint)",
    "make_eval_setup": "eval setup (pipeline's)",
    "verify_checkpoint": "checkpoint verification (hashes the state)",
    "open_checkpoint": "checkpoint open (verifies)",
    "read_meta": "checkpoint metadata read",
    "load_checkpoint": "checkpoint state load",
    "sampler_config": "sampler config (from checkpoint meta)",
    "check_compatible": "checkpoint vs data check",
    "file_sha256": "file hash (state file)",
    "dataset_hash": "dataset content hash",
    "eval_key": "evaluation key",
}
# Entering one of these ends the planning phase (the pipeline's stages, ttt/pipeline/stages.py).
STAGE_MARKERS = ("ensure_data", "load_data", "ensure_checkpoint", "evaluate_run")
# Files by base name, first match wins -> the label they are counted under. Others are kept under their own name.
FILES: tuple[tuple[str, str], ...] = (
    ("meta.json", r"meta\.json"),
    ("state-*.eqx", r"state-\d+\.eqx"),
    ("dataset NAME-val.npz", r".+-v\d+-val\.npz"),
    ("dataset NAME.npz", r".+-v\d+\.npz"),
    ("dataset sidecar NAME.json", r".+-v\d+(-val)?\.json"),
    ("eval record ROW-KEY.json", r".+-[0-9a-f]{12}\.json"),
    ("shared eval record KEY.json", r"[0-9a-f]{12}\.json"),
    ("eval part taskT.npz", r"task\d+\.npz"),
    ("pipeline .toml", r".+\.toml"),
    ("pipeline.json", r"pipeline\.json"),
    ("results.json", r"results\.json"),
    ("figure part ROW.{success,failure}.npz", r".+\.(success|failure)\.npz"),
    ("report outputs (report.md, results.csv, *.png)", r"report\.md|results\.csv|.+\.png"),
    ("write probe", r"\.ttt-write-probe-.*"),
    ("lock file", r"\..+\.lock"),
)
IGNORED_SUFFIXES = (".py", ".pyc", ".so", ".pth", ".typed", ".zip")
IGNORED_DIRS = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix, "/proc", "/sys", "/dev"})
ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
_UNSEEN = object()


class Count:
    """Counts calls of the functions named in `names` whose code lies under one of `roots` (sys.setprofile, also in
    threads started meanwhile), and file opens (an audit hook), each split by phase: 'planning' until a function
    named in `markers` is entered, then 'stages'. `start()` / `stop()`; the audit hook stays installed (Python cannot
    remove one) but counts only while started."""

    def __init__(self, names, roots, markers=(), stack_depth=6):
        self.names, self.markers = set(names), set(markers)
        self.roots = tuple(str(Path(r).resolve()) + os.sep for r in roots)
        self.stack_depth = stack_depth
        self.phase = "planning"
        self.calls: dict[str, Counter] = {}  # name -> Counter of (phase)
        self.sites: dict[str, Counter] = {}  # name -> Counter of caller 'file:function'
        self.stacks: dict[str, Counter] = {}  # name -> Counter of the chain of package frames above
        self.defined: dict[str, set] = {}  # name -> files defining a function of that name that ran
        self.opens: dict[str, Counter] = {}  # file label -> Counter of (read|write, phase)
        self.openers: dict[str, Counter] = {}  # file label -> Counter of the package function that opened it
        self.active = False
        self.tmp = tempfile.gettempdir()  # here: tempfile creates files the first time (the hook must not)
        self._codes: dict = {}
        self._hooked = False

    # -- calls
    def _match(self, code):
        name = code.co_name
        if name not in self.names and name not in self.markers:
            return None
        return name if code.co_filename.startswith(self.roots) else None

    def _profile(self, frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        name = self._codes.get(code, _UNSEEN)
        if name is _UNSEEN:
            name = self._codes[code] = self._match(code)
        if name is None:
            return
        if name in self.markers:
            self.phase = "stages"
        if name in self.names:
            self.calls.setdefault(name, Counter())[self.phase] += 1
            self.defined.setdefault(name, set()).add(self._rel(code.co_filename))
            chain = self._chain(frame.f_back)
            self.sites.setdefault(name, Counter())[chain[0] if chain else "?"] += 1
            self.stacks.setdefault(name, Counter())[" < ".join(chain)] += 1

    def _rel(self, filename: str) -> str:
        try:
            return Path(filename).resolve().relative_to(ROOT).as_posix()
        except ValueError:
            return Path(filename).name

    def _chain(self, frame) -> list[str]:
        """The caller, then the package's frames above it (file:function), nearest first."""
        out = []
        while frame is not None and len(out) < self.stack_depth:
            f = frame.f_code.co_filename
            if not out or f.startswith(self.roots):
                out.append(f"{self._rel(f)}:{frame.f_code.co_name}")
            frame = frame.f_back
        return out

    # -- files
    def _audit(self, event, args):
        if event != "open" or not self.active:
            return
        path, mode, flags = args
        if isinstance(path, int):  # an open file descriptor (os.fdopen): its opening was counted
            return
        path = os.fsdecode(path)
        # Python's own files, and a folder (NamedTemporaryFile audits its folder, then the file it makes there)
        if path.endswith(IGNORED_SUFFIXES) or path.startswith(IGNORED_DIRS) or os.path.isdir(path):
            return
        name = os.path.basename(path)
        if os.path.dirname(os.path.abspath(path)) == self.tmp:  # e.g. a maze's MuJoCo XML
            name = "(a temporary file in the temp folder)"
        m = re.fullmatch(r"\.(.+)\.[^.]+\.tmp", name)  # ttt.storage's atomic writes: .NAME.RANDOM.tmp
        write = m is not None or (
            any(c in mode for c in "wax+") if mode else bool((flags or 0) & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        )
        label = classify(m.group(1) if m else name)
        phase = self.phase
        self.opens.setdefault(label, Counter())[("write" if write else "read", phase)] += 1
        frame = sys._getframe(1)
        while frame is not None and not frame.f_code.co_filename.startswith(self.roots):
            frame = frame.f_back
        opener = "?" if frame is None else f"{self._rel(frame.f_code.co_filename)}:{frame.f_code.co_name}"
        self.openers.setdefault(label, Counter())[opener] += 1

    def start(self) -> None:
        if not self._hooked:
            sys.addaudithook(self._audit)
            self._hooked = True
        self.active = True
        threading.setprofile(self._profile)
        sys.setprofile(self._profile)

    def stop(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)
        self.active = False

    def report(self) -> dict:
        resolvers = {}
        for name in sorted(self.names, key=lambda n: list(RESOLVERS).index(n) if n in RESOLVERS else len(RESOLVERS)):
            c = self.calls.get(name, Counter())
            resolvers[name] = dict(
                what=RESOLVERS.get(name, ""), calls=sum(c.values()), planning=c["planning"], stages=c["stages"],
                defined_in=sorted(self.defined.get(name, ())),
                sites=dict(self.sites.get(name, Counter()).most_common()),
                stacks=dict(self.stacks.get(name, Counter()).most_common()),
            )  # fmt: skip
        files = {}
        for label, c in sorted(self.opens.items()):
            files[label] = dict(
                read=c[("read", "planning")] + c[("read", "stages")], write=c[("write", "planning")] +
                c[("write", "stages")], read_planning=c[("read", "planning")], read_stages=c[("read", "stages")],
                write_planning=c[("write", "planning")], write_stages=c[("write", "stages")],
                openers=dict(self.openers[label].most_common()),
            )  # fmt: skip
        return dict(resolvers=resolvers, files=files)


def classify(name: str) -> str:
    for label, pattern in FILES:
        if re.fullmatch(pattern, name):
            return label
    return name


# -- one measured invocation (a fresh process)


def child(a) -> None:
    import ttt
    from ttt.cli.app import main as cli_main

    argv = ["run", a.pipeline, "--only", a.row, "--out", a.out, "--cache", a.cache]
    for s in a.set or ():
        argv += ["--set", s]
    count = Count(RESOLVERS, [Path(ttt.__file__).parent], STAGE_MARKERS)
    t0 = time.perf_counter()
    count.start()
    try:
        rc = cli_main(argv)
    finally:
        count.stop()
    doc = dict(row=a.row, argv=["ttt", *argv], rc=rc, wall_s=round(time.perf_counter() - t0, 1),
               ttt=str(Path(ttt.__file__).parent), **count.report())  # fmt: skip
    Path(a.child_json).write_text(json.dumps(doc, indent=1))


# -- the scenarios


def prepare(a, row: str, scenario: str, scratch: Path) -> tuple[str, str]:
    """(--out, --cache) of one measured invocation."""
    where = scratch / f"{scenario}-{row}"
    if scenario == "cached":
        if a.reference is None:
            out = where / "out"
            print(f"  seeding {out} (not measured)", flush=True)  # the row's record then sits in OUT/evals
            subprocess.run([sys.executable, "-m", "ttt.cli", "run", a.pipeline, "--only", row, "--out", str(out),
                            "--cache", a.cache, *sum((["--set", s] for s in a.set or ()), [])], check=True,
                           stdout=subprocess.DEVNULL)  # fmt: skip
        else:
            out = where / "out"
            shutil.copytree(a.reference, out)
        return str(out), a.cache
    cache = where / "cache"
    for sub in ("ckpt", "data"):
        shutil.copytree(Path(a.cache) / sub, cache / sub, symlinks=False)
    return str(where / "out"), str(cache)


def measure(a, row: str, scenario: str, scratch: Path) -> dict:
    out, cache = prepare(a, row, scenario, scratch)
    log = scratch / f"{scenario}-{row}.log"
    js = scratch / f"{scenario}-{row}.json"
    cmd = [sys.executable, __file__, "--child", "--pipeline", a.pipeline, "--row", row, "--out", out, "--cache",
           cache, "--child-json", str(js), *sum((["--set", s] for s in a.set or ()), [])]  # fmt: skip
    t0 = time.perf_counter()
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    wall = time.perf_counter() - t0
    if p.returncode != 0 or not js.exists():
        sys.exit(f"{scenario} {row}: exit {p.returncode}; log {log}:\n{log.read_text()[-3000:]}")
    doc = json.loads(js.read_text())
    doc.update(scenario=scenario, process_wall_s=round(wall, 1), log_tail=log.read_text().splitlines()[-4:])
    if doc["rc"] != 0:
        sys.exit(f"{scenario} {row}: ttt run exited {doc['rc']}; log {log}")
    if scenario == "eval" and a.reference is not None and not a.set:
        from compare_records import compare

        new = sorted((Path(out) / "evals").glob(f"{row}-*.json"))
        ref = Path(a.reference) / "evals" / new[0].name if new else None
        if ref is not None and ref.exists():
            diff = compare(json.loads(ref.read_text()), json.loads(new[0].read_text()))
            doc["same_as_reference"] = dict(record=new[0].name, identical=diff is None, first_difference=diff)
    return doc


def markdown(docs: list[dict]) -> str:
    cols = [f"{d['row']} ({d['scenario']})" for d in docs]
    lines = ["Resolver calls per row (total = planning + stages):", "",
             "| function | resolves | " + " | ".join(cols) + " |", "|---|---|" + "---:|" * len(cols)]  # fmt: skip
    for name, what in RESOLVERS.items():
        cells = []
        for d in docs:
            r = d["resolvers"][name]
            cells.append(f"{r['calls']} ({r['planning']}+{r['stages']})" if r["calls"] else "0")
        lines.append(f"| `{name}` | {what} | " + " | ".join(cells) + " |")
    labels = [lab for lab, _ in FILES] + sorted({k for d in docs for k in d["files"]} - {lab for lab, _ in FILES})
    lines += ["", "File opens per row, read / write (reads: planning + stages):", "",
              "| file | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]  # fmt: skip
    for label in labels:
        if not any(label in d["files"] for d in docs):
            continue
        cells = []
        for d in docs:
            f = d["files"].get(label)
            reads = "0" if f is None else f"{f['read']} ({f['read_planning']}+{f['read_stages']})"
            cells.append(f"{reads} / {0 if f is None else f['write']}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "| | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols),
              "| wall s (under the counter) | " + " | ".join(f"{d['wall_s']:.0f}" for d in docs) + " |"]  # fmt: skip
    if any("same_as_reference" in d for d in docs):
        cells = [("identical" if d["same_as_reference"]["identical"] else "DIFFERS") if "same_as_reference" in d
                 else "-" for d in docs]  # fmt: skip
        lines.append("| record vs the reference's | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def sites_text(docs: list[dict], top: int = 4) -> str:
    """Where each resolver that ran more than once per row was called from (the to-do list)."""
    lines = []
    for d in docs:
        for name, r in d["resolvers"].items():
            if r["calls"] > 1:
                where = "; ".join(f"{s} x{n}" for s, n in list(r["sites"].items())[:top])
                lines.append(f"- {d['row']} ({d['scenario']}): `{name}` x{r['calls']}: {where}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pipeline", default="quickstart")
    ap.add_argument("--rows", default="ttt,ttt-no-critic")
    ap.add_argument("--scenarios", default="cached,eval")
    ap.add_argument("--cache", default=None, help="the full run's cache (default: $TTT_CACHE or ~/.cache/ttt)")
    ap.add_argument("--reference", default=None, help="the full run's --out (copied for 'cached'; never written)")
    ap.add_argument("--set", action="append", help="key=value passed to every run (repeatable)")
    ap.add_argument("--scratch", default=None, help="where the scratch outputs and caches go (default: a temp dir)")
    ap.add_argument("--json", default=None, help="write every measurement here")
    ap.add_argument("--markdown", action="store_true", help="print the tables as markdown (else: plain)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--row", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--child-json", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    sys.path.insert(0, str(HERE))
    from ttt.pipeline.keys import cache_root

    a.cache = str(cache_root(a.cache))
    scratch = Path(a.scratch or tempfile.mkdtemp(prefix="rederivation-"))
    scratch.mkdir(parents=True, exist_ok=True)
    docs = []
    for scenario in a.scenarios.split(","):
        for row in a.rows.split(","):
            print(f"{scenario} {row} ...", flush=True)
            docs.append(measure(a, row, scenario, scratch))
            print(f"  {docs[-1]['wall_s']:.0f} s under the counter", flush=True)
    table = markdown(docs)
    print(table if a.markdown else table.replace("`", ""))
    print("\nResolvers run more than once per row, by caller (top 4):\n" + (sites_text(docs) or "(none)"))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        meta = dict(command=" ".join(["python", *sys.argv]), date=time.strftime("%Y-%m-%d"), scratch=str(scratch))
        Path(a.json).write_text(json.dumps(dict(**meta, runs=docs), indent=1) + "\n")
    if a.scratch is None:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
