"""GPU kind: what `benchmarks/gpu_queue.sh` recorded on the GPUs lent to the project, from the records under
``benchmarks/results/gpu/DEVICE/`` (each declared by file; ``devices``: folder -> the GPU's model as the page names
it)."""

from __future__ import annotations

import json

from .records import RES


def _device(decl: dict, rel: str) -> str:
    folder = rel.split("/")[1]
    return decl["devices"].get(folder, folder)


def _load(rel: str) -> dict:
    return json.loads((RES / rel).read_text())


def updates(decl: dict) -> str:
    """``update_flops.py --time`` on a GPU: per update its FLOPs (XLA's count), the measured time, the rate achieved and
    its share of the device's rate on one large float32 matmul."""
    out = ["| GPU | update | batch, width | FLOPs per update | measured | achieved | share of the large-matmul rate |",
           "|---|---|---|---|---|---|---|"]  # fmt: skip
    for rel in decl["updates"]:
        d = _load(rel)
        for r in d["rows"]:
            if "flops_per_update" not in r:
                continue
            out.append(f"| {_device(decl, rel)} | {r['job']} | {r['batch']}, {r['width']} | "
                       f"{r['flops_per_update'] / 1e9:.2f} G | {r['measured_ms']:.2f} ms | "
                       f"{r['achieved_gflops'] / 1e3:.1f} TFLOP/s | {r['share_of_peak']:.1%} |")  # fmt: skip
        out.append("")
        out.append(f"{_device(decl, rel)}: one float32 {d['peak_matmul']}^3 matmul at {d['peak_gflops'] / 1e3:.0f} "
                   f"TFLOP/s; jax {d['jax']} (`results/{rel}`).")  # fmt: skip
    return "\n".join(out)


def episodes(decl: dict) -> str:
    """``paper_episode.py`` on a GPU: the paper-profile GC-IQL critic episode amortised over a batch in one program,
    with the batch's live episodes fine-tuned one after another or together."""
    out = ["| GPU | batch | fine-tuning per round | s per episode | first call s (compile included) | update ms | "
           "value pass s | rounds run (batch) | record |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for rel in decl["episodes"]:
        d = _load(rel)
        together = "bucket" in d and not d["bucket"]
        how = "the live episodes together (bucket 0)" if together else "one episode after another (bucket 1)"
        out.append(f"| {d.get('device') or _device(decl, rel)} | {d['batch']} | {how} | {d['episode_s']:.2f} | "
                   f"{d['first_call_s']:.0f} | {d['update_ms']:.2f} | {d['value_pass_s']:.3f} | {d['rounds_run']} | "
                   f"`results/{rel}` |")  # fmt: skip
    return "\n".join(out)


def pretrain(decl: dict) -> str:
    """Pre-training's rate per checkpoint (``pretrain/*.json``): the updates reached and updates/s, seeds vmapped."""
    out = ["| GPU | dataset | agent | profile: widths, batch | seeds | updates reached | updates/s |",
           "|---|---|---|---|---|---|---|"]  # fmt: skip
    for rel in decl["pretrain"]:
        d = _load(rel)
        c = d.get("config", {})
        widths = "x".join(map(str, c.get("actor_hidden_dims", []))) or "-"
        out.append(f"| {_device(decl, rel)} | {d['dataset']} | {d['agent']} | {d['profile']}: {widths}, "
                   f"{c.get('batch_size', '-')} | {d['seeds']} | {d['step']:,} | "
                   f"{d['updates_per_s']:,.0f} |")  # fmt: skip
    return "\n".join(out)
