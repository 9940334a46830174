"""`ttt run` and `ttt report`: pipelines (`ttt.pipeline.run_pipeline`) and their reports."""

from __future__ import annotations

import click

from ttt.cli.common import ProgressBar
from ttt.errors import TttError


@click.command("run")
@click.argument("pipeline")
@click.option(
    "--set",
    "sets",
    multiple=True,
    help="Override a run key in every run: key=value (repeatable). The keys: the settings' declaration "
    "(ttt.settings; docs/reference.md's table).",
)
@click.option("--out", type=str, default=None, help="Output directory (default: runs/<pipeline name>).")
@click.option("--cache", type=str, default=None, help="Artifact cache (default: $TTT_CACHE or ~/.cache/ttt).")
@click.option(
    "--stages", type=str, default="data,pretrain,eval", show_default=True, help="Stages allowed to produce artifacts."
)
@click.option("--only", type=str, default=None, help="Run only the runs whose names match these globs (a,b*,...).")
@click.option("--dry-run", is_flag=True, help="Validate the pipeline and list its runs; run nothing.")
def run_cmd(pipeline, sets, out, cache, stages, only, dry_run):
    """Run a pipeline (a name in pipelines/ or a .toml path): data, pre-training, evaluation, report."""
    from ttt.pipeline import (
        cache_root,
        find_pipeline,
        load_pipeline,
        parse_sets,
        run_pipeline,
        select_runs,
    )
    from ttt.pipeline.report import settings_text

    full = load_pipeline(find_pipeline(pipeline), parse_sets(sets))
    pipe = select_runs(full, only)
    if out is None:
        from ttt.storage import file_name

        out = f"runs/{file_name(pipe.name, 'pipeline name')}"
    stage_list = tuple(s.strip() for s in stages.split(",") if s.strip())
    from ttt.pipeline import STAGES

    bad = [s for s in stage_list if s not in STAGES] if stage_list else ["(none)"]
    if bad:
        raise TttError(f"--stages: unknown stage(s) {', '.join(bad)}; valid: {', '.join(STAGES)}")
    click.echo(f"pipeline {pipe.name}: {len(pipe.runs)} runs -> {out} (cache {cache_root(cache)})")
    if dry_run:
        from ttt.pipeline import plan_run
        from ttt.pipeline.stages import check_checkpoint_data

        plans = [plan_run(r, cache) for r in pipe.runs]
        checked = [check_checkpoint_data(p) for p in plans]  # the checkpoints and their data, generating nothing
        for r, p, note in zip(pipe.runs, plans, checked, strict=True):
            tt = "" if r["variant"] == "base" else f" ({settings_text(r)})"
            click.echo(  # the profile the plan resolved: an imported checkpoint's is "imported"
                f"  {r['name']}: {r['agent']} {r['variant']} on {r['dataset']} ({p.train.profile}, {r['seeds']} seeds, "
                f"{r['episodes']} episodes x {len(r['tasks'])} tasks){tt}" + (f"\n    {note}" if note else "")
            )
        return
    result = run_pipeline(
        pipe,
        out,
        cache,
        stage_list,
        bar=lambda desc, unit: ProgressBar(desc, unit),
        echo=click.echo,
        all_names=[r["name"] for r in full.runs],
    )
    n, c = len(result.records), len(result.cached)
    came = f"{n} rows evaluated" if not c else f"{c} of {n} rows from the cache ({', '.join(result.cached)})"
    click.echo(f"done in {result.wall_s:.0f} s ({came}): {out}/results.json, results.csv, report.md, plots/")


@click.command("report")
@click.argument("run_dirs", nargs=-1, required=True)
@click.option("--out", type=str, default=None, help="Combined report directory (needed for several RUN_DIRs).")
@click.option("--from-evals", is_flag=True,
              help="First rebuild results.json from every record in RUN_DIR/evals/ (per run: most episodes, then "
                   "newest), e.g. after runs with --only or on other machines wrote into one directory.")  # fmt: skip
def report_cmd(run_dirs, out, from_evals):
    """Rebuild report.md and plots from saved pipeline results (one directory in place, or several combined)."""
    from pathlib import Path

    from ttt.pipeline import combine, write_report
    from ttt.pipeline.report import records_from_evals, write_results

    if from_evals:
        for d in run_dirs:
            records = records_from_evals(d, echo=click.echo)
            write_results(records, Path(d))
            click.echo(f"{d}/results.json: {len(records)} records from {d}/evals")
    if len(run_dirs) == 1 and out is None:
        write_report(run_dirs[0], echo=click.echo)
    elif out is None:
        raise TttError("several RUN_DIRs are combined into one report: give --out DIR")
    else:
        combine(list(run_dirs), Path(out), echo=click.echo)
