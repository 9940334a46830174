"""The `ttt` command line. User errors print one line on stderr and exit with status 2, without a traceback."""

from __future__ import annotations

import sys
import time

import click

from ttt.errors import TttError


def _human(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


class _EpisodeBar:
    """A rich progress bar (episodes done / total, elapsed, time left) that appears on its first update,
    so that errors found before any work starts are not preceded by an empty bar."""

    def __init__(self, description: str, unit: str = "episodes"):
        self.description = description
        self.unit = unit
        self.bar = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(self.unit),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
            )
            self.task = self.bar.add_task(self.description, total=total, completed=done)
            self.bar.start()
        self.bar.update(self.task, completed=done, total=total)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


@click.group(context_settings=dict(help_option_names=["-h", "--help"]))
@click.version_option(package_name="ttt")
def cli() -> None:
    """Goal-conditioned test-time training (GC-TTT) on OGBench, in JAX/Equinox."""


@cli.group()
def data() -> None:
    """Generate, list and check OGBench datasets (made offline with OGBench's own environments and oracles)."""


def _dataset_name(ctx, param, value):
    from ttt.data.specs import get_spec

    get_spec(value)  # unknown names list the valid ones
    return value


@data.command("generate")
@click.argument("name", callback=_dataset_name)
@click.option("--episodes", type=int, default=None, help="Training episodes (default: OGBench's full size).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed; the same seed gives identical arrays.")
@click.option(
    "--dir",
    "directory",
    type=str,
    default=None,
    help="Output directory (must exist). Default: OGBench's ~/.ogbench/data.",
)
@click.option("--workers", type=int, default=None, help="Worker processes (default: all cores).")
@click.option("--force", is_flag=True, help="Overwrite existing files.")
def data_generate(name, episodes, seed, directory, workers, force):
    """Generate NAME.npz and NAME-val.npz in OGBench's format."""
    from ttt.data.files import check
    from ttt.data.generate import generate

    if workers is not None and workers < 1:
        raise TttError(f"--workers must be >= 1, got {workers}")
    t0 = time.time()
    with _EpisodeBar(name) as bar:
        train, _ = generate(
            name, episodes=episodes, seed=seed, directory=directory, workers=workers, force=force, progress=bar
        )
    reports = check(name, train.parent)
    wall = time.time() - t0
    for r in reports:
        click.echo(f"wrote {r.path}  {r.episodes} episodes, {r.rows} rows, {_human(r.bytes)}")
    click.echo(f"done in {wall:.1f} s")


@data.command("list")
@click.option("--dir", "directory", type=str, default=None, help="Dataset directory (default: OGBench's).")
def data_list(directory):
    """List the datasets present locally, with their sizes."""
    from ttt.data.files import list_datasets, resolve_dir

    d = resolve_dir(directory)
    rows = list_datasets(d)
    click.echo(f"datasets in {d}:")
    if not rows:
        click.echo("  (none; generate one with `ttt data generate NAME`)")
    for r in rows:
        eps = f"{r['episodes']} episodes" if r["episodes"] else ""
        click.echo(
            f"  {r['name']:<34} train {_human(r['train_bytes']):>10}  val {_human(r['val_bytes']):>10}  "
            f"{eps:<15} {r['status']}"
        )


@data.command("check")
@click.argument("name", callback=_dataset_name)
@click.option("--dir", "directory", type=str, default=None, help="Dataset directory (default: OGBench's).")
def data_check(name, directory):
    """Validate NAME.npz and NAME-val.npz: keys, dtypes, shapes, terminals, contents, and loading by OGBench."""
    from ttt.data.files import check

    for r in check(name, directory):
        click.echo(
            f"ok {r.path}: {r.episodes} episodes, {r.rows} rows, obs {r.ob_dim}, action {r.action_dim}, "
            f"{_human(r.bytes)}"
        )


def _parse_sets(pairs: tuple[str, ...]) -> dict:
    """`--set key=value` pairs; values parse as JSON where they can (numbers, lists, booleans), else strings."""
    import json

    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise TttError(f"--set expects key=value, got '{pair}'")
        k, v = pair.split("=", 1)
        try:
            out[k.strip()] = json.loads(v)
        except ValueError:
            out[k.strip()] = v
    return out


