"""How GC-TTT's cost grows: selection and precompute time against dataset rows (1e4 to 1e7), one round's adaptation
against N and network width, and whole-episode time against K.

Usage:
    python benchmarks/speed/growth.py [--rows 1e4,1e5,1e6,1e7] [--N 25,50,100,200,400] [--width 64,128,256,512,1024]
        [--K 50,100,200,500,1000] [--repeats 3] [--out benchmarks/results/speed/growth.json]

- rows: pointmaze-medium-navigate-v0 episodes, truncated or tiled to the row count (whole 1001-row episodes); the
  cpu-profile GC-BC checkpoint's twin value; times of the dataset value pass, the critic and critic-free
  precompute (once per episode) and one round's selection (relevance, percentile filter, weights, weight table).
- N, width: one round's `adapt` (selection + N fine-tuning steps from the pre-trained agent), critic-free, GC-BC at
  random init with MLPs of the given width (2 hidden layers), batch 256, on the full dataset.
- K: one compiled batch of 5 episodes (seed 0, one per task; the cpu checkpoint, critic-free, N = 100); episodes
  end early at the goal, so the env steps and rounds actually run are reported with the time.
Slopes are least-squares fits of log(time) on log(x) over the points at or above the first x where time exceeds
10 ms (a slope of 1 is linear growth).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine, open_run, seed0, select_round, variant_setup  # noqa: E402

from ttt.checkpoint import init_state  # noqa: E402
from ttt.data.dataset import Dataset  # noqa: E402
from ttt.data.files import read_npz, resolve_dir  # noqa: E402
from ttt.data.specs import get_spec  # noqa: E402
from ttt.episode import TTTConfig, dataset_values, make_episodes, make_round_fns  # noqa: E402
from ttt.finetune import FinetuneConfig, make_ttt_step  # noqa: E402
from ttt.presets import agent_backbone, make_configs  # noqa: E402
from ttt.select import SelectConfig  # noqa: E402

GCBC = agent_backbone("gcbc")

NAV = "pointmaze-medium-navigate-v0"


def timed(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def slope(xs, ts) -> float | None:
    pts = [(x, t) for x, t in zip(xs, ts, strict=True) if t > 0.01]
    if len(pts) < 2:
        return None
    lx, lt = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(lx, lt, 1)[0])


def dataset_of(arrays: dict, rows: int) -> Dataset:
    spec = get_spec(NAV)
    ep = spec.episode_rows
    n_ep = max(1, rows // ep)
    have = arrays["observations"].shape[0] // ep
    idx = np.arange(n_ep * ep) % (have * ep)  # tile whole episodes
    return Dataset.from_arrays(arrays["observations"][idx], arrays["actions"][idx], arrays["terminals"][idx],
                               goal_fn=spec.goal_coords)  # fmt: skip


def rows_sweep(rows_list, ck, states, repeats) -> list[dict]:
    arrays = read_npz(resolve_dir(None) / f"{NAV}.npz", get_spec(NAV))
    setup = variant_setup(ck, "ttt")
    spec, ttt = setup.spec, setup.ttt
    mc = dataclasses.replace(ttt, select=SelectConfig(mode="mc"))
    prep_m, _, _ = make_round_fns(setup.backbone, setup.cfg, setup.sampler, spec, mc)
    ts = make_ttt_step(setup.backbone, setup.cfg, setup.sampler, ttt.finetune)
    agent = seed0(states.agent)
    from ttt.select import precompute

    value_fn = setup.backbone.value
    f_values = jax.jit(lambda a, d, g: dataset_values(value_fn, a, d.observations, g, ttt.value_chunk))
    f_pre = jax.jit(lambda d, g, v: precompute(d, spec.goal_coords(g), v, ttt.select, spec.goal_eps))
    f_prep_m = jax.jit(prep_m)
    sel = ttt.select
    f_sel = jax.jit(lambda k, t, d, o: ts.table(select_round(k, t, d, spec.goal_coords(o), sel, spec.goal_eps)[0]))
    goal = jnp.asarray(arrays["observations"][5000])
    state = jnp.asarray(arrays["observations"][123])
    out = []
    for rows in rows_list:
        data = dataset_of(arrays, rows)
        values = f_values(agent, data, goal)
        tables = f_pre(data, goal, values)
        r = dict(rows=data.n_rows,
                 value_pass_s=timed(f_values, agent, data, goal, repeats=1 if rows >= 1e7 else repeats),
                 precompute_critic_s=timed(f_pre, data, goal, values, repeats=repeats),
                 precompute_mc_s=timed(f_prep_m, agent, data, goal, repeats=repeats),
                 selection_s=timed(f_sel, jax.random.key(0), tables, data, state, repeats=repeats))  # fmt: skip
        print("rows", json.dumps(r), flush=True)
        out.append(r)
        del data, values, tables
    return out


def adapt_sweep(Ns, widths, repeats) -> dict:
    from ttt.data.files import load

    data = load(NAV)
    spec = get_spec(NAV)
    goal = data.observations[5000]
    obs = data.observations[123]
    res = {"N": [], "width": []}
    for kind, values in (("N", Ns), ("width", widths)):
        for v in values:
            n, w = (v, 256) if kind == "N" else (100, v)
            cfg, sampler = make_configs("gcbc", spec, "cpu", {"actor_hidden_dims": (w, w), "value_hidden_dims": (w, w)})
            agent = init_state(jax.random.key(0), GCBC, 2, 2, cfg).agent
            ttt = TTTConfig(K=100, select=SelectConfig(mode="mc"), finetune=FinetuneConfig(steps=n))
            prepare, adapt, _ = make_round_fns(GCBC, cfg, sampler, spec, ttt)
            tables = jax.jit(prepare)(agent, data, goal)
            f = eqx.filter_jit(lambda a, k, d, t, o, g, adapt=adapt: adapt(a, None, k, d, t, o, g)[0])
            t = timed(f, agent, jax.random.key(1), data, tables, obs, goal, repeats=repeats)
            r = dict(N=n, width=w, adapt_s=t, per_step_ms=1e3 * t / max(n, 1))
            print(kind, json.dumps(r), flush=True)
            res[kind].append(r)
    return res


def k_sweep(Ks, ck, states) -> list[dict]:
    from ttt.data.files import load
    from ttt.envs import make_env
    from ttt.evaluation import episode_batch

    data = load(NAV)
    env = make_env(get_spec(NAV).env_id)
    eb = episode_batch(0, ck.seeds, (1, 2, 3, 4, 5), 1)
    eb = eb.take(np.flatnonzero(eb.seed_idx == 0))  # seed 0, one episode of each task: B = 5
    out = []
    for K in Ks:
        setup = variant_setup(ck, "ttt-mc", K=K, N=100)
        prog = eqx.filter_jit(make_episodes(setup.backbone, setup.cfg, setup.sampler, setup.spec, setup.ttt, 1000))
        agents = jax.tree.map(lambda x: jnp.repeat(x[:1], len(eb), 0) if isinstance(x, jax.Array) else x, states.agent)
        args = (agents, None, env, data, eb.reset_keys, eb.ttt_keys, jnp.asarray(eb.task))
        o = jax.block_until_ready(prog(*args))
        t0 = time.perf_counter()
        o = jax.block_until_ready(prog(*args))
        t = time.perf_counter() - t0
        active = int(np.asarray(o.rounds["active"]).sum())
        r = dict(K=K, batch_s=t, steps=int(np.asarray(o.steps).sum()), rounds_run=active,
                 success=float(np.asarray(o.success).mean()))  # fmt: skip
        print("K", json.dumps(r), flush=True)
        out.append(r)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1e4,1e5,1e6,1e7")
    ap.add_argument("--N", default="25,50,100,200,400")
    ap.add_argument("--width", default="64,128,256,512,1024")
    ap.add_argument("--K", default="50,100,200,500,1000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/speed/growth.json"))
    args = ap.parse_args()
    ck, states, _ = open_run(f"runs/base/cpu/{NAV}/gcbc")
    doc = dict(machine=machine(), command="python " + " ".join(sys.argv))
    ints = lambda s: [int(float(x)) for x in s.split(",") if x]  # noqa: E731
    if args.rows:
        rows = rows_sweep(ints(args.rows), ck, states, args.repeats)
        xs = [r["rows"] for r in rows]
        doc["rows"] = rows
        doc["rows_slopes"] = {k: slope(xs, [r[k] for r in rows]) for k in rows[0] if k.endswith("_s")}
    if args.N or args.width:
        ad = adapt_sweep(ints(args.N), ints(args.width), args.repeats)
        doc["adapt"] = ad
        doc["N_slope"] = slope([r["N"] for r in ad["N"]], [r["adapt_s"] for r in ad["N"]])
        doc["width_slope"] = slope([r["width"] for r in ad["width"]], [r["adapt_s"] for r in ad["width"]])
    if args.K:
        doc["K"] = k_sweep(ints(args.K), ck, states)
    print(json.dumps({k: v for k, v in doc.items() if k.endswith("slope") or k.endswith("slopes")}), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
