"""Shared set-up of the speed benchmarks: a checkpoint (`ttt.open_checkpoint`, read and verified once), its dataset
and an `EvalSetup` per variant (`ttt.setups.checkpoint_setup`), the machine's description, and a paper-style host loop
(the structure of the paper's own evaluation code) for comparison."""

from __future__ import annotations

import os
import platform
import subprocess
import time

import jax
import jax.numpy as jnp
import numpy as np

from ttt.checkpoint import Checkpoint, open_checkpoint
from ttt.data.files import load
from ttt.envs.gym import make_gym_env as make_env
from ttt.episode import make_act, round_keys
from ttt.evaluation import EvalSetup, episode_batch
from ttt.finetune import make_ttt_step
from ttt.select import Context, round_weights
from ttt.setups import checkpoint_setup

CKPT = "runs/base/cpu/pointmaze-medium-navigate-v0/gcbc"


def select_round(key, tables, data, state_xy, cfg, goal_eps, row_values=None):
    """One selection round of the library's own stages from plain arguments (`ttt.select.round_weights`)."""
    return round_weights(Context(data=data, goal_eps=goal_eps, cfg=cfg, state_xy=state_xy, key=key,
                                 row_values=row_values, tables=tables))  # fmt: skip


def machine() -> dict:
    """What ran the benchmark: JAX device, CPU model and cores."""
    cpu = platform.processor() or ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        cpu = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), cpu)
    except OSError:
        pass
    return dict(jax_device=str(jax.devices()[0]), n_devices=len(jax.devices()), cpu=cpu, cores=os.cpu_count(),
                jax=jax.__version__)  # fmt: skip


def open_run(ckpt: str = CKPT) -> tuple[Checkpoint, object, object]:
    """`(ck, states, data)`: the checkpoint read and verified once, its seed-stacked TrainState and its dataset (from
    OGBench's directory)."""
    ck = open_checkpoint(ckpt)
    return ck, ck.load(), load(ck.dataset)


def variant_setup(ck: Checkpoint, variant: str, **settings) -> EvalSetup:
    """`checkpoint_setup(ck, variant, **settings)` (`make_setup`'s keywords: K, N, lr, ...) with `bucket=1` unless
    given: a batch's episodes fine-tune one after another, as every speed record here was measured (`TTTConfig`'s
    default; `make_setup`'s 'auto' would pick the whole batch on a GPU)."""
    return checkpoint_setup(ck, variant, **{"bucket": 1, **settings})


def seed0(tree):
    return jax.tree.map(lambda x: x[0] if isinstance(x, jax.Array) and x.ndim > 0 else x, tree)


class PaperLoop:
    """One episode at a time, as the paper's code runs them: OGBench's gymnasium env stepped from Python, one jitted
    action call per step, and every K steps a jitted selection and N separate jitted update calls (batch draw, then
    Adam step) from Python. Same pure pieces and keys as the compiled episode. The dataset value pass runs once per
    goal here (the paper's code repeats it every round, which would make this slower still)."""

    def __init__(self, setup: EvalSetup):
        self.setup = setup
        ttt = setup.ttt
        self.act = jax.jit(make_act(setup.backbone))
        if ttt is not None:
            from ttt.episode import make_round_fns

            prepare, _, _ = make_round_fns(setup.backbone, setup.cfg, setup.sampler, setup.spec, ttt)
            self.prepare = jax.jit(prepare)
            spec, sel = setup.spec, ttt.select
            self.select = jax.jit(
                lambda key, tables, data, state: select_round(key, tables, data, spec.goal_coords(state), sel,
                                                              spec.goal_eps, None)  # fmt: skip
            )
            ts = make_ttt_step(setup.backbone, setup.cfg, setup.sampler, ttt.finetune, sel.mix)
            self.init, self.table = jax.jit(ts.init), jax.jit(ts.table)
            self.draw, self.update = jax.jit(ts.draw), jax.jit(ts.update)

    def episode(self, agent0, data, start_goal, reset_key, ttt_key) -> dict:
        from ttt.envs import impose_start_goal

        s, ttt = self.setup, self.setup.ttt
        env = make_env(s.spec.env_id)
        env.reset(seed=0, options=dict(task_id=1))
        obs, goal = impose_start_goal(env, *start_goal)
        obs, goal = np.asarray(obs, np.float32), np.asarray(goal, np.float32)
        t0 = time.perf_counter()
        tables = self.prepare(agent0, data, goal) if ttt else None
        agent, success, t, n_updates = agent0, False, 0, 0
        K = ttt.K if ttt else s.max_steps
        for r in range(-(-s.max_steps // K)):
            k_adapt, k_act = round_keys(ttt_key, r)
            agent = agent0  # reset to the pre-trained weights
            if ttt is not None:
                k_sel, k_ft = jax.random.split(k_adapt)
                weights, m = self.select(k_sel, tables, data, obs)
                if not bool(m["empty"]):
                    opt, table = self.init(agent0), self.table(weights)
                    for i in range(ttt.finetune.steps):
                        k_rows, k_goals, k_loss = jax.random.split(jax.random.fold_in(k_ft, i), 3)
                        batch = self.draw(k_rows, k_goals, data, table, goal)
                        agent, opt, _ = self.update(agent, opt, batch, k_loss)
                        n_updates += 1
            for i in range(K):
                if t >= s.max_steps:
                    break
                a = np.asarray(self.act(agent, jnp.asarray(obs), jnp.asarray(goal), jax.random.fold_in(k_act, i)))
                obs, _, _, _, info = env.step(a)
                obs = np.asarray(obs, np.float32)
                t += 1
                if info.get("success"):
                    success = True
                    break
            if success:
                break
        return dict(wall_s=time.perf_counter() - t0, steps=t, success=success, updates=n_updates)


def episode_inputs(setup: EvalSetup, seed: int, n_seeds: int, n: int):
    """The first `n` (seed, task, episode) elements of the evaluation grid and their starts/goals."""
    from ttt.envs import make_env as make_jax_env

    eb = episode_batch(seed, n_seeds, (1, 2, 3, 4, 5), -(-n // (5 * n_seeds)))
    eb = eb.take(np.arange(n))
    env = make_jax_env(setup.spec.env_id)
    starts, goals = jax.jit(jax.vmap(env.sample_start_goal))(eb.reset_keys, jnp.asarray(eb.task))
    return eb, np.asarray(starts), np.asarray(goals)
