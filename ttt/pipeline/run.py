"""`run_pipeline`: every run of a pipeline resolved into its plan (`ttt.pipeline.plan`), then through the stages
(data -> pre-training -> evaluation, each cached and resumable, each consuming the plan), then `OUT/results.json`,
`results.csv` and the report. All writes are atomic; after every run the results so far are written, so an
interrupted pipeline leaves its finished rows."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from ttt.checkpoint import dataset_hash
from ttt.errors import TttError
from ttt.pipeline.config import Pipeline
from ttt.pipeline.keys import cache_root
from ttt.pipeline.plan import plan_pipeline
from ttt.pipeline.records import SCHEMA, portable_path, portable_run
from ttt.pipeline.report import rows, table_md, write_report, write_results
from ttt.pipeline.stages import (
    BarFactory,
    Echo,
    EnvCache,
    check_checkpoint_data,
    ensure_checkpoint,
    ensure_data,
    evaluate_run,
    load_data,
)
from ttt.storage import atomic_write_text, dumps, locked, read_json, writable_dir

STAGES = ("data", "pretrain", "eval")


@dataclasses.dataclass
class RunOutcome:
    records: list[dict]
    out: Path
    wall_s: float
    cached: list[str] = dataclasses.field(default_factory=list)  # rows whose record came from the cache


def run_pipeline(
    pipe: Pipeline,
    out: str | os.PathLike,
    cache: str | os.PathLike | None = None,
    stages: tuple[str, ...] = STAGES,
    bar: BarFactory | None = None,
    echo: Echo = print,
    all_names: list[str] | None = None,
) -> RunOutcome:
    """Run every run of `pipe` through the stages (cached / resumed), then write results and the report.

    `all_names`: the names of every run of the pipeline when `pipe` holds only some of them (`--only`): the rows of
    the others already in `OUT/results.json` are kept there, in the pipeline's order."""
    bad = [s for s in stages if s not in STAGES]
    if bad:
        raise TttError(f"unknown stage(s) {', '.join(bad)}; valid: {', '.join(STAGES)}")
    cache_arg, cache = cache, cache_root(cache)
    plans = plan_pipeline(pipe, cache)  # every check that needs no data or training, before any stage starts
    for plan in plans:  # a named checkpoint against data that exists already: before anything is generated
        check_checkpoint_data(plan)
    bar = bar or _null_bar
    out = writable_dir(out, "--out")
    if "data" in stages or "pretrain" in stages:
        writable_dir(cache, cache_label(cache_arg))
    doc = dict(schema=SCHEMA, name=pipe.name, description=pipe.description, source=portable_path(pipe.source, cache),
               runs=[portable_run(r, cache) for r in pipe.runs])  # fmt: skip
    with locked(out / ".results.lock", f"{out / 'results.json'}"):  # the runs of other --only invocations kept
        doc["runs"] = _merge_runs(doc["runs"], read_json(out / "pipeline.json"), all_names)
        atomic_write_text(out / "pipeline.json", dumps(doc, indent=1))
    t0 = time.perf_counter()
    datasets: dict[tuple, tuple] = {}
    envs = EnvCache()
    records, cached = [], []
    for i, plan in enumerate(plans):
        echo(f"[{i + 1}/{len(plans)}] {plan.name}: {plan.train.agent} {plan.eval.variant} on {plan.data.name}")
        d = ensure_data(plan, "data" in stages, bar, echo)
        dkey = (str(d), plan.data.name)
        if dkey not in datasets:
            data = load_data(plan, "data" in stages, bar, echo)
            datasets[dkey] = (data, dataset_hash(data))
        data, dhash = datasets[dkey]
        ckpt = ensure_checkpoint(plan, data, dhash, "pretrain" in stages, bar, echo)
        if "eval" not in stages:
            continue
        records.append(evaluate_run(plan, ckpt, data, out, bar, echo, envs, shared=cache / "evals", cached=cached))
        # After every run: an interrupted pipeline leaves its finished rows (and the other rows kept). The rows of
        # the other runs are read when writing, under a lock: two invocations into one --out (--only A, --only B at
        # once) keep each other's rows.
        with locked(out / ".results.lock", f"{out / 'results.json'}"):
            write_results(_merge(records, _kept_records(out, pipe, all_names), all_names), out)
    if "eval" in stages:
        echo(table_md(rows(records)))
        with locked(out / ".results.lock", f"{out / 'results.json'}"):
            write_report(out, echo=echo)
    return RunOutcome(records, out, time.perf_counter() - t0, cached)


def cache_label(cache: str | os.PathLike | None) -> str:
    """How errors name the cache: the option, or the environment variable it came from, or the default."""
    if cache:
        return "--cache"
    if os.environ.get("TTT_CACHE"):
        return "the cache ($TTT_CACHE)"
    return "the cache (~/.cache/ttt; --cache or $TTT_CACHE)"


def _kept_records(out: Path, pipe: Pipeline, all_names: list[str] | None) -> list[dict]:
    """Records in `OUT/results.json` of runs of the pipeline that this invocation does not run (`--only`)."""
    if not all_names:
        return []
    doc = read_json(out / "results.json")
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        return []
    running = {r["name"] for r in pipe.runs}
    names = set(all_names) - running
    return [r for r in doc["records"] if isinstance(r, dict) and r.get("run", {}).get("name") in names]


def _merge_runs(runs: list, old, all_names: list[str] | None) -> list:
    """`pipeline.json`'s runs: this invocation's, and (with `--only`, `all_names` given) the runs of the same pipeline
    that an earlier invocation into this `--out` wrote and this one does not run, in the pipeline's order; so the
    file describes every row `results.json` keeps."""
    if not all_names or not isinstance(old, dict) or not isinstance(old.get("runs"), list):
        return runs
    running = {r["name"] for r in runs}
    kept = [r for r in old["runs"] if isinstance(r, dict) and r.get("name") in set(all_names) - running]
    order = {n: i for i, n in enumerate(all_names)}
    return sorted([*runs, *kept], key=lambda r: order.get(r["name"], len(order)))


def _merge(records: list[dict], kept: list[dict], all_names: list[str] | None) -> list[dict]:
    """This invocation's records and the kept ones, in the pipeline's order."""
    if not kept:
        return records
    order = {n: i for i, n in enumerate(all_names or [])}
    return sorted([*records, *kept], key=lambda r: order.get(r["run"]["name"], len(order)))


class _null_bar:
    def __init__(self, *a):
        pass

    def __call__(self, done, total):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None
