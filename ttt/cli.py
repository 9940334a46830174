"""The `ttt` command line. User errors print one line on stderr and exit with status 2, without a traceback."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

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
    """Progress of long work: ``bar(done, total, **fields)``.

    On a terminal, a rich progress bar (done / total, the fields, elapsed, time left) that appears on its first
    update, so that errors found before any work starts are not preceded by an empty bar. Elsewhere (a log file, a
    batch job, CI), where a live bar would print nothing until the end, one plain line on stderr every ``every_s``
    seconds and when done."""

    def __init__(self, description: str, unit: str = "episodes", every_s: float = 30.0):
        self.description = description
        self.unit = unit
        self.every_s = every_s
        self.bar = None
        self.terminal = sys.stdout.isatty()
        self.t0 = self.start = self.last_line = None
        self.state = None  # (done, total, fields) of the last update
        self.printed = None  # the update last printed as a line

    def __call__(self, done: int, total: int, **fields) -> None:
        info = "  ".join(f"{k} {v}" for k, v in fields.items())
        if not self.terminal:
            now = time.perf_counter()
            if self.t0 is None:
                self.t0, self.start, self.last_line = now, done, now
            self.state = (done, total, info)
            if (now - self.last_line >= self.every_s or done >= total) and self.state != self.printed:
                self._line(now)
            return
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
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
            )
            self.task = self.bar.add_task(self.description, total=total, completed=done, info=info)
            self.bar.start()
        self.bar.update(self.task, completed=done, total=total, info=info)

    def _line(self, now: float) -> None:
        done, total, info = self.state
        elapsed = now - self.t0
        rate = (done - self.start) / elapsed if elapsed > 0 else 0.0
        eta = f"eta {_clock((total - done) / rate)}" if rate > 0 and done < total else ""
        parts = [f"{self.description} {done}/{total} {self.unit}", info, f"{_clock(elapsed)} elapsed", eta]
        click.echo("  ".join(p for p in parts if p), err=True)
        self.last_line, self.printed = now, self.state

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
        if self.state is not None and self.state != self.printed:
            self._line(time.perf_counter())


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


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
    help="Output directory (created when missing). Default: OGBench's ~/.ogbench/data.",
)
@click.option("--workers", type=int, default=None, help="Worker processes (default: all cores).")
@click.option("--force", is_flag=True, help="Overwrite existing files.")
@click.option("--expert", type=str, default=None, help="antmaze: the ant expert (`ttt expert train ant`'s expert.pkl).")
def data_generate(name, episodes, seed, directory, workers, force, expert):
    """Generate NAME.npz and NAME-val.npz in OGBench's format."""
    from ttt.data.files import check
    from ttt.data.generate import generate

    if workers is not None and workers < 1:
        raise TttError(f"--workers must be >= 1, got {workers}")
    t0 = time.time()
    with _EpisodeBar(name) as bar:
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


@cli.group()
def expert() -> None:
    """Locomotion experts for generating datasets (OGBench's SAC ant expert)."""


@expert.command("train")
@click.argument("robot", type=click.Choice(["ant"]), metavar="ROBOT")
@click.option("--steps", type=int, default=400_000, show_default=True, help="Environment steps in all (OGBench: 400k).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the agent and the environment stream.")
@click.option(
    "--out", type=str, default="runs/expert/ant", show_default=True, help="Directory (resumes if it holds a run)."
)
@click.option("--checkpoint-every", type=int, default=20_000, show_default=True, help="Steps between checkpoints.")
@click.option(
    "--eval-episodes", type=int, default=50, show_default=True, help="Evaluation episodes when done (0: none)."
)
def expert_train(robot, steps, seed, out, checkpoint_every, eval_episodes):
    """Train ROBOT's direction-following expert with SAC (resumable), then evaluate it."""
    from ttt.expert import evaluate_expert, load_actor, train_expert, write_json

    if steps < 1:
        raise TttError(f"--steps must be >= 1, got {steps}")
    if checkpoint_every < 1:
        raise TttError(f"--checkpoint-every must be >= 1, got {checkpoint_every}")
    if eval_episodes < 0:
        raise TttError(f"--eval-episodes must be >= 0, got {eval_episodes}")
    with _EpisodeBar(f"SAC {robot}", unit="steps") as bar:

        def progress(log, rate):
            bar(log.step, steps, **{"return": f"{log.recent_return():.2f}", "steps/s": f"{rate:.0f}"})

        log = train_expert(out, steps=steps, seed=seed, checkpoint_every=checkpoint_every, progress=progress)
    click.echo(
        f"trained {log.step} steps ({log.episodes} episodes, {log.falls} falls) in {log.wall / 60:.1f} min; "
        f"mean return of the last 10 episodes {log.recent_return():.2f}; expert: {Path(out) / 'expert.pkl'}"
    )
    if eval_episodes:
        actor, _, _ = load_actor(Path(out) / "expert.pkl")
        with _EpisodeBar("evaluate", unit="steps") as bar:
            res = evaluate_expert(actor, episodes=eval_episodes, progress=bar)
        write_json(Path(out) / "eval.json", res)
        click.echo(
            f"deterministic return along z over {res['episodes']} episodes: {res['mean_return']:.2f} "
            f"+- {res['std_return']:.2f} (min {res['min_return']:.2f}), falls {res['falls']}"
        )


