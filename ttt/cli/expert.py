"""`ttt expert`: train and evaluate the SAC experts that generate antmaze and humanoidmaze data (`ttt.data.expert`)."""

from __future__ import annotations

from pathlib import Path

import click

from ttt.cli.common import ProgressBar
from ttt.errors import TttError


@click.group()
def expert() -> None:
    """Locomotion experts for generating datasets (SAC, as OGBench's ant and humanoid experts)."""


@expert.command("train")
@click.argument("robot", type=click.Choice(["ant", "humanoid"]), metavar="ROBOT")
@click.option("--steps", type=int, default=None, help="Environment steps in all [default: ant 400k, humanoid 2M].")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the agent and the environment stream.")
@click.option(
    "--out", type=str, default=None, help="Directory (resumes if it holds a run) [default: runs/expert/ROBOT]."
)
@click.option(
    "--checkpoint-every", type=int, default=None, help="Steps between checkpoints [default: ant 20k, humanoid 100k]."
)
@click.option(
    "--eval-episodes", type=int, default=50, show_default=True, help="Evaluation episodes when done (0: none)."
)
@click.option("--stop-after", type=float, default=None, help="Checkpoint and stop after this many minutes.")
def expert_train(robot, steps, seed, out, checkpoint_every, eval_episodes, stop_after):
    """Train ROBOT's direction-following expert with SAC (resumable), then evaluate it.

    The recipes (ROBOTS in ttt.data.expert): the ant as OGBench; the humanoid as OGBench's with 256x2 critics."""
    from ttt.data.expert import EXPERT_NAME, ROBOTS, evaluate_expert, load_actor, train_expert, write_json

    spec = ROBOTS[robot]
    steps = spec.steps if steps is None else steps
    checkpoint_every = spec.checkpoint_every if checkpoint_every is None else checkpoint_every
    out = out or f"runs/expert/{robot}"
    if steps < 1:
        raise TttError(f"--steps must be >= 1, got {steps}")
    if checkpoint_every < 1:
        raise TttError(f"--checkpoint-every must be >= 1, got {checkpoint_every}")
    if eval_episodes < 0:
        raise TttError(f"--eval-episodes must be >= 0, got {eval_episodes}")
    if stop_after is not None and not stop_after > 0:
        raise TttError(f"--stop-after must be > 0 minutes, got {stop_after}")
    with ProgressBar(f"SAC {robot}", unit="steps") as bar:

        def progress(log, rate):
            bar(log.step, steps, **{"return": f"{log.recent_return():.2f}", "steps/s": f"{rate:.0f}"})

        log = train_expert(
            out,
            steps=steps,
            seed=seed,
            checkpoint_every=checkpoint_every,
            progress=progress,
            robot=robot,
            stop_after_s=None if stop_after is None else stop_after * 60,
        )
    click.echo(
        f"trained {log.step} steps ({log.episodes} episodes, {log.falls} falls) in {log.wall / 60:.1f} min; "
        f"mean return of the last 10 episodes {log.recent_return():.2f}"
        + (f"; expert: {Path(out) / EXPERT_NAME}" if log.step >= steps else "; stopped: run again to resume")
    )
    if eval_episodes and log.step >= steps:
        actor, _, _ = load_actor(Path(out) / EXPERT_NAME)
        with ProgressBar("evaluate", unit="steps") as bar:
            res = evaluate_expert(actor, episodes=eval_episodes, progress=bar, robot=robot)
        write_json(Path(out) / "eval.json", res)
        click.echo(_direction_line(res))


def _direction_line(res: dict) -> str:
    return (
        f"deterministic return over {res['episodes']} episodes: {res['mean_return']:.2f} +- {res['std_return']:.2f} "
        f"(min {res['min_return']:.2f}); progress along z {res['mean_progress']:.2f} +- {res['std_progress']:.2f}; "
        f"falls {res['falls']}; up {res['up_fraction']:.2f} of steps"
    )


