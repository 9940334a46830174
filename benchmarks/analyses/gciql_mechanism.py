"""Why GC-IQL's GC-TTT does not act on its selection at OGBench's pointmaze alpha: one measured round.

For each evaluation start (the seeds x tasks x episodes `ttt eval` faces, round 0: the episode's start state and goal
g*), this runs GC-TTT's first round as the episode does (the learned critic's values, rule `episodes`, the round's
span weights), then fine-tunes the same pre-trained agent N steps with the same keys once per BC weight `alpha`, and
measures on a held-out batch drawn from the same selection (actor goal g*):

- `mse`: the actor's squared error to the SELECTED actions, before and after fine-tuning (does it imitate them?);
- `q_pi`, `q_data`: the pre-trained critic's min(Q1, Q2)(s, a, g*) of the actor's action and of the selected action,
  each divided by mean |Q(s, pi(s))| before fine-tuning (which action does the critic prefer?);
- `n_selected` / `n_train_rows`: the round's kept spans and the rows they cover (its training rows);
- `move`: how far the action at the start state moved, |pi_after(s0, g*) - pi_before(s0, g*)|.

    python benchmarks/analyses/gciql_mechanism.py --ckpt CKPT_DIR [--alphas 0.003,0.3,3] [--out FILE.json]

Prints one markdown table (mean +- s.e. over the starts) and writes every start's numbers to `--out`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import ttt
from ttt.episode import default_hparams, make_round_fns, round_keys
from ttt.evaluation import episode_batch
from ttt.finetune import make_finetune, make_ttt_step
from ttt.select import Context, round_weights


def _pick(tree, i: int):
    return jax.tree.map(lambda x: x[i] if eqx.is_array(x) else x, tree)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt", required=True, help="a GC-IQL (DDPG+BC) checkpoint directory (ttt pretrain)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--alphas", default="", help="comma-separated BC weights (default: the checkpoint's, 0.3, 3)")
    ap.add_argument("--tasks", default="1,2,3,4,5")
    ap.add_argument("--episodes", type=int, default=1)
    ap.add_argument("--eval-seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--N", type=int, default=100)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)

    setup, agents, data, env = ttt.load_run(a.ckpt, a.data_dir, variant="ttt", lr=a.lr, N=a.N, K=100)
    if setup.backbone.name != "gciql" or getattr(setup.cfg, "actor_loss", "ddpgbc") != "ddpgbc":
        print(f"gciql_mechanism: needs a GC-IQL DDPG+BC checkpoint, got {setup.backbone.name}", file=sys.stderr)
        return 2
    alphas = [float(x) for x in a.alphas.split(",") if x] or [setup.cfg.alpha, 0.3, 3.0]
    n_seeds = jax.tree.leaves(eqx.filter(agents, eqx.is_array))[0].shape[0]
    tasks = tuple(int(t) for t in a.tasks.split(","))
    ttt_cfg = dataclasses.replace(setup.ttt, value_cap=None)  # the full value pass: the tables hold every value
    prepare, _, _ = make_round_fns(setup.backbone, setup.cfg, setup.sampler, setup.spec, ttt_cfg)
    params = default_hparams(ttt_cfg, setup.sampler, setup.spec, setup.transforms)
    sel, spec = ttt_cfg.select, setup.spec
    ts = make_ttt_step(setup.backbone, setup.cfg, setup.sampler, ttt_cfg.finetune)  # only for the held-out draw
    tunes = {al: make_finetune(setup.backbone, setup.cfg, setup.sampler,
                               dataclasses.replace(ttt_cfg.finetune, alpha=al)) for al in alphas}  # fmt: skip

    @jax.jit
    def weights_of(agent, data, obs, goal, key):
        tables = prepare(agent, data, goal)
        ctx = Context(data=data, goal_eps=spec.goal_eps, cfg=sel, goal_xy=spec.goal_coords(goal), params=params,
                      goal=goal, obs=obs, state_xy=spec.goal_coords(obs), round=jnp.int32(0), key=key,
                      tables=tables)  # fmt: skip
        weights, m = round_weights(ctx)
        return weights, m["n_selected"], m["n_train_rows"]

    def measures(agent, agent0, batch, obs, goal):
        mean, _ = agent.actor(batch.observations, batch.actor_goals)
        mean0, _ = agent0.actor(batch.observations, batch.actor_goals)
        q = lambda act: jnp.minimum(*agent0.critic(batch.observations, batch.actor_goals, act))  # noqa: E731
        scale = jnp.abs(q(jnp.clip(mean0, -1, 1))).mean()
        a_s0 = agent.actor(obs[None], goal[None])[0][0]
        a0_s0 = agent0.actor(obs[None], goal[None])[0][0]
        return {"mse": jnp.mean((mean - batch.actions) ** 2), "q_pi": q(jnp.clip(mean, -1, 1)).mean() / scale,
                "q_data": q(batch.actions).mean() / scale, "move": jnp.linalg.norm(a_s0 - a0_s0)}  # fmt: skip

    @jax.jit
    def round_of(agent, data, obs, goal, key):  # the dataset an argument, not a constant of the program
        k_adapt, _ = round_keys(key, 0)
        k_sel, k_ft = jax.random.split(k_adapt)
        k_rows, k_goals = jax.random.split(jax.random.fold_in(k_adapt, 7))  # held-out draw: its own keys
        weights, n_sel, n_rows = weights_of(agent, data, obs, goal, k_sel)
        batch = ts.draw(k_rows, k_goals, data, ts.table(weights), goal)
        out = {"n_selected": n_sel, "n_train_rows": n_rows, "before": measures(agent, agent, batch, obs, goal)}
        for al, tune in tunes.items():
            tuned, _ = tune(agent, None, k_ft, data, weights, goal)
            out[f"alpha={al:g}"] = measures(tuned, agent, batch, obs, goal)
        return out

    eb = episode_batch(a.eval_seed, n_seeds, tasks, a.episodes)
    rows, t0 = [], time.perf_counter()
    for i in range(len(eb)):
        s, t = int(eb.seed_idx[i]), int(eb.task[i])
        _, obs, goal = env.reset(eb.reset_keys[i], t)
        r = jax.tree.map(float, round_of(_pick(agents, s), data, obs, goal, eb.ttt_keys[i]))
        rows.append({"seed": s, "task": t, "episode": int(eb.episode[i]), **r})
        print(f"  start {i + 1}/{len(eb)} (seed {s}, task {t}): {r['n_selected']:.0f} spans, "
              f"{r['n_train_rows']:.0f} rows ({time.perf_counter() - t0:.0f} s)",
              file=sys.stderr, flush=True)  # fmt: skip

    def ms(key, field):
        x = np.array([r[key][field] for r in rows if r["n_selected"] > 0])
        return f"{x.mean():.3f} +- {x.std(ddof=1) / math.sqrt(len(x)):.3f}" if len(x) > 1 else "-"

    kept = sum(r["n_selected"] > 0 for r in rows)
    print(f"\n{a.ckpt}: {len(rows)} starts ({kept} with a selection), N {a.N}, lr {a.lr:g}, pre-training alpha "
          f"{setup.cfg.alpha:g}\n")  # fmt: skip
    print("| fine-tuning | mse to selected actions | Q(s, pi) / mean abs Q | Q(s, a_selected) / mean abs Q | "
          "action move at s0 |\n|---|---|---|---|---|")  # fmt: skip
    for k in ["before"] + [f"alpha={al:g}" for al in alphas]:
        print(f"| {k} | {ms(k, 'mse')} | {ms(k, 'q_pi')} | {ms(k, 'q_data')} | {ms(k, 'move')} |")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = a.out.with_suffix(".tmp")
        tmp.write_text(json.dumps({"ckpt": str(a.ckpt), "alphas": alphas, "N": a.N, "lr": a.lr,
                                   "pretrain_alpha": setup.cfg.alpha, "starts": rows}, indent=1))  # fmt: skip
        tmp.replace(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
