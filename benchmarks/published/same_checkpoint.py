"""Same checkpoint, two implementations: the published code's own GC-IQL checkpoints imported into `ttt`
(`ttt.import_checkpoint`) and evaluated by `ttt` on the published run's episodes, beside the published code's
records of the same episodes (benchmarks/published/README.md).

    python benchmarks/published/same_checkpoint.py \\
        --run-dir $PUBLISHED_ROOT/runs/pointmaze-medium-stitch-v0/gciql-10000 --dataset pointmaze-medium-stitch-v0 \\
        --seeds 0,1 --steps 10000 --tasks 1-5 --episodes 3 --variants base,ttt \\
        --published benchmarks/results/same-checkpoint/published --trajectories /work/cache/same/traj \\
        --out benchmarks/results/same-checkpoint

Episode `e` of task `t` under seed `s` starts where the published adapter's does: the environment reset with
`10000 s + 100 t + e`, NumPy's global generator and the action space seeded with it, then the task's reset (OGBench's
maze draws the start's and the goal's noise from NumPy's generator). `ttt` runs the episode from that start and
goal with `ttt.evaluation.run_episode` (its compiled program, its in-program environment). Settings: the published
run's (rule `episodes`, N 100, K 100, lr 3e-4, fine-tuning batch 1024, the pre-training Adam state: `reuse_adam`).

Per episode the record holds both sides' success and steps and, where the published trajectory was saved
(adapter `--trajectories`), the first step at which the two paths differ by more than 1e-4 (and by how much at the
end). Resumable: finished episodes are kept in OUT/ttt-VARIANT.jsonl and skipped.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import jax
import numpy as np

from ttt.checkpoint import open_checkpoint
from ttt.envs.gym import make_gym_env
from ttt.evaluation import run_episode
from ttt.interop import import_checkpoint
from ttt.setups import load_run
from ttt.storage import atomic_write_json, dumps

SETTINGS = dict(rule="episodes", N=100, K=100, lr=3e-4, batch=1024, reuse_adam=True)


def ints(s: str) -> list[int]:
    out = []
    for part in s.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b) + 1)) if b else [int(a)]
    return out


def start_and_goal(env, task: int, reset_seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The published adapter's seeding, then the task's reset: (first observation, start xy, goal xy)."""
    env.reset(seed=reset_seed)
    env.action_space.seed(reset_seed)
    np.random.seed(reset_seed)
    obs, info = env.reset(options=dict(task_id=task, render_goal=False))
    return np.asarray(obs, np.float32), np.asarray(env.unwrapped.get_xy(), np.float32), np.asarray(info["goal"][:2])


def published_episodes(folder: Path, dataset: str, variant: str, steps: int) -> dict:
    path = folder / f"{dataset}__gciql__{variant}__{steps}.json"
    if not path.exists():
        return {}
    rec = json.loads(path.read_text())
    return {(d["seed"], d["task"], d["episode"]): d for d in rec.get("episodes_run", [])}


