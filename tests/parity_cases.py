"""Replaying the reference agents' parity fixtures (tests/fixtures/parity/, written by
benchmarks/published/parity.py in the reference code's own environment) with `ttt`'s own code.

Each fixture holds the reference's initial agent (`init.pkl`, the bytes its `save_agent` wrote), 100 batches, every
term its `update` returned at every update, its agent after them (`final.pkl`), and its actions and values on 1,000
rows. `replay(case)` imports `init.pkl`, applies `ttt.pretrain.make_step` to the same batches and returns both
sides' numbers; `tests/test_parity.py` checks them and `benchmarks/published/parity_table.py` prints the table.
No Flax is needed: the pickles go through `ttt.safe_pickle`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ttt import safe_pickle
from ttt.agents import get_backbone
from ttt.data.batch import Batch
from ttt.interop import read_reference, reference_states
from ttt.pretrain import make_step

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "parity"
CASES = sorted(p.name for p in FIXTURES.glob("*") if (p / "case.json").exists())


@dataclasses.dataclass
class Case:
    name: str
    meta: dict
    data: dict
    backbone: str

    @property
    def dir(self) -> Path:
        return FIXTURES / self.name


def load_case(name: str) -> Case:
    meta = json.loads((FIXTURES / name / "case.json").read_text())
    with np.load(FIXTURES / name / "data.npz") as f:
        data = {k: f[k] for k in f.files}
    return Case(name, meta, data, meta["agent"])


def imported(case: Case, which: str):
    """(cfg, TrainState) of the case's `init.pkl` or `final.pkl` in `ttt`'s layout, with the case's settings."""
    settings = {k: v for k, v in case.meta["config"].items()}
    _, cfg, _, states = reference_states([read_reference(case.dir / f"{which}.pkl")], case.backbone, settings)
    return cfg, states[0].state


def batch(case: Case, i: int):
    """The `i`-th update's batch in `ttt`'s layout (a `Batch`, or SAW's `SawBatch`)."""
    d, pool = case.data, case.data["pool"]

    def rows(key):
        return d[f"idx__{key}"][i].astype(np.int32)

    def obs(key):
        return jnp.asarray(pool[rows(key)])

    base = Batch(
        observations=obs("observations"),
        actions=jnp.asarray(d["batch__actions"][i]),
        next_observations=obs("next_observations"),
        value_goals=obs("value_goals"),
        actor_goals=obs("actor_goals") if "idx__actor_goals" in d else obs("high_actor_goals"),
        rewards=jnp.asarray(d["batch__rewards"][i]),
        masks=jnp.asarray(d["batch__masks"][i]),
        idxs=jnp.asarray(rows("observations")),
        value_goal_idxs=jnp.asarray(rows("value_goals")),
        actor_goal_idxs=jnp.asarray(rows("actor_goals") if "idx__actor_goals" in d else rows("high_actor_goals")),
    )
    if case.backbone != "saw":
        return base
    from ttt.agents.saw import SawBatch

    return SawBatch(base=base, low_goals=obs("low_actor_goals"), waypoints=obs("high_actor_targets"),
                    low_goal_idxs=jnp.asarray(rows("low_actor_goals")),
                    waypoint_idxs=jnp.asarray(rows("high_actor_targets")))  # fmt: skip


def forward(case: Case, cfg, agent) -> dict[str, np.ndarray]:
    """`ttt`'s actions and values on the case's evaluation rows, named as the fixture names the reference's."""
    bb = get_backbone(case.backbone)
    o, g = jnp.asarray(case.data["eval_observations"]), jnp.asarray(case.data["eval_goals"])
    out = {"actions": np.asarray(bb.act(agent, o, g, jax.random.key(0), 0.0))}
    if case.backbone == "gciql":
        a = jnp.asarray(case.data["eval_q_actions"])
        out["value"] = np.asarray(agent.value(o, g))
        out["critic"] = np.asarray(agent.critic(o, g, a))
        out["target_critic"] = np.asarray(agent.target_critic(o, g, a))
    elif case.backbone == "qrl":
        from ttt.agents.qrl import _predict_next

        a = jnp.asarray(case.data["eval_q_actions"])
        out["distance"] = np.asarray(agent.value(o, g))
        if agent.dynamics is not None:
            z_next = _predict_next(agent.dynamics, agent.value.encode(o), a)
            out["dyn_q"] = np.asarray(-agent.value.latent_distance(z_next, agent.value.encode(g)))
    elif case.backbone == "saw":
        out["value"] = np.asarray(agent.value(o, g))
        from ttt.agents.saw import target_values

        out["target_value"] = np.asarray(target_values(agent, o, g))
        out["low_actor_actions"] = np.asarray(jnp.clip(agent.low_actor(o, g)[0], -1.0, 1.0))
    return {k: v for k, v in out.items() if f"eval_{k}_init" in case.data}


@dataclasses.dataclass
class Replay:
    losses: dict[str, tuple[np.ndarray, np.ndarray]]  # term -> (ttt's, the reference's), each (updates,)
    final: list[tuple[str, np.ndarray, np.ndarray]]  # (leaf path, ttt's, the reference's) after the updates
    init_forward: dict[str, tuple[np.ndarray, np.ndarray]]
    final_forward: dict[str, tuple[np.ndarray, np.ndarray]]


def replay(case: Case, step_fn=None) -> Replay:
    """Import `init.pkl`, apply `ttt`'s update to the fixture's batches, and pair every number with the
    reference's. `step_fn(backbone, cfg)` (a `Backbone` record) replaces `ttt.pretrain.make_step` (to show what a
    change would do)."""
    cfg, state = imported(case, "init")
    init_fwd = forward(case, cfg, state.agent)
    step = jax.jit((step_fn or make_step)(get_backbone(case.backbone), cfg))
    n = case.meta["num_updates"]
    # The reference's keys: `update` splits the agent's rng into (next rng, rng), `total_loss` splits rng into
    # (rng, actor key); the actor key draws DDPG+BC's sampled action when the std is learned.
    rng = jnp.asarray(safe_pickle.load(case.dir / "init.pkl")["agent"]["rng"], jnp.uint32)
    terms: dict[str, list[float]] = {}
    for i in range(n):
        rng, loss_rng = jax.random.split(rng)
        _, actor_rng = jax.random.split(loss_rng)
        state, _, metrics = step(state, batch(case, i), jax.random.wrap_key_data(actor_rng))
        for k, v in metrics.items():
            terms.setdefault(k, []).append(float(v))
    losses = {}
    for k, v in terms.items():
        ref = f"info__{k.replace('/', '.')}"
        if ref in case.data:
            losses[k] = (np.asarray(v), case.data[ref].astype(np.float64))
    _, ref_final = imported(case, "final")
    final = []
    paths = jax.tree_util.tree_leaves_with_path(ref_final.agent)
    for (path, theirs), mine in zip(paths, jax.tree.leaves(state.agent), strict=True):
        final.append((jax.tree_util.keystr(path), np.asarray(mine), np.asarray(theirs)))
    fin_fwd = forward(case, cfg, state.agent)
    pair = lambda fwd, which: {k: (v, case.data[f"eval_{k}_{which}"]) for k, v in fwd.items()}  # noqa: E731
    return Replay(losses, final, pair(init_fwd, "init"), pair(fin_fwd, "final"))


def max_rel(a: np.ndarray, b: np.ndarray) -> float:
    """The largest |a - b| / max(|b|, 1) over the elements (absolute below 1, relative above)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1.0))) if a.size else 0.0
