"""A probe of bad inputs, corrupt and hostile files, interruptions and Python misuse: every case must be
refused with one line (CLI: exit 2, no traceback; Python: a `TttError` naming the argument), or do what it says.

    python benchmarks/reliability/probe.py        # writes benchmarks/results/probe.md (the table) and probe.json
    python benchmarks/reliability/probe.py --before OLD.json   # ... with a column of an older version's outcomes
                                                               #     (its probe.json)

Each case runs in this process (the CLI through `ttt.cli.main`, its stdout and stderr captured) on a tiny dataset and
checkpoint made first (3 navigate episodes; GC-BC with 8x8 networks, 2 seeds, 4 steps), except the interruptions,
which are real subprocesses sent a signal. A case passes when its outcome matches the expectation: `refuse NEEDLE`
(exit 2 / TttError, one line, no traceback, NEEDLE in the line) or `ok` (exit 0).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAV = "pointmaze-medium-navigate-v0"
TINY = ["--set", "actor_hidden_dims=[8,8]", "--set", "value_hidden_dims=[8,8]", "--set", "batch_size=8"]
CODE = "import sys; from ttt.cli import main; sys.exit(main(sys.argv[1:]))"


def cli(argv: list[str]) -> tuple[int, str, str]:
    """`ttt ARGV` in this process: (exit status, stdout, stderr); an escaping exception is a traceback on stderr."""
    from ttt.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except BaseException:  # noqa: BLE001  (what a user would see: a traceback)
            traceback.print_exc()
            rc = 1
    return rc, out.getvalue(), err.getvalue()


def py(fn) -> tuple[int, str, str]:
    """A Python call: (0, repr of the result, '') / (2, '', 'error: MESSAGE') for a TttError / (1, '', traceback)."""
    from ttt.errors import TttError

    try:
        r = fn()
    except TttError as e:
        return 2, "", f"error: {e}"
    except BaseException:  # noqa: BLE001
        return 1, "", traceback.format_exc()
    return 0, repr(r)[:200], ""


def judge(expect: str, rc: int, out: str, err: str) -> tuple[bool, str]:
    """(passed, observed): `expect` is 'ok' or 'refuse NEEDLE'."""
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    if "Traceback" in err:
        tb = [ln for ln in err.strip().splitlines() if ln.strip()]
        return False, f"traceback: {tb[-1][:200]}"
    if expect == "ok":
        return rc == 0, f"exit {rc}" + (f": {last[:160]}" if rc else "")
    needle = expect.removeprefix("refuse").strip()
    errors = [ln for ln in lines if ln.startswith("error: ")]
    one = len(errors) == 1 and last.startswith("error: ")
    return rc == 2 and one and needle.lower() in last.lower(), f"exit {rc}: {last[:220]}"


def make_fixture(root: Path) -> tuple[Path, Path]:
    from ttt.data import generate as gen

    data = root / "data"
    gen.generate(NAV, episodes=3, seed=0, directory=data, workers=1)
    ck = root / "ck"
    rc, _, err = cli(["pretrain", "--dataset", NAV, "--agent", "gcbc", "--steps", "4", "--chunk", "2", "--seeds", "2",
                      "--out", str(ck), "--dir", str(data), *TINY])  # fmt: skip
    assert rc == 0, err
    return data, ck


def copy_ck(ck: Path, dst: Path, edit=None) -> Path:
    import shutil

    shutil.copytree(ck, dst)
    if edit:
        edit(dst)
    return dst


def signal_case(argv: list[str], sig: int, after: float) -> tuple[int, str, str]:
    p = subprocess.Popen([sys.executable, "-c", CODE, *argv], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)  # fmt: skip
    time.sleep(after)
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    return p.returncode, out, err


def cases(root: Path, data: Path, ck: Path) -> list[tuple[str, str, str, object]]:
    """(case, command as shown, expectation, thunk returning (rc, out, err))."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import ttt
    from ttt.evaluation import evaluate

    E = ["eval", str(ck), "--dir", str(data), "--episodes", "1", "--tasks", "1"]  # noqa: N806
    ev = lambda *a: (lambda: cli([*E, *a]))  # noqa: E731
    P = ["pretrain", "--dataset", NAV, "--agent", "gcbc", "--out", str(root / "p"), "--dir", str(data), *TINY]  # noqa: N806
    pre = lambda *a: (lambda: cli([*P, *a]))  # noqa: E731
    setup, agents, ds, env = ttt.load_run(ck, data_dir=data, variant="ttt-mc", K=250, N=2)
    agent = jax.tree.map(lambda x: x[0] if hasattr(x, "shape") and x.ndim else x, agents)

    def toml(name: str, text: str) -> str:
        p = root / f"{name}.toml"
        p.write_text(text)
        return str(p)

    def hostile_meta(kind: str) -> Path:
        def edit(d: Path):
            m = json.loads((d / "meta.json").read_text())
            if kind == "list":
                (d / "meta.json").write_text("[1, 2]")
            elif kind == "step":
                m["step"] = "four"
                (d / "meta.json").write_text(json.dumps(m))
            elif kind == "config":
                m["config"] = {"actor_hidden_dims": "abc"}
                (d / "meta.json").write_text(json.dumps(m))
            elif kind == "state":
                f = d / m["state_file"]
                f.write_bytes(os.urandom(f.stat().st_size))
            elif kind == "nan":
                (d / "meta.json").write_text(json.dumps(m).replace('"seeds": 2', '"seeds": NaN'))
            elif kind == "escape":
                m["state_file"] = "../../../../etc/passwd"
                (d / "meta.json").write_text(json.dumps(m))

        return copy_ck(ck, root / f"ck-{kind}", edit)

    def bad_data(kind: str) -> Path:
        import shutil

        d = root / f"data-{kind}"
        shutil.copytree(data, d)
        f = d / f"{NAV}.npz"
        if kind == "truncated":
            f.write_bytes(f.read_bytes()[:500])
        elif kind == "pickle":
            np.savez(f, observations=np.array([object()] * 3, dtype=object), actions=np.zeros(3), terminals=np.ones(3))
        elif kind == "dtype":
            with np.load(data / f"{NAV}.npz") as z:
                arrays = {k: z[k] for k in z.files}
            arrays["observations"] = arrays["observations"].astype(np.float64)[:, :1]
            np.savez(f, **arrays)
        elif kind == "nan":
            with np.load(data / f"{NAV}.npz") as z:
                arrays = {k: z[k] for k in z.files}
            arrays["observations"][3] = np.nan
            np.savez(f, **arrays)
        elif kind == "sidecar":
            (d / f"{NAV}.json").write_text("{not json")
        elif kind == "symlink":
            f.unlink()
            f.symlink_to("/dev/zero")
        return d

    results_dir = root / "res"
    (results_dir / "bad").mkdir(parents=True)
    (results_dir / "bad" / "results.json").write_text('{"rows": 3, "records": "x"}')
    (results_dir / "trunc").mkdir(parents=True)
    (results_dir / "trunc" / "results.json").write_text('{"rows": [')
    return [
        # ---- evaluation options
        ("eval: --lr inf", "ttt eval CK --variants ttt-mc --lr inf", "refuse --lr", ev("--variants", "ttt-mc",
                                                                                     "--lr", "inf")),
        ("eval: --lr nan", "ttt eval CK --variants ttt-mc --lr nan", "refuse --lr", ev("--variants", "ttt-mc",
                                                                                     "--lr", "nan")),
        ("eval: --eps inf", "ttt eval CK --variants ttt-mc --eps inf", "refuse --eps", ev("--variants", "ttt-mc",
                                                                                        "--eps", "inf")),
        ("eval: --q nan", "ttt eval CK --variants ttt-mc --q nan", "refuse --q",
         ev("--variants", "ttt-mc", "--q", "nan")),
        ("eval: --mix 1.5", "ttt eval CK --variants ttt-mc --mix 1.5", "refuse --mix", ev("--variants", "ttt-mc",
                                                                                        "--mix", "1.5")),
        ("eval: --K 0", "ttt eval CK --variants ttt-mc --K 0", "refuse --K", ev("--variants", "ttt-mc", "--K", "0")),
        ("eval: --K past the episode", "ttt eval CK --variants ttt-mc --K 5000", "refuse --K",
         ev("--variants", "ttt-mc", "--K", "5000")),
        ("eval: --seed -1", "ttt eval CK --seed -1", "refuse --seed", ev("--seed", "-1")),
        ("eval: --seed 2^70", "ttt eval CK --seed 1180591620717411303424", "refuse --seed",
         ev("--seed", str(2**70))),
        ("eval: --chunk 0", "ttt eval CK --chunk 0", "refuse --chunk", ev("--chunk", "0")),
        ("eval: --batch 0", "ttt eval CK --variants ttt-mc --batch 0", "refuse --batch",
         ev("--variants", "ttt-mc", "--batch", "0")),
        ("eval: --h-min 0", "ttt eval CK --variants ttt-mc --h-min 0", "refuse --h-min",
         ev("--variants", "ttt-mc", "--h-min", "0")),
        ("eval: --n-episodes 0", "ttt eval CK --variants ttt --n-episodes 0", "refuse --n-episodes",
         ev("--variants", "ttt", "--n-episodes", "0")),
        ("eval: --tasks 1,,2", "ttt eval CK --tasks 1,,2", "refuse --tasks", lambda: cli([*E[:-2], "--tasks", "1,,2"])),
        ("eval: --tasks 6", "ttt eval CK --tasks 6", "refuse 1..5", lambda: cli([*E[:-2], "--tasks", "6"])),
        ("eval: --variants foo", "ttt eval CK --variants foo", "refuse unknown variant", ev("--variants", "foo")),
        ("eval: --critic oracle without ttt", "ttt eval CK --variants ttt-mc --critic oracle", "refuse --critic",
         ev("--variants", "ttt-mc", "--critic", "oracle")),
        ("eval: dataset of other sizes", "ttt eval CK --dataset cube-single-play-v0", "refuse",
         ev("--dataset", "cube-single-play-v0")),
        ("eval: --episodes 0", "ttt eval CK --episodes 0", "refuse --episodes",
         lambda: cli([*E[:4], "--episodes", "0", "--tasks", "1"])),
        ("eval: missing checkpoint", "ttt eval /nonexistent", "refuse no checkpoint",
         lambda: cli(["eval", "/nonexistent/ck", "--dir", str(data)])),
        # ---- corrupt and hostile checkpoints
        ("checkpoint: meta.json is a JSON list", "ttt eval CK(meta=[1,2])", "refuse meta.json",
         lambda: cli(["eval", str(hostile_meta("list")), "--dir", str(data), "--episodes", "1", "--tasks", "1"])),
        ("checkpoint: step is a string", "ttt eval CK(step='four')", "refuse step",
         lambda: cli(["eval", str(hostile_meta("step")), "--dir", str(data), "--episodes", "1", "--tasks", "1"])),
        ("checkpoint: config of the wrong type", "ttt eval CK(config.actor_hidden_dims='abc')", "refuse",
         lambda: cli(["eval", str(hostile_meta("config")), "--dir", str(data), "--episodes", "1", "--tasks", "1"])),
        ("checkpoint: state file of random bytes", "ttt eval CK(state=urandom)", "refuse sha256",
         lambda: cli(["eval", str(hostile_meta("state")), "--dir", str(data), "--episodes", "1", "--tasks", "1"])),
        ("checkpoint: bare NaN in meta.json", "ttt eval CK(seeds=NaN)", "refuse",
         lambda: cli(["eval", str(hostile_meta("nan")), "--dir", str(data), "--episodes", "1", "--tasks", "1"])),
        ("checkpoint: state_file escaping the folder", "ttt eval CK(state_file=../../etc/passwd)", "refuse state_file",
         lambda: cli(["eval", str(hostile_meta("escape")), "--dir", str(data), "--episodes", "1", "--tasks", "1"])),
        # ---- corrupt and hostile datasets
        ("data: truncated npz", "ttt data check NAV --dir D(truncated)", "refuse",
         lambda: cli(["data", "check", NAV, "--dir", str(bad_data("truncated"))])),
        ("data: object (pickle) array", "ttt data check NAV --dir D(object array)", "refuse",
         lambda: cli(["data", "check", NAV, "--dir", str(bad_data("pickle"))])),
        ("data: wrong dtype and width", "ttt data check NAV --dir D(float64, 1 column)", "refuse",
         lambda: cli(["data", "check", NAV, "--dir", str(bad_data("dtype"))])),
        ("data: NaN observation", "ttt eval CK --dir D(NaN row)", "refuse",
         lambda: cli(["eval", str(ck), "--dir", str(bad_data("nan")), "--episodes", "1", "--tasks", "1"])),
        ("data: corrupt sidecar json", "ttt data check NAV --dir D(sidecar '{not json')", "refuse",
         lambda: cli(["data", "check", NAV, "--dir", str(bad_data("sidecar"))])),
        ("data: npz is a symlink to /dev/zero", "ttt data check NAV --dir D(npz -> /dev/zero)", "refuse",
         lambda: cli(["data", "check", NAV, "--dir", str(bad_data("symlink"))])),
        ("data: list a missing dir", "ttt data list --dir /nonexistent", "refuse does not exist",
         lambda: cli(["data", "list", "--dir", "/nonexistent/d"])),
        ("data: generate --workers -3", "ttt data generate NAV --workers -3", "refuse --workers",
         lambda: cli(["data", "generate", NAV, "--episodes", "2", "--dir", str(root / "g"), "--workers", "-3"])),
        ("data: generate --seed 2^40", "ttt data generate NAV --seed 1099511627776", "refuse --seed",
         lambda: cli(["data", "generate", NAV, "--episodes", "2", "--dir", str(root / "g"), "--seed", str(2**40)])),
        ("data: generate into a file", "ttt data generate NAV --dir FILE", "refuse",
         lambda: cli(["data", "generate", NAV, "--episodes", "2", "--dir", str(results_dir / "bad" / "results.json")])),
        # ---- pre-training
        ("pretrain: --steps 0", "ttt pretrain ... --steps 0", "refuse --steps", pre("--steps", "0")),
        ("pretrain: --steps 2^70", "ttt pretrain ... --steps 1180591620717411303424", "refuse --steps",
         pre("--steps", str(2**70))),
        ("pretrain: --seeds 10^9", "ttt pretrain ... --seeds 1000000000", "refuse seeds",
         pre("--steps", "2", "--seeds", str(10**9))),
        ("pretrain: --set lr=nan", "ttt pretrain ... --set lr=nan", "refuse lr",
         pre("--steps", "2", "--set", "lr=nan")),
        ("pretrain: --set unknown key", "ttt pretrain ... --set foo=1", "refuse foo", pre("--steps", "2", "--set",
                                                                                         "foo=1")),
        ("pretrain: --agent foo", "ttt pretrain --agent foo", "refuse foo",
         lambda: cli(["pretrain", "--dataset", NAV, "--agent", "foo", "--out", str(root / "p2"), "--dir", str(data)])),
        ("pretrain: --seed -1", "ttt pretrain ... --seed -1", "refuse --seed", pre("--steps", "2", "--seed", "-1")),
        # ---- pipelines and reports
        ("run: missing pipeline", "ttt run missing.toml", "refuse", lambda: cli(["run", str(root / "missing.toml")])),
        ("run: TOML syntax error", "ttt run bad.toml (name = )", "refuse",
         lambda: cli(["run", toml("syntax", "name = \n"), "--dry-run"])),
        ("run: episodes = 10^20", "ttt run p.toml --dry-run (episodes = 10^20)", "refuse episodes",
         lambda: cli(["run", toml("eps", 'name = "e"\n[[run]]\nepisodes = 100000000000000000000\n'), "--dry-run"])),
        ("run: data_episodes = 10^15", "ttt run p.toml --dry-run (data_episodes = 10^15)", "refuse",
         lambda: cli(["run", toml("deps", 'name = "e"\n[[run]]\ndata_episodes = 1000000000000000\n'), "--dry-run"])),
        ("run: --set K=abc", "ttt run quickstart --set K=abc --dry-run", "refuse K",
         lambda: cli(["run", "quickstart", "--set", "K=abc", "--dry-run"])),
        ("run: --only matching nothing", "ttt run quickstart --only nomatch --dry-run", "refuse nomatch",
         lambda: cli(["run", "quickstart", "--only", "nomatch", "--dry-run"])),
        ("run: --stages foo", "ttt run quickstart --stages foo --dry-run", "refuse foo",
         lambda: cli(["run", "quickstart", "--stages", "foo", "--dry-run"])),
        ("run: lr = inf in a pipeline", "ttt run p.toml --dry-run (lr = inf)", "refuse lr",
         lambda: cli(["run", toml("inf", 'name = "i"\n[[run]]\nvariant = "ttt-mc"\nlr = inf\n'), "--dry-run"])),
        ("report: results.json truncated", "ttt report DIR(results.json '{\"rows\": [')", "refuse results.json",
         lambda: cli(["report", str(results_dir / "trunc")])),
        ("report: results.json of wrong types", "ttt report DIR(records = 'x')", "refuse",
         lambda: cli(["report", str(results_dir / "bad")])),
        # ---- Python misuse
        ("py: evaluate(seed=-1)", "evaluate(setup, agents, data, episodes=1, seed=-1)", "refuse seed",
         lambda: py(lambda: evaluate(setup, agents, ds, episodes=1, tasks=(1,), env=env, seed=-1))),
        ("py: evaluate(tasks=[1.5])", "evaluate(..., tasks=[1.5])", "refuse tasks",
         lambda: py(lambda: evaluate(setup, agents, ds, episodes=1, tasks=[1.5], env=env))),
        ("py: evaluate(episodes=True)", "evaluate(..., episodes=True)", "refuse episodes",
         lambda: py(lambda: evaluate(setup, agents, ds, episodes=True, tasks=(1,), env=env))),
        ("py: evaluate(batch_size=0)", "evaluate(..., batch_size=0)", "refuse batch",
         lambda: py(lambda: evaluate(setup, agents, ds, episodes=1, tasks=(1,), env=env, batch_size=0))),
        ("py: grid={'lr': []}", "evaluate(..., grid={'lr': []})", "refuse grid",
         lambda: py(lambda: evaluate(setup, agents, ds, episodes=1, tasks=(1,), env=env, grid={"lr": []}))),
        ("py: grid={'lr': [nan]}", "evaluate(..., grid={'lr': [nan]})", "refuse lr",
         lambda: py(lambda: evaluate(setup, agents, ds, episodes=1, tasks=(1,), env=env, grid={"lr": [math.nan]}))),
        ("py: params={'lr': -1}", "evaluate(..., params={'lr': -1})", "refuse lr",
         lambda: py(lambda: evaluate(setup, agents, ds, episodes=1, tasks=(1,), env=env, params={"lr": -1.0}))),
        ("py: load_run(lr=inf)", "ttt.load_run(CK, variant='ttt-mc', lr=inf)", "refuse lr",
         lambda: py(lambda: ttt.load_run(ck, data_dir=data, variant="ttt-mc", lr=math.inf))),
        ("py: load_run(K=1.5)", "ttt.load_run(CK, variant='ttt-mc', K=1.5)", "refuse K",
         lambda: py(lambda: ttt.load_run(ck, data_dir=data, variant="ttt-mc", K=1.5))),
        ("py: load_run(missing)", "ttt.load_run('/nonexistent')", "refuse no checkpoint",
         lambda: py(lambda: ttt.load_run("/nonexistent/ck"))),
        ("py: run_episode with a raw uint32 key", "ttt.run_episode(..., key=jax.random.PRNGKey(0))", "refuse key",
         lambda: py(lambda: ttt.run_episode(setup, agent, ds, env, ds.goals[0], ds.goals[5],
                                            key=jax.random.PRNGKey(0)))),  # fmt: skip
        ("py: run_episode(start in a wall)", "ttt.run_episode(..., start_xy=[8, 0])", "refuse start_xy",
         lambda: py(lambda: ttt.run_episode(setup, agent, ds, env, jnp.array([8.0, 0.0]), ds.goals[5]))),
        ("py: load_dataset(split='test')", "ttt.load_dataset(NAV, D, split='test')", "refuse split",
         lambda: py(lambda: ttt.load_dataset(NAV, data, split="test"))),
        ("py: make_env('nope')", "ttt.make_env('nope')", "refuse nope", lambda: py(lambda: ttt.make_env("nope"))),
        ("py: Transforms(params={'k': 'x'})", "ttt.Transforms(params={'k': 'x'})", "refuse params",
         lambda: py(lambda: ttt.Transforms(params={"k": "x"}))),
        ("py: load_checkpoint(missing)", "ttt.load_checkpoint('/nonexistent')", "refuse",
         lambda: py(lambda: ttt.load_checkpoint("/nonexistent/ck"))),
        *name_and_size_cases(root, data, ck, E, setup, agents, ds, env),
        # ---- interruptions (real processes)
        ("SIGTERM during eval without --json", "ttt eval CK (SIGTERM after 6 s)", "interrupted",
         lambda: signal_case([*E[:4], "--episodes", "40", "--variants", "base"], signal.SIGTERM, 6.0)),
    ]


