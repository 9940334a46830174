"""`ttt eval`: evaluate a checkpoint, base policy and GC-TTT variants (`ttt.setups.checkpoint_setup`,
`ttt.evaluate`); `--json` keeps each finished variant, keyed by content, so a rerun resumes."""

from __future__ import annotations

import json

import click

from ttt.cli.common import ProgressBar
from ttt.errors import TttError


@click.command("eval")
@click.argument("checkpoint")
@click.option("--episodes", type=int, default=10, show_default=True, help="Episodes per task and seed.")
@click.option("--tasks", type=str, default="1,2,3,4,5", show_default=True, help="Comma-separated task ids.")
@click.option("--dir", "directory", type=str, default=None, help="Dataset directory (default: OGBench's).")
@click.option("--seed", type=int, default=0, show_default=True, help="Evaluation seed (start/goal noise, TTT keys).")
@click.option("--json", "json_out", type=str, default=None, help="Write per-episode results to this JSON file.")
@click.option("--dataset", type=str, default=None, help="Dataset to evaluate on (default: the checkpoint's).")
@click.option(
    "--variants",
    type=str,
    default="base,ttt",
    show_default=True,
    help="Comma-separated: base (no TTT), ttt (GC-TTT, critic returns), ttt-mc (GC-TTT without critic), ttgs "
    "(test-time graph search, the published settings: 4000 vertices), ttt+ttgs (ttt towards TTGS's subgoal).",
)
@click.option("--K", "K", type=int, default=100, show_default=True, help="TTT period: environment steps per round.")
@click.option("--N", "N", type=int, default=100, show_default=True, help="Fine-tuning steps per round.")
@click.option("--lr", type=float, default=3e-4, show_default=True, help="Fine-tuning learning rate.")
@click.option("--q", type=float, default=0.05, show_default=True, help="Fraction of relevant sub-trajectories kept.")
@click.option("--eps", type=float, default=None, help="Relevance radius (default: the environment's goal threshold).")
@click.option("--h-min", type=int, default=10, show_default=True, help="Shortest sub-trajectory with a critic.")
@click.option("--mix", type=float, default=0.0, show_default=True, help="Fraction of TTT batches drawn uniformly.")
@click.option("--batch", type=int, default=None, help="TTT batch size (default: the pre-training one).")
@click.option(
    "--driver",
    type=click.Choice(["auto", "compiled", "host"]),
    default="auto",
    show_default=True,
    help="compiled: whole episodes as one program (pointmaze, antmaze, humanoidmaze, cube-single); host: OGBench's "
    "gym env.",
)
@click.option(
    "--backend",
    type=click.Choice(["mujoco", "mjx"]),
    default="mujoco",
    show_default=True,
    help="Physics of the in-program env: C MuJoCo via a callback (fast on CPU) or MJX (pointmaze; for GPUs).",
)
@click.option(
    "--chunk",
    type=int,
    default=25,
    show_default=True,
    help="Episodes per compiled program call, at most (calls split evenly).",
)
@click.option(
    "--bucket",
    type=int,
    default=None,
    help="Episodes of a compiled call fine-tuned together each round: 1 suits a CPU; 0, the whole call at once, "
    "fills a GPU. Default: 1 on a CPU, 0 on a GPU or TPU. Speed only: results do not depend on it beyond float "
    "rounding.",
)
@click.option(
    "--rule",
    type=click.Choice(["paper", "episodes", "mc-episodes"]),
    default=None,
    help="Selection rule: paper (the paper's text), episodes (published code, critic; variant ttt), mc-episodes "
    "(published code, critic-free; variant ttt-mc). Default: episodes for ttt, paper for ttt-mc. See "
    "docs/algorithm.md.",
)
@click.option(
    "--critic",
    type=click.Choice(["learned", "oracle"]),
    default="learned",
    show_default=True,
    help="Values for selection: the learned critic, or the maze oracle (point mazes; selection only).",
)
@click.option("--n-episodes", type=int, default=10, show_default=True, help="Rule episodes: episodes kept.")
@click.option("--slack", type=int, default=10, show_default=True, help="Rule mc-episodes: rows kept past the goal.")
@click.option("--once", is_flag=True, help="Fine-tune once, at the episode's start (K = the episode length).")
@click.option(
    "--reset-after-horizon", is_flag=True, help="Act with the pre-trained agent past the round's longest kept span."
)
@click.option("--reuse-adam", is_flag=True, help="Fine-tune from the pre-training Adam state, not a fresh one.")
@click.option(
    "--ft-train",
    type=click.Choice(["all", "actor"]),
    default="all",
    show_default=True,
    help="Networks fine-tuning moves: all (value, critic, actor) or actor (the policy only).",
)
@click.option(
    "--ft-alpha", type=float, default=None, help="BC weight alpha of the actor loss during fine-tuning (default: the "
    "checkpoint's; gciql, qrl)."
)
@click.option(
    "--ttgs",
    "ttgs_opts",
    multiple=True,
    metavar="KEY=VALUE",
    help="A test-time graph search setting of variants ttgs and ttt+ttgs, repeatable: e.g. --ttgs n_vertices=1000 "
    "--ttgs distance=l2. Keys: the fields of ttt.graph.TTGSConfig (docs/algorithm.md); unset: the published values "
    "(tau and threshold: the dataset's).",
)
def eval_cmd(
    checkpoint,
    episodes,
    tasks,
    directory,
    seed,
    json_out,
    dataset,
    variants,
    K,
    N,
    lr,
    q,
    eps,
    h_min,
    mix,
    batch,
    driver,
    backend,
    chunk,
    bucket,
    rule,
    critic,
    n_episodes,
    slack,
    once,
    reset_after_horizon,
    reuse_adam,
    ft_train,
    ft_alpha,
    ttgs_opts,
):
    """Evaluate a checkpoint: base policy and/or GC-TTT, success per task and seed (mean +- s.e. over seeds)."""
    if not json_out:  # first: a signal at any moment of this command must not promise a resume
        from ttt.cli.common import interrupt_note

        interrupt_note("nothing is saved: ttt eval keeps its results only with --json FILE (a rerun with the same "
                       "--json resumes at the first unfinished variant)")  # fmt: skip

    from ttt.checkpoint import dataset_hash, open_checkpoint
    from ttt.data.specs import get_spec
    from ttt.envs import resolve_driver
    from ttt.evaluation import evaluate
    from ttt.setups import VARIANTS

    ck = open_checkpoint(checkpoint)  # read and verified once
    meta = dict(ck.meta)
    try:
        task_ids = tuple(int(t) for t in tasks.split(","))
    except ValueError:
        raise TttError(f"--tasks must be comma-separated integers, got '{tasks}'") from None
    if episodes < 1:
        raise TttError(f"--episodes must be >= 1, got {episodes}")
    if chunk < 1:
        raise TttError(f"--chunk must be >= 1 episodes, got {chunk}")
    if bucket is not None and bucket < 0:
        raise TttError(f"--bucket must be >= 1 episodes, or 0 for the whole call at once, got {bucket}")
    names = tuple(v.strip() for v in variants.split(",") if v.strip())
    bad = [v for v in names if v not in VARIANTS]
    if bad or not names:
        raise TttError(f"unknown variant(s) {', '.join(bad) or '(none)'}; valid: {', '.join(VARIANTS)}")
    ttgs = _ttgs_settings(ttgs_opts, names)
    if critic == "oracle" and "ttt" not in names:
        raise TttError("--critic oracle replaces the learned critic of variant ttt; add ttt to --variants")
    dataset = meta["dataset"] if dataset is None else dataset
    spec = get_spec(dataset)
    ck.check_compatible(dataset, spec.ob_dim, spec.action_dim, checkpoint)
    bad_tasks = [t for t in task_ids if not 1 <= t <= 5]
    if bad_tasks:
        raise TttError(f"--tasks: task {bad_tasks[0]} does not exist in {spec.env_id}; valid: 1..5")
    if len(set(task_ids)) != len(task_ids):
        raise TttError(f"--tasks must be distinct task ids in 1..5, got '{tasks}'")
    if not 0 <= seed < 2**63:
        raise TttError(f"--seed must be in [0, 2^63), got {seed}")
    driver = resolve_driver(driver, backend, spec.env_id, say=lambda name, value: f"--{name} {value}")
    if json_out:
        from ttt.storage import writable_file

        writable_file(json_out, "--json")
    from ttt.setups import checkpoint_setup

    settings = dict(K=K, N=N, lr=lr, q=q, eps=eps, h_min=h_min, mix=mix, batch=batch, rule=rule, critic=critic,
                    n_episodes=n_episodes, slack=slack, once=once, reset_after_horizon=reset_after_horizon,
                    reuse_adam=reuse_adam, ft_train=ft_train, ft_alpha=ft_alpha, ttgs=ttgs,
                    bucket="auto" if bucket is None else bucket or None)  # fmt: skip
    option = lambda name: "--" + name.replace("_", "-")  # noqa: E731  (errors name the command line's options)
    setups = {
        name: checkpoint_setup(ck, name, dataset=dataset, where=checkpoint, backend=backend, label=option,
                               **settings)
        for name in names
    }  # fmt: skip
    _refuse_unread(setups, option)
    from ttt.evaluation import check_eval_memory

    for setup in setups.values():  # before any loading: the results, and one call's batches or graphs
        check_eval_memory(setup, meta["seeds"] * len(task_ids) * episodes, chunk)
    from ttt.setups import checkpoint_data

    data, found = checkpoint_data(meta, dataset, directory)
    if directory is None and found is not None:
        click.echo(f"data: {dataset} from {found} (the copy this checkpoint was trained on, in the ttt run cache; "
                   "--dir overrides)")  # fmt: skip
    ck.check_compatible(dataset, data.obs_dim, data.action_dim, checkpoint, dataset_hash(data))
    states = ck.load()
    import jax

    from ttt.storage import read_json

    writer = bool(json_out) and jax.process_index() == 0  # one writer in a multi-process run
    from ttt.pipeline.keys import checkpoint_ref
    from ttt.pipeline.records import SCHEMA

    doc = dict(
        schema=SCHEMA,  # ttt.pipeline.records: no machine's paths
        checkpoint=checkpoint_ref(checkpoint),  # the cache key (or a path without the machine's), not the path given
        checkpoint_sha256=meta.get("state_sha256"),
        dataset_hash=meta.get("dataset_hash"),
        agent=meta["agent"],
        dataset=dataset,
        step=meta["step"],
        profile=meta.get("profile"),
        tasks=list(task_ids),
        episodes=episodes,
        seed=seed,
        driver=driver,
        backend=backend,
        variants={},
    )
    # The key of a variant's result: the checkpoint's content and every setting that changes it. A rerun with the
    # same --json keeps the variants it finished (an interrupted evaluation resumes at the next variant).
    from ttt.storage import digest

    identity = dict(state=meta.get("state_sha256") or meta["state_file"], step=meta["step"], data=meta["dataset_hash"])
    old = read_json(json_out) if json_out else None
    old_variants = old.get("variants", {}) if isinstance(old, dict) and isinstance(old.get("variants"), dict) else {}
    for name, setup in setups.items():
        # Neither the value pass nor the bucket changes a result: keyed as constants (bucket as the CPU default, 1, so
        # a file written before the default followed the backend keeps its key), so a file resumes on any machine.
        ttt_key = None if setup.ttt is None else {**_ttt_doc(setup), "value_cap": None, "bucket": 1}
        vkey = digest(dict(checkpoint=identity, variant=name, tasks=task_ids, episodes=episodes, seed=seed,
                           driver=driver, backend=backend, ttt=ttt_key))  # fmt: skip
        prev = old_variants.get(name)
        if isinstance(prev, dict) and prev.get("key") == vkey and "success" in prev:
            doc["variants"][name] = prev
            click.echo(f"{name}: kept from {json_out} (same checkpoint and settings)")
            _echo_variant(name, prev, meta, dataset, task_ids, episodes, driver)
            continue
        from ttt.evaluation import ttgs_cost_note

        note = ttgs_cost_note(setup, meta["seeds"] * len(task_ids) * episodes)
        if note:
            click.echo(note)
        with ProgressBar(f"{name} {meta['agent']}") as bar:
            res = evaluate(
                setup,
                states.agent,
                data,
                opt_states=states.opt_state if setup.ttt is not None and setup.ttt.finetune.reuse_opt_state else None,
                episodes=episodes,
                tasks=task_ids,
                seed=seed,
                driver=driver,
                batch_size=chunk,
                progress=bar,
            )
        doc["variants"][name] = dict(_result_doc(res, setup), key=vkey)
        _echo_variant(name, doc["variants"][name], meta, dataset, task_ids, episodes, driver)
        if writer:  # after every variant: an interrupted evaluation keeps the finished ones
            _save(json_out, _flat(doc))
    if writer:
        _save(json_out, _flat(doc))


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


