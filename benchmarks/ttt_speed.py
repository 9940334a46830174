"""Test-time training speed, this code against an earlier commit, side by side in one run (issue: updates near the
hardware, no work for finished episodes, the value pass).

Usage:
    python benchmarks/ttt_speed.py [--old a74afb6] [--parts update,fixed,value,batched,row] [--repeats 3]
        [--out benchmarks/results/speed/ttt_speed.json]

The old commit is checked out once into a git worktree (`.bench-old/`, ignored) and every measurement runs as a
fresh worker process, alternating old and new (old, new, old, new, ...) so that the load of a shared machine falls
on both alike; each figure is the minimum over `--repeats` workers (the least disturbed run). Parts:
- update: ms per fine-tuning step (batch draw + Adam update, inside the N-step `lax.scan` of `make_finetune`,
  the figure that matters for TTT), GC-BC and GC-IQL cpu profile (cached 10k-step checkpoints of
  pointmaze-medium-navigate, full 1M-row data) and GC-IQL paper profile (OGBench's 512x3, batch 1024, random init);
- fixed: the same for an 8-wide network at batch 8 (the per-step cost that does not scale with the model);
- value: the dataset value pass of one episode (`prepare`, GC-BC cpu, 1M rows);
- batched: critic-free TTT episodes/s at B = 1 (one program call per episode) and B = 25 (one call);
- row: a TTT-with-critic row (GC-BC cpu, rule 'episodes', 3 seeds x 5 tasks x E episodes, batches of 25) end to
  end through `ttt.evaluate`, with its success.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAV = "pointmaze-medium-navigate-v0"


# ------------------------------------------------------------------------------------------------ worker side


def _ckpt(agent: str) -> str:
    """The cached cpu-profile checkpoint (10k steps) of `agent` on navigate, newest first."""
    base = Path(os.environ.get("TTT_CACHE", "~/.cache/ttt")).expanduser() / "ckpt" / NAV
    found = sorted(base.glob(f"{agent}-cpu-*/state-000010000.eqx"), key=lambda p: p.stat().st_mtime, reverse=True)
    if not found:
        raise SystemExit(f"no cached cpu-profile {agent} checkpoint under {base}: run `ttt run selection-study` first")
    return str(found[0].parent)


def _load(agent: str):
    import jax

    from ttt.data.files import load
    from ttt.pretrain import backbone_config, load_checkpoint, read_meta, sampler_config

    meta = read_meta(_ckpt(agent))
    states, meta = load_checkpoint(_ckpt(agent), meta)
    return meta, states, load(meta["dataset"]), backbone_config(meta), sampler_config(meta), jax


def _best(fn, repeats: int = 3) -> float:
    import jax

    jax.block_until_ready(fn())
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        ts.append(time.perf_counter() - t0)
    return min(ts)


def w_update(kind: str) -> dict:
    import jax
    import jax.numpy as jnp

    from ttt.data.files import load
    from ttt.data.specs import get_spec
    from ttt.finetune import FinetuneConfig, make_finetune
    from ttt.presets import get_agent, make_configs
    from ttt.pretrain import init_state

    steps = 100
    if kind in ("gcbc-cpu", "gciql-cpu"):
        meta, states, data, cfg, sampler, _ = _load(kind.split("-")[0])
        agent = jax.tree.map(lambda x: x[0] if isinstance(x, jax.Array) and x.ndim > 0 else x, states.agent)
        backbone = meta["backbone"]
    else:
        data = load(NAV)
        over = {"fixed": {"actor_hidden_dims": (8, 8), "value_hidden_dims": (8, 8), "batch_size": 8}}.get(kind, {})
        name = "gcbc" if kind == "fixed" else "gciql"
        cfg, sampler = make_configs(name, get_spec(NAV), "cpu" if kind == "fixed" else "paper", over)
        backbone = get_agent(name).backbone
        agent = init_state(jax.random.key(0), backbone, data.obs_dim, data.action_dim, cfg).agent
        steps = 20 if kind == "gciql-paper" else 500
    ft = jax.jit(make_finetune(backbone, cfg, sampler, FinetuneConfig(steps=steps)))
    w = (jnp.arange(data.n_rows) % 100 < 3).astype(jnp.int32)  # 3% of the rows selected
    goal = data.observations[5000]
    s = _best(lambda: ft(agent, None, jax.random.key(1), data, w, goal), 2 if kind == "gciql-paper" else 3)
    return {"ms_per_step": 1e3 * s / steps, "steps": steps}


def w_value() -> dict:
    import jax

    from ttt.data.specs import get_spec
    from ttt.episode import TTTConfig, make_round_fns
    from ttt.select import SelectConfig

    meta, states, data, cfg, sampler, _ = _load("gcbc")
    agent = jax.tree.map(lambda x: x[0] if isinstance(x, jax.Array) and x.ndim > 0 else x, states.agent)
    ttt = TTTConfig(select=SelectConfig(mode="critic", rule="episodes"))
    prepare, _, _ = make_round_fns(meta["backbone"], cfg, sampler, get_spec(NAV), ttt)
    f = jax.jit(prepare)
    return {"s_per_episode": _best(lambda: f(agent, data, data.observations[5000]), 2), "rows": data.n_rows}


def _setup(meta, cfg, sampler, mode: str, rule: str, bucket):
    import dataclasses

    from ttt.data.specs import get_spec
    from ttt.episode import TTTConfig
    from ttt.evaluate import EvalSetup
    from ttt.finetune import FinetuneConfig
    from ttt.select import SelectConfig

    ttt = TTTConfig(K=100, select=SelectConfig(mode=mode, rule=rule), finetune=FinetuneConfig(steps=100, lr=3e-4))
    if bucket != "default" and "bucket" in {f.name for f in dataclasses.fields(TTTConfig)}:
        ttt = dataclasses.replace(ttt, bucket=bucket)
    return EvalSetup(meta["backbone"], cfg, sampler, get_spec(NAV), ttt, 1000)


def w_batched(batch: int) -> dict:
    import jax

    from ttt.evaluate import evaluate

    meta, states, data, cfg, sampler, _ = _load("gcbc")
    setup = _setup(meta, cfg, sampler, "mc", "paper", "default")
    seed1 = jax.tree.map(lambda x: x[:1] if hasattr(x, "ndim") and x.ndim > 0 else x, states.agent)
    n = 25 if batch > 1 else 5
    kw = dict(episodes=n, tasks=(1,), batch_size=batch)
    evaluate(setup, seed1, data, **{**kw, "episodes": batch})  # compile (the same shapes)
    t0 = time.perf_counter()
    res = evaluate(setup, seed1, data, **kw)
    wall = time.perf_counter() - t0
    return {"episodes": n, "episodes_per_s": n / wall, "success": float(res.success.mean())}


def w_row(episodes: int) -> dict:
    from ttt.evaluate import evaluate

    meta, states, data, cfg, sampler, _ = _load("gcbc")
    setup = _setup(meta, cfg, sampler, "critic", "episodes", "default")
    t0 = time.perf_counter()
    res = evaluate(setup, states.agent, data, episodes=episodes, tasks=(1, 2, 3, 4, 5), batch_size=25)
    wall = time.perf_counter() - t0
    mean, se = res.mean_and_se()
    return {"wall_s": wall, "episodes": int(res.success.size), "success": mean, "se": se,
            "success_per_episode": res.success.reshape(-1).tolist()}  # fmt: skip


def worker(part: str, arg: str) -> None:
    import jax

    fn = {"update": lambda: w_update(arg), "value": w_value, "batched": lambda: w_batched(int(arg)),
          "row": lambda: w_row(int(arg))}[part]  # fmt: skip
    out = fn()
    out["jax"] = jax.__version__
    out["ttt_from"] = str(Path(__import__("ttt").__file__).parent.parent)
    print("RESULT " + json.dumps(out), flush=True)


# ------------------------------------------------------------------------------------------------ driver side


def old_tree(commit: str) -> Path:
    path = ROOT / ".bench-old"
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), commit], cwd=ROOT, check=True,
                       capture_output=True)  # fmt: skip
    else:
        subprocess.run(["git", "checkout", "-q", "--detach", commit], cwd=path, check=True)
    return path


def run_worker(tree: Path, part: str, arg: str) -> dict:
    """One measurement in a fresh process whose `import ttt` resolves to `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "ttt_speed.py"), "--worker", part, arg]
    p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"worker {part} {arg} in {tree} failed:\n{p.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


JOBS = {
    "update": [("update", k) for k in ("gcbc-cpu", "gciql-cpu", "gciql-paper")],
    "fixed": [("update", "fixed")],
    "value": [("value", "")],
    "batched": [("batched", "1"), ("batched", "25")],
    "row": [("row", "2")],
}


METRIC = {"update": ("ms_per_step", "ms per step", False), "value": ("s_per_episode", "s per episode", False),
          "batched": ("episodes_per_s", "episodes/s", True), "row": ("wall_s", "s per row", False)}  # fmt: skip


def _success(runs: list[dict]) -> str:
    """The first run's success (+- s.e. where recorded), or blank for parts without one."""
    r = runs[0]
    if "success" not in r:
        return ""
    return f"{r['success']:.2f}" + (f" +- {r['se']:.2f}" if "se" in r else "")


def table(doc: dict) -> str:
    """Markdown: each measurement's best (least disturbed) old and new figure and the speed-up old / new."""
    lines = ["| part | configuration | metric | old | new | speed-up | old success | new success |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in doc["results"]:
        key, label, higher = METRIC[r["part"]] if r["part"] != "fixed" else METRIC["update"]
        pick = max if higher else min
        old, new = pick(x[key] for x in r["old"]), pick(x[key] for x in r["new"])
        speed = new / old if higher else old / new
        names = {"fixed": "gcbc 8-wide, batch 8", "": "gcbc cpu, 1M rows", "1": "B = 1", "25": "B = 25"}
        job = names.get(r["job"], r["job"])
        if r["part"] == "row":
            job = f"gcbc cpu, critic (episodes), {r['old'][0]['episodes']} episodes, batches of 25"
        fmt = "{:.3f}" if old < 10 else "{:.1f}"
        lines.append(f"| {r['part']} | {job} | {label} | {fmt.format(old)} | {fmt.format(new)} | {speed:.2f}x | "
                     f"{_success(r['old'])} | {_success(r['new'])} |")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", nargs=2, metavar=("PART", "ARG"), help=argparse.SUPPRESS)
    ap.add_argument("--old", default="a74afb6", help="the earlier commit to measure beside this tree")
    ap.add_argument("--parts", default="update,fixed,value,batched,row")
    ap.add_argument("--repeats", type=int, default=3, help="workers per measurement and tree (minimum kept)")
    ap.add_argument("--row-repeats", type=int, default=1, help="workers per tree for the (long) row part")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/speed/ttt_speed.json")
    ap.add_argument("--report", action="store_true", help="print the table of --out and run nothing")
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return 0
    if args.report:
        print(table(json.loads(args.out.read_text())))
        return 0
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _common import machine

    trees = {"old": old_tree(args.old), "new": ROOT}
    new_commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()  # fmt: skip
    results = []
    for part in args.parts.split(","):
        for job in JOBS[part]:
            reps = args.row_repeats if part == "row" else args.repeats
            runs = {"old": [], "new": []}
            for _ in range(reps):
                for which in ("old", "new"):
                    r = run_worker(trees[which], *job)
                    runs[which].append(r)
                    shown = {k: v for k, v in r.items() if k != "success_per_episode"}
                    print(f"{part} {job[1]} {which}: {json.dumps(shown)}", flush=True)
            results.append({"part": part, "job": job[1], **runs})
    doc = {"machine": machine(), "old": args.old, "new": new_commit + " (+ working tree)",
           "command": "python " + " ".join(sys.argv), "results": results}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
