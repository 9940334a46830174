"""The compiled receding-horizon episode on a wall-free point env: batch = loop, equals a hand-written Python loop
over the same pure round functions (periodic resets to the pre-trained agent), empty selection = base policy,
termination at the goal, config errors, one trace, and sharding over 2 forced CPU devices."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_same_values, toy_dataset

from ttt.agents import get_backbone
from ttt.data.specs import get_spec
from ttt.envs.toy import OpenPoint
from ttt.episode import TTTConfig, make_episode, make_episodes, make_round_fns, round_keys
from ttt.errors import TttError
from ttt.finetune import FinetuneConfig
from ttt.presets import make_configs
from ttt.pretrain import init_state
from ttt.select import SelectConfig

GCBC = get_backbone("gcbc")

NAV = "pointmaze-medium-navigate-v0"
SPEC = get_spec(NAV)  # pointmaze goal coordinates (obs[:2]) and threshold 1.0
L = 24


DATA = toy_dataset([20] * 12, spread=3)  # 12 straight-line episodes of 20 rows, starting in [-3, 3]^2
CFG, SAMPLER = make_configs(
    "gcbc", SPEC, "cpu", {"actor_hidden_dims": (16, 16), "value_hidden_dims": (16, 16), "batch_size": 16}
)
ENV = OpenPoint([[0.0, 0.0], [1.0, -1.0]], [[3.0, 3.0], [-2.0, 2.0]], noise=0.1, max_steps=L)


def ttt_cfg(mode="critic", **sel):
    return TTTConfig(
        K=8, select=SelectConfig(q=0.3, mode=mode, h_min=3, **sel), finetune=FinetuneConfig(steps=3), value_chunk=50
    )


@eqx.filter_jit  # one compile instead of one per operation of the initialisation
def _init_agents(keys):
    return eqx.filter_vmap(lambda k: init_state(k, GCBC, 2, 2, CFG).agent)(keys)


def agents(n):
    return _init_agents(jax.random.split(jax.random.key(0), n))


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]


def keys_tasks(n):
    return jax.random.split(jax.random.key(1), n), jax.random.split(jax.random.key(2), n), jnp.arange(n) % 2 + 1


@pytest.mark.parametrize("mode, rule", [("critic", "paper"), ("mc", "mc-episodes")])
def test_batch_equals_single_episodes(mode, rule):
    """A batch of 2 (the shapes of the other tests here, whose programs the compilation cache then shares) equals
    each episode run alone. Both value modes, two of the three rules; the third rule ("episodes") and the two
    other mode-rule pairs run batched in the live-bucket test below."""
    ttt = ttt_cfg(mode, rule=rule)
    episodes = eqx.filter_jit(make_episodes(GCBC, CFG, SAMPLER, SPEC, ttt, L))
    episode = eqx.filter_jit(make_episode(GCBC, CFG, SAMPLER, SPEC, ttt, L))
    ag = agents(2)
    rk, tk, tasks = keys_tasks(2)
    out = episodes(ag, None, ENV, DATA, rk, tk, tasks)
    assert out.observations.shape == (2, L, 2) and out.rounds["n_rel"].shape == (2, 3)
    for b in range(2):
        one = episode(
            jax.tree.map(lambda x, b=b: x[b] if eqx.is_array(x) else x, ag), None, ENV, DATA, rk[b], tk[b], tasks[b]
        )
        for x, y in zip(leaves(one), leaves(out), strict=True):
            np.testing.assert_allclose(x, y[b], rtol=1e-5, atol=1e-6)
    assert (np.asarray(out.rounds["n_selected"]) > 0).any()  # the test exercises real selections


@pytest.mark.parametrize("mode, rule", [("critic", "episodes"), ("mc", "paper")])
def test_live_buckets_give_the_results_of_the_whole_batch(mode, rule):
    """Adapting only the running episodes, 1 or 2 at a time (`TTTConfig.bucket`), changes no result against the
    whole batch adapting every round (bucket None); the batch mixes episodes that end at once and ones that run."""
    env = OpenPoint([[0.0, 0.0], [1.0, -1.0]], [[0.0, 0.5], [-2.0, 2.0]], noise=0.0, max_steps=L)  # task 1: 1 step
    ag = agents(5)
    rk, tk, _ = keys_tasks(5)
    tasks = jnp.array([2, 1, 2, 1, 2])
    outs = {}
    for bucket in (None, 1, 2):
        ttt = dataclasses.replace(ttt_cfg(mode, rule=rule), bucket=bucket)
        outs[bucket] = eqx.filter_jit(make_episodes(GCBC, CFG, SAMPLER, SPEC, ttt, L))(ag, None, env, DATA, rk, tk,
                                                                                          tasks)  # fmt: skip
    steps = np.asarray(outs[None].steps)
    assert (steps[[1, 3]] == 1).all() and (steps[[0, 2, 4]] > 8).all()  # some end at once, others adapt again
    assert (np.asarray(outs[None].rounds["n_selected"])[[0, 2, 4], 1] > 0).all()
    for bucket in (1, 2):  # vmaps of another width may round differently in the last bit: float32 tolerance
        for x, y in zip(leaves(outs[None]), leaves(outs[bucket]), strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
        for name in ("n_rel", "n_selected", "n_train_rows", "empty", "max_span"):
            np.testing.assert_array_equal(outs[None].rounds[name], outs[bucket].rounds[name])
        np.testing.assert_array_equal(outs[None].steps, outs[bucket].steps)


def test_compiled_episode_equals_python_loop_with_resets():
    """Round r fine-tunes from the PRE-TRAINED agent at the state reached so far (never from round r-1's)."""
    ttt = ttt_cfg()
    ag = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, agents(1))
    rk, tk, tasks = keys_tasks(1)
    out = eqx.filter_jit(make_episode(GCBC, CFG, SAMPLER, SPEC, ttt, L))(ag, None, ENV, DATA, rk[0], tk[0], tasks[0])
    prepare, adapt, act = (eqx.filter_jit(f) for f in make_round_fns(GCBC, CFG, SAMPLER, SPEC, ttt))
    state, obs, goal = ENV.reset(rk[0], tasks[0])
    tables = prepare(ag, DATA, goal)
    traj, n_sel = [], []
    done = False
    for r in range(3):
        k_adapt, k_act = round_keys(tk[0], r)
        agent_r, m, _ = adapt(ag, None, k_adapt, DATA, tables, obs, goal)
        n_sel.append(int(m["n_selected"]))
        for i in range(8):
            if not done:
                a = act(agent_r, obs, goal, jax.random.fold_in(k_act, i))
                state, obs, hit = ENV.step(state, a)
                done = bool(hit) or r * 8 + i + 1 >= L
            traj.append(np.asarray(obs))
    np.testing.assert_allclose(np.asarray(out.observations), np.stack(traj), rtol=1e-5, atol=1e-5)
    assert list(np.asarray(out.rounds["n_selected"])) == n_sel and max(n_sel) > 0


