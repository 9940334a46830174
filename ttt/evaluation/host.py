"""The host driver: OGBench's gymnasium environments stepped from Python in lockstep over a batch, with the same
jitted `prepare` / `adapt` / `act` as the compiled episode (`ttt.episode.make_round_fns`) and the same keys, on the
in-program environment's episodes (`Env.reset_draws`, `Env.impose`), so both drivers face the same episodes and make
the same selections."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ttt.envs import has_jax_env, make_env
from ttt.envs.gym import make_gym_env, seed_env
from ttt.episode import empty_round_metrics, make_act, make_round_fns, n_rounds, round_keys
from ttt.evaluation.setup import EpisodeBatch, EvalSetup, cached_program, gather


def make_host_fns(setup: EvalSetup):
    """Jitted, batch-vmapped `(prepare, adapt, act, base)` for the host driver: the same pure functions the compiled
    episode uses (`episode.make_round_fns`); `adapt` returns the round's tables too, for the next round."""
    if setup.ttt is not None:
        prepare, adapt, act = make_round_fns(
            setup.backbone, setup.cfg, setup.sampler, setup.spec, setup.ttt, setup.transforms
        )
    else:
        prepare = adapt = None
        act = make_act(setup.backbone)

    def prepare_b(agents, seed_idx, data, goal, oracle):
        return prepare(gather(agents, seed_idx), data, goal, oracle)

    def adapt_b(agents, opt_states, seed_idx, key, data, tables, obs, goal):
        opt0 = None if opt_states is None else gather(opt_states, seed_idx)
        return adapt(gather(agents, seed_idx), opt0, key, data, tables, obs, goal)

    def base_b(agents, seed_idx):
        return gather(agents, seed_idx)

    jit_vmap = lambda f, axes: eqx.filter_jit(eqx.filter_vmap(f, in_axes=axes))  # noqa: E731
    return (
        jit_vmap(prepare_b, (None, 0, None, 0, None)) if prepare else None,
        jit_vmap(adapt_b, (None, None, 0, 0, None, 0, 0, 0)) if adapt else None,
        jit_vmap(act, (0, 0, 0, 0)),
        jit_vmap(base_b, (None, 0)),
    )


@eqx.filter_jit
def _reset_draws(env, keys, tasks):
    """`env.reset_draws` of a batch of reset keys and tasks (the host driver's episodes)."""
    return jax.vmap(env.reset_draws)(keys, tasks)


