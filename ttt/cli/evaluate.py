"""`ttt eval`: evaluate a checkpoint, base policy and GC-TTT variants, as a pipeline of one row per variant: each
variant is a run naming the checkpoint (`ttt.pipeline.config.resolve_run`), planned (`ttt.pipeline.plan_run`) and
evaluated by the pipeline's evaluation stage (`ttt.pipeline.stages.evaluate_run`), so it has `ttt run`'s content key
(`ttt.pipeline.keys.eval_key`), record and checks. Its options are the settings' declaration (`ttt.settings`);
`--json` keeps each finished variant's record, so a rerun resumes (docs/reference.md, "GC-TTT evaluation")."""

from __future__ import annotations

import json

import click

from ttt.cli.common import ProgressBar, interrupt_note, setting_options
from ttt.errors import TttError
from ttt.settings import SETTINGS, VARIANTS, option_name

EVAL_OPTIONS = tuple(k for k in SETTINGS if option_name(k))  # every setting with a `ttt eval` option


def _option(name: str) -> str:
    """How `ttt eval`'s errors name a setting: its option."""
    return option_name(name) if name in SETTINGS and option_name(name) else name


@click.command("eval")
@click.argument("checkpoint")
@click.option(
    "--variants",
    type=str,
    default="base,ttt",
    show_default=True,
    help="Comma-separated: base (no TTT), ttt (GC-TTT, critic returns), ttt-mc (GC-TTT without critic), ttgs "
    "(test-time graph search, the published settings: 4000 vertices), ttt+ttgs (ttt towards TTGS's subgoal).",
)
@click.option("--json", "json_out", type=str, default=None, help="Write per-episode results to this JSON file.")
@setting_options(EVAL_OPTIONS)
def eval_cmd(checkpoint, variants, json_out, **options):
    """Evaluate a checkpoint: base policy and/or GC-TTT, success per task and seed (mean +- s.e. over seeds)."""
    if not json_out:  # first: a signal at any moment of this command must not promise a resume
        interrupt_note("nothing is saved: ttt eval keeps its results only with --json FILE (a rerun with the same "
                       "--json resumes at the first unfinished variant)")  # fmt: skip
    import tempfile
    from pathlib import Path

    import jax

    from ttt.checkpoint import check_compatible, dataset_hash, read_meta
    from ttt.data.specs import get_spec
    from ttt.pipeline.stages import EnvCache, ensure_checkpoint
    from ttt.setups import checkpoint_data
    from ttt.storage import read_json, writable_file

    names = tuple(v.strip() for v in variants.split(",") if v.strip())
    bad = [v for v in names if v not in VARIANTS]
    if bad or not names:
        raise TttError(f"unknown variant(s) {', '.join(bad) or '(none)'}; valid: {', '.join(VARIANTS)}")
    given = _given(options, names)
    meta = read_meta(checkpoint)
    dataset = given.pop("dataset", meta["dataset"])
    spec = get_spec(dataset)
    check_compatible(meta, dataset, spec.ob_dim, spec.action_dim, checkpoint)
    plans = {name: _plan(checkpoint, name, given) for name in names}  # every check, before any loading
    _refuse_unread(plans, given)
    if json_out:
        writable_file(json_out, "--json")
    data, found = checkpoint_data(meta, dataset, given.get("data_dir"))
    if "data_dir" not in given and found is not None:
        click.echo(f"data: {dataset} from {found} (the copy this checkpoint was trained on, in the ttt run cache; "
                   "--dir overrides)")  # fmt: skip
    first = next(iter(plans.values()))
    ck = ensure_checkpoint(first, data, dataset_hash(data), False, _bar, click.echo)  # read and verified once
    doc = _header(checkpoint, ck, first)
    old = read_json(json_out) if json_out else None
    kept = old.get("variants", {}) if isinstance(old, dict) and isinstance(old.get("variants"), dict) else {}
    writer = bool(json_out) and jax.process_index() == 0  # one writer in a multi-process run
    envs = EnvCache()
    with tempfile.TemporaryDirectory(prefix="ttt-eval-") as work:  # the stage's task parts, while it runs
        for name, plan in plans.items():
            doc["variants"][name] = _variant(name, plan, ck, data, Path(work), envs, kept.get(name), json_out)
            _echo_variant(name, doc["variants"][name], plan, dict(ck.meta))
            if writer:  # after every variant: an interrupted evaluation keeps the finished ones
                _save(json_out, _flat(doc))


def _bar(description: str, unit: str) -> ProgressBar:
    return ProgressBar(description, unit)


