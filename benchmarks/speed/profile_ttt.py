"""Where the time of test-time training goes, op by op: a JAX profiler trace (XLA CPU thunks, traceme on) of one
round's N fine-tuning steps and of the per-episode value pass, aggregated into the ops' self times.

Usage:
    python benchmarks/speed/profile_ttt.py [--configs cpu:gcbc,cpu:gciql,paper:gciql] [--steps 20]
        [--out benchmarks/results/speed/profile.json]

Each config is PROFILE:AGENT on pointmaze-medium-navigate-v0 (1,001,000 rows): `cpu` uses the cached 10k-step
cpu-profile checkpoint, `paper` OGBench's networks (512x3, batch 1024) at random init (time does not depend on the
weights). The jitted piece is run once to compile, then once under `jax.profiler.trace`; the trace's complete
events are nested per thread, each event's self time is its duration minus its direct children's, and self times
are summed per op name and per category: matmul (XLA `dot`, YNNPACK/XNNPACK/oneDNN fusions), gather/scatter,
elementwise fusions (activations, Adam, PRNG), reductions, loop control (`while` self time), copies, runtime
(thunk executor and dispatch self time). Profiling adds overhead per op, so totals exceed untraced times: read the
shares, not the absolute figures.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_xprof_traceme=true"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from ttt_speed import NAV, _ckpt  # noqa: E402

from ttt.data.files import load  # noqa: E402
from ttt.data.specs import get_spec  # noqa: E402

CATEGORIES = (
    ("matmul", ("dot", "ynn_fusion", "xnn_fusion", "onednn", "convolution", "custom-call")),
    ("gather/scatter", ("gather", "scatter", "dynamic-slice", "dynamic_slice", "dynamic-update", "dynamic_update")),
    ("reduction", ("reduce",)),
    ("loop control", ("while", "conditional", "call")),
    ("copy", ("copy", "transpose", "bitcast", "concatenate")),
    ("elementwise fusion", ("fusion",)),
)
RUNTIME = ("ThunkExecutor", "PjitFunction", "Execute", "$", "ExecuteHelper", "CommonPjRt")


def category(name: str) -> str:
    if name.startswith(RUNTIME) or "Thunk" in name or "PjRt" in name:
        return "runtime"
    low = name.lower()
    for cat, keys in CATEGORIES:
        if any(k in low for k in keys):
            return cat
    return "other"


def self_times(events: list[dict]) -> tuple[collections.Counter, collections.Counter, float]:
    """(self time per op name, calls per op name, span of the traced execution) from complete ('X') events."""
    by_tid = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and "dur" in e:
            by_tid[(e.get("pid"), e.get("tid"))].append(e)
    own, calls = collections.Counter(), collections.Counter()
    lo, hi = float("inf"), 0.0
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[list] = []  # [event, children's duration]
        for e in evs + [None]:
            while stack and (e is None or e["ts"] >= stack[-1][0]["ts"] + stack[-1][0]["dur"]):
                done, child = stack.pop()
                own[done["name"]] += max(done["dur"] - child, 0.0)
                calls[done["name"]] += 1
                if stack:
                    stack[-1][1] += done["dur"]
            if e is not None:
                stack.append([e, 0.0])
                if not e["name"].startswith("$"):
                    lo, hi = min(lo, e["ts"]), max(hi, e["ts"] + e["dur"])
    return own, calls, hi - lo


def traced(fn, *args) -> dict:
    jax.block_until_ready(fn(*args))
    with tempfile.TemporaryDirectory() as d:
        jax.profiler.start_trace(d, create_perfetto_trace=True)
        jax.block_until_ready(fn(*args))
        jax.profiler.stop_trace()
        f = sorted(glob.glob(f"{d}/**/*.trace.json.gz", recursive=True))[-1]
        doc = json.load(gzip.open(f))
    own, calls, span = self_times(doc["traceEvents"] if isinstance(doc, dict) else doc)
    ops = {n: t for n, t in own.items() if not n.startswith("$") and category(n) != "runtime"}
    cats = collections.Counter()
    for n, t in own.items():
        if not n.startswith("$"):
            cats[category(n)] += t
    top = sorted(ops.items(), key=lambda kv: -kv[1])[:12]
    return {"span_ms": span / 1e3, "categories_ms": {k: v / 1e3 for k, v in cats.most_common()},
            "top_ops": [{"op": n, "ms": t / 1e3, "calls": calls[n]} for n, t in top]}  # fmt: skip


def agent_for(profile: str, name: str, data):
    from ttt.checkpoint import init_state, open_checkpoint
    from ttt.presets import agent_backbone, make_configs

    if profile == "cpu":
        ck = open_checkpoint(_ckpt(name))
        agent = jax.tree.map(lambda x: x[0] if isinstance(x, jax.Array) and x.ndim > 0 else x, ck.load().agent)
        return ck.backbone, ck.cfg, ck.sampler, agent
    cfg, sampler = make_configs(name, get_spec(NAV), "paper")
    backbone = agent_backbone(name)
    return backbone, cfg, sampler, init_state(jax.random.key(0), backbone, data.obs_dim, data.action_dim, cfg).agent


def profile(profile: str, name: str, data, steps: int) -> dict:
    from ttt.episode import TTTConfig, make_round_fns
    from ttt.finetune import FinetuneConfig, make_finetune
    from ttt.select import SelectConfig

    backbone, cfg, sampler, agent = agent_for(profile, name, data)
    ft = jax.jit(make_finetune(backbone, cfg, sampler, FinetuneConfig(steps=steps)))
    w = (jnp.arange(data.n_rows) % 100 < 3).astype(jnp.int32)
    goal = data.observations[5000]
    out = {"config": f"{profile}:{name}", "steps": steps}
    out["finetune"] = traced(ft, agent, None, jax.random.key(1), data, w, goal)
    ttt = TTTConfig(select=SelectConfig(mode="critic", rule="episodes"), value_cap=None)  # the full pass
    prepare, _, _ = make_round_fns(backbone, cfg, sampler, get_spec(NAV), ttt)
    out["value_pass"] = traced(jax.jit(prepare), agent, data, goal)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="cpu:gcbc,cpu:gciql,paper:gciql")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/speed/profile.json"))
    args = ap.parse_args()
    data = load(NAV)
    rows = []
    for c in args.configs.split(","):
        p, name = c.split(":")
        r = profile(p, name, data, args.steps)
        rows.append(r)
        for piece in ("finetune", "value_pass"):
            cats = ", ".join(f"{k} {v:.1f}" for k, v in r[piece]["categories_ms"].items())
            print(f"{c} {piece}: span {r[piece]['span_ms']:.1f} ms; {cats}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": "python " + " ".join(sys.argv), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
