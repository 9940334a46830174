"""Speed kind: the tables of the speed benchmarks (throughput, latency, growth, scale-out) from their records, each
named in the declaration (``files``: table name -> record, ``OUT/NAME.json`` under benchmarks/results/). Each table
names the command, the machine (CPU model and cores as the record holds them) and what was timed."""

from __future__ import annotations

import json

from .records import RES


def f(x, d=2):
    return "-" if x is None else f"{x:.{d}f}"


def throughput(doc, title="### Episode throughput: compiled vs host drivers, batch sizes") -> list[str]:
    m = doc["machine"]
    out = [
        title,
        "",
        f"`{doc['command']}`; {doc['agent']} on {doc['dataset']} ({doc['profile']} profile checkpoint), K = {doc['K']},"
        f" N = {doc['N']}, lr {doc['lr']:g}; {m['cpu']} ({m['cores']} cores), {m['jax_device']}. Compiled: one program"
        " call on B episodes, timed on its second call (compile = first call minus second). Host lockstep: the host"
        " driver on the same first 25 episodes (second run). Paper-style loop: one episode at a time (the first few"
        " of the same episodes), jitted pieces warmed up. Env steps/s counts all episodes of the batch.",
        "",
        "| variant | driver | B | episodes/s | env steps/s | env steps/s per episode | compile s | success |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        for c in r["compiled"]:
            out.append(
                f"| {r['variant']} | compiled | {c['batch']} | {f(c['episodes_per_s'])} | "
                f"{c['env_steps_per_s']:.0f} | {c['env_steps_per_s_per_episode']:.0f} | {f(c['compile_s'], 1)} | "
                f"{f(c['success'])} |"
            )
        if "host_lockstep" in r:
            h = r["host_lockstep"]
            out.append(
                f"| {r['variant']} | host lockstep | {h['batch']} | {f(h['episodes_per_s'])} | "
                f"{h['env_steps_per_s']:.0f} | {h['env_steps_per_s'] / h['batch']:.0f} | {f(h['compile_s'], 1)}"
                f" | {f(h['success'])} |"
            )
        if "paper_loop" in r:
            p = r["paper_loop"]
            out.append(
                f"| {r['variant']} | paper-style loop | 1 (x{p['episodes']}) | {f(p['episodes_per_s'])} | "
                f"{p['env_steps_per_s']:.0f} | {p['env_steps_per_s']:.0f} | "
                f"{f(p['first_episode_s'] - p['warm_episode_s'], 1)} | {f(p['success'])} |"
            )
    out += ["", "| variant | compiled B = 25 / host lockstep | compiled B = 25 / paper-style loop |", "|---|---|---|"]
    for r in doc["rows"]:
        out.append(f"| {r['variant']} | {f(r.get('ratio_vs_host_lockstep'))} | {f(r.get('ratio_vs_paper_loop'))} |")
    return out + [""]


def latency(doc) -> list[str]:
    m = doc["machine"]
    out = [
        "### Latency breakdown and FLOPs",
        "",
        f"`{doc['command']}`; {m['cpu']} ({m['cores']} cores). Median of repeated calls of each piece jitted alone, "
        f"pointmaze-medium-navigate-v0 (1,001,000 rows), B = 1. float32 2048^3 matmul measured in the same run: "
        f"{doc['matmul_flop_per_s'] / 1e9:.0f} GFLOP/s (the attainable peak used below).",
        "",
        "| profile, agent | widths, batch | value pass (per episode) | critic-free precompute | selection (per round) "
        "| weight table | batch draw | update | act | env step | episode estimate (K = N = 100) | paper (RTX 4090) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        s = r["median_s"]
        out.append(
            f"| {r['profile']}, {r['agent']} | {'x'.join(map(str, r['hidden'])) or '-'}, {r['batch']} | "
            f"{s['value_pass']:.2f} s | {1e3 * s['precompute_mc']:.0f} ms | {1e3 * s['selection']:.0f} ms | "
            f"{1e3 * s['weight_table']:.1f} ms | {1e3 * s['batch_draw']:.2f} ms | {1e3 * s['update']:.1f} ms | "
            f"{1e3 * s['act']:.2f} ms | {1e3 * s['env_step']:.2f} ms | {r['episode_estimate_s']:.1f} s | "
            "< 15 s, < 1 s, -, < 10 ms, < 30 ms; ~65 s |"
        )
    out += [
        "",
        "| profile, agent | GFLOP per episode | value pass GFLOP | update MFLOP | achieved GFLOP/s (episode) | "
        "value pass GFLOP/s | update GFLOP/s | fraction of matmul peak |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        fl = r["flops"]
        out.append(
            f"| {r['profile']}, {r['agent']} | {r['flops_per_episode'] / 1e9:.0f} | {fl['value_pass'] / 1e9:.0f} | "
            f"{fl['update'] / 1e6:.0f} | {r['achieved_flop_per_s'] / 1e9:.1f} | "
            f"{r['value_pass_flop_per_s'] / 1e9:.1f} | "
            f"{r['update_flop_per_s'] / 1e9:.1f} | {r['fraction_of_matmul_peak']:.2f} |"
        )
    return out + [""]


def growth(doc) -> list[str]:
    out = ["### Cost growth", "", f"`{doc['command']}`.", ""]
    if "rows" in doc:
        out += [
            "| rows | value pass s | critic precompute s | critic-free precompute s | selection s (per round) |",
            "|---|---|---|---|---|",
        ]
        for r in doc["rows"]:
            out.append(
                f"| {r['rows']:,} | {r['value_pass_s']:.3f} | {r['precompute_critic_s']:.4f} | "
                f"{r['precompute_mc_s']:.4f} | {r['selection_s']:.4f} |"
            )
        sl = doc["rows_slopes"]
        out += [
            "",
            "Log-log slopes against rows (1 = linear): " + ", ".join(f"{k[:-2]} {f(v)}" for k, v in sl.items()),
            "",
        ]
    if "adapt" in doc:
        out += ["| N | width | one round's adapt s | ms per step |", "|---|---|---|---|"]
        for r in doc["adapt"]["N"] + doc["adapt"]["width"]:
            out.append(f"| {r['N']} | {r['width']} | {r['adapt_s']:.3f} | {r['per_step_ms']:.2f} |")
        out += ["", f"Slopes: against N {f(doc.get('N_slope'))}, against width {f(doc.get('width_slope'))}.", ""]
    if "K" in doc:
        out += ["| K | batch of 5 episodes, s | env steps | rounds run | success |", "|---|---|---|---|---|"]
        for r in doc["K"]:
            out.append(f"| {r['K']} | {r['batch_s']:.2f} | {r['steps']} | {r['rounds_run']} | {f(r['success'])} |")
        out.append("")
    return out


def scale_out(doc) -> list[str]:
    out = [
        "### Scale-out",
        "",
        f"`{doc['command']}`; variant {doc['variant']}, success {doc['success_mean']:.2f}.",
        "",
        "| configuration | devices | episodes | first call s (with compile) | second call s | same as 1 device |",
        "|---|---|---|---|---|---|",
    ]
    for r in doc["runs"]:
        kind = r["kind"] + (f" (process {r['pid']})" if r["processes"] > 1 else "")
        out.append(
            f"| {kind} | {r['devices']} | {r['episodes']} | {r['first_s']:.1f} | {r['second_s']:.1f} | "
            f"{r['same_as_1_device']} |"
        )
    return out + [""]


def hparam_grid(doc) -> list[str]:
    """``hparam_grid.py``: one lr x q grid of GC-TTT run three ways (one grid program, one program per point, one
    program shared by the points run one after another): programs, compile and wall seconds, and how far each point's
    numbers are from the grid's; then every point's success."""
    a, m = doc["args"], doc["machine"]
    out = [
        f"`python benchmarks/speed/hparam_grid.py --ckpt $TTT_CACHE/ckpt/{a['ckpt']} --data-dir {a['data_dir']} "
        f"--tasks {' '.join(map(str, a['tasks']))} --out {a['out']}`; "
        f"variant {a['variant']} (K {a['K']}, N {a['N']}), lr {', '.join(f'{x:g}' for x in a['lr'])} x q "
        f"{', '.join(f'{x:g}' for x in a['q'])}: {doc['points']} points of {doc['episodes_per_point']} episodes; "
        f"{m['cpu']} ({m['cores']} cores). Compile s: JAX's tracing, lowering and compile durations "
        "(`jax.monitoring`); wall s: the whole calls.",
        "",
        "| way | programs | compile s | wall s | largest difference from the grid's numbers |",
        "|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        d = r.get("max_abs_diff")
        out.append(f"| {r['way']} | {r['programs']} | {r['compile_s']:.1f} | {r['wall_s']:.1f} | "
                   f"{'-' if d is None else f'{d:g}'} |")  # fmt: skip
    out += ["", "Success per point: " + "; ".join(f"{k} {v:.2f}" for k, v in doc["success"].items()) + "."]
    return out


def grid(decl: dict) -> str:
    """The hyper-parameter grid record (``file``)."""
    return "\n".join(hparam_grid(json.loads((RES / decl["file"]).read_text())))


def tables(decl: dict) -> str:
    """Every declared table, in the order declared (``files``)."""
    same25 = lambda d: throughput(d, "### The same 25 episodes through all three drivers")  # noqa: E731
    kinds = {"throughput25": same25, "throughput": throughput, "latency": latency, "growth": growth,
             "scale_out": scale_out}  # fmt: skip
    md: list[str] = []
    for name, rel in decl["files"].items():
        md += kinds[name](json.loads((RES / rel).read_text()))
    return "\n".join(md).rstrip()


# ---- this code against an earlier commit (benchmarks/speed/ttt_speed.py records) ----

VERSUS_NEW_ONLY = {"breakdown"}  # parts a ttt_speed.py record measures in the new tree only
VERSUS_METRIC = {"update": ("ms_per_step", "ms per step", False), "value": ("s_per_episode", "s per episode", False),
                 "batched": ("episodes_per_s", "episodes/s", True), "row": ("wall_s", "s per row", False),
                 "episode": ("s_per_episode", "s per episode", False)}  # fmt: skip


def _versus_success(runs: list[dict]) -> str:
    """The first run's success (+- s.e. where recorded), or blank for parts without one."""
    r = runs[0]
    if "success" not in r:
        return ""
    return f"{r['success']:.2f}" + (f" +- {r['se']:.2f}" if "se" in r else "")


def same_selection(a: dict, b: dict) -> bool:
    """Two episode-part runs made the same episodes: success, steps and every round's selection, exactly."""
    import math

    def eq(x, y):
        if isinstance(x, list):
            return isinstance(y, list) and len(x) == len(y) and all(eq(u, v) for u, v in zip(x, y, strict=True))
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            return True
        return x == y

    keys = ("success_per_episode", "steps_per_episode")
    return all(eq(a[k], b[k]) for k in keys) and all(eq(a["rounds"][k], b["rounds"].get(k)) for k in a["rounds"])


def versus_table(doc: dict) -> str:
    """A ttt_speed.py record: each measurement's best (least disturbed) old and new figure and the speed-up."""
    lines = ["| part | configuration | metric | old | new | speed-up | old success | new success |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in doc["results"]:
        if r["part"] in VERSUS_NEW_ONLY:
            continue
        key, label, higher = VERSUS_METRIC[r["part"]] if r["part"] != "fixed" else VERSUS_METRIC["update"]
        pick = max if higher else min
        old, new = pick(x[key] for x in r["old"]), pick(x[key] for x in r["new"])
        speed = new / old if higher else old / new
        names = {"fixed": "gcbc 8-wide, batch 8", "": "gcbc cpu, 1M rows", "1": "B = 1", "25": "B = 25"}
        job = names.get(r["job"], r["job"])
        if r["part"] == "row":
            job = f"gcbc cpu, critic (episodes), {r['old'][0]['episodes']} episodes, batches of 25"
        if r["part"] == "episode":
            same = all(same_selection(o, n) for o in r["old"] for n in r["new"])
            job = f"gcbc cpu critic, {r['job']}, 15 episodes (selections identical: {'yes' if same else 'NO'})"
        fmt = "{:.3f}" if old < 10 else "{:.1f}"
        lines.append(f"| {r['part']} | {job} | {label} | {fmt.format(old)} | {fmt.format(new)} | {speed:.2f}x | "
                     f"{_versus_success(r['old'])} | {_versus_success(r['new'])} |")  # fmt: skip
    return "\n".join(lines)


def versus(decl: dict) -> str:
    """Every declared ttt_speed.py record (``records``: [{file, note}]): its command, the commits it measured, the
    machine it names, the declared note on the machine's load, and its table."""
    md: list[str] = []
    for item in decl["records"]:
        doc = json.loads((RES / item["file"]).read_text())
        m = doc["machine"]
        md += [f"### {doc['old']} against {doc['new'].replace(' (+ working tree)', '')}", "",
               f"`{doc['command']}` (`results/{item['file']}`); {m['cpu']} ({m['cores']} cores), jax {m['jax']}. "
               + item["note"].strip(), "", versus_table(doc), ""]  # fmt: skip
    return "\n".join(md).rstrip()
