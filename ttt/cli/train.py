"""`ttt pretrain`: pre-train seeds of an agent on a dataset (`ttt.pretrain.pretrain`)."""

from __future__ import annotations

from pathlib import Path

import click

from ttt.cli.common import ProgressBar, dataset_name, parse_json_sets
from ttt.errors import TttError


@click.command("pretrain")
@click.option(
    "--dataset", required=True, callback=dataset_name, help="Dataset name (e.g. pointmaze-medium-navigate-v0)."
)
@click.option("--agent", required=True, help="gcbc, gciql, gciql-awr, saw or qrl.")
@click.option("--steps", type=int, default=None, help="Gradient steps (default: the profile's).")
@click.option("--seeds", type=int, default=1, show_default=True, help="Seeds trained together in one program.")
@click.option("--profile", default="cpu", show_default=True, help="cpu (small, for this CPU) or paper (OGBench's).")
@click.option("--out", required=True, type=str, help="Checkpoint directory (resumes if it holds one).")
@click.option("--dir", "directory", type=str, default=None, help="Dataset directory (default: OGBench's).")
@click.option("--chunk", type=int, default=1000, show_default=True, help="Steps per compiled chunk / checkpoint.")
@click.option("--seed", type=int, default=0, show_default=True, help="Root seed; seed i uses fold_in(seed, i).")
@click.option("--set", "sets", multiple=True, help="Override a backbone config field: key=value.")
def pretrain_cmd(dataset, agent, steps, seeds, profile, out, directory, chunk, seed, sets):
    """Pre-train SEEDS seeds of an agent on a dataset; checkpoints after every chunk and resumes."""
    from ttt.data.files import load
    from ttt.data.specs import get_spec
    from ttt.presets import get_agent, get_profile, make_configs
    from ttt.pretrain import MAX_STEPS, pretrain

    get_agent(agent)
    prof = get_profile(profile)
    steps = prof.steps if steps is None else steps
    if steps < 1 or seeds < 1 or chunk < 1:
        raise TttError(f"--steps, --seeds and --chunk must be >= 1, got {steps}, {seeds}, {chunk}")
    if steps > MAX_STEPS:
        raise TttError(f"--steps must be at most {MAX_STEPS} (the step counter is a 32-bit integer), got {steps}")
    if not 0 <= seed < 2**63:
        raise TttError(f"--seed must be in [0, 2^63), got {seed}")
    cfg, sampler = make_configs(agent, get_spec(dataset), profile, parse_json_sets(sets))
    from ttt.storage import writable_dir

    writable_dir(out, "--out")
    data = load(dataset, directory)
    widths = getattr(cfg, "actor_hidden_dims", None) or prof.hidden_dims
    click.echo(  # what this run trains (the profile's networks and batch after --set), not the profile's defaults
        f"{agent} on {dataset} ({data.n_rows} rows), profile {profile}: {'x'.join(map(str, widths))} MLPs, batch "
        f"{sampler.batch_size}; {seeds} seed(s), {steps} steps -> {out}"
    )
    if (Path(out) / "meta.json").exists():
        from ttt.checkpoint import read_meta

        at = read_meta(out).get("step", 0)
        if at < steps:
            click.echo(f"resuming at step {at} of {steps} from {out}")
    bar = ProgressBar(f"pretrain {agent}", unit="steps")

    def progress(done, total, means, rate):
        terms = " ".join(
            f"{k.split('/')[-1] if k != 'loss' else 'loss'}={v:.3g}"
            for k, v in means.items()
            if k == "loss" or k.endswith("_loss")
        )
        bar(done, total, losses=terms, **{"steps/s": f"{rate:.0f}"})

    with bar:
        result = pretrain(
            agent,
            dataset,
            data,
            cfg,
            sampler,
            steps,
            seeds,
            out,
            chunk_steps=chunk,
            seed=seed,
            profile=profile,
            progress=progress,
        )
    if not result.history:
        click.echo(f"{out} is already at step {result.meta['step']}: nothing to train")
        return
    rate = "" if result.steps_per_s != result.steps_per_s else f"; {result.steps_per_s:.1f} steps/s"
    click.echo(f"saved {out} at step {result.meta['step']}{rate} ({seeds} seed(s) per step)")