def _ttgs_settings(opts: tuple[str, ...], variants: tuple[str, ...]) -> dict | None:
    """`--ttgs KEY=VALUE` options as a dict of `TTGSConfig` fields, each value read as its field's type (int, float
    or str); refused where no variant asked for reads them. The values' ranges are checked by `ttgs_config`."""
    if not opts:
        return None
    import dataclasses as dc

    from ttt.graph import TTGSConfig

    if not {"ttgs", "ttt+ttgs"} & set(variants):
        raise TttError("--ttgs changes nothing here: only variants ttgs and ttt+ttgs read it; add one to --variants")
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


def _refuse_unread(setups: dict, option) -> None:
    """An option given on the command line that the selection rule of every GC-TTT variant asked for ignores (e.g.
    --q with variant ttt, whose rule 'episodes' reads no q) would change nothing: refuse it."""
    from click.core import ParameterSource

    from ttt.select import IGNORED_BY_RULE

    ctx = click.get_current_context()
    given = [n for n in ("q", "slack", "n_episodes") if ctx.get_parameter_source(n) is ParameterSource.COMMANDLINE]
    ttt_setups = [s for s in setups.values() if s.ttt is not None]
    for name in given:
        if ttt_setups and all(name in IGNORED_BY_RULE[s.ttt.select.rule_used] for s in ttt_setups):
            rules = ", ".join(sorted({f"{v}: rule {s.ttt.select.rule_used}" for v, s in setups.items() if s.ttt}))
            raise TttError(f"{option(name)} changes nothing here: no selection rule of the variants asked for reads it "
                           f"({rules}); leave it out, or add a variant / --rule that reads it (docs/algorithm.md)")


