"""Test-time training speed, this code against an earlier commit, side by side in one run (issue: updates near the
hardware, no work for finished episodes, the value pass).

Usage:
    python benchmarks/speed/ttt_speed.py [--old a74afb6] [--parts update,fixed,value,batched,row] [--repeats 3]
        [--out benchmarks/results/speed/ttt_speed.json]

The old commit is checked out once into a git worktree (`.bench-old/`, ignored) and every measurement runs as a
fresh worker process, alternating old and new (old, new, old, new, ...) so that the load of a shared machine falls
on both alike; each figure is the minimum over `--repeats` workers (the least disturbed run). A worker is this file
run against the old tree's `ttt`, so the old commit must have this tree's API (`ttt.open_checkpoint`, `ttt.evaluation`,
functions taking the backbone record: 648170f or later). Parts:
- update: ms per fine-tuning step (batch draw + Adam update, inside the N-step `lax.scan` of `make_finetune`,
  the figure that matters for TTT), GC-BC and GC-IQL cpu profile (cached 10k-step checkpoints of
  pointmaze-medium-navigate, full 1M-row data) and GC-IQL paper profile (OGBench's 512x3, batch 1024, random init);
- fixed: the same for an 8-wide network at batch 8 (the per-step cost that does not scale with the model);
- value: the dataset value pass of one episode (`prepare`, GC-BC cpu, 1M rows);
- batched: critic-free TTT episodes/s at B = 1 (one program call per episode) and B = 25 (one call);
- row: a TTT-with-critic row (GC-BC cpu, rule 'episodes', 3 seeds x 5 tasks x E episodes, batches of 25) end to
  end through `ttt.evaluate`, with its success;
- episode (issue 38): GC-BC critic episodes (cpu profile, rule 'episodes', K 100, N 100, `TTTConfig`'s defaults
  otherwise, so each tree's own default value pass) on the full navigate and stitch data, 5 tasks x 3 episodes
  of one seed as one batch of 15 through `ttt.evaluate`, compilation included (as `ttt eval` runs them): seconds
  per episode, and every episode's success, steps and per-round selection (relevant rows, spans kept, training rows,
  threshold), so that old and new can be compared exactly (`--report` says whether they are identical);
- breakdown (issue 38; this tree only): one GC-BC critic episode on navigate and stitch, part by part, each part
  timed alone in one process against its floor: the full value pass and the lazy one (the rows a round computes)
  against its FLOPs at this CPU's matmul rate at the pass's shape; one round's selection against the bytes it
  must read at this CPU's copy rate; one update against its FLOPs; one environment step (C MuJoCo through the
  callback, and the act) against MuJoCo's own step; the host-device traffic of an episode (the dataset put on
  the device once per call, the trajectories fetched); then the episode's sum against the measured episode.

Checkpoints: the cached 10k-step cpu-profile ones (`$TTT_CACHE/ckpt/DATASET/AGENT-cpu-*`), or those named in
`TTT_SPEED_CKPTS="navigate=DIR,stitch=DIR"` (`ttt pretrain ... --out DIR`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAV = "pointmaze-medium-navigate-v0"


# ------------------------------------------------------------------------------------------------ worker side


DATASETS = {"navigate": NAV, "stitch": "pointmaze-medium-stitch-v0"}


def _ckpt(agent: str, dataset: str = NAV) -> str:
    """The cpu-profile checkpoint (10k steps) of `agent` on `dataset`: named in `TTT_SPEED_CKPTS` (GC-BC), else the
    cached one, newest first."""
    named = dict(kv.split("=", 1) for kv in os.environ.get("TTT_SPEED_CKPTS", "").split(",") if "=" in kv)
    short = {v: k for k, v in DATASETS.items()}.get(dataset)
    if agent == "gcbc" and short in named:
        return named[short]
    base = Path(os.environ.get("TTT_CACHE", "~/.cache/ttt")).expanduser() / "ckpt" / dataset
    found = sorted(base.glob(f"{agent}-cpu-*/state-000010000.eqx"), key=lambda p: p.stat().st_mtime, reverse=True)
    if not found:
        raise SystemExit(f"no cached cpu-profile {agent} checkpoint under {base}: run `ttt run selection-study` first")
    return str(found[0].parent)


def _load(agent: str, dataset: str = NAV):
    """`(ck, states, data)`: the checkpoint (`ttt.open_checkpoint`: read and verified once), its seed-stacked
    TrainState and its dataset."""
    from ttt.checkpoint import open_checkpoint
    from ttt.data.files import load

    ck = open_checkpoint(_ckpt(agent, dataset))
    return ck, ck.load(), load(ck.dataset)


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

    from ttt.checkpoint import init_state
    from ttt.data.files import load
    from ttt.data.specs import get_spec
    from ttt.finetune import FinetuneConfig, make_finetune
    from ttt.presets import agent_backbone, make_configs

    steps = 100
    if kind in ("gcbc-cpu", "gciql-cpu"):
        ck, states, data = _load(kind.split("-")[0])
        agent = jax.tree.map(lambda x: x[0] if isinstance(x, jax.Array) and x.ndim > 0 else x, states.agent)
        backbone, cfg, sampler = ck.backbone, ck.cfg, ck.sampler
    else:
        data = load(NAV)
        over = {"fixed": {"actor_hidden_dims": (8, 8), "value_hidden_dims": (8, 8), "batch_size": 8}}.get(kind, {})
        name = "gcbc" if kind == "fixed" else "gciql"
        cfg, sampler = make_configs(name, get_spec(NAV), "cpu" if kind == "fixed" else "paper", over)
        backbone = agent_backbone(name)
        agent = init_state(jax.random.key(0), backbone, data.obs_dim, data.action_dim, cfg).agent
        steps = 20 if kind == "gciql-paper" else 500
    ft = jax.jit(make_finetune(backbone, cfg, sampler, FinetuneConfig(steps=steps)))
    w = (jnp.arange(data.n_rows) % 100 < 3).astype(jnp.int32)  # 3% of the rows selected
    goal = data.observations[5000]
    s = _best(lambda: ft(agent, None, jax.random.key(1), data, w, goal), 2 if kind == "gciql-paper" else 3)
    return {"ms_per_step": 1e3 * s / steps, "steps": steps}


def w_value() -> dict:
    import dataclasses

    import jax

    from ttt.data.specs import get_spec
    from ttt.episode import TTTConfig, make_round_fns
    from ttt.select import SelectConfig

    ck, states, data = _load("gcbc")
    agent = jax.tree.map(lambda x: x[0] if isinstance(x, jax.Array) and x.ndim > 0 else x, states.agent)
    ttt = TTTConfig(select=SelectConfig(mode="critic", rule="episodes"))
    if getattr(ttt, "value_cap", None) is not None:  # the full pass (the lazy one computes no value in prepare)
        ttt = dataclasses.replace(ttt, value_cap=None)
    prepare, _, _ = make_round_fns(ck.backbone, ck.cfg, ck.sampler, get_spec(NAV), ttt)
    f = jax.jit(prepare)
    return {"s_per_episode": _best(lambda: f(agent, data, data.observations[5000]), 2), "rows": data.n_rows}


def _setup(ck, variant: str, rule: str):
    """`variant` of checkpoint `ck` under `rule`, K 100, N 100, lr 3e-4 (`make_setup`'s defaults otherwise), one
    episode fine-tuning at a time (bucket 1, `TTTConfig`'s default)."""
    from ttt.setups import checkpoint_setup

    return checkpoint_setup(ck, variant, K=100, N=100, lr=3e-4, rule=rule, bucket=1)


def w_batched(batch: int) -> dict:
    import jax

    from ttt.evaluation import evaluate

    ck, states, data = _load("gcbc")
    setup = _setup(ck, "ttt-mc", "paper")
    seed1 = jax.tree.map(lambda x: x[:1] if hasattr(x, "ndim") and x.ndim > 0 else x, states.agent)
    n = 25 if batch > 1 else 5
    kw = dict(episodes=n, tasks=(1,), batch_size=batch)
    evaluate(setup, seed1, data, **{**kw, "episodes": batch})  # compile (the same shapes)
    t0 = time.perf_counter()
    res = evaluate(setup, seed1, data, **kw)
    wall = time.perf_counter() - t0
    return {"episodes": n, "episodes_per_s": n / wall, "success": float(res.success.mean())}


def w_row(episodes: int) -> dict:
    from ttt.evaluation import evaluate

    ck, states, data = _load("gcbc")
    setup = _setup(ck, "ttt", "episodes")
    t0 = time.perf_counter()
    res = evaluate(setup, states.agent, data, episodes=episodes, tasks=(1, 2, 3, 4, 5), batch_size=25)
    wall = time.perf_counter() - t0
    mean, se = res.mean_and_se()
    return {"wall_s": wall, "episodes": int(res.success.size), "success": mean, "se": se,
            "success_per_episode": res.success.reshape(-1).tolist()}  # fmt: skip


SELECTION = ("active", "n_rel", "n_selected", "n_train_rows", "threshold", "empty", "max_span")


def _critic_setup(dataset: str):
    """GC-BC cpu checkpoint of `dataset`, and the critic setup (rule episodes, K 100, N 100, lr 3e-4)."""
    ck, states, data = _load("gcbc", dataset)
    return ck, states, data, _setup(ck, "ttt", "episodes")


def w_episode(short: str) -> dict:
    """15 critic episodes (5 tasks x 3, one seed) as one batch, after a compiling call of the same shapes."""
    import dataclasses

    import numpy as np

    from ttt.evaluation import evaluate

    _, states, data, setup = _critic_setup(DATASETS[short])
    agents = jax_first(states.agent)
    kw = dict(episodes=3, tasks=(1, 2, 3, 4, 5), batch_size=15)
    t0 = time.perf_counter()
    res = evaluate(setup, agents, data, **kw)  # compilation included (as `ttt eval` runs it)
    wall = time.perf_counter() - t0
    n = int(res.success.size)
    rounds = {k: np.asarray(res.rounds[k]).reshape(n, -1).tolist() for k in SELECTION if k in res.rounds}
    vr = np.asarray(res.rounds.get("value_rows", np.zeros((n, 1)))).reshape(n, -1)
    return {"s_per_episode": wall / n, "wall_s": wall, "episodes": n,
            "value_cap": getattr(setup.ttt, "value_cap", None) if dataclasses.is_dataclass(setup.ttt) else None,
            "success": float(res.success.mean()), "success_per_episode": res.success.reshape(-1).tolist(),
            "steps_per_episode": res.steps.reshape(-1).tolist(), "rounds": rounds,
            "rounds_run": float(np.asarray(res.rounds["active"]).reshape(n, -1).sum(-1).mean()),
            "value_rows_per_episode": float(vr.sum(-1).mean())}  # fmt: skip


def _rate(fn, *args, repeats: int = 5) -> float:
    """Best seconds of `fn(*args)` over `repeats` calls after a compiling one."""
    import jax

    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t0)
    return best


def _flops(fn, *args) -> float:
    cost = fn.lower(*args).compile().cost_analysis()
    return float((cost[0] if isinstance(cost, list) else cost)["flops"])


def w_breakdown(short: str) -> dict:
    """One GC-BC critic episode of `short`'s data, part by part, each against its floor (module docstring)."""
    import dataclasses

    import jax
    import jax.numpy as jnp
    import numpy as np

    from ttt.envs.pointmaze import _maze_info
    from ttt.episode import make_round_fns
    from ttt.evaluation import evaluate
    from ttt.finetune import FinetuneConfig, make_finetune
    from ttt.select import Context, round_weights
    from ttt.setups import checkpoint_setup

    ck, states, data, setup = _critic_setup(DATASETS[short])
    ttt, cfg, sampler, spec = setup.ttt, setup.cfg, setup.sampler, setup.spec
    backbone = setup.backbone
    agent = jax.tree.map(lambda x: x[0] if isinstance(x, jax.Array) and x.ndim > 0 else x, states.agent)
    goal = data.observations[data.n_rows // 3]
    out: dict = {"dataset": DATASETS[short], "rows": int(data.n_rows), "value_cap_default": ttt.value_cap}

    # Rates of this CPU: the float32 matmul at the value pass's and the update's shapes, and a copy (bytes moved).
    def mm_rate(rows, width):
        x, w = jnp.ones((rows, width)), jnp.ones((width, width))
        return 2 * rows * width * width / _rate(jax.jit(lambda x, w: x @ w), x, w, repeats=20) / 1e9

    width_v, width_a = max(cfg.value_hidden_dims), max(cfg.actor_hidden_dims)
    out["matmul_gflops_value_shape"] = mm_rate(ttt.value_chunk, width_v)
    out["matmul_gflops_update_shape"] = mm_rate(sampler.batch_size, width_a)
    big = jnp.ones((64 * 2**20,), jnp.float32)  # 256 MB
    out["copy_gb_s"] = 2 * big.nbytes / _rate(jax.jit(lambda x: x * 1.5), big) / 1e9  # read + write
    del big

    # The full value pass (prepare with value_cap None): time and FLOPs (one chunk's, times the chunks).
    full = dataclasses.replace(ttt, value_cap=None)
    prep_full = jax.jit(make_round_fns(backbone, cfg, sampler, spec, full)[0])
    out["value_pass_s"] = _rate(prep_full, agent, data, goal, repeats=2)
    chunk = data.observations[: ttt.value_chunk]
    f_chunk = jax.jit(lambda a, o, g: backbone.value(a, o, jnp.broadcast_to(g, o.shape)))
    out["value_flops_per_row"] = _flops(f_chunk, agent, chunk, goal) / ttt.value_chunk
    out["value_pass_floor_s"] = out["value_flops_per_row"] * data.n_rows / (out["matmul_gflops_value_shape"] * 1e9)
    tables = prep_full(agent, data, goal)

    # One round's selection (rule episodes over every row) from a dataset row's state.
    sel = ttt.select
    state = spec.goal_coords(data.observations[data.n_rows // 2])
    f_sel = jax.jit(lambda t, s, k: round_weights(Context(data=data, goal_eps=spec.goal_eps, cfg=sel, state_xy=s,
                                                          key=k, tables=t))[0])  # fmt: skip
    out["selection_ms"] = 1e3 * _rate(f_sel, tables, state, jax.random.key(0))
    per_row = (data.goals.dtype.itemsize * data.goals.shape[1] + 4 + 4 + 1 + 1 + 4) + 4  # read, + weights written
    out["selection_bytes_per_row"] = per_row  # goals, ep_id, steps, eligible, valid, ep_end; the weights
    out["selection_floor_ms"] = 1e3 * per_row * data.n_rows / (out["copy_gb_s"] * 1e9)

    # One update (inside the N-step scan) against its FLOPs.
    N = ttt.finetune.steps
    w = (jnp.arange(data.n_rows) % 100 < 3).astype(jnp.int32)
    ft = jax.jit(make_finetune(backbone, cfg, sampler, FinetuneConfig(steps=N, lr=3e-4)))
    out["update_ms"] = 1e3 * _rate(ft, agent, None, jax.random.key(1), data, w, goal, repeats=3) / N
    ft1 = jax.jit(make_finetune(backbone, cfg, sampler, FinetuneConfig(steps=1, lr=3e-4)))
    out["update_flops"] = _flops(ft1, agent, None, jax.random.key(1), data, w, goal)
    out["update_floor_ms"] = 1e3 * out["update_flops"] / (out["matmul_gflops_update_shape"] * 1e9)

    # The environment: OGBench's MjModel stepped by C MuJoCo (the callback's own work) for a batch of 15.
    host = _maze_info(spec.env_id).host
    qpos = np.zeros((15, host.model.nq), np.float32)
    t0 = time.perf_counter()
    for _ in range(200):
        host(qpos)
    out["mujoco_step_ms_per_episode"] = 1e3 * (time.perf_counter() - t0) / 200 / 15

    # Host-device traffic: the dataset put on the device (once per evaluate call), an episode's trajectory fetched.
    arrays = [np.asarray(x) for x in jax.tree.leaves(data)]
    out["dataset_bytes"] = int(sum(a.nbytes for a in arrays))
    out["put_dataset_ms"] = 1e3 * _rate(lambda: [jax.device_put(a) for a in arrays], repeats=3)

    # The rollout: 15 base episodes as one batch (the program's act, C MuJoCo callback and bookkeeping), timed
    # after a compiling call; the batch steps until every episode has ended.
    agents = jax_first(states.agent)
    kw = dict(episodes=3, tasks=(1, 2, 3, 4, 5), batch_size=15)
    base = checkpoint_setup(ck, "base")
    evaluate(base, agents, data, seed=1000, **kw)
    t0 = time.perf_counter()
    res = evaluate(base, agents, data, **kw)
    wall = time.perf_counter() - t0
    out["base_s_per_episode"], out["base_success"] = wall / 15, float(res.success.mean())
    out["env_step_ms"] = 1e3 * wall / 15 / int(res.steps.max())  # per episode and step of the batch
    t0 = time.perf_counter()
    np.asarray(res.observations)
    out["fetch_trajectories_ms_per_episode"] = 1e3 * (time.perf_counter() - t0) / 15
    return out


def compose(b: dict, e: dict | None) -> dict:
    """One critic episode, part by part: the unit costs of a breakdown run `b` times what the episodes of an
    episode-part run `e` (this tree's, the same data) did per episode: rounds, value rows, steps."""
    if e is None:
        return {}
    R = e["rounds_run"]
    N = 100
    steps = sum(e["steps_per_episode"]) / len(e["steps_per_episode"])
    share = (e.get("value_rows_per_episode") or b["rows"]) / b["rows"]
    parts = {
        "value pass": (b["value_pass_s"] * share, b["value_pass_floor_s"] * share),
        "selection": (R * b["selection_ms"] / 1e3, R * b["selection_floor_ms"] / 1e3),
        "updates": (R * N * b["update_ms"] / 1e3, R * N * b["update_floor_ms"] / 1e3),
        "rollout": (steps * b["env_step_ms"] / 1e3, steps * b["mujoco_step_ms_per_episode"] / 1e3),
        "host-device": ((b["put_dataset_ms"] / 15 + b["fetch_trajectories_ms_per_episode"]) / 1e3, 0.0),
    }
    full = dict(parts, **{"value pass": (b["value_pass_s"], b["value_pass_floor_s"])})
    return {"parts": {k: {"s": v[0], "floor_s": v[1]} for k, v in parts.items()}, "value_share": share,
            "sum_s": sum(v[0] for v in parts.values()), "floor_s": sum(v[1] for v in parts.values()),
            "full_pass_sum_s": sum(v[0] for v in full.values()),
            "full_pass_floor_s": sum(v[1] for v in full.values()), "measured_s": e["s_per_episode"],
            "rounds": R, "steps": steps}  # fmt: skip


def jax_first(tree):
    """The first seed of seed-stacked arrays, keeping the seed axis (one seed)."""
    import jax

    return jax.tree.map(lambda x: x[:1] if isinstance(x, jax.Array) and x.ndim > 0 else x, tree)


def worker(part: str, arg: str) -> None:
    import jax

    fn = {"update": lambda: w_update(arg), "value": w_value, "batched": lambda: w_batched(int(arg)),
          "row": lambda: w_row(int(arg)), "episode": lambda: w_episode(arg),
          "breakdown": lambda: w_breakdown(arg)}[part]  # fmt: skip
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
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{ROOT / 'benchmarks' / 'speed'}"}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "speed" / "ttt_speed.py"), "--worker", part, arg]
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
    "episode": [("episode", "navigate"), ("episode", "stitch")],
    "breakdown": [("breakdown", "navigate"), ("breakdown", "stitch")],
}
NEW_ONLY = {"breakdown"}  # parts measured in this tree only


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
    if args.report:  # the table the results pages render (benchmarks/reporting/speed.py)
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from reporting.speed import versus_table

        print(versus_table(json.loads(args.out.read_text())))
        return 0
    sys.path.insert(0, str(ROOT / "benchmarks" / "speed"))
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
                for which in ("new",) if part in NEW_ONLY else ("old", "new"):
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