def _given(options: dict, variants: tuple[str, ...]) -> dict:
    """The settings stated on the command line (the others are the declaration's defaults), as run values; one that
    no variant asked for reads (and that is not its default) would change nothing: refused."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    given = {k: v for k, v in options.items() if ctx.get_parameter_source(k) is ParameterSource.COMMANDLINE}
    if "tasks" in given:
        try:
            given["tasks"] = [int(t) for t in given["tasks"].split(",")]
        except ValueError:
            raise TttError(f"--tasks must be comma-separated integers, got '{given['tasks']}'") from None
    if "ttgs" in given:
        given["ttgs"] = _ttgs_settings(given["ttgs"])
    for k, v in given.items():
        readers = SETTINGS[k].variants
        if v != SETTINGS[k].default and not set(readers) & set(variants):
            raise TttError(f"{_option(k)} changes nothing here: only variant(s) {', '.join(readers)} read it; add one "
                           "to --variants")  # fmt: skip
    return given


def _plan(checkpoint: str, variant: str, given: dict):
    """The pipeline row of one variant: the checkpoint, the variant and the settings it reads (a rule applies to the
    variants of its kind: 'episodes' to the critic's, 'mc-episodes' to ttt-mc), resolved and planned."""
    from ttt.pipeline import plan_run
    from ttt.pipeline.config import resolve_run
    from ttt.settings import CRITIC_VARIANTS

    sets = {k: v for k, v in given.items() if variant in SETTINGS[k].variants}
    rule = sets.get("rule")
    if (rule == "episodes" and variant not in CRITIC_VARIANTS) or (rule == "mc-episodes" and variant != "ttt-mc"):
        del sets["rule"]
    where = f"variant {variant}"
    row = resolve_run({"checkpoint": checkpoint, "variant": variant}, {}, sets, where, _option)
    return plan_run(row, where=where, label=_option)


def _refuse_unread(plans: dict, given: dict) -> None:
    """An option given on the command line that the selection rule of every GC-TTT variant asked for ignores (e.g.
    --q with variant ttt, whose rule 'episodes' reads no q) would change nothing: refuse it."""
    from ttt.select import IGNORED_BY_RULE

    setups = {v: p.eval.setup for v, p in plans.items() if p.eval.setup.ttt is not None}
    for name in (n for n in ("q", "slack", "n_episodes") if n in given):
        if setups and all(name in IGNORED_BY_RULE[s.ttt.select.rule_used] for s in setups.values()):
            rules = ", ".join(sorted(f"{v}: rule {s.ttt.select.rule_used}" for v, s in setups.items()))
            raise TttError(
                f"{_option(name)} changes nothing here: no selection rule of the variants asked for reads it "
                f"({rules}); leave it out, or add a variant / --rule that reads it (docs/algorithm.md)"
            )


def _header(checkpoint: str, ck, plan) -> dict:
    """What the `--json` file says of all its variants: the checkpoint (its cache key or portable path, its content),
    the dataset, tasks, episodes, seed, driver and backend."""
    from ttt.pipeline.keys import checkpoint_ref
    from ttt.pipeline.records import SCHEMA

    meta, ev = dict(ck.meta), plan.eval
    return dict(schema=SCHEMA, checkpoint=checkpoint_ref(checkpoint), checkpoint_sha256=ck.digest,
                dataset_hash=meta.get("dataset_hash"), agent=meta["agent"], dataset=plan.data.name, step=meta["step"],
                profile=meta.get("profile"), tasks=list(ev.tasks), episodes=ev.episodes, seed=ev.seed,
                driver=ev.driver, backend=ev.setup.backend, variants={})  # fmt: skip


def _variant(name: str, plan, ck, data, work, envs, prev, json_out) -> dict:
    """One variant's record: kept from the `--json` file when it has this evaluation (same `eval_key`), else the
    evaluation stage's (`ttt run`'s record), with the resolved GC-TTT and graph-search settings beside it."""
    from ttt.pipeline.keys import eval_key
    from ttt.pipeline.stages import evaluate_run

    key = eval_key(plan, ck.path, dict(ck.meta))
    if isinstance(prev, dict) and prev.get("eval_key") == key and "success" in prev:
        click.echo(f"{name}: kept from {json_out} (same checkpoint and settings)")
        return prev
    record = evaluate_run(plan, ck, data, work, _bar, click.echo, envs, say_result=False)  # the summary says it
    setup = plan.eval.setup
    if setup.ttt is not None:
        record["ttt"] = _ttt_doc(setup)
    if setup.ttgs is not None:
        import dataclasses as dc

        record["ttgs"] = dc.asdict(setup.ttgs)
    return record


def _echo_variant(name: str, vd: dict, plan, meta: dict) -> None:
    """The summary of one variant: success (mean +- s.e. over seeds), the rate, per task and per seed."""
    import numpy as np

    ev = plan.eval
    success = np.asarray(vd["success"], float)
    se = vd["se"]
    spread = " (one seed: no s.e.)" if se is None or se != se else f" +- {se:.3f} (s.e. over seeds)"
    rate = f"; {episode_rate(success.size, vd['wall_s'])}" if vd.get("wall_s") else ""
    click.echo(
        f"{name}: {meta['agent']} on {plan.data.name} (step {meta['step']}, {meta['seeds']} seeds x "
        f"{len(ev.tasks)} tasks x {ev.episodes} episodes, {ev.driver}): success {vd['mean']:.3f}{spread}{rate}"
        + _ttgs_line(vd)
    )
    per_task = zip(ev.tasks, success.mean(axis=(0, 2)), strict=True)
    click.echo("  per task: " + ", ".join(f"task{t} {r:.2f}" for t, r in per_task))
    click.echo("  per seed: " + ", ".join(f"{r:.2f}" for r in success.mean(axis=(1, 2))))


def _save(json_out: str, doc: dict) -> None:
    """Write the results to `json_out`; when that fails (a full disk), keep them in a file that can be written (the
    temporary directory, else the working directory) and stop with one line naming both."""
    import os
    import tempfile
    from pathlib import Path

    from ttt.storage import atomic_write_json

    try:
        atomic_write_json(json_out, doc)
        return
    except TttError as e:
        error = str(e)
    name = f"ttt-eval-{os.getpid()}-{Path(json_out).name}"
    for place in (Path(tempfile.gettempdir()), Path.cwd(), Path.home()):
        try:
            atomic_write_json(place / name, doc)
        except (TttError, OSError):
            continue
        raise TttError(f"{error}; the finished results are kept in {place / name} instead (pass it as --json to "
                       "resume from them)")  # fmt: skip
    raise TttError(f"{error}; no other place could hold the results either (temporary, working and home "
                   "directories): they are lost")  # fmt: skip


def _ttgs_settings(opts: tuple[str, ...]) -> dict:
    """`--ttgs KEY=VALUE` options as a dict of `TTGSConfig` fields, each value read as its field's type (int, float
    or str). The values' ranges are checked by `ttgs_config`."""
    import dataclasses as dc

    from ttt.graph import TTGSConfig

    kinds = {f.name: type(f.default) for f in dc.fields(TTGSConfig)}
    out: dict = {}
    for opt in opts:
        key, sep, value = opt.partition("=")
        key = key.strip()
        if not sep or not key:
            raise TttError(f"--ttgs takes KEY=VALUE, got '{opt}'; keys: {', '.join(kinds)}")
        if key not in kinds:
            raise TttError(f"--ttgs: unknown key '{key}'; valid: {', '.join(kinds)}")
        if key in out:
            raise TttError(f"--ttgs: key '{key}' given twice")
        kind = kinds[key]
        try:
            out[key] = kind(value.strip()) if kind is not int else int(value.strip(), 10)
        except ValueError:
            raise TttError(f"--ttgs {key}={value}: {key} takes {'an int' if kind is int else 'a number'}") from None
    return out


def _flat(doc: dict) -> dict:
    """Single-variant runs keep the flat layout of the base evaluation too."""
    doc = dict(doc)
    if len(doc["variants"]) == 1:
        only = next(iter(doc["variants"].values()))
        doc.update({k: only[k] for k in ("mean", "se", "success", "steps")})
    return doc


def episode_rate(n: int, wall_s: float) -> str:
    """How fast episodes ran, in words that stay readable when they are slow (not '0.00 episodes/s')."""
    rate = n / wall_s
    return f"{rate:.2f} episodes/s" if rate >= 0.1 else f"{wall_s / n:.1f} s per episode"


def _ttgs_line(vd: dict) -> str:
    """TTGS's fallback, in the summary line: the mean over active rounds of the fraction of steps whose subgoal was
    the final goal (1.0: no waypoint was used, the base policy ran)."""
    import numpy as np

    rounds = vd.get("rounds") or {}
    if "ttgs_goal_frac" not in rounds or "active" not in rounds:
        return ""
    frac, active = np.asarray(rounds["ttgs_goal_frac"], float), np.asarray(rounds["active"], bool)
    if not active.any():
        return ""
    return f"; ttgs_goal_frac {np.nanmean(frac[active]):.2f} (1.00: no waypoint used, the base policy)"


def _ttt_doc(setup) -> dict | None:
    import dataclasses as dc

    if setup.ttt is None:
        return None
    doc = json.loads(json.dumps(dc.asdict(setup.ttt), default=str))
    doc["select"]["rule_used"] = setup.ttt.select.rule_used  # rule None: the mode's default
    return doc
