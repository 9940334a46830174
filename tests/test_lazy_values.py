"""The lazy value pass (`TTTConfig.value_cap`, the default 'auto'): each round computes only the values of the rows
from each dataset episode's first relevant row to its end, and the selections (the per-row training weights of every
round) and the episode results equal the full pass's exactly: rules 'episodes' and 'paper', unequal episode lengths,
a round without relevant rows, a cap small enough that a round needs several passes, the whole-batch and the bucket
paths, the round functions' loop (the host driver's) and the host driver itself; rows not computed filled with
garbage change nothing."""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_same_values, toy_dataset

import ttt.episode as episode_mod
from ttt.agents import get_backbone
from ttt.data.specs import get_spec
from ttt.envs.toy import OpenPoint
from ttt.episode import Transforms, TTTConfig, lazy_pass, make_episodes, make_round_fns, round_keys, value_pass_rows
from ttt.finetune import FinetuneConfig
from ttt.presets import make_configs
from ttt.pretrain import init_state
from ttt.select import SelectConfig

GCBC = get_backbone("gcbc")

SPEC = get_spec("pointmaze-medium-navigate-v0")  # goal coordinates obs[:2], threshold 1.0
L = 24
LENGTHS = (20, 7, 31, 12, 25, 9, 18, 40, 5, 16, 22, 11, 14, 27)  # unequal episode lengths


DATA = toy_dataset(LENGTHS, spread=3)
CFG, SAMPLER = make_configs(
    "gcbc", SPEC, "cpu", {"actor_hidden_dims": (16, 16), "value_hidden_dims": (16, 16), "batch_size": 16}
)
# Task 3 starts far from every dataset row: its first round has no relevant row (and computes no value).
ENV = OpenPoint([[0.0, 0.0], [1.0, -1.0], [30.0, 30.0]], [[3.0, 3.0], [-2.0, 2.0], [29.0, 29.0]], noise=0.1,
                max_steps=L)  # fmt: skip
CHUNK = 8
CAP = 0.05  # 0.05 * 294 rows -> 15 -> one chunk of 8 rows... rounded up to 16 rows per pass: rounds need several


def ttt_cfg(rule="episodes", mode="critic", value_cap=None, bucket=1, **sel):
    return TTTConfig(K=8, select=SelectConfig(q=0.3, mode=mode, h_min=3, rule=rule, eps_rel=1.5, **sel),
                     finetune=FinetuneConfig(steps=3), value_chunk=CHUNK, value_cap=value_cap,
                     bucket=bucket)  # fmt: skip


@eqx.filter_jit
def _init_agents(keys):
    return eqx.filter_vmap(lambda k: init_state(k, GCBC, 2, 2, CFG).agent)(keys)


AGENTS = _init_agents(jax.random.split(jax.random.key(0), 4))
RK, TK = jax.random.split(jax.random.key(1), 4), jax.random.split(jax.random.key(2), 4)
TASKS = jnp.array([1, 2, 3, 1])


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]


@pytest.fixture
def recorder(monkeypatch):
    """Record every round's training weights, keyed by (round, observation, goal), from inside the program."""
    seen: dict = {}
    original = episode_mod.round_weights

    def record(r, obs, goal, w):
        for i in range(np.asarray(r).size):  # one call per element (vmapped: a batch at once)
            rr, oo, gg, ww = (np.asarray(x).reshape((-1,) + np.asarray(x).shape[np.asarray(r).ndim:])[i]
                              for x in (r, obs, goal, w))  # fmt: skip
            seen[(int(rr), oo.tobytes(), gg.tobytes())] = ww.copy()

    def round_weights(ctx, *a, **k):
        w, m = original(ctx, *a, **k)
        jax.debug.callback(record, ctx.round, ctx.obs, ctx.goal, w)
        return w, m

    monkeypatch.setattr(episode_mod, "round_weights", round_weights)
    return seen


def run(ttt, n=4, env=ENV):
    agents = jax.tree.map(lambda x: x[:n] if eqx.is_array(x) else x, AGENTS)
    episodes = eqx.filter_jit(make_episodes(GCBC, CFG, SAMPLER, SPEC, ttt, L))
    return episodes(agents, None, env, DATA, RK[:n], TK[:n], TASKS[:n])


def assert_same(full, lazy):
    f = dataclasses.replace(full, rounds={k: v for k, v in full.rounds.items() if k != "value_rows"})
    z = dataclasses.replace(lazy, rounds={k: v for k, v in lazy.rounds.items() if k != "value_rows"})
    for x, y in zip(leaves(f), leaves(z), strict=True):
        assert_same_values(x, y)