def test_empty_selection_is_the_base_policy():
    ttt = ttt_cfg(eps_rel=1e-6)  # nothing is relevant
    ag = agents(2)
    rk, tk, tasks = keys_tasks(2)
    out = eqx.filter_jit(make_episodes(GCBC, CFG, SAMPLER, SPEC, ttt, L))(ag, None, ENV, DATA, rk, tk, tasks)
    base = eqx.filter_jit(make_episodes(GCBC, CFG, SAMPLER, SPEC, None, L))(ag, None, ENV, DATA, rk, tk, tasks)
    assert np.asarray(out.rounds["empty"]).all() and (np.asarray(out.rounds["n_rel"]) == 0).all()
    assert_same_values(out.observations, base.observations)


def test_episode_ends_at_the_goal_and_later_rounds_are_idle():
    # Any first step ends within 1.0 of the goal (start and goal within 0.54 of each other, a step moves <= 0.29).
    # Two equal tasks and ENV's noise: ENV's static fields and shapes, so the compiled program is ENV's.
    env = OpenPoint([[0.0, 0.0]] * 2, [[0.0, 0.3]] * 2, noise=0.1, max_steps=L)
    ttt = ttt_cfg()
    ag = agents(2)
    rk, tk, _ = keys_tasks(2)
    out = eqx.filter_jit(make_episodes(GCBC, CFG, SAMPLER, SPEC, ttt, L))(ag, None, env, DATA, rk, tk,
                                                                             jnp.array([1, 2]))  # fmt: skip
    assert np.asarray(out.success).all() and (np.asarray(out.steps) == 1).all()
    obs = np.asarray(out.observations)
    assert (obs == obs[:, :1]).all()  # frozen after the first step
    assert (np.asarray(out.actions)[:, 1:] == 0).all()
    active = np.asarray(out.rounds["active"])
    assert active[:, 0].all() and not active[:, 1:].any()
    assert np.asarray(out.rounds["empty"])[:, 1:].all() and (np.asarray(out.rounds["n_selected"])[:, 1:] == 0).all()