def name_and_size_cases(root: Path, data: Path, ck: Path, E: list[str], setup, agents, ds, env) -> list:  # noqa: N803
    """Names that escape their folder, huge sizes, labels a checkpoint contradicts, what the dry run resolves,
    settings a rule ignores, Python frictions, malformed records and a BOM; with variations (other separators, other
    sizes, other ignored settings)."""
    import jax.numpy as jnp
    import numpy as np

    import ttt
    from ttt.data import generate as gen

    ev = lambda *a: (lambda: cli([*E, *a]))  # noqa: E731
    box = root / "names"
    box.mkdir(exist_ok=True)
    count = [0]

    def toml(text: str) -> Path:
        count[0] += 1
        p = box / f"p{count[0]}.toml"
        p.write_text(text)
        return p

    def dry(text: str, *sets: str, out: bool = True):
        """`ttt run P --dry-run` (with --out and --cache in the box); fails when it writes where an escaping name would
        (or anything at all: --out, the cache)."""

        def thunk():
            p = toml(text)
            targets = [Path.cwd() / "runs", Path.cwd().parent / "evil", root.parent / "evil", Path("/tmp/abs"),
                       box / "out", box / "cache"]  # where an escaping name or a dry run would write  # fmt: skip
            before = {t for t in targets if t.exists()}
            argv = ["run", str(p), "--dry-run", *(["--out", str(box / "out"), "--cache", str(box / "cache")]
                                                  if out else [])]  # fmt: skip
            for s in sets:
                argv += ["--set", s]
            rc, o, e = cli(argv)
            new = {t for t in targets if t.exists()} - before
            if new:
                return 1, o, f"Traceback: wrote {sorted(map(str, new))}"
            return rc, o, e

        return thunk

    def shows(thunk, needle: str, absent: str = ""):
        """An 'ok' case that must also print `needle` (and not `absent`)."""

        def wrapped():
            rc, o, e = thunk()
            if rc == 0 and (needle not in o or (absent and absent in o)):
                seen = f"lacks {needle!r}" if needle not in o else f"shows {absent!r}"
                return 1, o, f"exit 0 but the output {seen}"
            return rc, o, e

        return wrapped

    def other_data() -> Path:
        d = box / "other"
        if not (d / f"{NAV}.npz").exists():
            gen.generate(NAV, episodes=3, seed=1, directory=d, workers=1)
        return d

    def results(text: str, evals: str | None = None) -> str:
        count[0] += 1
        d = box / f"res{count[0]}"
        d.mkdir()
        (d / "results.json").write_text(text)
        if evals is not None:
            (d / "evals").mkdir()
            (d / "evals" / "r-abc.json").write_text(evals)
        return str(d)

    def record(**edits) -> dict:
        rec = dict(run=dict(name="r", group="main", dataset=NAV, agent="gcbc", variant="base", tasks=[1], episodes=1,
                            eval_seed=0), checkpoint="ck", seeds=2, n_episodes=2, per_seed=[0.0, 1.0], mean=0.5, se=0.5,
                   wall_s=1.0, profile="cpu")  # fmt: skip
        rec.update(edits)
        return rec

    def bom() -> str:
        p = box / "bom.toml"
        p.write_bytes(b"\xef\xbb\xbf" + (REPO / "pipelines" / "quickstart.toml").read_bytes())
        return str(p)

    row = 'name = "p"\n[[run]]\n'
    ckrow = f'name = "p"\n[[run]]\nname = "r"\ncheckpoint = "{ck}"\n'
    L = lambda **kw: (lambda: py(lambda: ttt.load_run(ck, data_dir=data, **kw)))  # noqa: E731, N806
    return [
        # ---- 1. names that escape their folder
        ("run: run named ../../evil", "ttt run p.toml --dry-run (run name '../../evil')", "refuse run name",
         dry(row + 'name = "../../evil"\n')),
        ("run: run named a/b", "ttt run p.toml --dry-run (run name 'a/b')", "refuse run name",
         dry(row + 'name = "a/b"\n')),
        ("run: run named a\\b", "ttt run p.toml --dry-run (run name 'a\\b')", "refuse run name",
         dry(row + 'name = "a\\\\b"\n')),
        ("run: run named /tmp/abs", "ttt run p.toml --dry-run (run name '/tmp/abs')", "refuse run name",
         dry(row + 'name = "/tmp/abs"\n')),
        ("run: run named ..", "ttt run p.toml --dry-run (run name '..')", "refuse run name",
         dry(row + 'name = ".."\n')),
        ("run: run name with a control character", "ttt run p.toml --dry-run (run name '\\u0001x')", "refuse run name",
         dry(row + 'name = "\\u0001x"\n')),
        ("run: empty run name", "ttt run p.toml --dry-run (run name '')", "refuse run name", dry(row + 'name = ""\n')),
        ("run: run name of 300 bytes", "ttt run p.toml --dry-run (run name 'x' * 300)", "refuse run name",
         dry(row + f'name = "{"x" * 300}"\n')),
        ("run: --set name=../x", "ttt run p.toml --dry-run --set name=../x", "refuse run name",
         dry(row, "name=../x")),
        ("run: a grid that puts / into names", "ttt run p.toml --dry-run (grid = { data_dir = ['x/y'] })",
         "refuse path separator", dry(row + 'name = "r"\ngrid = { data_dir = ["x/y"] }\n')),
        ("run: pipeline named ../../evil", "ttt run p.toml --dry-run (name = '../../evil', no --out)",
         "refuse pipeline name", dry('name = "../../evil"\n[[run]]\n', out=False)),
        ("run: pipeline named a/b", "ttt run p.toml --dry-run (name = 'a/b', no --out)", "refuse pipeline name",
         dry('name = "a/b"\n[[run]]\n', out=False)),
        ("run: pipeline named /tmp/abs", "ttt run p.toml --dry-run (name = '/tmp/abs')", "refuse pipeline name",
         dry('name = "/tmp/abs"\n[[run]]\n')),
        # ---- 2. huge sizes
        ("eval: --N 3e9", "ttt eval CK --variants ttt-mc --N 3000000000", "refuse --N",
         ev("--variants", "ttt-mc", "--N", "3000000000")),
        ("eval: --batch 1e9", "ttt eval CK --variants ttt-mc --batch 1000000000", "refuse of memory",
         ev("--variants", "ttt-mc", "--batch", "1000000000")),
        ("eval: --h-min 1e11", "ttt eval CK --variants ttt-mc --h-min 99999999999", "refuse --h-min",
         ev("--variants", "ttt-mc", "--h-min", "99999999999")),
        ("eval: --n-episodes 1e11", "ttt eval CK --variants ttt --n-episodes 99999999999", "refuse --n-episodes",
         ev("--variants", "ttt", "--n-episodes", "99999999999")),
        ("eval: --slack 1e11", "ttt eval CK --variants ttt-mc --rule mc-episodes --slack 99999999999",
         "refuse --slack", ev("--variants", "ttt-mc", "--rule", "mc-episodes", "--slack", "99999999999")),
        ("eval: --ttgs n_vertices=1e8", "ttt eval CK --variants ttgs --ttgs n_vertices=100000000", "refuse memory",
         ev("--variants", "ttgs", "--ttgs", "n_vertices=100000000")),
        ("eval: --chunk 1e12", "ttt eval CK --variants base --chunk 1000000000000 (clamped: ok)", "ok",
         ev("--variants", "base", "--chunk", "1000000000000")),
        ("run: --set batch=1e9", "ttt run p.toml --dry-run --set batch=1000000000", "refuse of memory",
         dry(row + 'variant = "ttt"\n', "batch=1000000000")),
        ("run: --set N=3e9", "ttt run p.toml --dry-run --set N=3000000000", "refuse N",
         dry(row + 'variant = "ttt"\n', "N=3000000000")),
        ("run: --set h_min=1e11", "ttt run p.toml --dry-run --set h_min=99999999999", "refuse h_min",
         dry(row + 'variant = "ttt-mc"\n', "h_min=99999999999")),
        ("run: ttgs n_vertices=1e8", "ttt run p.toml --dry-run (ttgs = { n_vertices = 100000000 })",
         "refuse memory", dry(row + 'variant = "ttgs"\nttgs = { n_vertices = 100000000 }\n')),
        ("run: seeds=1e9", "ttt run p.toml --dry-run --set seeds=1000000000", "refuse memory",
         dry(row, "seeds=1000000000")),
        ("py: load_run(batch=1e9)", "ttt.load_run(CK, variant='ttt-mc', batch=10**9)", "refuse memory",
         L(variant="ttt-mc", K=250, N=2, batch=10**9)),
        ("py: load_run(N=3e9)", "ttt.load_run(CK, variant='ttt-mc', N=3 * 10**9)", "refuse N",
         L(variant="ttt-mc", N=3 * 10**9)),
        ("py: load_run(ttgs n_vertices=1e8)", "ttt.load_run(CK, variant='ttgs', ttgs={'n_vertices': 10**8})",
         "refuse memory", L(variant="ttgs", ttgs={"n_vertices": 10**8})),
        # ---- 3. a row's labels come from its checkpoint
        ("run: row agent contradicts its checkpoint", "ttt run p.toml --dry-run (checkpoint = CK, agent = 'gciql')",
         "refuse agent", dry(ckrow + 'agent = "gciql"\n')),
        ("run: row steps contradict its checkpoint", "ttt run p.toml --dry-run (checkpoint = CK, steps = 10)",
         "refuse steps", dry(ckrow + "steps = 10\n")),
        ("run: row dataset contradicts its checkpoint",
         "ttt run p.toml --dry-run (checkpoint = CK, dataset = pointmaze-medium-stitch-v0)", "refuse dataset",
         dry(ckrow + 'dataset = "pointmaze-medium-stitch-v0"\n')),
        ("run: --set profile contradicts the checkpoint", "ttt run p.toml --dry-run --set profile=paper",
         "refuse profile", dry(ckrow, "profile=paper")),
        ("run: [defaults] agent contradicts its checkpoint", "ttt run p.toml --dry-run ([defaults] agent = 'gciql', "
         "checkpoint = CK of gcbc)", "refuse agent",
         dry(ckrow.replace("[[run]]", '[defaults]\nagent = "gciql"\n[[run]]'))),
        ("run: [defaults] agent agrees with its checkpoint", "ttt run p.toml --dry-run ([defaults] agent = 'gcbc', "
         "checkpoint = CK of gcbc)", "ok",
         shows(dry(ckrow.replace("[[run]]", '[defaults]\nagent = "gcbc"\n[[run]]') + f'data_dir = "{data}"\n'),
               "r: gcbc base")),
        # ---- 4. the dry run resolves checkpoints and their data
        ("run: --dry-run --set checkpoint=/nonexistent", "ttt run quickstart --dry-run --set checkpoint=/nonexistent",
         "refuse no checkpoint", lambda: cli(["run", "quickstart", "--dry-run", "--set", "checkpoint=/nonexistent"])),
        ("run: --dry-run --set checkpoint=", "ttt run quickstart --dry-run --set checkpoint=", "refuse empty",
         lambda: cli(["run", "quickstart", "--dry-run", "--set", "checkpoint="])),
        ("run: --dry-run data of another copy", "ttt run p.toml --dry-run (checkpoint = CK, data_dir = another copy)",
         "refuse different copy", lambda: dry(ckrow + f'data_episodes = 3\ndata_dir = "{other_data()}"\n')()),
        ("run: --dry-run data that matches", "ttt run p.toml --dry-run (checkpoint = CK, data_dir = its data)", "ok",
         shows(dry(ckrow + f'data_episodes = 3\ndata_dir = "{data}"\n'), "matches its data")),
        # ---- 5. settings a rule ignores
        ("run: q in [defaults] with a ttt row", "ttt run p.toml --dry-run ([defaults] q = 0.2; a ttt row)",
         "refuse q", dry('name = "p"\n[defaults]\nq = 0.2\n[[run]]\nvariant = "ttt"\n')),
        ("run: q in a ttt row", "ttt run p.toml --dry-run (variant ttt, q = 0.2)", "refuse q",
         dry(row + 'variant = "ttt"\nq = 0.2\n')),
        ("run: slack under rule episodes", "ttt run p.toml --dry-run (variant ttt, slack = 3)", "refuse slack",
         dry(row + 'variant = "ttt"\nslack = 3\n')),
        ("run: n_episodes under rule paper", "ttt run p.toml --dry-run (variant ttt-mc, n_episodes = 5)",
         "refuse n_episodes", dry(row + 'variant = "ttt-mc"\nn_episodes = 5\n')),
        ("run: n_episodes under rule mc-episodes", "ttt run p.toml --dry-run (ttt-mc, mc-episodes, n_episodes = 5)",
         "refuse n_episodes", dry(row + 'variant = "ttt-mc"\nrule = "mc-episodes"\nn_episodes = 5\n')),
        ("run: --set q with only ttt rows", "ttt run p.toml --dry-run --set q=0.2 (variant ttt)", "refuse q",
         dry(row + 'variant = "ttt"\n', "q=0.2")),
        ("run: --set q applies to the rows that read it", "ttt run quickstart --dry-run --set q=0.2", "ok",
         shows(lambda: cli(["run", "quickstart", "--dry-run", "--set", "q=0.2"]), "ttt-mc",
               absent="gcbc ttt on pointmaze-medium-navigate-v0 (cpu, 3 seeds, 2 episodes x 5 tasks) (lr 3e-05, N 200, "
                      "K 100, q")),  # fmt: skip
        ("run: shipped pipelines load", "ttt run PIPELINE --dry-run, every pipelines/*.toml", "ok",
         lambda: next((r for r in (cli(["run", str(f), "--dry-run"]) for f in sorted((REPO / "pipelines")
                                                                                     .glob("*.toml"))) if r[0] != 0),
                      (0, "", ""))),  # fmt: skip
        # ---- 6. Python frictions
        ("py: load_run(lr='3e-4')", "ttt.load_run(CK, variant='ttt-mc', lr='3e-4')", "refuse lr",
         L(variant="ttt-mc", lr="3e-4")),
        ("py: load_run(eps='1')", "ttt.load_run(CK, variant='ttt-mc', eps='1')", "refuse eps",
         L(variant="ttt-mc", eps="1")),
        ("py: load_run(N=[2])", "ttt.load_run(CK, variant='ttt-mc', N=[2])", "refuse N", L(variant="ttt-mc", N=[2])),
        ("py: load_run(K=np.int64(250))", "ttt.load_run(CK, variant='ttt-mc', K=np.int64(250), N=np.int32(2))", "ok",
         L(variant="ttt-mc", K=np.int64(250), N=np.int32(2))),
        ("py: load_run(K=jnp.asarray(250))", "ttt.load_run(CK, variant='ttt-mc', K=jnp.asarray(250))", "ok",
         L(variant="ttt-mc", K=jnp.asarray(250), N=2)),
        ("py: load_run(lr=np.float32)", "ttt.load_run(CK, variant='ttt-mc', lr=np.float32(1e-3))", "ok",
         L(variant="ttt-mc", K=250, N=2, lr=np.float32(1e-3))),
        ("py: load_run(ttgs n_vertices=np.int64)", "ttt.load_run(CK, variant='ttgs', ttgs={'n_vertices': "
         "np.int64(2)})", "ok", L(variant="ttgs", ttgs={"n_vertices": np.int64(2)})),
        ("py: run_episode(seed-stacked agents)", "ttt.run_episode(setup, agents, ...) (agents of 2 seeds)",
         "refuse seed-stacked", lambda: py(lambda: ttt.run_episode(setup, agents, ds, env, ds.goals[0], ds.goals[5]))),
        # ---- 7. malformed records and a BOM
        ("report: per_seed null", "ttt report DIR (a record with per_seed: null)", "refuse per_seed",
         lambda: cli(["report", results(json.dumps(dict(rows=[], records=[record(per_seed=None)])))])),
        ("report: mean 'oops'", "ttt report DIR (a record with mean: 'oops')", "refuse mean",
         lambda: cli(["report", results(json.dumps(dict(rows=[], records=[record(mean="oops")])))])),
        ("report: se 'x'", "ttt report DIR (a record with se: 'x')", "refuse se",
         lambda: cli(["report", results(json.dumps(dict(rows=[], records=[record(se="x")])))])),
        ("report: record without its run's variant", "ttt report DIR (run: {name})", "refuse variant",
         lambda: cli(["report", results(json.dumps(dict(rows=[], records=[record(run=dict(name="r"))])))])),
        ("report: truncated results.json", "ttt report DIR (results.json cut at 50 bytes)", "refuse --from-evals",
         lambda: cli(["report", results(json.dumps(dict(rows=[], records=[record()]))[:50])])),
        ("report: --from-evals per_seed null", "ttt report DIR --from-evals (evals/r-abc.json per_seed null)",
         "refuse per_seed",
         lambda: cli(["report", results("{}", json.dumps(record(per_seed=None))), "--from-evals"])),
        ("run: pipeline with a UTF-8 BOM", "ttt run quickstart.toml(with a BOM) --dry-run", "ok",
         lambda: cli(["run", bom(), "--dry-run"])),
    ]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "probe"))
    ap.add_argument("-k", default="", help="only the cases whose name contains this")
    ap.add_argument("--before", default="", help="probe.json of an older version: adds its outcome as a column")
    ap.add_argument("--skip", default="", help="comma-separated: skip the cases whose name contains one of these "
                    "(e.g. the memory-hungry ones when probing an older version)")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ttt-probe-") as tmp:
        root = Path(tmp)
        data, ck = make_fixture(root)
        for name, shown, expect, thunk in cases(root, data, ck):
            if args.k not in name or any(x and x in name for x in args.skip.split(",")):
                continue
            t0 = time.perf_counter()
            rc, out, err = thunk()
            if expect == "interrupted":  # a signal: exit 143, one line that does not promise a resume
                ok = rc == 143 and "nothing is saved" in err and "Traceback" not in err
                observed = f"exit {rc}: {err.strip().splitlines()[-1][:200] if err.strip() else ''}"
                if not ok:  # the whole of stderr's end, to tell where a stray line came from
                    observed += " (stderr ends: " + " / ".join(err.strip().splitlines()[-12:])[-1500:] + ")"
            else:
                ok, observed = judge(expect, rc, out, err)
            rows.append(dict(case=name, command=shown, expected=expect, observed=observed.replace(str(root), "TMP"),
                             passed=ok, s=round(time.perf_counter() - t0, 1)))  # fmt: skip
            print(f"{'PASS' if ok else 'FAIL'}  {name}: {rows[-1]['observed']}", flush=True)
    sys.path.insert(0, str(REPO / "benchmarks" / "migrations"))
    from records_schema2 import scrub  # no path of this machine in what is committed (tests/test_records.py)

    rows = [{k: scrub(v) if isinstance(v, str) else v for k, v in r.items()} for r in rows]
    n = sum(r["passed"] for r in rows)
    print(f"{n} of {len(rows)} cases pass")
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        Path(f"{out}.json").write_text(json.dumps(rows, indent=1))
        before = {r["case"]: r for r in json.loads(Path(args.before).read_text())} if args.before else None
        md = ["| case | command | expected | observed | pass |" + (" before |" if before else ""),
              "|---|---|---|---|---|" + ("---|" if before else "")]  # fmt: skip
        for r in rows:
            line = (f"| {r['case']} | `{r['command']}` | {r['expected']} | {r['observed'].replace('|', '/')} | "
                    f"{'yes' if r['passed'] else 'NO'} |")  # fmt: skip
            if before is not None:
                b = before.get(r["case"])
                seen = "" if b is None else b["observed"][:90].replace("|", "/")
                line += " not run |" if b is None else f" {'yes' if b['passed'] else 'no'}: {seen} |"
            md.append(line)
        Path(f"{out}.md").write_text("\n".join(md) + "\n")
    return dict(passed=n, cases=len(rows), rows=rows)


if __name__ == "__main__":
    doc = main()
    sys.exit(0 if doc["passed"] == doc["cases"] else 1)
