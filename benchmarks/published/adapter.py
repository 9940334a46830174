"""Run the authors' published GC-TTT code on `ttt`'s generated datasets and write records beside ours.

The published code is antoniomari/meta-gc-rl (no licence: read and run, never copied here) at its last runnable
revision 434aa5e. This script is OUR adapter: it runs in THEIR virtual environment (see README.md; `run.sh` calls
it), pre-trains with THEIR `main.py` (one subprocess per seed, a generated YAML config, evaluation switched off)
and evaluates with THEIR `utils.evaluation.evaluate`, one episode per call, exactly as their `main.py` does per
task, for the variants

- `base`: no fine-tuning (their grid's row `[lr 0, num_steps 0, filter_by_mc false, filter_by_recursive_mdp false]`),
- `ttt`: GC-TTT with their critic rule (`filter_by_recursive_mdp`: whole dataset episodes ranked by the critic's
  predicted steps to the goal, 10 kept), re-selected and re-fine-tuned every `--replan` steps,
- `ttt-mc`: their critic-free rule (`filter_by_mc`), fine-tuned once per episode.

Fine-tuning settings are their grid's common keys (`grids/pointmaze.yaml`, `grids/antmaze.yaml`) with lr 3e-4,
N = 100 updates, replan horizon K = 100 (the `ttt` rows' setting); their fine-tuning batch (1024) and their reuse
of the pre-training Adam state are left as they are.

Resumable: a finished pre-training checkpoint (`params_STEPS.pkl`) is reused, and every finished episode is
appended to `WORK/DATASET/gciql-STEPS/VARIANT.jsonl` and skipped on a rerun; `--record-only` rewrites the records
from those logs and runs nothing (after stopping a run). Episodes are paired across variants:
episode `e` of task `t` under training seed `s` resets the environment (and numpy's global generator) with seed
`10000 * s + 100 * t + e`. Episodes run episode-major (episode 0 of every seed and task, then episode 1, ...), so
a row cut short still has whole (seeds, tasks, k) blocks.

After every episode the row's record is rewritten: `OUT/DATASET__gciql__VARIANT__STEPS.json` with
`success[seed][task][episode]` (the finished block; `complete` says whether it is the whole row), the per-episode
list with wall times, mean +- s.e. over seeds, wall seconds per episode, and the revision and every setting.

    python benchmarks/published/adapter.py --code CHECKOUT --work WORK --dataset pointmaze-medium-navigate-v0 \
        --seeds 0,1 --steps 10000 --tasks 1,2,3,4,5 --episodes 3 --variants base,ttt
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

REVISION = "434aa5eef42dfdab93b1eed39b0bd78d6e8115fe"
REPO = "antoniomari/meta-gc-rl"
ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "published"

# OGBench's per-environment DDPG+BC alpha (impls/hyperparameters.sh), also the authors' grids.
ALPHA = {"pointmaze": 0.003, "antmaze": 0.3}
VARIANTS = ("base", "ttt", "ttt-mc")
LABEL = {
    "base": "published GC-IQL-DDPG, no fine-tuning",
    "ttt": "published GC-IQL-DDPG + GC-TTT, their critic rule (filter_by_recursive_mdp)",
    "ttt-mc": "published GC-IQL-DDPG + GC-TTT, their critic-free rule (filter_by_mc, once per episode)",
}


def fail(msg: str) -> None:
    print(f"adapter.py: {msg}", file=sys.stderr)
    raise SystemExit(2)


def check_setup(code: Path, dataset: str, data_dir: Path) -> None:
    """Clear one-line errors for a missing checkout, the wrong interpreter, or a missing dataset."""
    needed = ["main.py", "agents/gciql.py", "utils/evaluation.py", "utils/datasets.py", "grids/default.yaml"]
    missing = [p for p in needed if not (code / p).is_file()]
    if missing:
        fail(f"published checkout not found at '{code}' (missing {', '.join(missing)}); "
             "set it up with benchmarks/published/setup.sh (README.md)")
    if "os.environ.get('WANDB_MODE'" not in (code / "utils" / "log_utils.py").read_text():
        fail(f"the checkout '{code}' is not patched; run benchmarks/published/patch.sh {code}")
    try:
        import flax  # noqa: F401
        import jax  # noqa: F401
        import ml_collections  # noqa: F401
        import rustworkx  # noqa: F401
        import wandb  # noqa: F401
    except ImportError as e:
        fail(f"this Python ({sys.executable}) is not the published code's venv ({e.name} missing); "
             "create it with benchmarks/published/setup.sh and run through run.sh")
    for name in (f"{dataset}.npz", f"{dataset}-val.npz"):
        if not (data_dir / name).is_file():
            fail(f"dataset file '{data_dir / name}' not found (their ogbench would try to download it); "
                 f"generate it with `ttt data generate {dataset}`")


def family(dataset: str) -> str:
    fam = dataset.split("-")[0]
    if fam not in ALPHA:
        fail(f"dataset '{dataset}' not supported; valid families: {', '.join(ALPHA)} (e.g. pointmaze-medium-stitch-v0)")
    return fam


def make_cfg(code: Path, dataset: str, seed: int, steps: int, work_dir: Path, variant: str, lr: float,
             num_steps: int, replan: int) -> dict:
    """Their main.py's YAML config: their grids/default.yaml, the grid's common keys, our budget and sizes."""
    import yaml

    cfg = yaml.safe_load((code / "grids" / "default.yaml").read_text())
    stitch = "stitch" in dataset
    cfg.update(
        run_group="ttt-published", seed=seed, env_name=dataset, data_ratio=1.0, working_dir=str(work_dir),
        restore_path=None, restore_epoch=None, train_steps=steps, log_interval=min(1000, steps),
        eval_interval=steps + 1, eval_start=steps + 1, save_interval=steps, eval_tasks=None, eval_episodes=1,
        eval_temperature=0, eval_gaussian=None, video_episodes=0, eval_on_cpu=1,
    )
    cfg["agent"] = dict(
        agent_name="gciql", actor_loss="ddpgbc", alpha=ALPHA[family(dataset)],
        # Their grids: stitch datasets draw actor goals half from the trajectory, half at random.
        actor_p_randomgoal=0.5 if stitch else 0.0, actor_p_trajgoal=0.5 if stitch else 1.0,
        # `ttt`'s cpu profile (OGBench: 512x3, batch 1024).
        actor_hidden_dims=[256, 256], value_hidden_dims=[256, 256], batch_size=256,
    )
    ft = dict(cfg["finetune"])
    # The grid's common fine-tuning keys (grids/pointmaze.yaml and grids/antmaze.yaml are identical here).
    ft.update(ratio=1.0, fix_actor_goal=1.0, filter_by_td=False, mc_quantile=0.2, mc_slack=10, sorb_len=5,
              td_correction_horizon=20, td_quantile=0.2, filter_by_argmax=False, filter_by_nstep_td=False,
              max_steps=15, min_steps=10, mc_similarity_threshold=1.0, actor_loss="ddpgbc")
    if variant == "base":
        ft.update(lr=0.0, num_steps=0, filter_by_mc=False, filter_by_recursive_mdp=False, replan_horizon=replan)
    elif variant == "ttt":
        ft.update(lr=lr, num_steps=num_steps, filter_by_mc=False, filter_by_recursive_mdp=True, replan_horizon=replan)
    else:
        ft.update(lr=lr, num_steps=num_steps, filter_by_mc=True, filter_by_recursive_mdp=False, replan_horizon=replan)
    cfg["finetune"] = ft
    return cfg


def digest(path: Path) -> str:
    """SHA-256 of a checkpoint file: the same digest means the same pre-trained parameters."""
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def adopt(done: list[dict], record: Path, pre: list[dict], seeds: list[int], tasks: list[int], episodes: int,
          force: bool) -> tuple[list[dict], str | None]:
    """Episodes the row's record holds and its log lacks (the log lost with a machine): (episodes, None) when they
    may be adopted, ([], message) when not.

    They are adopted when every seed's checkpoint digest in the record equals this machine's (`pre`), or with
    `force` (after re-running some recorded episodes and finding they end the same way)."""
    if not record.is_file():
        return [], None
    rec = json.loads(record.read_text())
    have = {(d["seed"], d["task"], d["episode"]) for d in done}
    extra = [d for d in rec.get("episodes_run", []) if d["seed"] in seeds and d["task"] in tasks
             and d["episode"] < episodes and (d["seed"], d["task"], d["episode"]) not in have]
    if not extra or force:
        return extra, None
    old = {p.get("seed"): p.get("params_sha256") for p in rec.get("pretrain", [])}
    new = {p.get("seed"): p.get("params_sha256") for p in pre}
    if all(old.get(s) is not None and old.get(s) == new.get(s) for s in {d["seed"] for d in extra}):
        return extra, None
    why = ("were run on checkpoints whose digests the record does not hold" if any(
        old.get(d["seed"]) is None for d in extra) else "were run on checkpoints other than this machine's")
    return [], (f"{record} holds {len(extra)} episodes that this run's log lacks, and they {why}; re-run a few "
                f"recorded episodes (e.g. with --out elsewhere) to check they end the same way, then pass "
                f"--adopt-record, or move the record aside to start the row afresh")


def run_main(code: Path, cfg: dict, log_path: Path, mode: str = "w") -> float:
    """Run their main.py on `cfg` (written beside its checkpoints); return its wall seconds, or stop on a failure."""
    import yaml

    work_dir = Path(cfg["working_dir"])
    work_dir.mkdir(parents=True, exist_ok=True)
    yaml_path = work_dir / "pretrain.yaml"
    yaml_path.write_text(yaml.safe_dump(cfg))
    env = dict(os.environ, WANDB_MODE="disabled", WANDB_SILENT="true")
    t0 = time.perf_counter()
    with open(log_path, mode) as log:
        rc = subprocess.run([sys.executable, "main.py", str(yaml_path)], cwd=code, env=env, stdout=log,
                            stderr=subprocess.STDOUT).returncode
    if rc != 0 or not (work_dir / f"params_{cfg['train_steps']}.pkl").is_file():
        fail(f"their main.py failed for seed {cfg['seed']} (exit {rc}); see {log_path}")
    return time.perf_counter() - t0


def piece_cfg(cfg: dict, pieces: Path, k: int, chunk: int) -> dict:
    """Their config for piece `k` (1-based) of a pre-training cut into pieces of `chunk` updates: piece k > 1
    restores piece k-1's agent (parameters, target network, Adam state, the agent's key) through their own
    `restore_path` / `restore_epoch`, and seeds their sampler (numpy's global generator) with seed + 100000 (k-1), so
    no piece draws the batches of another piece or of another seed's run."""
    steps = cfg["train_steps"]
    size = min(chunk, steps - (k - 1) * chunk)
    prev = min(chunk, steps - (k - 2) * chunk) if k > 1 else None
    return dict(cfg, working_dir=str(pieces / f"piece{k:03d}"), train_steps=size, save_interval=size,
                log_interval=min(1000, size), eval_interval=size + 1, eval_start=size + 1,
                seed=cfg["seed"] + 100_000 * (k - 1),
                restore_path=str(pieces / f"piece{k - 1:03d}") if k > 1 else None, restore_epoch=prev)


def pretrain(code: Path, cfg: dict, log_path: Path, chunk: int | None = None) -> dict:
    """Run their main.py for one seed unless its checkpoint exists; return wall time and throughput.

    With `chunk` (fewer updates than the run), pre-train in pieces of `chunk` updates, each a run of their main.py
    restoring the previous piece (`piece_cfg`); a finished piece is kept, so a stopped pre-training resumes at the
    piece it was in. Not bit-equal to a run in one piece (the sampler is reseeded at each piece)."""
    work_dir = Path(cfg["working_dir"])
    steps = cfg["train_steps"]
    ckpt = work_dir / f"params_{steps}.pkl"
    meta_path = work_dir / "pretrain.json"
    if ckpt.is_file() and meta_path.is_file():
        print(f"reusing {ckpt}", flush=True)
        meta = json.loads(meta_path.read_text())
        if "params_sha256" not in meta:  # checkpoints made before the digest was recorded
            meta["params_sha256"] = digest(ckpt)
            meta_path.write_text(json.dumps(meta, indent=1))
        return meta
    print(f"pre-training seed {cfg['seed']} ({steps} updates{f' in pieces of {chunk}' if chunk else ''}) -> "
          f"{work_dir} (log {log_path})", flush=True)
    extra = {}
    if not chunk or chunk >= steps:
        wall = run_main(code, cfg, log_path)
    else:
        pieces, n = work_dir / "pieces", -(-steps // chunk)
        walls = []
        for k in range(1, n + 1):
            c = piece_cfg(cfg, pieces, k, chunk)
            done = Path(c["working_dir"]) / "piece.json"
            if done.is_file():
                walls.append(json.loads(done.read_text())["wall_s"])
                continue
            shutil.rmtree(c["working_dir"], ignore_errors=True)  # a piece cut short starts again
            print(f"  piece {k} of {n} ({c['train_steps']} updates)", flush=True)
            walls.append(run_main(code, c, log_path, mode="a"))
            done.write_text(json.dumps({"piece": k, "updates": c["train_steps"], "wall_s": walls[-1]}))
        c = piece_cfg(cfg, pieces, n, chunk)
        last = Path(c["working_dir"]) / f"params_{c['train_steps']}.pkl"
        work_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(last, ckpt.with_suffix(".tmp"))
        os.replace(ckpt.with_suffix(".tmp"), ckpt)
        wall, extra = sum(walls), {"chunk": chunk, "pieces": n}
    meta = {"seed": cfg["seed"], "steps": steps, "wall_s": wall, "updates_per_s": steps / wall,
            "checkpoint": str(ckpt), "params_sha256": digest(ckpt), **extra}
    meta_path.write_text(json.dumps(meta, indent=1))
    return meta


SPEEDUPS = ("optax.adam memoised per arguments, and their TrainState deep-copied with its static fields (apply_fn, "
            "model_def, tx) shared, not copied: the fine-tuning optimiser their evaluate() builds every round and the "
            "network it restores every round are then the same static objects, so their jitted update and "
            "sample_actions compile once, not every round",
            "their TrainState.__call__ jitted for the value network when called outside a trace (their critic rule "
            "evaluates V over the whole dataset eagerly, op by op, in 10k-row chunks, twice a round)",
            "matplotlib's scatter, quiver and savefig as no-ops (savefig writes an 8x8 PNG): their evaluate() draws a "
            "10,000-point scatter and quiver at 200 dpi before and after every round and a filter plot after it, for "
            "wandb, which the adapter disables (62% of an episode's time in a 120 s py-spy sample); the data they "
            "plot is still sampled and evaluated, so the random streams are unchanged",
            "numpy's where(x) in their utils/datasets.py computed once per JAX array: their active_sample recomputes "
            "np.where(_filter) over the 1M-row filter for every update of a round with the same (immutable) filter, "
            "copied to the host each time (32% of a GC-TTT episode's time in a 90 s py-spy sample); the indices, and "
            "so np.random.choice's draws from them, are the same")


class _NumpyWhereOnce:
    """numpy for their utils/datasets.py, except that `where(x)` with one argument, a JAX array (immutable), is
    computed once per array object and then returned again (`SPEEDUPS`, the fourth)."""

    def __init__(self, numpy):
        import jax

        self._np, self._array, self._last = numpy, jax.Array, (None, None)  # jax imported once, not per call

    def __getattr__(self, name):
        return getattr(self._np, name)

    def where(self, *args, **kwargs):
        if len(args) != 1 or kwargs or not isinstance(args[0], self._array):
            return self._np.where(*args, **kwargs)
        if self._last[0] is not args[0]:
            self._last = (args[0], self._np.where(args[0]))  # the reference kept: its id cannot be reused
        return self._last[1]


def speed_up() -> None:
    """Make their evaluate() cheaper without changing what it computes (`SPEEDUPS`; README.md, "Cost").

    The plotting patch drops figures nobody sees (wandb is disabled) and keeps their sampling; the `where` patch
    computes the same indices once a round instead of once an update; the other three
    touch only how JAX runs their code: the same optimiser hyper-parameters, the same parameters restored
    each round, the same value network on the same rows. The jitted value pass may round differently from the eager
    one; README.md records the selections and episodes rerun with the patches against the code as published."""
    import functools

    import jax
    import matplotlib
    import optax
    from utils import flax_utils

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not getattr(plt.savefig, "ttt_no_draw", False):
        import io

        from PIL import Image

        one = io.BytesIO()
        Image.new("RGBA", (8, 8)).save(one, format="png")  # wandb.Image refuses 1x1
        png = one.getvalue()

        def no_draw(*args, **kwargs):
            return None

        def tiny_png(fname, *args, **kwargs):
            fname.write(png)  # every savefig of theirs writes into an io.BytesIO read back by PIL

        tiny_png.ttt_no_draw = True
        plt.scatter = plt.quiver = no_draw
        plt.savefig = tiny_png
    if getattr(optax.adam, "cache_info", None) is None:
        optax.adam = functools.lru_cache(maxsize=None)(optax.adam)
    from utils import datasets as their_datasets

    if not isinstance(their_datasets.np, _NumpyWhereOnce):
        their_datasets.np = _NumpyWhereOnce(their_datasets.np)
    state = flax_utils.TrainState
    if getattr(state.__call__, "ttt_jitted", False):
        return
    eager = state.__call__

    def deepcopy(self, memo):
        # Their evaluate() restores copy.deepcopy(agent.network) every round; a deep copy of the bound method
        # apply_fn is a new static object, so every jitted function taking the agent would trace again.
        import copy

        return self.replace(step=copy.deepcopy(self.step, memo), params=copy.deepcopy(self.params, memo),
                            opt_state=copy.deepcopy(self.opt_state, memo))  # fmt: skip

    state.__deepcopy__ = deepcopy

    @functools.partial(jax.jit, static_argnames=("apply_fn",))
    def value(apply_fn, params, *args):
        return apply_fn({"params": params}, *args, name="value")

    def call(self, *args, params=None, method=None, **kwargs):
        if (params is None and method is None and kwargs == {"name": "value"}
                and not any(isinstance(a, jax.core.Tracer) for a in args)):
            return value(self.apply_fn, self.params, *args)
        return eager(self, *args, params=params, method=method, **kwargs)

    call.ttt_jitted = True
    state.__call__ = call


class Published:
    """Their environment, dataset and one restored agent per seed, built the way their main.py builds them."""

    def __init__(self, code: Path, cfgs: dict[int, dict], fast: bool = True, trajectories: Path | None = None,
                 variant: str = ""):  # fmt: skip
        import random

        import numpy as np
        from agents import agents
        from ml_collections import FrozenConfigDict
        from utils.datasets import Dataset, GCDataset, HGCDataset
        from utils.env_utils import make_env_and_datasets
        from utils.flax_utils import restore_agent

        self.fast, self.trajectories, self.variant = fast, trajectories, variant
        if fast:
            speed_up()
        self.agents, self.cfgs = {}, {}
        for seed, raw in cfgs.items():
            raw = json.loads(json.dumps(raw))
            agent_mod = __import__(f"agents.{raw['agent']['agent_name']}", fromlist=["get_config"])
            for k, v in agent_mod.get_config().items():
                raw["agent"].setdefault(k, v)
            cfg = FrozenConfigDict(raw)
            config = cfg.agent
            if not hasattr(self, "env"):
                env, train, _ = make_env_and_datasets(cfg.env_name, cfg.data_ratio, frame_stack=config["frame_stack"])
                cls = {"GCDataset": GCDataset, "HGCDataset": HGCDataset}[config["dataset_class"]]
                self.env, self.train = env, cls(Dataset.create(**train), config)
            random.seed(seed)
            np.random.seed(seed)
            example = self.train.sample(1)
            agent = agents[config["agent_name"]].create(seed, example["observations"], example["actions"], config)
            self.agents[seed] = restore_agent(agent, cfg.working_dir, cfg.train_steps)
            self.cfgs[seed] = cfg

    def episode(self, seed: int, task: int, ep: int) -> dict:
        """One episode of their evaluate() (fine-tuning included), seeded for pairing across variants."""
        import random

        import numpy as np
        from utils.evaluation import evaluate

        cfg = self.cfgs[seed]
        reset_seed = 10000 * seed + 100 * task + ep
        self.env.reset(seed=reset_seed)
        self.env.action_space.seed(reset_seed)
        random.seed(reset_seed)
        np.random.seed(reset_seed)
        t0 = time.perf_counter()
        _, trajs, _ = evaluate(
            agent=self.agents[seed], env=self.env, task_id=task, config=cfg.agent, finetune_config=cfg.finetune,
            num_eval_episodes=1, num_video_episodes=0, train_dataset=self.train, video_frame_skip=cfg.video_frame_skip,
            eval_temperature=cfg.eval_temperature, eval_gaussian=cfg.eval_gaussian, exp_name="ttt-published",
        )
        wall = time.perf_counter() - t0
        traj = trajs[0]
        if self.trajectories is not None:  # the episode's path, for a step-by-step comparison (same_checkpoint.py)
            self.trajectories.mkdir(parents=True, exist_ok=True)
            np.savez(self.trajectories / f"{self.variant}-s{seed}-t{task}-e{ep}.npz",
                     observations=np.asarray(traj["observation"], np.float32),
                     actions=np.asarray(traj["action"], np.float32))  # fmt: skip
        return {"seed": seed, "task": task, "episode": ep, "success": float(traj["info"][-1]["success"]),
                "steps": len(traj["action"]), "wall_s": wall, "reset_seed": reset_seed, "speedups": self.fast,
                "patches": len(SPEEDUPS) if self.fast else 0}  # 3 since the plotting patch (26 Nov, session 22)


def _dataset_digest(args) -> str | None:
    meta = Path(args.data_dir) / f"{args.dataset}.json"
    try:
        return json.loads(meta.read_text()).get("sha256_arrays")
    except (OSError, ValueError):
        return None


def write_record(path: Path, args, variant: str, cfg: dict, done: list[dict], pre: list[dict]) -> dict:
    """The row's record: the largest finished (seeds, tasks, k) block as `success`, every episode in `episodes_run`."""
    import numpy as np

    key = {(d["seed"], d["task"], d["episode"]): d for d in done}
    k = 0
    while all((s, t, k) in key for s in args.seeds for t in args.tasks) and k < args.episodes:
        k += 1
    succ = [[[key[(s, t, e)]["success"] for e in range(k)] for t in args.tasks] for s in args.seeds]
    steps = [[[key[(s, t, e)]["steps"] for e in range(k)] for t in args.tasks] for s in args.seeds]
    per_seed = np.asarray(succ, float).reshape(len(args.seeds), -1).mean(1) if k else np.zeros(0)
    n = len(per_seed)
    se = float(per_seed.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    walls = [d["wall_s"] for d in done]
    rec = {
        "source": "published",
        "code": f"github.com/{REPO}",
        "revision": REVISION,
        # the data's digest as `ttt data generate` wrote it beside the file (NAME.json), to pair records by digest
        "dataset_sha256_arrays": _dataset_digest(args),
        "label": LABEL[variant],
        "dataset": args.dataset,
        "agent": "gciql",
        "variant": variant,
        "step": args.steps,
        "profile": "cpu-equivalent: 256x2 MLPs, batch 256",
        "seeds": args.seeds,
        "tasks": args.tasks,
        "episodes": k,
        "episodes_asked": args.episodes,
        "n_episodes": len(args.seeds) * len(args.tasks) * k,
        "complete": k == args.episodes,
        "success": succ,
        "steps": steps,
        "per_seed": per_seed.tolist(),
        "mean": float(per_seed.mean()) if n else None,
        "se": se if n > 1 else None,
        "se_note": "s.e. over training seeds (std ddof=1 / sqrt(seeds)) of each seed's success rate",
        "mean_episodes_run": float(np.mean([d["success"] for d in done])) if done else None,
        "wall_s_per_episode": float(np.mean(walls)) if walls else None,
        "speedups": list(SPEEDUPS),
        "speedups_note": "episodes_run[i]['speedups'] says whether an episode ran with them (episodes run before "
                         "26 Nov 2026 did not), and ['patches'] how many of them (3 with the plotting patch, from "
                         "26 Nov 2026 22:00 UTC; 4 with the `where` patch, from 27 Nov 2026; absent before); they "
                         "change the wall time, not what is computed",
        "wall_s_per_episode_max": float(np.max(walls)) if walls else None,
        "episodes_run": sorted(done, key=lambda d: (d["episode"], d["seed"], d["task"])),
        "pretrain": pre,
        "agent_config": cfg["agent"],
        "finetune_config": cfg["finetune"] if variant != "base" else {"num_steps": 0, "lr": 0.0},
        "command": args.command,
        "machine": args.machine,
        "load_avg_1m": os.getloadavg()[0],  # when the record was written: the machine may be shared
        "written": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec, indent=1, default=float) + "\n")
    tmp.replace(path)
    return rec


def ints(s: str) -> list[int]:
    try:
        out = []
        for part in s.split(","):
            a, _, b = part.partition("-")
            out += list(range(int(a), int(b) + 1)) if b else [int(a)]
        return out
    except ValueError:
        fail(f"'{s}' is not a list of integers (e.g. 0,1 or 1-5)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--code", type=Path, required=True, help="the authors' meta-gc-rl checkout (patched)")
    p.add_argument("--work", type=Path, required=True, help="checkpoints, per-episode logs (outside the repository)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the row records go")
    p.add_argument("--dataset", required=True, help="e.g. pointmaze-medium-navigate-v0")
    p.add_argument("--seeds", type=ints, default=[0, 1])
    p.add_argument("--steps", type=int, default=10_000, help="pre-training updates")
    p.add_argument("--chunk", type=int, default=None,
                   help="pre-train in resumable pieces of this many updates (each restores the last; not bit-equal "
                        "to one piece)")
    p.add_argument("--tasks", type=ints, default=[1, 2, 3, 4, 5])
    p.add_argument("--episodes", type=int, default=3, help="episodes per task and seed")
    p.add_argument("--variants", default="base,ttt", help=f"comma-separated, of {', '.join(VARIANTS)}")
    p.add_argument("--lr", type=float, default=3e-4, help="fine-tuning learning rate")
    p.add_argument("--num-steps", type=int, default=100, help="fine-tuning updates per round (N)")
    p.add_argument("--replan", type=int, default=100, help="steps between re-selections with the critic rule (K)")
    p.add_argument("--trajectories", type=Path, default=None,
                   help="also save each episode's observations and actions here (VARIANT-sS-tT-eE.npz)")
    p.add_argument("--data-dir", type=Path, default=Path("~/.ogbench/data").expanduser())
    p.add_argument("--machine", default=f"{platform.node()}, {os.cpu_count()} CPUs, CPU jax")
    p.add_argument("--no-speedups", action="store_true",
                   help="run their evaluate() exactly as it is: no memoised optimiser, no shared static fields in deep "
                        "copies, no jitted value pass")
    p.add_argument("--adopt-record", action="store_true",
                   help="take the episodes a row's record holds and its log lacks (a log lost with a machine) even "
                        "when the record cannot show they ran on the same checkpoints (digests missing or different)")
    p.add_argument("--record-only", action="store_true",
                   help="rewrite the records from the finished episodes' logs, run nothing (e.g. after a stop)")
    args = p.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        fail(f"unknown variant(s) {', '.join(bad) or '(none)'}; valid: {', '.join(VARIANTS)}")
    if args.steps < 1 or args.episodes < 1 or (args.chunk is not None and args.chunk < 1):
        fail("--steps, --episodes and --chunk must be >= 1")
    if any(t not in range(1, 6) for t in args.tasks):
        fail(f"tasks {args.tasks}: valid task ids are 1-5")
    family(args.dataset)
    # resolved before the chdir into their checkout below (a relative --out went into their checkout)
    args.code, args.out, args.work, args.data_dir = (
        a.resolve() for a in (args.code, args.out, args.work, args.data_dir))
    args.command = ("benchmarks/published/run.sh " + " ".join(
        f"--{k} {v}" for k, v in (("dataset", args.dataset), ("seeds", ",".join(map(str, args.seeds))),
                                  ("steps", args.steps), ("tasks", ",".join(map(str, args.tasks))),
                                  ("episodes", args.episodes), ("variants", args.variants))))
    if args.chunk:
        args.command += f" --chunk {args.chunk}"
    if args.out != DEFAULT_OUT.resolve():  # a rerun's own folder (e.g. retrained/)
        args.command += f" --out {os.path.relpath(args.out, ROOT)}"
    check_setup(args.code, args.dataset, args.data_dir)
    os.chdir(args.code)
    sys.path.insert(0, str(args.code))
    os.environ.setdefault("WANDB_MODE", "disabled")
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    wandb.init(mode="disabled")  # their evaluate() logs plots to wandb

    run_dir = args.work / args.dataset / f"gciql-{args.steps}"
    run_dir.mkdir(parents=True, exist_ok=True)
    pre = []
    for seed in args.seeds:
        if args.record_only:
            meta = run_dir / f"seed{seed}" / "pretrain.json"
            pre.append(json.loads(meta.read_text()) if meta.is_file() else {"seed": seed, "missing": True})
            continue
        cfg = make_cfg(args.code, args.dataset, seed, args.steps, run_dir / f"seed{seed}", "base", args.lr,
                       args.num_steps, args.replan)
        pre.append(pretrain(args.code, cfg, run_dir / f"pretrain-seed{seed}.log", args.chunk))

    for variant in variants:
        cfgs = {s: make_cfg(args.code, args.dataset, s, args.steps, run_dir / f"seed{s}", variant, args.lr,
                            args.num_steps, args.replan) for s in args.seeds}
        log = run_dir / f"{variant}.jsonl"
        done = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
        done = [d for d in done if d["seed"] in args.seeds and d["task"] in args.tasks and d["episode"] < args.episodes]
        have = {(d["seed"], d["task"], d["episode"]) for d in done}
        rec_path = args.out / f"{args.dataset}__gciql__{variant}__{args.steps}.json"
        extra, err = adopt(done, rec_path, pre, args.seeds, args.tasks, args.episodes, args.adopt_record)
        if err:
            fail(err)
        if extra:  # a lost log: the record's episodes go back into it, so the run resumes after them
            with open(log, "a") as f:
                f.writelines(json.dumps(d) + "\n" for d in extra)
            done += extra
            have |= {(d["seed"], d["task"], d["episode"]) for d in extra}
            print(f"{variant}: adopted {len(extra)} episodes from {rec_path} into {log}", flush=True)
        todo = [(s, t, e) for e in range(args.episodes) for s in args.seeds for t in args.tasks
                if (s, t, e) not in have]
        if not todo or args.record_only:
            rec = write_record(rec_path, args, variant, cfgs[args.seeds[0]], done, pre)
            print(f"{variant}: {rec['n_episodes']} of {len(args.seeds) * len(args.tasks) * args.episodes} episodes in "
                  f"the block ({len(done)} run), mean {rec['mean']}, s.e. {rec['se']} -> {rec_path}", flush=True)
            continue
        pub = Published(args.code, cfgs, fast=not args.no_speedups, trajectories=args.trajectories, variant=variant)
        for s, t, e in todo:
            d = pub.episode(s, t, e)
            with open(log, "a") as f:
                f.write(json.dumps(d) + "\n")
            done.append(d)
            rec = write_record(rec_path, args, variant, cfgs[args.seeds[0]], done, pre)
            print(f"{variant} seed {s} task {t} ep {e}: success {d['success']:.0f} in {d['steps']} steps, "
                  f"{d['wall_s']:.1f} s; {rec['mean_episodes_run']:.3f} over {len(done)} episodes", flush=True)
        print(f"{variant}: {rec['mean']} +- {rec['se']} ({rec['n_episodes']} episodes, "
              f"{rec['wall_s_per_episode']:.1f} s per episode) -> {rec_path}", flush=True)


if __name__ == "__main__":
    main()
