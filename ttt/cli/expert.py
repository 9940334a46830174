"""`ttt expert`: train and evaluate the SAC ant expert that generates antmaze data (`ttt.data.expert`)."""

from __future__ import annotations

from pathlib import Path

import click

from ttt.cli.common import ProgressBar
from ttt.errors import TttError


@click.group()
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
    from ttt.data.expert import evaluate_expert, load_actor, train_expert, write_json

    if steps < 1:
        raise TttError(f"--steps must be >= 1, got {steps}")
    if checkpoint_every < 1:
        raise TttError(f"--checkpoint-every must be >= 1, got {checkpoint_every}")
    if eval_episodes < 0:
        raise TttError(f"--eval-episodes must be >= 0, got {eval_episodes}")
    with ProgressBar(f"SAC {robot}", unit="steps") as bar:

        def progress(log, rate):
            bar(log.step, steps, **{"return": f"{log.recent_return():.2f}", "steps/s": f"{rate:.0f}"})

        log = train_expert(out, steps=steps, seed=seed, checkpoint_every=checkpoint_every, progress=progress)
    click.echo(
        f"trained {log.step} steps ({log.episodes} episodes, {log.falls} falls) in {log.wall / 60:.1f} min; "
        f"mean return of the last 10 episodes {log.recent_return():.2f}; expert: {Path(out) / 'expert.pkl'}"
    )
    if eval_episodes:
        actor, _, _ = load_actor(Path(out) / "expert.pkl")
        with ProgressBar("evaluate", unit="steps") as bar:
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
    from ttt.data.expert import NumpyExpert, evaluate_expert, evaluate_expert_maze, load_actor, write_json

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
        with ProgressBar("direction following", unit="steps") as bar:
            res = evaluate_expert(actor, episodes=episodes, seed=seed, progress=bar)
        doc["direction"] = res
        click.echo(
            f"deterministic return along z over {episodes} episodes: {res['mean_return']:.2f} +- "
            f"{res['std_return']:.2f} (min {res['min_return']:.2f}), falls {res['falls']}"
        )
    if maze and maze_episodes:
        with ProgressBar(maze) as bar:
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
