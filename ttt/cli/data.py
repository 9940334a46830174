"""`ttt data`: generate, list and check datasets (`ttt.data.generate`, `ttt.data.files`)."""

from __future__ import annotations

import time

import click

from ttt.cli.common import ProgressBar, dataset_name, human_bytes
from ttt.errors import TttError


@click.group()
def data() -> None:
    """Generate, list and check OGBench datasets (made offline with OGBench's own environments and oracles)."""


@data.command("generate")
@click.argument("name", callback=dataset_name)
@click.option("--episodes", type=int, default=None, help="Training episodes (default: OGBench's full size).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed; the same seed gives identical arrays.")
@click.option(
    "--dir",
    "directory",
    type=str,
    default=None,
    help="Output directory (created when missing). Default: OGBench's ~/.ogbench/data.",
)
@click.option("--workers", type=int, default=None, help="Worker processes (default: all cores).")
@click.option("--force", is_flag=True, help="Overwrite existing files.")
@click.option("--expert", type=str, default=None, help="antmaze: the ant expert (`ttt expert train ant`'s expert.npz).")
def data_generate(name, episodes, seed, directory, workers, force, expert):
    """Generate NAME.npz and NAME-val.npz in OGBench's format."""
    from ttt.data.files import check
    from ttt.data.generate import generate

    if workers is not None and workers < 1:
        raise TttError(f"--workers must be >= 1, got {workers}")
    t0 = time.time()
    with ProgressBar(f"{name} (training + validation)") as bar:  # NAME-val.npz adds a tenth: 50 asked, 55 shown
        train, _ = generate(
            name,
            episodes=episodes,
            seed=seed,
            directory=directory,
            workers=workers,
            force=force,
            progress=bar,
            expert=expert,
        )
    reports = check(name, train.parent)
    wall = time.time() - t0
    for r in reports:
        click.echo(f"wrote {r.path}  {r.episodes} episodes, {r.rows} rows, {human_bytes(r.bytes)}")
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
            f"  {r['name']:<34} train {human_bytes(r['train_bytes']):>10}  val {human_bytes(r['val_bytes']):>10}  "
            f"{eps:<15} {r['status']}"
        )


@data.command("check")
@click.argument("name", callback=dataset_name)
@click.option("--dir", "directory", type=str, default=None, help="Dataset directory (default: OGBench's).")
def data_check(name, directory):
    """Validate NAME.npz and NAME-val.npz: keys, dtypes, shapes, terminals, contents, and loading by OGBench."""
    from ttt.data.files import check

    for r in check(name, directory):
        click.echo(
            f"ok {r.path}: {r.episodes} episodes, {r.rows} rows, obs {r.ob_dim}, action {r.action_dim}, "
            f"{human_bytes(r.bytes)}"
        )