def _flat(doc: dict) -> dict:
    """Single-variant runs keep the flat layout of the base evaluation too."""
    doc = dict(doc)
    if len(doc["variants"]) == 1:
        only = next(iter(doc["variants"].values()))
        doc.update({k: only[k] for k in ("mean", "se", "success", "steps")})
    return doc


def _echo_variant(name, vd, meta, dataset, task_ids, episodes, driver) -> None:
    import numpy as np

    success = np.asarray(vd["success"], float)
    per_seed = success.mean(axis=(1, 2))
    se = vd["se"]
    spread = " (one seed: no s.e.)" if se is None or se != se else f" +- {se:.3f} (s.e. over seeds)"
    rate = f"; {episode_rate(success.size, vd['wall_s'])}" if vd.get("wall_s") else ""
    click.echo(
        f"{name}: {meta['agent']} on {dataset} (step {meta['step']}, {meta['seeds']} seeds x "
        f"{len(task_ids)} tasks x {episodes} episodes, {driver}): success {vd['mean']:.3f}{spread}{rate}"
        + _ttgs_line(vd)
    )
    per_task = zip(task_ids, success.mean(axis=(0, 2)), strict=True)
    click.echo("  per task: " + ", ".join(f"task{t} {r:.2f}" for t, r in per_task))
    click.echo("  per seed: " + ", ".join(f"{r:.2f}" for r in per_seed))


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


def _result_doc(res, setup) -> dict:
    mean, se = res.mean_and_se()
    doc = dict(mean=mean, se=se, success=res.success.tolist(), steps=res.steps.tolist(), wall_s=res.wall_s)
    doc["episodes_per_s"] = res.success.size / res.wall_s if res.wall_s else None
    if setup.ttt is not None:
        doc["ttt"] = _ttt_doc(setup)
    if setup.ttgs is not None:
        import dataclasses as dc

        doc["ttgs"] = dc.asdict(setup.ttgs)
    if setup.ttt is not None or setup.ttgs is not None:
        doc["rounds"] = {k: v.tolist() for k, v in (res.rounds or {}).items()}
    return doc
