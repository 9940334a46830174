"""Parity fixtures from the reference implementations (OGBench's impls/ and the GC-TTT authors' meta-gc-rl), for
`ttt`'s tests to check its agents against, without flax. Runs in the REFERENCE venv (benchmarks/published/setup.sh):

    /work/cache/published/venv/bin/python benchmarks/published/parity.py --ogbench /work/cache/ogbench-impls \
        --authors /work/cache/published/meta-gc-rl --out tests/fixtures/parity [--case NAME ...]

`--ogbench` is OGBench's `impls/` folder (holding agents/ and utils/), `--authors` a meta-gc-rl checkout at 434aa5e.
Both have top-level `agents` and `utils` packages, so every case runs in its own subprocess with its checkout first
on sys.path. Nothing of theirs is copied here: this file only imports their code from their checkouts.

Each case writes CASE/ with init.pkl and final.pkl (the bytes their `utils.flax_utils.save_agent` writes, before and
after 100 updates), data.npz (the batches, every info term of every update, evaluation rows and the forwards of the
initial and final agents) and case.json (config, versions, array descriptions, state-dict shapes, pickle globals).
See benchmarks/published/PARITY.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OGBENCH_COMMIT = "1d4140997f60c52c6fb0702ec100dc988b18c548"  # seohongpark/ogbench HEAD of the mirror used
AUTHORS_COMMIT = "434aa5eef42dfdab93b1eed39b0bd78d6e8115fe"  # antoniomari/meta-gc-rl, as setup.sh

NUM_UPDATES = 100
BATCH_SIZE = 32
TRAJ_LEN, NUM_TRAJS = 50, 8  # the pool: 8 trajectories of 50 states (400 observations)
NUM_EVAL = 1000
SUBGOAL_STEPS = 25  # SAW's (HGCDataset's) default subgoal_steps
POINTMAZE, ANTMAZE = (2, 2), (29, 8)  # (obs_dim, action_dim)

# name -> (repository, agent module, sizes, agent seed, config overrides of the reference get_config()).
CASES: dict[str, dict] = {
    "ogbench-gcbc": dict(
        repo="ogbench", module="gcbc", dims=POINTMAZE, seed=0,
        overrides=dict(batch_size=BATCH_SIZE, actor_hidden_dims=(64, 48, 32)),
    ),
    "ogbench-gciql-ddpgbc": dict(
        repo="ogbench", module="gciql", dims=ANTMAZE, seed=1,
        overrides=dict(batch_size=BATCH_SIZE, actor_hidden_dims=(32, 32), value_hidden_dims=(48, 32, 24)),
    ),
    "ogbench-gciql-awr": dict(
        repo="ogbench", module="gciql", dims=POINTMAZE, seed=2,
        overrides=dict(batch_size=BATCH_SIZE, actor_hidden_dims=(64, 48, 32), value_hidden_dims=(40, 40),
                       layer_norm=False, const_std=False, actor_loss="awr"),
    ),
    "ogbench-qrl": dict(
        repo="ogbench", module="qrl", dims=ANTMAZE, seed=3,
        overrides=dict(batch_size=BATCH_SIZE, actor_hidden_dims=(32, 32), value_hidden_dims=(40, 40), latent_dim=64),
    ),
    "authors-saw": dict(
        repo="authors", module="saw", dims=ANTMAZE, seed=4,
        overrides=dict(batch_size=BATCH_SIZE, actor_hidden_dims=(64, 48, 32), low_actor_hidden_dims=(32, 32),
                       value_hidden_dims=(48, 32, 24)),
    ),
    "authors-gciql-ddpgbc": dict(
        repo="authors", module="gciql", dims=POINTMAZE, seed=5,
        overrides=dict(batch_size=BATCH_SIZE, actor_hidden_dims=(32, 32), value_hidden_dims=(40, 40),
                       const_std=False, actor_loss="ddpgbc"),
    ),
}  # fmt: skip

GC_KEYS = ["observations", "next_observations", "value_goals", "actor_goals"]
HGC_KEYS = ["observations", "next_observations", "value_goals", "low_actor_goals", "high_actor_goals",
            "high_actor_targets"]  # fmt: skip


def fail(msg: str) -> None:
    print(msg, file=sys.stderr)
    sys.exit(1)


# ---------------------------------------------------------------------------------------------------------------
# Reference imports (only after the case's checkout is first on sys.path)


def import_reference(repo_path: Path, module: str):
    """Put the checkout first on sys.path and import its agents.<module> and utils.flax_utils (one per process)."""
    for name in list(sys.modules):
        if name in ("agents", "utils") or name.startswith(("agents.", "utils.")):
            del sys.modules[name]
    sys.path.insert(0, str(repo_path))
    import importlib

    agent_mod = importlib.import_module(f"agents.{module}")
    flax_utils = importlib.import_module("utils.flax_utils")
    assert Path(agent_mod.__file__).resolve().is_relative_to(repo_path.resolve()), agent_mod.__file__
    return agent_mod, flax_utils


def agent_class(agent_mod):
    return {"gcbc": "GCBCAgent", "gciql": "GCIQLAgent", "qrl": "QRLAgent", "saw": "SAWAgent"}[
        agent_mod.__name__.split(".")[-1]
    ]


def make_config(agent_mod, overrides: dict):
    """The reference's get_config() (an ml_collections.ConfigDict, as their main.py passes) with `overrides`."""
    config = agent_mod.get_config()
    for k, v in overrides.items():
        if k not in config:
            raise KeyError(f"{k} is not a key of {agent_mod.__name__}.get_config()")
        config[k] = v
    return config


