"""Which of a locomotion expert's checkpoints to generate data with: evaluate the actor that `ttt expert train` keeps at
every checkpoint (``DIR/actors/actor-STEP.npz``) as `ttt expert eval` does it: deterministic direction following
(return along z, falls) and, steered by antmaze-medium's BFS oracle with the generation noise, success and
turned-over ants on the maze's 5 tasks. Results go to a JSON file, one entry per (actor, seed); actors already
evaluated with that seed are skipped, so the script can run again as training goes on.

    python benchmarks/analyses/expert_checkpoints.py [--dir runs/expert/ant] [--min-step 600000] [--seed 1000]
        [--episodes 50] [--maze-episodes 10] [--out benchmarks/results/expert/checkpoints.json]

Choosing on one evaluation seed and reporting that seed overstates the choice: confirm the chosen actor with
another ``--seed`` (``--only STEP``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "speed"))  # the speed benchmarks' shared set-up

from _common import machine  # noqa: E402

from ttt.data.expert import NumpyExpert, evaluate_expert, evaluate_expert_maze, load_actor  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default="runs/expert/ant")
    p.add_argument("--min-step", type=int, default=0)
    p.add_argument("--only", type=int, default=None, help="Evaluate only the actor of this step.")
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--maze-episodes", type=int, default=10)
    p.add_argument("--maze", default="antmaze-medium-v0")
    p.add_argument("--noise", type=float, default=0.2, help="Action noise in the maze (the generation's).")
    p.add_argument("--out", default="benchmarks/results/expert/checkpoints.json")
    args = p.parse_args()

    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.exists() else dict(machine=machine(), results=[])
    done = {(r["step"], r["seed"], r["digest"]) for r in doc["results"]}
    actors = sorted(Path(args.dir, "actors").glob("actor-*.npz"))
    if not actors:
        sys.exit(f"error: no actors in {Path(args.dir, 'actors')}: `ttt expert train` writes one per checkpoint")
    for path in actors:
        actor, _, meta = load_actor(path)
        step = int(meta["step"])
        if step < args.min_step or (args.only is not None and step != args.only):
            continue
        digest = NumpyExpert(actor).digest()
        if (step, args.seed, digest) in done:
            continue
        t0 = time.perf_counter()
        robot = meta.get("robot") or "ant"
        direction = evaluate_expert(actor, episodes=args.episodes, seed=args.seed, robot=robot)
        maze = evaluate_expert_maze(
            NumpyExpert(actor), args.maze, episodes=args.maze_episodes, noise=args.noise, seed=args.seed
        )
        rec = dict(
            step=step,
            seed=args.seed,
            digest=digest,
            actor=str(path),
            mean_return=direction["mean_return"],
            std_return=direction["std_return"],
            min_return=direction["min_return"],
            falls=direction["falls"],
            episodes=direction["episodes"],
            maze=maze["env_id"],
            maze_episodes=maze["episodes_per_task"],
            maze_noise=maze["noise"],
            maze_success={str(k): v for k, v in maze["success"].items()},
            **{f"maze_{k}": {str(t): v for t, v in maze[k].items()} for k in ("flipped", "falls") if k in maze},
            maze_overall=maze["overall"],
            eval_s=time.perf_counter() - t0,
        )
        doc["results"].append(rec)
        doc["results"].sort(key=lambda r: (r["seed"], r["step"]))
        tmp = out.with_suffix(".json.tmp")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, out)
        print(_row(rec), flush=True)
    print("\n| step | seed | return along z | falls | maze tasks 1-5 (overall) | maze ants turned over |")
    print("|---|---|---|---|---|---|")
    for r in doc["results"]:
        print(_row(r))


def _row(r: dict) -> str:
    tasks = " / ".join(f"{v:.1f}" for v in r["maze_success"].values())
    flips = sum(r["maze_flipped"].values())
    n = r["maze_episodes"] * len(r["maze_success"])
    return (
        f"| {r['step']} | {r['seed']} | {r['mean_return']:.1f} +- {r['std_return']:.1f} (min {r['min_return']:.1f}) "
        f"| {r['falls']} / {r['episodes']} | {tasks} ({r['maze_overall']:.2f}) | {flips} / {n} |"
    )


if __name__ == "__main__":
    main()
