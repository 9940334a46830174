"""Latency of each piece of a GC-TTT round, alone, comparable to the paper's appendix (RTX 4090: dataset-wide critic
pass < 15 s per episode, selection < 1 s per round, batch draw < 10 ms, update < 30 ms), with FLOP accounting.

Usage:
    python benchmarks/speed/latency.py [--configs cpu:gcbc,cpu:gciql,paper:gciql] [--repeats 5]
        [--out benchmarks/results/speed/latency.json]

Each config is PROFILE:AGENT on pointmaze-medium-navigate-v0 (1,001,000 rows): `cpu` with the pre-trained cpu
profile checkpoint (runs/base/cpu/...), `paper` with OGBench's networks (512x3, batch 1024) at random init (time and
FLOPs do not depend on the weights). Every piece is jitted alone, run once to compile, then timed `--repeats` times
(median, `block_until_ready`):
- value pass: V(s_j, g*) for every row (`episode.dataset_values`, 4096 rows per chunk) + precompute tables
  (critic mode), once per episode; and the critic-free precompute;
- selection: relevance + percentile filter + training weights (`select.round_weights`), once per round;
- weight table: the round's cumulative weights, once per round;
- batch draw and update (`finetune.make_ttt_step`), N times per round;
- act (one action) and env step (in-program PointMaze, C MuJoCo callback), L times per episode.
Episode estimate = value pass + L/K (selection + table + N (draw + update)) + L (act + env), K = N = 100, L = 1000.
FLOPs: XLA's cost analysis of each jitted piece (the value pass as one chunk's cost times the chunks, since the
analysis does not multiply loop bodies); achieved FLOP/s = FLOPs / time, against a 2048^3 float32 matmul measured in
the same run (the attainable peak) and the CPU's nominal peak if known.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine, open_run, seed0, select_round, variant_setup  # noqa: E402

from ttt.checkpoint import init_state  # noqa: E402
from ttt.data.files import load  # noqa: E402
from ttt.data.specs import get_spec  # noqa: E402
from ttt.episode import TTTConfig, make_round_fns  # noqa: E402
from ttt.finetune import make_ttt_step  # noqa: E402
from ttt.presets import agent_backbone, make_configs  # noqa: E402
from ttt.select import SelectConfig  # noqa: E402
from ttt.setups import make_setup  # noqa: E402

NAV = "pointmaze-medium-navigate-v0"


def timed(fn, *args, repeats: int) -> tuple[float, float]:
    """(compile + first run seconds, median run seconds)."""
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t0)
    return first, statistics.median(ts)


def flops(fn, *args) -> float:
    try:
        cost = jax.jit(fn).lower(*args).compile().cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        return float(cost.get("flops", float("nan")))
    except Exception:  # noqa: BLE001  (cost analysis is best effort)
        return float("nan")


def matmul_peak(n: int = 2048, repeats: int = 5) -> float:
    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    _, t = timed(f, a, repeats=repeats)
    return 2 * n**3 / t


def setup_for(profile: str, agent: str, data):
    spec = get_spec(NAV)
    if profile == "cpu":
        ck, states, _ = open_run(f"runs/base/cpu/{NAV}/{agent}")
        return variant_setup(ck, "ttt"), seed0(states.agent)
    cfg, sampler = make_configs(agent, spec, "paper")
    backbone = agent_backbone(agent)
    st = init_state(jax.random.key(0), backbone, data.obs_dim, data.action_dim, cfg)
    return make_setup("ttt", backbone, cfg, sampler, spec, 1000, bucket=1), st.agent


def measure(profile: str, agent: str, data, repeats: int) -> dict:
    from ttt.envs import make_env as make_jax_env

    setup, agent0 = setup_for(profile, agent, data)
    spec, ttt = setup.spec, setup.ttt
    backbone = setup.backbone
    prepare, _, _ = make_round_fns(backbone, setup.cfg, setup.sampler, spec, ttt)
    mc = TTTConfig(K=100, select=SelectConfig(mode="mc"), finetune=ttt.finetune)
    prepare_mc, _, _ = make_round_fns(backbone, setup.cfg, setup.sampler, spec, mc)
    ts = make_ttt_step(backbone, setup.cfg, setup.sampler, ttt.finetune, 0.0)
    env = make_jax_env(spec.env_id)
    state, obs, goal = env.reset(jax.random.key(1), 1)
    out = {}
    f_prep = jax.jit(prepare)
    out["value_pass"] = timed(f_prep, agent0, data, goal, repeats=max(1, repeats // 2))
    out["precompute_mc"] = timed(jax.jit(prepare_mc), agent0, data, goal, repeats=repeats)
    tables = f_prep(agent0, data, goal)
    sel, ge = ttt.select, spec.goal_eps
    f_sel = jax.jit(lambda k, t, d, o: select_round(k, t, d, spec.goal_coords(o), sel, ge, None))
    k = jax.random.key(2)
    out["selection"] = timed(f_sel, k, tables, data, obs, repeats=repeats)
    weights, m = f_sel(k, tables, data, obs)
    f_table = jax.jit(ts.table)
    out["weight_table"] = timed(f_table, weights, repeats=repeats)
    table = f_table(weights)
    f_draw = jax.jit(ts.draw)
    out["batch_draw"] = timed(f_draw, k, k, data, table, goal, repeats=repeats)
    batch = f_draw(k, k, data, table, goal)
    opt = ts.init(agent0)
    f_upd = eqx.filter_jit(ts.update)
    out["update"] = timed(f_upd, agent0, opt, batch, k, repeats=repeats)
    f_act = jax.jit(lambda a, o, g, kk: backbone.act(a, o, g, kk, 0.0))
    out["act"] = timed(f_act, agent0, obs, goal, k, repeats=repeats * 20)
    f_env = eqx.filter_jit(lambda e, s, a: e.step(s, a))
    out["env_step"] = timed(f_env, env, state, jnp.zeros(spec.action_dim), repeats=repeats * 20)
    med = {name: v[1] for name, v in out.items()}
    L, K, N = 1000, ttt.K, ttt.finetune.steps
    rounds = L // K
    per_round = med["selection"] + med["weight_table"] + N * (med["batch_draw"] + med["update"])
    est = med["value_pass"] + rounds * per_round + L * (med["act"] + med["env_step"])
    # FLOPs per call (XLA cost analysis); the value pass as chunks x one chunk's value computation.
    chunk = ttt.value_chunk
    n_chunks = -(-data.n_rows // chunk)
    obs_c = data.observations[:chunk]
    fl = dict(
        value_pass=n_chunks * flops(lambda a, o, g: backbone.value(a, o, jnp.broadcast_to(g, o.shape)), agent0,
                                    obs_c, goal),  # fmt: skip
        update=flops(lambda a, s, b, kk: ts.update(a, s, b, kk)[2], agent0, opt, batch, k),
        act=flops(lambda a, o, g, kk: backbone.act(a, o, g, kk, 0.0), agent0, obs, goal, k),
        selection=flops(lambda kk, t, d, o: select_round(kk, t, d, spec.goal_coords(o), sel, ge, None)[0], k,
                        tables, data, obs),  # fmt: skip
    )
    fl_episode = fl["value_pass"] + rounds * (fl["selection"] + N * fl["update"]) + L * fl["act"]
    t_flops = med["value_pass"] + rounds * (med["selection"] + N * med["update"]) + L * med["act"]
    return dict(
        profile=profile,
        agent=agent,
        hidden=list(getattr(setup.cfg, "value_hidden_dims", ())),
        batch=setup.sampler.batch_size if ttt.finetune.batch_size is None else ttt.finetune.batch_size,
        rows=data.n_rows,
        K=K,
        N=N,
        L=L,
        median_s=med,
        first_call_s={name: v[0] for name, v in out.items()},
        episode_estimate_s=est,
        episode_parts_s=dict(
            value_pass=med["value_pass"],
            selection=rounds * (med["selection"] + med["weight_table"]),
            updates=rounds * N * (med["batch_draw"] + med["update"]),
            acting=L * (med["act"] + med["env_step"]),
        ),
        flops=fl,
        flops_per_episode=fl_episode,
        achieved_flop_per_s=fl_episode / t_flops,
        value_pass_flop_per_s=fl["value_pass"] / med["value_pass"],
        update_flop_per_s=fl["update"] / med["update"],
        selected=int(m["n_selected"]),
        relevant=int(m["n_rel"]),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="cpu:gcbc,cpu:gciql,paper:gciql")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/speed/latency.json"))
    args = ap.parse_args()
    data = load(NAV)
    peak = matmul_peak()
    print(f"float32 matmul 2048^3: {peak / 1e9:.1f} GFLOP/s", flush=True)
    rows = []
    for c in args.configs.split(","):
        profile, agent = c.split(":")
        r = measure(profile, agent, data, args.repeats)
        r["fraction_of_matmul_peak"] = r["achieved_flop_per_s"] / peak
        rows.append(r)
        print(json.dumps({k: v for k, v in r.items() if k != "first_call_s"}), flush=True)
    doc = dict(machine=machine(), matmul_flop_per_s=peak, command="python " + " ".join(sys.argv), rows=rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