def config_to_json(config) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in config.to_dict().items()}


def config_from_json(agent_mod, cfg: dict):
    """get_config() with every key of a case.json config (lists back to tuples: the FrozenDict must hash)."""
    config = agent_mod.get_config()
    for k, v in cfg.items():
        config[k] = tuple(v) if isinstance(v, list) else v
    return config


def create_agent(agent_mod, config, seed: int, obs_dim: int, action_dim: int):
    """As their main.py: create(seed, example_batch['observations'], example_batch['actions'], config), a batch of 1
    (the values do not matter to the initialisation, only the shapes)."""
    cls = getattr(agent_mod, agent_class(agent_mod))
    ex_obs = np.zeros((1, obs_dim), np.float32)
    ex_act = np.zeros((1, action_dim), np.float32)
    return cls.create(seed, ex_obs, ex_act, config)


# ---------------------------------------------------------------------------------------------------------------
# Synthetic GCDataset-like batches


def make_data(obs_dim: int, action_dim: int, seed: int, hierarchical: bool) -> dict[str, np.ndarray]:
    """A pool of NUM_TRAJS trajectories of TRAJ_LEN normal observations and NUM_UPDATES batches drawn from it with the
    goal semantics of their utils/datasets.py GCDataset.sample / sample_goals (HGCDataset.sample when
    `hierarchical`), with GC-IQL's default goal mix for the value goals (p_curgoal 0.2, p_trajgoal 0.5 geometric with
    discount 0.99, p_randomgoal 0.3) and uniform future-in-trajectory actor goals, for every case alike. Rows are
    drawn from non-final states, so that next_observations = pool[idx + 1] stays in the trajectory."""
    rng = np.random.default_rng(seed)
    pool_size = TRAJ_LEN * NUM_TRAJS
    pool = rng.standard_normal((pool_size, obs_dim)).astype(np.float32)
    terminal_locs = np.arange(TRAJ_LEN - 1, pool_size, TRAJ_LEN)
    non_final = np.setdiff1d(np.arange(pool_size), terminal_locs)
    keys = HGC_KEYS if hierarchical else GC_KEYS
    out = {f"idx__{k}": np.zeros((NUM_UPDATES, BATCH_SIZE), np.int16) for k in keys}
    out["batch__actions"] = rng.uniform(-1, 1, (NUM_UPDATES, BATCH_SIZE, action_dim)).astype(np.float32)
    out["batch__rewards"] = np.zeros((NUM_UPDATES, BATCH_SIZE), np.float32)
    out["batch__masks"] = np.zeros((NUM_UPDATES, BATCH_SIZE), np.float32)
    B = BATCH_SIZE
    for u in range(NUM_UPDATES):
        idxs = rng.choice(non_final, B)
        final = terminal_locs[np.searchsorted(terminal_locs, idxs)]
        # Value goals (sample_goals: random / geometric future / current, in that order of override).
        random_goal = rng.integers(0, pool_size, B)
        geom = np.minimum(idxs + rng.geometric(p=1 - 0.99, size=B), final)
        vg = np.where(rng.random(B) < 0.5 / (1.0 - 0.2), geom, random_goal)
        vg = np.where(rng.random(B) < 0.2, idxs, vg)
        successes = (idxs == vg).astype(np.float32)
        out["batch__masks"][u] = 1.0 - successes
        out["batch__rewards"][u] = successes - 1.0  # gc_negative
        # Uniform future goal in the trajectory (actor_geom_sample False).
        d = rng.random(B)
        uniform_future = np.round(np.minimum(idxs + 1, final) * d + final * (1 - d)).astype(int)
        rows = {"observations": idxs, "next_observations": idxs + 1, "value_goals": vg}
        if hierarchical:
            rows["low_actor_goals"] = np.minimum(idxs + SUBGOAL_STEPS, final)
            rows["high_actor_goals"] = uniform_future  # actor_p_randomgoal 0
            rows["high_actor_targets"] = np.minimum(idxs + SUBGOAL_STEPS, uniform_future)
        else:
            rows["actor_goals"] = uniform_future
        for k in keys:
            out[f"idx__{k}"][u] = rows[k]
    out["pool"] = pool
    ev = rng.integers(0, pool_size, (2, NUM_EVAL))
    out["eval_observations"] = (pool[ev[0]] + 0.1 * rng.standard_normal((NUM_EVAL, obs_dim))).astype(np.float32)
    out["eval_goals"] = (pool[ev[1]] + 0.1 * rng.standard_normal((NUM_EVAL, obs_dim))).astype(np.float32)
    out["eval_q_actions"] = rng.uniform(-1, 1, (NUM_EVAL, action_dim)).astype(np.float32)
    return out