def test_config_errors():
    with pytest.raises(ValueError, match=r"K must be in \[1, 24\]"):
        make_episodes(GCBC, CFG, SAMPLER, SPEC, TTTConfig(K=25), L)
    with pytest.raises(ValueError, match="K must be an int >= 1"):
        TTTConfig(K=0)
    no_critic, sampler = make_configs("gcbc", SPEC, "cpu", {"with_critic": False})
    with pytest.raises(TttError, match="variant ttt needs a value function .*; use ttt-mc"):
        make_episodes(GCBC, no_critic, sampler, SPEC, TTTConfig(K=8), L)
    make_episodes(GCBC, no_critic, sampler, SPEC, TTTConfig(K=8, select=SelectConfig(mode="mc")), L)


def test_one_trace_per_configuration():
    episodes = eqx.filter_jit(
        eqx.debug.assert_max_traces(make_episodes(GCBC, CFG, SAMPLER, SPEC, ttt_cfg(), L), max_traces=1)
    )
    for seed in (0, 1):
        rk, tk, tasks = keys_tasks(2)
        episodes(agents(2), None, ENV, DATA, jax.random.split(jax.random.key(seed), 2), tk, tasks[::-1])


SHARD_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np
    sys.path.insert(0, {tests!r})
    import test_episode as t
    from ttt.evaluation import EvalSetup, evaluate
    setup = EvalSetup(t.GCBC, t.CFG, t.SAMPLER, t.SPEC, t.ttt_cfg(), t.L)
    out = []
    # (devices, batch): 3 does not divide over 2 devices, so the bound rounds down to 2 (12 = six calls of 2 elements).
    for n, b in ((1, 4), (2, 4), (2, 3)):
        res = evaluate(setup, t.agents(2), t.DATA, episodes=3, tasks=(1, 2), env=t.ENV, n_devices=n, batch_size=b)
        out.append(dict(success=res.success.tolist(), obs=res.observations.tolist(),
                        n_sel=res.rounds["n_selected"].tolist()))
    print(json.dumps(dict(devices=len(jax.devices()), results=out)))
    """
)


def _assert_same_results(a: dict, b: dict) -> None:
    """Two processes' (or devices') results, as tests/helpers.py compares two programs: success and selection counts
    exactly, observations to float32 rounding (bit for bit under XLA's default emitters)."""
    for k in ("success", "n_sel", "obs"):
        assert_same_values(a[k], b[k], err_msg=k)


def test_two_forced_cpu_devices_give_the_same_results(tmp_path):
    script = tmp_path / "shard.py"
    script.write_text(SHARD_SCRIPT.format(tests=os.path.dirname(__file__)))
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"  # the suite's flags
    env = dict(os.environ, XLA_FLAGS=flags.strip(), JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    one, *sharded = doc["results"]
    assert doc["devices"] == 2 and len(sharded) == 2
    for res in sharded:
        _assert_same_results(res, one)
    assert np.asarray(one["n_sel"]).max() > 0


DIST_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax
    pid, n, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    if n > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=f"localhost:{{port}}", num_processes=n, process_id=pid)
    sys.path.insert(0, {tests!r})
    import test_episode as t
    from ttt.evaluation import EvalSetup, evaluate
    setup = EvalSetup(t.GCBC, t.CFG, t.SAMPLER, t.SPEC, t.ttt_cfg(), t.L)
    # batch 4: the 1-device program of the two-device test (the compilation cache has it); padding: that test's (2, 3)
    res = evaluate(setup, t.agents(2), t.DATA, episodes=3, tasks=(1, 2), env=t.ENV, batch_size=4)
    print(json.dumps(dict(processes=jax.process_count(), devices=len(jax.devices()), success=res.success.tolist(),
                          obs=res.observations.tolist(), n_sel=res.rounds["n_selected"].tolist())))
    """
)


@pytest.mark.slow
def test_two_process_jax_distributed_matches_one_process(tmp_path):
    """Two processes on localhost (jax.distributed, gloo collectives), one CPU device each: the batch is sharded
    over both processes' devices and every process gets the same, complete result as a single process."""
    import json
    import socket

    script = tmp_path / "dist.py"
    script.write_text(DIST_SCRIPT.format(tests=os.path.dirname(__file__)))
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f)
    env["XLA_FLAGS"] = flags  # the suite's compile flags, one device per process
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        port = str(sock.getsockname()[1])
    procs = [subprocess.Popen([sys.executable, str(script), str(i), "2", port], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for i in range(2)]  # fmt: skip
    single = subprocess.run([sys.executable, str(script), "0", "1", port], capture_output=True, text=True, env=env,
                            timeout=600)  # fmt: skip
    outs = [p.communicate(timeout=600) for p in procs]
    assert single.returncode == 0, single.stderr[-3000:]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    ref = json.loads(single.stdout.strip().splitlines()[-1])
    assert ref["processes"] == 1
    for out, _ in outs:
        doc = json.loads(out.strip().splitlines()[-1])
        assert doc["processes"] == 2 and doc["devices"] == 2
        _assert_same_results(doc, ref)


def test_a_variant_composes_from_swapped_transforms():
    """Swapping the relevance stage for 'every eligible row' and the returns for a constant changes exactly what
    they should: every round sees all eligible rows as relevant and keeps ceil(q * n_rel) of them."""
    import dataclasses
    import math

    from ttt import select
    from ttt.episode import Transforms

    def everywhere(ctx):
        return ctx.tables.eligible

    def flat_returns(ctx):
        tables = select.precompute_ctx(ctx)
        return eqx.tree_at(lambda t: t.returns, tables, jnp.zeros_like(tables.returns))

    custom = dataclasses.replace(Transforms(), relevance=everywhere, precompute=flat_returns)
    ttt = ttt_cfg(rule="paper")  # the top-q filter the swapped stages feed
    ag = agents(2)
    rk, tk, tasks = keys_tasks(2)
    out = eqx.filter_jit(make_episodes(GCBC, CFG, SAMPLER, SPEC, ttt, L, custom))(ag, None, ENV, DATA, rk, tk, tasks)
    n_eligible = int(select.precompute(DATA, jnp.zeros(2), jnp.zeros(DATA.n_rows), ttt.select, 1.0).eligible.sum())
    active = np.asarray(out.rounds["active"])
    assert (np.asarray(out.rounds["n_rel"])[active] == n_eligible).all()
    assert (np.asarray(out.rounds["n_selected"])[active] == math.ceil(0.3 * n_eligible)).all()
    assert (np.asarray(out.rounds["threshold"])[active] == 0.0).all()


def test_reset_after_horizon_acts_with_the_pretrained_agent_past_the_longest_span():
    """Rule 'episodes' with reset_after_horizon: in each round, steps i <= max_span act with the fine-tuned agent,
    later steps with the pre-trained one (a Python loop over the same pure pieces)."""
    # One round of the whole episode (K = L = 24 > any toy span, which ends by row 19): the switch must happen.
    ttt = dataclasses.replace(ttt_cfg("critic", rule="episodes", n_episodes=2), K=L, reset_after_horizon=True)
    ag = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, agents(1))
    rk, tk, tasks = keys_tasks(1)
    out = eqx.filter_jit(make_episode(GCBC, CFG, SAMPLER, SPEC, ttt, L))(ag, None, ENV, DATA, rk[0], tk[0], tasks[0])
    prepare, adapt, act = (eqx.filter_jit(f) for f in make_round_fns(GCBC, CFG, SAMPLER, SPEC, ttt))
    state, obs, goal = ENV.reset(rk[0], tasks[0])
    tables = prepare(ag, DATA, goal)
    traj, spans, switched = [], [], 0
    done = False
    for r in range(1):
        k_adapt, k_act = round_keys(tk[0], r)
        agent_r, m, _ = adapt(ag, None, k_adapt, DATA, tables, obs, goal)
        spans.append(int(m["max_span"]))
        for i in range(L):
            if not done:
                use = ag if i > spans[-1] else agent_r
                switched += int(i > spans[-1] and not bool(m["empty"]))
                a = act(use, obs, goal, jax.random.fold_in(k_act, i))
                state, obs, hit = ENV.step(state, a)
                done = bool(hit) or r * L + i + 1 >= L
            traj.append(np.asarray(obs))
    np.testing.assert_allclose(np.asarray(out.observations), np.stack(traj), rtol=1e-5, atol=1e-5)
    assert list(np.asarray(out.rounds["max_span"])) == spans
    assert switched > 0  # the test exercises the switch to the pre-trained agent