def _by_state(weights: dict) -> list:
    """The recorded (round, obs bytes, goal bytes) keys ordered by round, goal and observation values (not bytes: an
    observation one float32 rounding apart, tests/helpers.py, keeps its place)."""
    as_f = lambda b: tuple(np.frombuffer(b, np.float32).round(4))  # noqa: E731
    return sorted(weights, key=lambda k: (k[0], as_f(k[2]), as_f(k[1])))


def compare(ttt_full, ttt_lazy, recorder):
    full = run(ttt_full)
    w_full = dict(recorder)
    recorder.clear()
    lazy = run(ttt_lazy)
    w_lazy = dict(recorder)
    assert_same(full, lazy)
    assert len(w_full) == len(w_lazy) > 0
    for kf, kz in zip(_by_state(w_full), _by_state(w_lazy), strict=True):  # the same (round, obs, goal) pairs
        assert kf[0] == kz[0]
        assert_same_values(np.frombuffer(kf[1], np.float32), np.frombuffer(kz[1], np.float32))
        assert_same_values(np.frombuffer(kf[2], np.float32), np.frombuffer(kz[2], np.float32))
        assert_same_values(w_full[kf], w_lazy[kz])
    assert any(w.sum() > 0 for w in w_full.values())  # real selections were compared
    return full, lazy


# Each rule and each bucket setting once, not all four pairs: the rule decides the selection and the bucket which
# episodes adapt, so every code path still runs; the two other pairs cost ~15 s of compiling (31 s -> 15 s for these
# cases in the clean-clone pair of benchmarks/results/layout/tests.md).
@pytest.mark.parametrize("rule, bucket", [("episodes", None), ("paper", 1)])
def test_lazy_pass_selects_and_ends_like_the_full_pass(rule, bucket, recorder):
    full, lazy = compare(ttt_cfg(rule, bucket=bucket), ttt_cfg(rule, value_cap=CAP, bucket=bucket), recorder)
    cap = value_pass_rows(ttt_cfg(value_cap=CAP), DATA.n_rows)
    assert cap == 16
    rows = np.asarray(lazy.rounds["value_rows"])
    n_rel = np.asarray(lazy.rounds["n_rel"])
    active = np.asarray(lazy.rounds["active"])
    assert (rows > cap).any()  # a round that needed several passes
    assert ((n_rel == 0) & active).any() and (rows[n_rel == 0] == 0).all()  # a round without relevant rows
    assert rows.sum(axis=1).max() < DATA.n_rows  # an episode computed fewer rows than the full pass
    assert (np.asarray(full.rounds["value_rows"]) == 0).all()  # the full pass counts none per round


def test_default_pass_selects_like_the_full_pass(recorder):
    """The default value pass ('auto': lazy, one chunk per pass) against the full pass (the pre-issue-38 default):
    every round's training weights bit for bit and the same episodes."""
    full, lazy = compare(ttt_cfg(), dataclasses.replace(ttt_cfg(), value_cap=TTTConfig().value_cap), recorder)
    rows = np.asarray(lazy.rounds["value_rows"])
    assert 0 < rows.sum(axis=1).max() < DATA.n_rows


def test_fixed_mode_and_value_relevance_match_the_full_pass(recorder):
    """Mode 'fixed' ranks by the critic's returns too (rule 'paper'); relevance 'value' computes V(s | s_j) of
    every row each round (a pass of its own, unchanged) and the lazy pass then computes V(s_j | g*) for the
    episodes it makes relevant."""
    sel = SelectConfig(q=0.3, mode="fixed", H=5, rule="paper", relevance="value", c_rel=-0.05)
    full_cfg = dataclasses.replace(ttt_cfg(), select=sel, bucket=None)
    full, lazy = compare(full_cfg, dataclasses.replace(full_cfg, value_cap=CAP), recorder)
    assert np.asarray(lazy.rounds["value_rows"]).sum() > 0


def test_untouched_episodes_hold_garbage_without_effect(monkeypatch, recorder):
    """The rows not computed hold anything (here random values that would win if read: steps near 0 and values
    above 0): nothing changes."""

    def garbage(n):
        return jax.random.uniform(jax.random.key(7), (n,), jnp.float32, -150.0, 10.0)

    for rule in ("episodes", "paper"):
        full = run(ttt_cfg(rule, bucket=None))
        recorder.clear()
        monkeypatch.setattr(episode_mod, "_uncomputed_values", garbage)
        lazy = run(ttt_cfg(rule, value_cap=CAP, bucket=None))
        monkeypatch.undo()
        assert_same(full, lazy)