def batch_at(data: dict[str, np.ndarray], u: int) -> dict[str, np.ndarray]:
    """The batch dict of update u, as their dataset's sample() returns it (float32 arrays)."""
    pool = data["pool"]
    batch = {k[len("idx__") :]: pool[v[u]] for k, v in data.items() if k.startswith("idx__")}
    batch.update({k[len("batch__") :]: v[u] for k, v in data.items() if k.startswith("batch__")})
    return batch


# ---------------------------------------------------------------------------------------------------------------
# Evaluation forwards (shared with restore_check.py)


def eval_forwards(agent, module: str, obs, goals, q_actions, config) -> dict[str, np.ndarray]:
    """Temperature-0 actions and every value-like forward of the agent on the evaluation rows, each through the
    agent's own network.select(...) calls (as their code calls them), in one jitted batch."""
    import jax
    import jax.numpy as jnp

    net = agent.network
    out = {"actions": agent.sample_actions(obs, goals, seed=jax.random.PRNGKey(0), temperature=0.0)}
    if module == "gciql":
        out["value"] = jax.jit(lambda o, g: net.select("value")(o, g))(obs, goals)
        out["critic"] = jnp.stack(jax.jit(lambda o, g, a: net.select("critic")(o, g, a))(obs, goals, q_actions))
        out["target_critic"] = jnp.stack(
            jax.jit(lambda o, g, a: net.select("target_critic")(o, g, a))(obs, goals, q_actions)
        )
    elif module == "qrl":
        out["distance"] = jax.jit(lambda o, g: net.select("value")(o, g))(obs, goals)

        def dyn_q(o, g, a):  # as QRLAgent.actor_loss (ddpgbc) computes q from the latent dynamics, at actions a
            _, ob_reps, goal_reps = net.select("value")(o, g, info=True)
            pred = ob_reps + net.select("dynamics")(jnp.concatenate([ob_reps, a], axis=-1))
            return -net.select("value")(pred, goal_reps, is_phi=True)

        if config["actor_loss"] == "ddpgbc":
            out["dyn_q"] = jax.jit(dyn_q)(obs, goals, q_actions)
    elif module == "saw":
        out["value"] = jnp.stack(jax.jit(lambda o, g: net.select("value")(o, g))(obs, goals))
        out["target_value"] = jnp.stack(jax.jit(lambda o, g: net.select("target_value")(o, g))(obs, goals))

        def low_actions(o, g):  # as sample_actions, with the low-level actor
            dist = net.select("low_actor")(o, g, temperature=0.0)
            return jnp.clip(dist.sample(seed=jax.random.PRNGKey(0)), -1, 1)

        out["low_actor_actions"] = jax.jit(low_actions)(obs, goals)
    return {k: np.asarray(v, np.float32) for k, v in out.items()}