@expert.command("eval")
@click.argument("path")
@click.option("--episodes", type=int, default=50, show_default=True, help="Direction-following episodes.")
@click.option(
    "--maze",
    type=str,
    default=None,
    help="Maze env for the oracle test ('' to skip) [default: the robot's medium maze].",
)
@click.option("--maze-episodes", type=int, default=10, show_default=True, help="Episodes per evaluation task.")
@click.option("--noise", type=float, default=0.2, show_default=True, help="Action noise in the maze (as generation).")
@click.option("--seed", type=int, default=1000, show_default=True, help="Evaluation seed.")
@click.option("--json", "json_out", type=str, default=None, help="Write the results to this JSON file.")
def expert_eval(path, episodes, maze, maze_episodes, noise, seed, json_out):
    """Evaluate an expert (expert.npz, a checkpoint, or their folder): deterministic direction-following
    return, progress along the direction and falls; then, steered by the maze's BFS oracle with generation
    noise, success on the maze's tasks."""
    from ttt.data.expert import ROBOTS, NumpyExpert, evaluate_expert, evaluate_expert_maze, load_actor, write_json

    if episodes < 0 or maze_episodes < 0:
        raise TttError("--episodes and --maze-episodes must be >= 0")
    if noise < 0:
        raise TttError(f"--noise must be >= 0, got {noise}")
    from ttt.data.specs import SPECS

    actor, _, meta = load_actor(path)
    robot = meta.get("robot") or "ant"
    if robot not in ROBOTS:
        raise TttError(f"{path}: unknown robot {str(robot)[:40]!r}; known: {', '.join(ROBOTS)}")
    family = f"{robot}maze"
    mazes = sorted({sp.env_id for sp in SPECS.values() if sp.family == family} | {ROBOTS[robot].maze})
    maze = ROBOTS[robot].maze if maze is None else maze
    if maze and maze not in mazes:
        raise TttError(f"--maze must be one of the {robot} mazes ({', '.join(mazes)}) or '' to skip, got {maze!r}")
    doc = dict(expert=Path(path).name, robot=robot, trained_steps=meta.get("step"))
    if episodes:
        with ProgressBar("direction following", unit="steps") as bar:
            res = evaluate_expert(actor, episodes=episodes, seed=seed, progress=bar, robot=robot)
        doc["direction"] = res
        click.echo(_direction_line(res))
    if maze and maze_episodes:
        with ProgressBar(maze) as bar:
            res = evaluate_expert_maze(
                NumpyExpert(actor), maze, episodes=maze_episodes, noise=noise, seed=seed, progress=bar
            )
        doc["maze"] = res
        rates = ", ".join(f"task {t}: {v:.2f}" for t, v in res["success"].items())
        lost = (
            f"falls {sum(res['falls'].values())}"
            if "falls" in res
            else f"ant turned over in {sum(res['flipped'].values())} of {len(res['flipped']) * maze_episodes}"
        )
        click.echo(f"{maze} with the BFS oracle and noise {noise}: {rates}; overall {res['overall']:.2f}; {lost}")
    if json_out:
        write_json(Path(json_out), doc)


@expert.command("convert")
@click.argument("src")
@click.argument("dst")
def expert_convert(src, dst):
    """Rewrite an expert saved by ttt 0.1 (SRC, expert.pkl) as DST (expert.npz), its weights unchanged; the pickle
    is read by ttt's safe reader, so nothing in it runs."""
    from ttt.data.expert import NumpyExpert, convert_legacy_expert, load_actor

    if not dst.endswith(".npz"):
        raise TttError(f"DST must end in .npz, got {dst!r}")
    convert_legacy_expert(src, dst)
    actor, _, meta = load_actor(dst)
    click.echo(f"wrote {dst}: {meta.get('step')} steps, weights sha256 {NumpyExpert(actor).digest()[:16]}")