def test_round_function_loop_carries_the_cache():
    """The host driver's loop: `adapt` returns the tables with the values it computed; each
    round's weights (recomputed here from the tables the round selected from) equal the full pass's, rows are
    computed once, each episode's computed rows run from its first relevant row so far to its end, and uncomputed
    rows stay NaN."""
    from ttt.select import Context, round_weights

    full_cfg, lazy_cfg = ttt_cfg("paper"), ttt_cfg("paper", value_cap=CAP)
    prep_f, adapt_f, _ = make_round_fns(GCBC, CFG, SAMPLER, SPEC, full_cfg)
    prep_z, adapt_z, _ = make_round_fns(GCBC, CFG, SAMPLER, SPEC, lazy_cfg)
    prep_f, adapt_f, prep_z, adapt_z = (eqx.filter_jit(f) for f in (prep_f, adapt_f, prep_z, adapt_z))
    ag = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, AGENTS)
    goal = jnp.array([2.0, 1.0])
    t_full = prep_f(ag, DATA, goal)
    t_lazy = prep_z(ag, DATA, goal)
    assert not bool(t_lazy.computed.any()) and bool(jnp.isnan(t_lazy.values).all())
    sel = lazy_cfg.select
    weights = eqx.filter_jit(lambda t, s: round_weights(Context(data=DATA, goal_eps=1.0, cfg=sel, state_xy=s,
                                                                key=jax.random.key(3), tables=t))[0])  # fmt: skip
    rows_total, partial = 0, []
    ep = np.asarray(DATA.ep_id)
    full_values = np.asarray(_full_values(ag, goal))
    for r, s in enumerate([[0.0, 0.0], [1.0, 1.0], [0.0, 0.0], [40.0, 40.0], [-2.0, 1.0]]):
        s = jnp.asarray(s)
        k_adapt, _ = round_keys(jax.random.key(4), r)
        a_f, m_f, same = adapt_f(ag, None, k_adapt, DATA, t_full, s, goal)
        assert same is t_full or all(np.array_equal(x, y) for x, y in zip(leaves(same), leaves(t_full), strict=True))
        before = np.asarray(t_lazy.computed)
        a_z, m_z, t_lazy = adapt_z(ag, None, k_adapt, DATA, t_lazy, s, goal)
        for x, y in zip(leaves(a_f), leaves(a_z), strict=True):
            assert_same_values(x, y)
        for k in m_f:
            if k != "value_rows":
                assert_same_values(m_f[k], m_z[k], err_msg=k)
        assert_same_values(weights(t_full, s), weights(t_lazy, s))
        computed = np.asarray(t_lazy.computed)
        assert computed.shape == (DATA.n_rows,) and (computed >= before).all()
        new_rows = int((computed & ~before).sum())
        assert int(m_z["value_rows"]) == new_rows
        rows_total += new_rows
        values = np.asarray(t_lazy.values)
        assert_same_values(values[computed], full_values[computed])
        assert np.isnan(values[~computed]).all()
        ends = np.asarray(DATA.ep_end)
        for e in np.unique(ep[computed]):  # a suffix of the episode: from some row to its end
            rows_e = np.flatnonzero(ep == e)
            on_e = computed[rows_e]
            assert on_e[-1] and (np.diff(on_e.astype(int)) >= 0).all(), e
            assert ends[rows_e[0]] == rows_e[-1]
        partial.append(bool(any(computed[ep == e].any() and not computed[ep == e].all() for e in np.unique(ep))))
    assert 0 < rows_total < DATA.n_rows
    assert any(partial)  # an episode computed from a relevant row in its middle, not from its start


def _full_values(agent, goal):
    return eqx.filter_jit(episode_mod.dataset_values)(GCBC.value, agent, DATA.observations, goal,
                                                      CHUNK)  # fmt: skip