def first_difference(mine_obs: np.ndarray, theirs_obs: np.ndarray, mine_act: np.ndarray, theirs_act: np.ndarray,
                     tol: float = 1e-4) -> dict:
    """Where two paths of one episode part: `ttt`'s `observations[t]` is the observation AFTER action t, the
    published trajectory's `observation[t]` the one before it, so `ttt`'s t pairs with their t + 1. The first step
    whose observation (or action) differs by more than `tol`, and the largest gap."""
    n = min(len(mine_obs), len(theirs_obs), len(theirs_act))
    d = theirs_obs.shape[1]
    obs_gap = np.abs(mine_obs[: n - 1, :d] - theirs_obs[1:n]).max(axis=-1) if n > 1 else np.zeros(0)
    act_gap = np.abs(mine_act[:n] - theirs_act[:n]).max(axis=-1)
    gap = np.maximum(np.append(obs_gap, 0.0), act_gap)
    above = np.flatnonzero(gap > tol)
    return dict(first_step=int(above[0]) if above.size else None, compared=int(n), max_obs_gap=float(obs_gap.max())
                if obs_gap.size else None, max_action_gap=float(act_gap.max()) if n else None)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-dir", type=Path, required=True, help="the published run's folder (seedS/params_STEPS.pkl)")
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--seeds", type=ints, default=[0, 1])
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--tasks", type=ints, default=[1, 2, 3, 4, 5])
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--variants", default="base,ttt")
    ap.add_argument("--published", type=Path, required=True, help="the published code's records of these episodes")
    ap.add_argument("--trajectories", type=Path, default=None, help="the adapter's --trajectories folder")
    ap.add_argument("--checkpoint", type=Path, default=None, help="where the import goes (default: OUT/../cache)")
    ap.add_argument("--dir", default=None, help="dataset folder (default: OGBench's)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    ck_dir = args.checkpoint or Path("/work/cache/same-checkpoint") / f"{args.dataset}-gciql-{args.steps}"
    pub_rec = json.loads((args.published / f"{args.dataset}__gciql__base__{args.steps}.json").read_text())
    if not (ck_dir / "meta.json").exists():
        pkls = [args.run_dir / f"seed{s}" / f"params_{args.steps}.pkl" for s in args.seeds]
        settings = {k: v for k, v in pub_rec["agent_config"].items() if k != "agent_name"}
        import_checkpoint(pkls, "gciql", args.dataset, ck_dir, settings=settings, data_dir=args.dir,
                          reference="meta-gc-rl")  # fmt: skip
    ck = open_checkpoint(ck_dir)
    digests = {s: f["sha256"] for s, f in zip(args.seeds, ck.meta["source"]["files"], strict=True)}
    pub_digests = {p["seed"]: p.get("params_sha256") for p in pub_rec.get("pretrain", [])}
    if any(pub_digests.get(s) != d for s, d in digests.items()):
        sys.exit(f"the imported pickles' sha256 {digests} differ from the published record's {pub_digests}")
    states = ck.load()
    env_gym = make_gym_env(_env_id(args.dataset))
    args.out.mkdir(parents=True, exist_ok=True)
    for variant in args.variants.split(","):
        settings = {} if variant == "base" else SETTINGS
        setup, agents, data, env = load_run(ck_dir, args.dir, variant=variant, **settings)
        log = args.out / f"ttt-{variant}.jsonl"
        done = {}
        if log.exists():
            for line in log.read_text().splitlines():
                d = json.loads(line)
                done[(d["seed"], d["task"], d["episode"])] = d
        for e in range(args.episodes):
            for si, s in enumerate(args.seeds):
                for t in args.tasks:
                    if (s, t, e) in done:
                        continue
                    reset_seed = 10000 * s + 100 * t + e
                    obs0, start, goal = start_and_goal(env_gym, t, reset_seed)
                    agent = jax.tree.map(lambda x, si=si: x[si], agents)
                    opt = jax.tree.map(lambda x, si=si: x[si], states.opt_state) if variant != "base" else None
                    t0 = time.perf_counter()
                    out = run_episode(setup, agent, data, env, start, goal, key=jax.random.key(reset_seed),
                                      opt_state=opt)  # fmt: skip
                    wall = time.perf_counter() - t0
                    n = int(out.steps)
                    d = dict(seed=s, task=t, episode=e, reset_seed=reset_seed, success=float(out.success), steps=n,
                             wall_s=wall, start_obs_matches=bool(np.allclose(out.start, obs0, atol=1e-5)))  # fmt: skip
                    if args.trajectories:  # ttt's path, kept so that the pairing can be redone later
                        args.trajectories.mkdir(parents=True, exist_ok=True)
                        np.savez(args.trajectories / f"ttt-{variant}-s{s}-t{t}-e{e}.npz",
                                 observations=np.asarray(out.observations)[:n], actions=np.asarray(out.actions)[:n])
                    done[(s, t, e)] = d
                    with open(log, "a") as f:
                        f.write(dumps(d) + "\n")
                    print(f"{variant} s{s} t{t} e{e}: ttt {d['success']:.0f} in {n} steps ({wall:.1f} s)", flush=True)
                    write_record(args, variant, done, ck, digests)
        write_record(args, variant, done, ck, digests)


def pair(args, variant: str, done: dict) -> list[dict]:
    """Each finished `ttt` episode with the published code's record of it and, where both paths were saved, where
    they part (recomputed from the files at every write, so episodes the published side finishes later pair too)."""
    pub = published_episodes(args.published, args.dataset, variant, args.steps)
    out = []
    for key in sorted(done):
        d = {k: v for k, v in done[key].items() if not k.startswith("published_") and k != "path"}
        p = pub.get(key)
        if p is not None:
            d.update(published_success=p["success"], published_steps=p["steps"])
        s, t, e = key
        mine = args.trajectories and args.trajectories / f"ttt-{variant}-s{s}-t{t}-e{e}.npz"
        theirs = args.trajectories and args.trajectories / f"{variant}-s{s}-t{t}-e{e}.npz"
        if mine and mine.exists() and theirs.exists():
            with np.load(mine) as a, np.load(theirs) as b:
                d["path"] = first_difference(a["observations"], b["observations"], a["actions"], b["actions"])
        out.append(d)
    return out


def _env_id(dataset: str) -> str:
    from ttt.data.specs import get_spec

    return get_spec(dataset).env_id


def _arrays_digest(args) -> str | None:
    """The generated data's digest as NAME.json holds it (what the published code's records name)."""
    from ttt.data.files import resolve_dir

    try:
        return json.loads((resolve_dir(args.dir) / f"{args.dataset}.json").read_text()).get("sha256_arrays")
    except (OSError, ValueError):
        return None


def write_record(args, variant: str, done: dict, ck, digests) -> None:
    eps = pair(args, variant, done)
    per_seed = [float(np.mean([d["success"] for d in eps if d["seed"] == s])) for s in args.seeds]
    paired = [d for d in eps if "published_success" in d]
    both = dict(
        n=len(paired),
        success_agree=sum(d["success"] == d["published_success"] for d in paired),
        steps_agree=sum(d["steps"] == d["published_steps"] for d in paired),
        paths_compared=sum("path" in d for d in paired),
        paths_identical=sum(d.get("path", {}).get("first_step", 0) is None for d in paired),
        published_mean=float(np.mean([d["published_success"] for d in paired])) if paired else None,
    )
    rec = dict(
        what="ttt on the published code's own checkpoints (imported), on the published run's episodes",
        dataset=args.dataset, variant=variant, settings=SETTINGS if variant != "base" else {}, steps=args.steps,
        seeds=args.seeds, tasks=args.tasks, episodes=args.episodes, n_episodes=len(eps),
        per_seed=per_seed, mean=float(np.mean(per_seed)),
        se=float(np.std(per_seed, ddof=1) / math.sqrt(len(per_seed))) if len(per_seed) > 1 else None,
        checkpoint_sha256=ck.digest, source_pickles=digests, dataset_hash=ck.meta["dataset_hash"],
        dataset_sha256_arrays=_arrays_digest(args),
        agreement=both, episodes_run=eps, command=" ".join(sys.argv),
    )  # fmt: skip
    atomic_write_json(args.out / f"{args.dataset}__ttt-on-published__{variant}__{args.steps}.json", rec)


if __name__ == "__main__":
    main()