EVAL_DESCRIPTIONS = {
    "actions": "(1000, act) agent.sample_actions(eval_observations, eval_goals, seed=PRNGKey(0), temperature=0.0): "
    "the actor mean clipped to [-1, 1]",
    "value": "GC-IQL: (1000,) network.select('value')(obs, goals) = V(s, g). SAW: (2, 1000) the two heads of the "
    "value ensemble (v1, v2); SAW uses (v1 + v2) / 2 as V",
    "critic": "(2, 1000) network.select('critic')(obs, goals, eval_q_actions) = (Q1, Q2)",
    "target_critic": "(2, 1000) network.select('target_critic')(obs, goals, eval_q_actions)",
    "distance": "(1000,) QRL network.select('value')(obs, goals): the IQE quasimetric d(s, g) >= 0; QRL's V = -d",
    "dyn_q": "(1000,) QRL's DDPG+BC q at eval_q_actions: -d(phi(s) + dynamics([phi(s), a]), phi(g)) (is_phi=True), "
    "as QRLAgent.actor_loss computes it",
    "target_value": "(2, 1000) SAW network.select('target_value')(obs, goals) (v1_t, v2_t)",
    "low_actor_actions": "(1000, act) SAW's low-level actor mean at temperature 0, clipped to [-1, 1]",
}


# ---------------------------------------------------------------------------------------------------------------
# State dict and pickle documentation


def flatten_state(tree, prefix="") -> dict[str, dict]:
    out = {}
    if isinstance(tree, dict) and not tree and prefix:
        out[prefix] = {"empty_dict": True}  # e.g. optax's EmptyState: restore needs the key, holding {}
    elif isinstance(tree, dict):
        for k, v in tree.items():
            out.update(flatten_state(v, f"{prefix}/{k}" if prefix else str(k)))
    elif isinstance(tree, (bool, int, float)):  # TrainState.step is a Python int until the first update
        out[prefix] = {
            "shape": [],
            "dtype": f"python {type(tree).__name__}",
            "python_type": f"builtins.{type(tree).__name__}",
        }
    else:
        a = np.asarray(tree)
        kind = type(tree).__module__ + "." + type(tree).__name__
        out[prefix] = {"shape": list(a.shape), "dtype": str(a.dtype), "python_type": kind}
    return out


def pickle_globals(path: Path) -> list[list[str]]:
    """Every (module, name) the pickle's GLOBAL / STACK_GLOBAL opcodes resolve while loading."""
    seen: set[tuple[str, str]] = set()

    class Recorder(pickle.Unpickler):
        def find_class(self, module, name):
            seen.add((module, name))
            return super().find_class(module, name)

    with open(path, "rb") as f:
        Recorder(f).load()
    return sorted([list(x) for x in seen])


def versions() -> dict[str, str]:
    import distrax
    import flax
    import jax
    import jaxlib
    import ml_collections
    import optax

    mods = dict(jax=jax, jaxlib=jaxlib, flax=flax, optax=optax, numpy=np, distrax=distrax)
    out = {k: m.__version__ for k, m in mods.items()}
    out["ml_collections"] = getattr(ml_collections, "__version__", "?")
    out["python"] = sys.version.split()[0]
    return out


# ---------------------------------------------------------------------------------------------------------------