def test_config():
    assert TTTConfig().value_cap == "auto" and lazy_pass(TTTConfig())
    assert not lazy_pass(TTTConfig(value_cap=None))
    assert not lazy_pass(TTTConfig(value_cap=0.0)) and lazy_pass(TTTConfig(value_cap=0.1))
    assert not lazy_pass(TTTConfig(value_cap=0.1, critic="oracle"))  # the oracle's values: computed in full
    assert not lazy_pass(TTTConfig(value_cap=0.1, select=SelectConfig(mode="mc")))  # no values read
    fixed = TTTConfig(value_cap=0.1, select=SelectConfig(mode="fixed", H=5))
    assert lazy_pass(fixed) and not lazy_pass(fixed, has_value=False)  # mode 'fixed' reads values only if it has them
    for bad in (-0.1, 1.5, float("nan"), True, "0.1"):
        with pytest.raises(ValueError, match="value_cap"):
            TTTConfig(value_cap=bad)
    assert value_pass_rows(TTTConfig(value_cap=0.1, value_chunk=4096), 1_005_000) == 25 * 4096
    assert value_pass_rows(TTTConfig(value_cap=1.0, value_chunk=4096), 100) == 100
    assert value_pass_rows(TTTConfig(value_chunk=4096), 1_005_000) == 4096  # 'auto': one chunk per pass
    custom = Transforms(relevance=lambda ctx: ctx.tables.eligible)
    # 'auto' with a transform of your own: the full pass, silently (the transform may read any row).
    assert not lazy_pass(TTTConfig(), custom) and lazy_pass(TTTConfig(), Transforms())
    prep, _, _ = make_round_fns(GCBC, CFG, SAMPLER, SPEC, ttt_cfg(value_cap="auto"), custom)
    tables = eqx.filter_jit(prep)(jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, AGENTS), DATA,
                                  jnp.array([2.0, 1.0]))  # fmt: skip
    assert tables.computed is None and tables.values is None  # the full pass: no cache
    with pytest.raises(ValueError, match="default selection transforms"):
        make_round_fns(GCBC, CFG, SAMPLER, SPEC, ttt_cfg(value_cap=CAP), custom)
    make_round_fns(GCBC, CFG, SAMPLER, SPEC, ttt_cfg(value_cap=None), custom)  # without value_cap: fine


STITCH = "pointmaze-medium-stitch-v0"


@pytest.fixture(scope="module")
def stitch(tmp_path_factory):
    from ttt.data import generate as gen
    from ttt.data.files import load

    d = tmp_path_factory.mktemp("tiny")
    gen.generate(STITCH, episodes=6, seed=0, directory=d, workers=1)
    return load(STITCH, d)


def test_host_driver_and_evaluate_carry_the_cache(stitch):
    """Through `ttt.evaluate`: the compiled program with the lazy pass equals the full pass exactly, and the host
    driver (OGBench's gymnasium env, the round functions' tables carried by `run_host`) makes its selections."""
    from ttt.evaluation import EvalSetup, evaluate

    spec = get_spec(STITCH)
    cfg, sampler = make_configs("gcbc", spec, "cpu", {"actor_hidden_dims": (16, 16), "value_hidden_dims": (16, 16),
                                                      "batch_size": 16})  # fmt: skip
    ag = eqx.filter_jit(eqx.filter_vmap(lambda k: init_state(k, GCBC, 2, 2, cfg).agent))(
        jax.random.split(jax.random.key(0), 2)
    )
    ttt = TTTConfig(K=20, select=SelectConfig(q=0.5, mode="critic", rule="episodes", h_min=3, eps_rel=0.5),
                    finetune=FinetuneConfig(steps=3, lr=1e-3), value_chunk=64, value_cap=None)  # fmt: skip
    kw = dict(episodes=1, tasks=(1, 3), seed=4)
    res = {}
    for name, t, driver in [("full", ttt, "compiled"), ("lazy", dataclasses.replace(ttt, value_cap=0.02), "compiled"),
                            ("host", dataclasses.replace(ttt, value_cap=0.02), "host")]:  # fmt: skip
        res[name] = evaluate(EvalSetup(GCBC, cfg, sampler, spec, t, max_steps=60), ag, stitch, driver=driver,
                             batch_size=4, **kw)  # fmt: skip
    full, lazy, host = res["full"], res["lazy"], res["host"]
    assert_same_values(full.observations, lazy.observations)
    assert_same_values(full.success, lazy.success)
    for k in full.rounds:
        if k != "value_rows":
            assert_same_values(full.rounds[k], lazy.rounds[k], err_msg=k)
    rows = lazy.rounds["value_rows"]
    assert 0 < rows.sum(axis=-1).max() < stitch.n_rows and (full.rounds["value_rows"] == 0).all()
    # The host driver against the compiled program: as tests/test_evaluate.py compares them (float tolerance).
    np.testing.assert_allclose(lazy.observations, host.observations, atol=1e-3)
    assert_same_values(lazy.steps, host.steps)
    for k in ("active", "empty", "n_rel", "n_selected", "n_train_rows"):
        assert_same_values(lazy.rounds[k], host.rounds[k], err_msg=k)
    assert lazy.rounds["n_selected"].max() > 0
    live = host.rounds["active"].astype(bool)
    assert_same_values(lazy.rounds["value_rows"][live], host.rounds["value_rows"][live])
