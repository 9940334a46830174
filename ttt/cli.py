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

    def __init__(self, description: str):
        self.description = description
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

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("episodes"), TimeElapsedColumn(), TextColumn("eta"),
                                TimeRemainingColumn())
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
@click.option("--dir", "directory", type=str, default=None,
              help="Output directory (must exist). Default: OGBench's ~/.ogbench/data.")
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
        train, _ = generate(name, episodes=episodes, seed=seed, directory=directory, workers=workers,
                            force=force, progress=bar)
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
        click.echo(f"  {r['name']:<34} train {_human(r['train_bytes']):>10}  val {_human(r['val_bytes']):>10}  "
                   f"{eps:<15} {r['status']}")


@data.command("check")
@click.argument("name", callback=_dataset_name)
@click.option("--dir", "directory", type=str, default=None, help="Dataset directory (default: OGBench's).")
def data_check(name, directory):
    """Validate NAME.npz and NAME-val.npz: keys, dtypes, shapes, terminals, contents, and loading by OGBench."""
    from ttt.data.files import check

    for r in check(name, directory):
        click.echo(f"ok {r.path}: {r.episodes} episodes, {r.rows} rows, obs {r.ob_dim}, action {r.action_dim}, "
                   f"{_human(r.bytes)}")


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