@expert.command("eval")
@click.argument("path")
@click.option("--episodes", type=int, default=50, show_default=True, help="Direction-following episodes.")
@click.option(
    "--maze",
    type=str,
    default="antmaze-medium-v0",
    show_default=True,
    help="Maze env for the oracle test ('' to skip).",
)
@click.option("--maze-episodes", type=int, default=10, show_default=True, help="Episodes per evaluation task.")
@click.option("--noise", type=float, default=0.2, show_default=True, help="Action noise in the maze (as generation).")
@click.option("--seed", type=int, default=1000, show_default=True, help="Evaluation seed.")
@click.option("--json", "json_out", type=str, default=None, help="Write the results to this JSON file.")
def expert_eval(path, episodes, maze, maze_episodes, noise, seed, json_out):
    """Evaluate an expert (expert.pkl, a checkpoint, or their folder): deterministic direction-following
    return and falls; then, steered by the maze's BFS oracle with generation noise, success on the maze's tasks."""
    from ttt.expert import NumpyExpert, evaluate_expert, evaluate_expert_maze, load_actor, write_json

    if episodes < 0 or maze_episodes < 0:
        raise TttError("--episodes and --maze-episodes must be >= 0")
    if noise < 0:
        raise TttError(f"--noise must be >= 0, got {noise}")
    from ttt.data.specs import SPECS

    mazes = sorted({sp.env_id for sp in SPECS.values() if sp.family == "antmaze"})
    if maze and maze not in mazes:
        raise TttError(f"--maze must be an ant maze ({', '.join(mazes)}) or '' to skip, got {maze!r}")
    actor, _, meta = load_actor(path)
    doc = dict(expert=str(path), trained_steps=meta.get("step"))
    if episodes:
        with _EpisodeBar("direction following", unit="steps") as bar:
            res = evaluate_expert(actor, episodes=episodes, seed=seed, progress=bar)
        doc["direction"] = res
        click.echo(
            f"deterministic return along z over {episodes} episodes: {res['mean_return']:.2f} +- "
            f"{res['std_return']:.2f} (min {res['min_return']:.2f}), falls {res['falls']}"
        )
    if maze and maze_episodes:
        with _EpisodeBar(maze) as bar:
            res = evaluate_expert_maze(
                NumpyExpert(actor), maze, episodes=maze_episodes, noise=noise, seed=seed, progress=bar
            )
        doc["maze"] = res
        rates = ", ".join(f"task {t}: {v:.2f}" for t, v in res["success"].items())
        flips = sum(res["flipped"].values())
        click.echo(
            f"{maze} with the BFS oracle and noise {noise}: {rates}; overall {res['overall']:.2f}; "
            f"ant turned over in {flips} of {len(res['flipped']) * maze_episodes}"
        )
    if json_out:
        write_json(Path(json_out), doc)


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
    from ttt.data.files import load
    from ttt.data.specs import get_spec
    from ttt.presets import get_agent, get_profile, make_configs
    from ttt.pretrain import pretrain

    get_agent(agent)
    prof = get_profile(profile)
    steps = prof.steps if steps is None else steps
    if steps < 1 or seeds < 1 or chunk < 1:
        raise TttError(f"--steps, --seeds and --chunk must be >= 1, got {steps}, {seeds}, {chunk}")
    if seed < 0:
        raise TttError(f"--seed must be >= 0, got {seed}")
    cfg, sampler = make_configs(agent, get_spec(dataset), profile, _parse_sets(sets))
    from ttt.storage import writable_dir

    writable_dir(out, "--out")
    data = load(dataset, directory)
    click.echo(
        f"{agent} on {dataset} ({data.n_rows} rows), profile {profile}: {prof.description}; "
        f"{seeds} seed(s), {steps} steps -> {out}"
    )
    if (Path(out) / "meta.json").exists():
        from ttt.pretrain import read_meta

        at = read_meta(out).get("step", 0)
        if at < steps:
            click.echo(f"resuming at step {at} of {steps} from {out}")
    bar = _EpisodeBar(f"pretrain {agent}", unit="steps")

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