def run_case(name: str, repo_path: Path, out_root: Path) -> None:
    spec = CASES[name]
    agent_mod, flax_utils = import_reference(repo_path, spec["module"])
    import jax

    obs_dim, action_dim = spec["dims"]
    config = make_config(agent_mod, spec["overrides"])
    defaults = agent_mod.get_config().to_dict()
    print(f"[{name}] {repo_path}  agents/{spec['module']}.py  changed from get_config():")
    for k, v in spec["overrides"].items():
        print(f"    {k}: {defaults[k]!r} -> {v!r}")
    hierarchical = config["dataset_class"] == "HGCDataset"
    data_seed = 1000 + spec["seed"]
    data = make_data(obs_dim, action_dim, data_seed, hierarchical)

    out = out_root / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    agent = create_agent(agent_mod, config, spec["seed"], obs_dim, action_dim)
    ev = (data["eval_observations"], data["eval_goals"], data["eval_q_actions"])
    init_eval = eval_forwards(agent, spec["module"], *ev, config)
    with tempfile.TemporaryDirectory() as tmp:
        flax_utils.save_agent(agent, tmp, 0)
        shutil.copyfile(Path(tmp) / "params_0.pkl", out / "init.pkl")
        infos: dict[str, list[float]] = {}
        for u in range(NUM_UPDATES):
            agent, info = agent.update(batch_at(data, u))
            for k, v in info.items():
                infos.setdefault(k, []).append(float(np.asarray(v)))
            if u == 0:
                info_order = list(info.keys())
        flax_utils.save_agent(agent, tmp, NUM_UPDATES)
        shutil.copyfile(Path(tmp) / f"params_{NUM_UPDATES}.pkl", out / "final.pkl")
    final_eval = eval_forwards(agent, spec["module"], *ev, config)
    bad = [k for k, v in infos.items() if not np.all(np.isfinite(v))]
    if bad:
        fail(f"[{name}] non-finite info terms: {bad}")

    arrays = dict(data)
    for k in info_order:
        arrays["info__" + k.replace("/", ".")] = np.asarray(infos[k], np.float32)
    for tag, ev_out in (("init", init_eval), ("final", final_eval)):
        for k, v in ev_out.items():
            arrays[f"eval_{k}_{tag}"] = v
    np.savez_compressed(out / "data.npz", **arrays)

    with open(out / "init.pkl", "rb") as f:
        init_shapes = flatten_state(pickle.load(f))
    with open(out / "final.pkl", "rb") as f:
        final_shapes = flatten_state(pickle.load(f))
    globs = sorted({tuple(g) for p in ("init.pkl", "final.pkl") for g in pickle_globals(out / p)})
    obs_keys = [k[len("idx__") :] for k in data if k.startswith("idx__")]
    describe = {
        "pool": f"({TRAJ_LEN * NUM_TRAJS}, obs) float32 standard normal observations: {NUM_TRAJS} trajectories of "
        f"{TRAJ_LEN} consecutive rows (row t+1 follows row t inside a trajectory; rows 49, 99, ... are final)",
        **{f"idx__{k}": f"({NUM_UPDATES}, {BATCH_SIZE}) int16 rows of pool giving batch['{k}'] of each update"
           for k in obs_keys},
        "batch__actions": f"({NUM_UPDATES}, {BATCH_SIZE}, act) float32 uniform in (-1, 1)",
        "batch__rewards": f"({NUM_UPDATES}, {BATCH_SIZE}) float32: 0 where idx__value_goals == idx__observations, "
        "else -1 (gc_negative)",
        "batch__masks": f"({NUM_UPDATES}, {BATCH_SIZE}) float32: 0 where idx__value_goals == idx__observations, "
        "else 1",
        "info__<term>": f"({NUM_UPDATES},) float32: entry <term> of the info dict agent.update(batch) returned at "
        "each update, the reference's name with '/' replaced by '.' (e.g. info__value.v_mean is 'value/v_mean')",
        "eval_observations": f"({NUM_EVAL}, obs) float32: pool rows + 0.1 * normal noise",
        "eval_goals": f"({NUM_EVAL}, obs) float32: pool rows + 0.1 * normal noise",
        "eval_q_actions": f"({NUM_EVAL}, act) float32 uniform in (-1, 1): the actions at which critics are evaluated",
        **{f"eval_{k}_{{init,final}}": EVAL_DESCRIPTIONS[k] + "; of the agent in init.pkl / final.pkl"
           for k in init_eval},
    }  # fmt: skip
    case = {
        "case": name,
        "agent": config["agent_name"],
        "agent_class": agent_class(agent_mod),
        "reference": {
            "repository": "seohongpark/ogbench (impls/)" if spec["repo"] == "ogbench" else "antoniomari/meta-gc-rl",
            "commit": OGBENCH_COMMIT if spec["repo"] == "ogbench" else AUTHORS_COMMIT,
            "file": ("impls/" if spec["repo"] == "ogbench" else "") + f"agents/{spec['module']}.py",
        },
        "config": config_to_json(config),
        "config_overrides": {k: (list(v) if isinstance(v, tuple) else v) for k, v in spec["overrides"].items()},
        "obs_dim": obs_dim,
        "action_dim": action_dim,
        "batch_size": BATCH_SIZE,
        "num_updates": NUM_UPDATES,
        "agent_seed": spec["seed"],
        "agent_seed_note": "create(agent_seed, zeros((1, obs_dim)), zeros((1, action_dim)), config), as main.py "
        "with a batch of 1; update() then splits agent.rng itself",
        "data_seed": data_seed,
        "data_seed_note": "numpy.random.default_rng(data_seed) drew pool, batches and eval rows (make_data in "
        "benchmarks/published/parity.py)",
        "batch_keys": sorted(obs_keys + ["actions", "rewards", "masks"]),
        "obs_like_keys": obs_keys,
        "info_terms": info_order,
        "info_npz_names": ["info__" + k.replace("/", ".") for k in info_order],
        "eval_outputs": sorted(init_eval),
        "arrays": describe,
        "pickles": {
            "init.pkl": "save_agent(agent, dir, 0) right after create(): the bytes their function wrote "
            "(pickle of {'agent': flax.serialization.to_state_dict(agent)})",
            "final.pkl": f"save_agent(agent, dir, {NUM_UPDATES}) after the {NUM_UPDATES} updates",
            "sha256": {p: hashlib.sha256((out / p).read_bytes()).hexdigest() for p in ("init.pkl", "final.pkl")},
        },
        "state_dict_shapes": init_shapes,
        "state_dict_shapes_final_changes": {k: v for k, v in final_shapes.items() if init_shapes.get(k) != v},
        "pickle_globals": [list(g) for g in globs],
        "versions": versions(),
        "jax_enable_x64": bool(jax.config.jax_enable_x64),
    }  # fmt: skip
    (out / "case.json").write_text(json.dumps(case, indent=1) + "\n")
    print(f"[{name}] wrote {out}: " + ", ".join(f"{p.name} {p.stat().st_size} B" for p in sorted(out.iterdir())))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ogbench", type=Path, required=True, help="OGBench's impls/ folder")
    p.add_argument("--authors", type=Path, required=True, help="meta-gc-rl checkout at 434aa5e")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--case", action="append", choices=sorted(CASES), help="only these cases (default all)")
    p.add_argument("--in-process", action="store_true", help="(internal) run the one --case in this process")
    a = p.parse_args()
    repos = {"ogbench": a.ogbench.resolve(), "authors": a.authors.resolve()}
    for r, path in repos.items():
        if not (path / "agents").is_dir() or not (path / "utils" / "flax_utils.py").is_file():
            fail(f"--{r} {path}: no agents/ and utils/flax_utils.py there")
    names = a.case or list(CASES)
    if a.in_process:
        assert len(names) == 1
        run_case(names[0], repos[CASES[names[0]]["repo"]], a.out.resolve())
        return
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONHASHSEED="0")
    for name in names:  # one process per case: the two checkouts' `agents` and `utils` packages collide
        cmd = [sys.executable, __file__, "--ogbench", str(repos["ogbench"]), "--authors", str(repos["authors"]),
               "--out", str(a.out.resolve()), "--case", name, "--in-process"]  # fmt: skip
        r = subprocess.run(cmd, env=env, cwd=HERE)
        if r.returncode != 0:
            fail(f"case {name} failed (exit {r.returncode})")


if __name__ == "__main__":
    main()