@cli.command("pretrain")
@click.option(
    "--dataset", required=True, callback=_dataset_name, help="Dataset name (e.g. pointmaze-medium-navigate-v0)."
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
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from ttt.data.files import load
    from ttt.data.specs import get_spec
    from ttt.presets import get_agent, get_profile, make_configs
    from ttt.pretrain import pretrain

    get_agent(agent)
    prof = get_profile(profile)
    steps = prof.steps if steps is None else steps
    if steps < 1 or seeds < 1 or chunk < 1:
        raise TttError(f"--steps, --seeds and --chunk must be >= 1, got {steps}, {seeds}, {chunk}")
    cfg, sampler = make_configs(agent, get_spec(dataset), profile, _parse_sets(sets))
    data = load(dataset, directory)
    click.echo(
        f"{agent} on {dataset} ({data.n_rows} rows), profile {profile}: {prof.description}; "
        f"{seeds} seed(s), {steps} steps -> {out}"
    )
    bar = Progress(
        TextColumn("step"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"), TimeRemainingColumn()
    )
    task = bar.add_task("pretrain", total=steps, info="compiling")

    def progress(done, total, means, rate):
        terms = " ".join(
            f"{k.split('/')[-1] if k != 'loss' else 'loss'}={v:.3g}"
            for k, v in means.items()
            if k == "loss" or k.endswith("_loss")
        )
        bar.update(task, completed=done, info=f"{terms} {rate:.0f} steps/s")

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
    click.echo(
        f"saved {out} at step {result.meta['step']}; {result.steps_per_s:.1f} steps/s ({seeds} seed(s) per step)"
    )


@cli.command("eval")
@click.argument("checkpoint")
@click.option("--episodes", type=int, default=10, show_default=True, help="Episodes per task and seed.")
@click.option("--tasks", type=str, default="1,2,3,4,5", show_default=True, help="Comma-separated task ids.")
@click.option("--dir", "directory", type=str, default=None, help="Dataset directory (default: OGBench's).")
@click.option("--seed", type=int, default=0, show_default=True, help="Evaluation seed (start/goal noise).")
@click.option("--json", "json_out", type=str, default=None, help="Write per-episode results to this JSON file.")
@click.option("--dataset", type=str, default=None, help="Dataset to evaluate on (default: the checkpoint's).")
def eval_cmd(checkpoint, episodes, tasks, directory, seed, json_out, dataset):
    """Evaluate a checkpoint without TTT (base) on OGBench's CPU environment: success per task and seed."""
    import json

    from ttt.data.files import load
    from ttt.data.specs import get_spec
    from ttt.evaluate import evaluate_base
    from ttt.pretrain import check_compatible, dataset_hash, load_checkpoint, read_meta

    meta = read_meta(checkpoint)
    try:
        task_ids = tuple(int(t) for t in tasks.split(","))
    except ValueError:
        raise TttError(f"--tasks must be comma-separated integers, got '{tasks}'") from None
    if episodes < 1:
        raise TttError(f"--episodes must be >= 1, got {episodes}")
    dataset = meta["dataset"] if dataset is None else dataset
    spec = get_spec(dataset)
    check_compatible(meta, dataset, spec.ob_dim, spec.action_dim, checkpoint)
    data = load(dataset, directory)
    check_compatible(meta, dataset, data.obs_dim, data.action_dim, checkpoint, dataset_hash(data))
    states, meta = load_checkpoint(checkpoint, meta)
    with _EpisodeBar(f"eval {meta['agent']}", unit="steps") as bar:
        res = evaluate_base(
            states.agent, meta["backbone"], spec.env_id, episodes, task_ids, seed=seed, progress=lambda t, n: bar(t, n)
        )
    mean, se = res.mean_and_se()
    click.echo(
        f"{meta['agent']} on {meta['dataset']} (step {meta['step']}, {meta['seeds']} seeds x "
        f"{len(task_ids)} tasks x {episodes} episodes): success {mean:.3f} +- {se:.3f} (s.e. over seeds)"
    )
    click.echo("per task: " + ", ".join(f"task{t} {r:.2f}" for t, r in zip(task_ids, res.per_task(), strict=True)))
    click.echo("per seed: " + ", ".join(f"{r:.2f}" for r in res.per_seed()))
    if json_out:
        from pathlib import Path

        from ttt.pretrain import _atomic_write

        doc = dict(
            checkpoint=str(checkpoint),
            agent=meta["agent"],
            dataset=meta["dataset"],
            step=meta["step"],
            profile=meta.get("profile"),
            tasks=list(task_ids),
            episodes=episodes,
            seed=seed,
            mean=mean,
            se=se,
            success=res.success.tolist(),
            steps=res.steps.tolist(),
        )
        _atomic_write(Path(json_out), lambda f: f.write(json.dumps(doc, indent=1)), mode="w")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors become one line on stderr and exit status 2 (no traceback)."""
    try:
        rv = cli.main(args=argv, prog_name="ttt", standalone_mode=False)
    except TttError as e:
        click.echo(f"error: {e}", err=True)
        return 2
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("interrupted; finished work is kept and a rerun resumes it", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return e.exit_code
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