VARIANTS = ("base", "ttt", "ttt-mc")


def _env_max_steps(env_id: str) -> int:
    import gymnasium
    import ogbench  # noqa: F401

    return int(gymnasium.spec(env_id).max_episode_steps)


@cli.command("eval")
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
    help="Comma-separated: base (no TTT), ttt (GC-TTT, critic returns), ttt-mc (GC-TTT without critic).",
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
    help="compiled: whole episodes as one program (envs with a JAX implementation); host: OGBench's gym env.",
)
@click.option(
    "--backend",
    type=click.Choice(["mujoco", "mjx"]),
    default="mujoco",
    show_default=True,
    help="Physics of the in-program env: C MuJoCo via a callback (fast on CPU) or MJX (for GPUs).",
)
@click.option("--chunk", type=int, default=25, show_default=True, help="Episodes per compiled program call.")
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
    rule,
    critic,
    n_episodes,
    slack,
    once,
    reset_after_horizon,
    reuse_adam,
):
    """Evaluate a checkpoint: base policy and/or GC-TTT, success per task and seed (mean +- s.e. over seeds)."""

    from ttt.data.files import load
    from ttt.data.specs import get_spec
    from ttt.envs import has_jax_env
    from ttt.evaluate import evaluate
    from ttt.pretrain import check_compatible, dataset_hash, load_checkpoint, read_meta, sampler_config

    meta = read_meta(checkpoint)
    try:
        task_ids = tuple(int(t) for t in tasks.split(","))
    except ValueError:
        raise TttError(f"--tasks must be comma-separated integers, got '{tasks}'") from None
    if episodes < 1:
        raise TttError(f"--episodes must be >= 1, got {episodes}")
    if chunk < 1:
        raise TttError(f"--chunk must be >= 1 episodes, got {chunk}")
    names = tuple(v.strip() for v in variants.split(",") if v.strip())
    bad = [v for v in names if v not in VARIANTS]
    if bad or not names:
        raise TttError(f"unknown variant(s) {', '.join(bad) or '(none)'}; valid: {', '.join(VARIANTS)}")
    if critic == "oracle" and "ttt" not in names:
        raise TttError("--critic oracle replaces the learned critic of variant ttt; add ttt to --variants")
    dataset = meta["dataset"] if dataset is None else dataset
    spec = get_spec(dataset)
    check_compatible(meta, dataset, spec.ob_dim, spec.action_dim, checkpoint)
    max_steps = _env_max_steps(spec.env_id)
    bad_tasks = [t for t in task_ids if not 1 <= t <= 5]
    if bad_tasks:
        raise TttError(f"--tasks: task {bad_tasks[0]} does not exist in {spec.env_id}; valid: 1..5")
    if len(set(task_ids)) != len(task_ids):
        raise TttError(f"--tasks must be distinct task ids in 1..5, got '{tasks}'")
    if seed < 0:
        raise TttError(f"--seed must be >= 0, got {seed}")
    if driver == "auto":
        driver = "compiled" if has_jax_env(spec.env_id) else "host"
    elif driver == "compiled" and not has_jax_env(spec.env_id):
        raise TttError(f"--driver compiled: {spec.env_id} has no in-program environment; use --driver host")
    if backend == "mjx" and driver == "host":
        raise TttError(
            f"--backend mjx is the physics of the compiled driver; {spec.env_id} runs on the host driver "
            "(OGBench's gym env, C MuJoCo): leave out --backend or use --backend mujoco"
        )
    if json_out:
        from ttt.storage import writable_file

        writable_file(json_out, "--json")
    from ttt.agents import get_backbone
    from ttt.pretrain import backbone_config

    cfg, sampler = backbone_config(meta), sampler_config(meta)
    setups = {}
    for name in names:
        setups[name] = _make_setup(
            name,
            meta,
            cfg,
            sampler,
            spec,
            max_steps,
            driver,
            backend,
            dict(K=K, N=N, lr=lr, q=q, eps=eps, h_min=h_min, mix=mix, batch=batch, rule=rule, critic=critic,
                 n_episodes=n_episodes, slack=slack, once=once, reset_after_horizon=reset_after_horizon,
                 reuse_adam=reuse_adam),
        )  # fmt: skip
        if name == "ttt" and not get_backbone(meta["backbone"]).has_value(cfg):
            raise TttError(
                f"variant ttt needs a value function, which this {meta['agent']} checkpoint lacks; use ttt-mc"
            )
    data = load(dataset, directory)
    check_compatible(meta, dataset, data.obs_dim, data.action_dim, checkpoint, dataset_hash(data))
    states, meta = load_checkpoint(checkpoint, meta)
    import jax

    from ttt.storage import atomic_write_json, read_json

    writer = bool(json_out) and jax.process_index() == 0  # one writer in a multi-process run
    doc = dict(
        checkpoint=str(checkpoint),
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
    from ttt.pipeline import _digest

    ck = dict(state=meta.get("state_sha256") or meta["state_file"], step=meta["step"], data=meta["dataset_hash"])
    old = read_json(json_out) if json_out else None
    old_variants = old.get("variants", {}) if isinstance(old, dict) and isinstance(old.get("variants"), dict) else {}
    for name, setup in setups.items():
        vkey = _digest(dict(checkpoint=ck, variant=name, tasks=task_ids, episodes=episodes, seed=seed, driver=driver,
                            backend=backend, ttt=_ttt_doc(setup)))  # fmt: skip
        prev = old_variants.get(name)
        if isinstance(prev, dict) and prev.get("key") == vkey and "success" in prev:
            doc["variants"][name] = prev
            click.echo(f"{name}: kept from {json_out} (same checkpoint and settings)")
            _echo_variant(name, prev, meta, dataset, task_ids, episodes, driver)
            continue
        with _EpisodeBar(f"{name} {meta['agent']}") as bar:
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
            atomic_write_json(json_out, _flat(doc))
    if writer:
        atomic_write_json(json_out, _flat(doc))


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
    se = vd["se"] if vd["se"] is not None else float("nan")
    rate = f"; {success.size / vd['wall_s']:.2f} episodes/s" if vd.get("wall_s") else ""
    click.echo(
        f"{name}: {meta['agent']} on {dataset} (step {meta['step']}, {meta['seeds']} seeds x "
        f"{len(task_ids)} tasks x {episodes} episodes, {driver}): success {vd['mean']:.3f} +- {se:.3f} (s.e. over "
        f"seeds){rate}"
    )
    per_task = zip(task_ids, success.mean(axis=(0, 2)), strict=True)
    click.echo("  per task: " + ", ".join(f"task{t} {r:.2f}" for t, r in per_task))
    click.echo("  per seed: " + ", ".join(f"{r:.2f}" for r in per_seed))


def _ttt_doc(setup) -> dict | None:
    import dataclasses as dc

    if setup.ttt is None:
        return None
    doc = json.loads(json.dumps(dc.asdict(setup.ttt), default=str))
    doc["select"]["rule_used"] = setup.ttt.select.rule_used  # rule None: the mode's default
    return doc


def _make_setup(name, meta, cfg, sampler, spec, max_steps, driver, backend, kw):
    """The EvalSetup of one variant; out-of-range settings raise TttError naming the option and its valid range."""
    from ttt.episode import TTTConfig
    from ttt.evaluate import EvalSetup
    from ttt.finetune import FinetuneConfig
    from ttt.select import SelectConfig

    ttt = None
    if name != "base":
        if not 1 <= kw["K"] <= max_steps:
            raise TttError(f"--K must be in [1, {max_steps}] (the episode length of {spec.env_id}), got {kw['K']}")
        if kw["N"] < 0:
            raise TttError(f"--N (fine-tuning steps per round) must be >= 0, got {kw['N']}")
        if not 0 < kw["q"] <= 1:
            raise TttError(f"--q (fraction of relevant sub-trajectories kept) must be in (0, 1], got {kw['q']}")
        if kw["eps"] is not None and not kw["eps"] > 0:
            raise TttError(f"--eps (relevance radius) must be > 0, got {kw['eps']}")
        if not kw["lr"] > 0:
            raise TttError(f"--lr must be > 0, got {kw['lr']}")
        if not 0 <= kw["mix"] <= 1:
            raise TttError(f"--mix must be in [0, 1], got {kw['mix']}")
        if kw["h_min"] < 1:
            raise TttError(f"--h-min must be >= 1, got {kw['h_min']}")
        if kw["batch"] is not None and kw["batch"] < 1:
            raise TttError(f"--batch must be >= 1, got {kw['batch']}")
        if kw["n_episodes"] < 1:
            raise TttError(f"--n-episodes must be >= 1, got {kw['n_episodes']}")
        if kw["slack"] < 0:
            raise TttError(f"--slack must be >= 0, got {kw['slack']}")
        rule = kw["rule"]  # None: the variant's default (SelectConfig: episodes with a critic, paper without)
        if rule == "episodes" and name != "ttt":
            rule = None  # the critic rule applies to variant ttt; ttt-mc keeps its default critic-free rule
        if rule == "mc-episodes" and name != "ttt-mc":
            rule = None
        try:
            ttt = TTTConfig(
                K=max_steps if kw["once"] else kw["K"],
                select=SelectConfig(
                    q=kw["q"],
                    eps_rel=kw["eps"],
                    h_min=kw["h_min"],
                    mode="critic" if name == "ttt" else "mc",
                    mix=kw["mix"],
                    rule=rule,
                    n_episodes=kw["n_episodes"],
                    slack=kw["slack"],
                ),
                finetune=FinetuneConfig(
                    steps=kw["N"], lr=kw["lr"], batch_size=kw["batch"], reuse_opt_state=kw["reuse_adam"]
                ),
                critic=kw["critic"] if name == "ttt" else "learned",
                reset_after_horizon=kw["reset_after_horizon"],
            )
        except ValueError as e:
            raise TttError(str(e)) from None
    return EvalSetup(meta["backbone"], cfg, sampler, spec, ttt, max_steps, backend)


def _result_doc(res, setup) -> dict:
    mean, se = res.mean_and_se()
    doc = dict(mean=mean, se=se, success=res.success.tolist(), steps=res.steps.tolist(), wall_s=res.wall_s)
    doc["episodes_per_s"] = res.success.size / res.wall_s if res.wall_s else None
    if setup.ttt is not None:
        doc["ttt"] = _ttt_doc(setup)
        doc["rounds"] = {k: v.tolist() for k, v in (res.rounds or {}).items()}
    return doc


@cli.command("run")
@click.argument("pipeline")
@click.option("--set", "sets", multiple=True, help="Override a run key in every run: key=value (repeatable).")
@click.option("--out", type=str, default=None, help="Output directory (default: runs/<pipeline name>).")
@click.option("--cache", type=str, default=None, help="Artifact cache (default: $TTT_CACHE or ~/.cache/ttt).")
@click.option(
    "--stages", type=str, default="data,pretrain,eval", show_default=True, help="Stages allowed to produce artifacts."
)
@click.option("--only", type=str, default=None, help="Run only the runs whose names match these globs (a,b*,...).")
@click.option("--dry-run", is_flag=True, help="Validate the pipeline and list its runs; run nothing.")
def run_cmd(pipeline, sets, out, cache, stages, only, dry_run):
    """Run a pipeline (a name in pipelines/ or a .toml path): data, pre-training, evaluation, report."""
    from ttt.config import find_pipeline, load_pipeline, parse_sets, select_runs
    from ttt.pipeline import cache_root, run_pipeline, validate_run

    full = load_pipeline(find_pipeline(pipeline), parse_sets(sets))
    pipe = select_runs(full, only)
    out = out or f"runs/{pipe.name}"
    stage_list = tuple(s.strip() for s in stages.split(",") if s.strip())
    click.echo(f"pipeline {pipe.name}: {len(pipe.runs)} runs -> {out} (cache {cache_root(cache)})")
    if dry_run:
        for r in pipe.runs:
            validate_run(r)
        for r in pipe.runs:
            tt = "" if r["variant"] == "base" else f" lr {r['lr']:g} N {r['N']} K {r['K']} q {r['q']:g}"
            click.echo(
                f"  {r['name']}: {r['agent']} {r['variant']} on {r['dataset']} ({r['profile']}, {r['seeds']} seeds, "
                f"{r['episodes']} episodes x {len(r['tasks'])} tasks){tt}"
            )
        return
    result = run_pipeline(
        pipe,
        out,
        cache,
        stage_list,
        bar=lambda desc, unit: _EpisodeBar(desc, unit),
        echo=click.echo,
        all_names=[r["name"] for r in full.runs],
    )
    click.echo(f"done in {result.wall_s:.0f} s: {out}/results.json, results.csv, report.md, plots/")


@cli.command("report")
@click.argument("run_dirs", nargs=-1, required=True)
@click.option("--out", type=str, default=None, help="Combined report directory (needed for several RUN_DIRs).")
def report_cmd(run_dirs, out):
    """Rebuild report.md and plots from saved pipeline results (one directory in place, or several combined)."""
    from pathlib import Path

    from ttt.report import combine, write_report

    if len(run_dirs) == 1 and out is None:
        write_report(run_dirs[0], echo=click.echo)
    elif out is None:
        raise TttError("several RUN_DIRs are combined into one report: give --out DIR")
    else:
        combine(list(run_dirs), Path(out), echo=click.echo)


def _init_distributed() -> None:
    """Join a multi-process JAX run when TTT_COORDINATOR (host:port), TTT_NUM_PROCESSES and TTT_PROCESS_ID are set:
    `ttt eval` then shards its episode batches over every process's devices (CPU: gloo collectives)."""
    import os

    addr = os.environ.get("TTT_COORDINATOR")
    if not addr:
        return
    try:
        n, i = int(os.environ["TTT_NUM_PROCESSES"]), int(os.environ["TTT_PROCESS_ID"])
    except (KeyError, ValueError):
        raise TttError(
            "TTT_COORDINATOR is set, so TTT_NUM_PROCESSES and TTT_PROCESS_ID must be integers "
            f"(got {os.environ.get('TTT_NUM_PROCESSES')!r}, {os.environ.get('TTT_PROCESS_ID')!r})"
        ) from None
    if not 0 <= i < n:
        raise TttError(f"TTT_PROCESS_ID must be in [0, TTT_NUM_PROCESSES), got {i} of {n}")
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # used only by CPU devices
    jax.distributed.initialize(coordinator_address=addr, num_processes=n, process_id=i)


def _stop_on_signals() -> Callable[[], None] | None:
    """SIGINT / SIGTERM stop the command within a moment, whatever it is doing, with a one-line message and exit
    status 128 + the signal (130, 143).

    Why not Python's KeyboardInterrupt: while a compiled program runs (a TTT batch, a pre-training chunk), the main
    thread is inside XLA and Python's handler runs only when the call returns (minutes later), and an exception
    raised then in the middle of JAX's runtime can crash the process (exit 139). Instead the signal's number goes to a
    wakeup socket that a watcher thread reads: it prints the message, ends worker processes and exits at once.
    Nothing finished is lost because every artifact is written atomically when it is finished (data blocks,
    checkpoints per chunk, evaluation tasks and variants, results after every row), so a rerun resumes.
    Returns a function that restores the previous handlers (None outside the main thread)."""
    import os
    import signal
    import socket
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    r, w = socket.socketpair()
    w.setblocking(False)
    wanted = (signal.SIGINT, signal.SIGTERM)
    old_fd = signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
    old = {sig: signal.signal(sig, lambda *_: None) for sig in wanted}

    def watch():
        while True:
            try:
                data = r.recv(1)
            except OSError:
                return
            if not data:
                return
            if data[0] in wanted:
                break
        import multiprocessing

        name = signal.Signals(data[0]).name
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os.write(2, f"\ninterrupted ({name}): finished work is saved; rerun the same command to resume\n".encode())

        def cleanup():  # worker processes, then the pools' and semaphores' finalizers (as at a normal exit)
            from multiprocessing import util

            for child in multiprocessing.active_children():
                child.terminate()
            util._run_finalizers(0)

        t = threading.Thread(target=cleanup, daemon=True)
        t.start()
        t.join(timeout=3.0)
        os._exit(128 + data[0])

    threading.Thread(target=watch, name="ttt-signal-watcher", daemon=True).start()

    def restore():
        signal.set_wakeup_fd(old_fd)
        for sig, h in old.items():
            signal.signal(sig, h)
        w.close()
        r.close()

    return restore


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors become one line on stderr and exit status 2 (no traceback)."""
    restore = _stop_on_signals()
    try:
        _init_distributed()
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
    finally:
        if restore is not None:
            restore()
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