def run_host(
    setup: EvalSetup,
    agents,
    opt_states,
    data,
    batch: EpisodeBatch,
    seed: int = 0,
    fns=None,
    gym_kwargs: dict | None = None,
    oracle=None,
) -> dict[str, np.ndarray]:
    """The host driver: OGBench's gymnasium environments stepped from Python, in lockstep over the batch, with
    the jitted batch `prepare` / `adapt` / `act`. Episodes come from the in-program environment's `reset_draws`
    with the same reset keys, imposed on the gymnasium env (`Env.impose`), where one exists (so both paths face the
    same episodes), else from the gymnasium reset seeded per (task, episode)."""
    prepare_b, adapt_b, act_b, base_b = fns or make_host_fns(setup)
    B, L = len(batch), setup.max_steps
    K = L if setup.ttt is None else setup.ttt.K
    R = n_rounds(L, setup.ttt)
    envs, obs, goals = [], [], []
    jax_env = make_env(setup.spec.env_id, backend="mujoco") if has_jax_env(setup.spec.env_id) else None
    if jax_env is not None:  # every number the in-program reset draws from the same keys
        draws = jax.tree.map(np.asarray, _reset_draws(jax_env, batch.reset_keys, jnp.asarray(batch.task)))
    for b in range(B):
        env = make_gym_env(setup.spec.env_id, **(gym_kwargs or {}))
        task = int(batch.task[b])
        ep_seed = int(np.random.SeedSequence([seed, int(batch.task[b]), int(batch.episode[b])]).generate_state(1)[0])
        seed_env(env, ep_seed)
        o, info = env.reset(seed=ep_seed, options=dict(task_id=task))
        g = info["goal"]
        if jax_env is not None:
            o, g = jax_env.impose(env, {k: v[b] for k, v in draws.items()})
        envs.append(env)
        obs.append(np.asarray(o, np.float32))
        goals.append(np.asarray(g, np.float32))
    obs, goals = np.stack(obs), np.stack(goals)
    start = obs.copy()
    seed_idx = jnp.asarray(batch.seed_idx)
    done = np.zeros(B, bool)
    success = np.zeros(B, bool)
    steps = np.zeros(B, np.int32)
    traj = np.zeros((B, L, obs.shape[-1]), np.float32)
    acts = np.zeros((B, L, setup.spec.action_dim), np.float32)
    metrics: dict[str, list] = {}
    tables = prepare_b(agents, seed_idx, data, jnp.asarray(goals), oracle) if prepare_b else None
    reset_after = setup.ttt is not None and setup.ttt.reset_after_horizon
    agent_base = base_b(agents, seed_idx) if reset_after else None
    keys = jax.jit(jax.vmap(round_keys, in_axes=(0, None)))
    fold = jax.jit(jax.vmap(jax.random.fold_in, in_axes=(0, None)))
    for r in range(R):
        k_adapt, k_act = keys(batch.ttt_keys, r)
        if adapt_b is not None and not done.all():
            o, g = jnp.asarray(obs), jnp.asarray(goals)
            # with the lazy value pass the tables now hold the values this round computed
            agent_r, m, tables = adapt_b(agents, opt_states, seed_idx, k_adapt, data, tables, o, g)
        else:  # base policy, or every episode already ended: nothing left to adapt
            agent_r, m = base_b(agents, seed_idx), _empty_round_metrics_np(B)
        idle = _empty_round_metrics_np(B)
        m = {k: np.where(done, idle[k], np.asarray(v)) for k, v in m.items()}  # ended episodes: idle rounds
        m["active"] = ~done
        for k, v in m.items():
            metrics.setdefault(k, []).append(np.asarray(v))
        for i in range(K):
            t = r * K + i
            if t >= L:
                break
            if done.all():
                traj[:, t:] = obs[:, None]
                break
            a = np.asarray(act_b(agent_r, jnp.asarray(obs), jnp.asarray(goals), fold(k_act, i)))
            if reset_after:  # past the longest kept span: the pre-trained agent acts
                a0 = np.asarray(act_b(agent_base, jnp.asarray(obs), jnp.asarray(goals), fold(k_act, i)))
                a = np.where((i > m["max_span"])[:, None], a0, a)
            for b in np.flatnonzero(~done):
                o, _, terminated, truncated, info = envs[b].step(a[b])
                obs[b] = o
                acts[b, t] = a[b]
                steps[b] += 1
                if info["success"]:
                    success[b] = True
                if terminated or truncated or steps[b] >= L:
                    done[b] = True
            traj[:, t] = obs
    for env in envs:
        env.close()
    rounds = {k: np.stack(v, axis=1) for k, v in metrics.items()}  # (B, R)
    return dict(success=success, steps=steps, start=start, goal=goals, observations=traj, actions=acts, rounds=rounds)


def _empty_round_metrics_np(B: int) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in empty_round_metrics(B).items()}


def host_calls(setup: EvalSetup, agents, opt_states, data, oracle, eb: EpisodeBatch, seed: int):
    """`run(idx)` for the host driver: the episodes `idx` of `eb` stepped from Python (`run_host`) with the cached
    jitted round functions."""
    fns = cached_program(make_host_fns, setup)

    def run(idx: np.ndarray) -> dict:
        return run_host(setup, agents, opt_states, data, eb.take(idx % len(eb)), seed=seed, fns=fns, oracle=oracle)

    return run
