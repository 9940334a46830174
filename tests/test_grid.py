"""Traced settings and one context for every transform (issue 22, items 3-4): a grid of lr x q evaluated as one
program equals one program per point; a traced change compiles nothing new; a rule of one function of the
`Context` sees the state and its own parameters inside the compiled episode; bad grids are one-line errors."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_episode import CFG, DATA, ENV, SAMPLER, SPEC, L, agents

from ttt import select
from ttt.agents import get_backbone
from ttt.episode import Transforms, TTTConfig
from ttt.errors import TttError
from ttt.evaluation import EvalSetup, evaluate
from ttt.finetune import FinetuneConfig
from ttt.select import SelectConfig, Selection

GCBC = get_backbone("gcbc")

AGENTS = agents(2)
TASKS = (1, 2)


def setup_of(lr=1e-2, q=0.3, mode="mc", transforms=None, N=3, **sel) -> EvalSetup:
    ttt = TTTConfig(K=8, select=SelectConfig(q=q, mode=mode, h_min=3, rule="paper", **sel),
                    finetune=FinetuneConfig(steps=N, lr=lr), value_chunk=50)  # fmt: skip
    return EvalSetup(GCBC, CFG, SAMPLER, SPEC, ttt, L, transforms=transforms or Transforms())


def run(setup, **kw):
    return evaluate(setup, AGENTS, DATA, episodes=1, tasks=TASKS, env=ENV, **kw)


def same(a, b, what=""):
    """Every number of two `EvalResult`s: success, steps and round counts equal, floats within 1e-6."""
    np.testing.assert_array_equal(a.success, b.success, err_msg=what)
    np.testing.assert_array_equal(a.steps, b.steps, err_msg=what)
    np.testing.assert_allclose(a.observations, b.observations, rtol=0, atol=1e-6, err_msg=what)
    for k in a.rounds:
        np.testing.assert_allclose(a.rounds[k], b.rounds[k], rtol=0, atol=1e-6, equal_nan=True, err_msg=f"{what} {k}")


def test_a_grid_of_lr_and_q_equals_one_program_per_point_and_base_comes_with_it():
    grid = run(setup_of(), grid={"lr": [1e-3, 3e-2], "q": [0.1, 0.3, 0.6]}, base=True)
    assert [p for p, _ in grid] == [{"lr": lr, "q": q} for lr in (1e-3, 3e-2) for q in (0.1, 0.3, 0.6)]
    for point, result in grid:
        same(result, run(setup_of(**point)), str(point))
        assert result.params["lr"] == point["lr"] and result.params["q"] == point["q"]
    base = run(dataclasses.replace(setup_of(), ttt=None))
    np.testing.assert_array_equal(grid.base.success, base.success)
    np.testing.assert_array_equal(grid.base.steps, base.steps)
    np.testing.assert_allclose(grid.base.observations, base.observations, rtol=0, atol=1e-6)
    assert grid.base.rounds["empty"].all() and np.isnan(grid.base.rounds["loss_last"]).all()
    # the grid is not the same number everywhere: q changes what is kept
    n_sel = [r.rounds["n_selected"].sum() for _, r in grid]
    assert len(set(n_sel)) > 1


def test_a_traced_change_of_lr_or_q_compiles_nothing_new():
    """A transform counts its traces: changing lr, q, eps or a user parameter (as a setup or as params) reuses the
    program; changing N (a shape) traces a new one."""
    traces = []

    def counting_relevance(ctx):
        traces.append(1)
        return select.relevance_ctx(ctx)

    tr = Transforms(relevance=counting_relevance, params={"unused": 1.0})
    run(setup_of(lr=1e-3, q=0.1, transforms=tr))
    first = len(traces)
    assert first >= 1
    run(setup_of(lr=3e-2, q=0.6, transforms=tr))
    run(setup_of(transforms=tr), params={"eps": 2.0, "unused": 5.0})
    run(setup_of(transforms=dataclasses.replace(tr, params={"unused": 2.0})))
    assert len(traces) == first, "a traced setting compiled a new program"
    run(setup_of(N=2, transforms=tr))
    assert len(traces) > first


def nearest_starts(ctx: select.Context) -> Selection:
    """A rule of one function: keep the `k` relevant rows nearest the CURRENT STATE (`ctx.state_xy`)."""
    d = jnp.linalg.norm(ctx.data.goals - ctx.state_xy, axis=-1)
    d = jnp.where(ctx.relevant, d, jnp.inf)
    rank = jnp.argsort(jnp.argsort(d))
    k = ctx.params.user["k"].astype(jnp.int32)
    mask = ctx.relevant & (rank < k)
    return Selection(mask=mask, threshold=jnp.max(jnp.where(mask, d, -jnp.inf)), n_rel=jnp.sum(ctx.relevant),
                     n_selected=jnp.sum(mask))  # fmt: skip


def test_a_rule_of_one_function_sees_the_state_and_its_own_parameters_in_the_compiled_episode():
    tr = Transforms(select=nearest_starts, params={"k": 2})
    setup = setup_of(transforms=tr, eps_rel=3.0)
    res = run(setup)
    active = res.rounds["active"]
    assert (res.rounds["n_selected"][active] == 2).all()
    # round 0's threshold is the 2nd-smallest distance from the episode's start to a relevant row
    for s, t in np.ndindex(res.success.shape[:2]):
        tables = select.precompute(DATA, jnp.asarray(res.goals[s, t, 0, :2]), None, setup.ttt.select, SPEC.goal_eps)
        start = res.starts[s, t, 0, :2]
        d = np.linalg.norm(np.asarray(DATA.goals) - start, axis=-1)
        rel = (d < 3.0) & np.asarray(tables.eligible)
        assert res.rounds["threshold"][s, t, 0, 0] == pytest.approx(np.sort(d[rel])[1], abs=1e-5)
    # the parameter's route: Transforms(params=...) is the default, params= and grid= override it
    assert (run(setup, params={"k": 5}).rounds["n_selected"][active] == 5).all()
    grid = run(setup, grid={"k": [1, 3]})
    assert [(r.rounds["n_selected"][active] == p["k"]).all() for p, r in grid] == [True, True]


def test_a_transform_of_positional_arguments_is_refused_by_name():
    """The positional form (the library's `relevance(tables, data, state_xy, cfg, goal_eps, ...)`) is no transform:
    refused when the episode is built, naming the slot and the function, not run or silently adapted."""

    def everywhere_old(tables, data, state_xy, cfg, goal_eps, row_values=None):
        return tables.eligible

    with pytest.raises(TttError, match=r"transform relevance \(.*everywhere_old\) must be a function of one "
                       r"ttt\.select\.Context"):  # fmt: skip
        run(setup_of(transforms=Transforms(relevance=everywhere_old)))


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(grid={"lr": []}), r"grid: lr must be a non-empty list"),
        (dict(grid="lr"), r"grid must be a dict"),
        (dict(grid={"K": [8, 16]}), r"'K' is not a traced setting; valid: lr, q, eps.*K, N, batch"),
        (dict(grid={"q": [0.1, 1.5]}), r"q must be in \(0, 1\], got 1.5"),
        (dict(grid={"lr": ["fast"]}), r"lr must be a number"),
        (dict(params={"nope": 1.0}), r"'nope' is not a traced setting"),
        (dict(grid={"lr": [1e-3]}, driver="host"), r"need driver 'compiled'"),
    ],
)
def test_a_bad_grid_is_a_one_line_error_naming_it(kw, match):
    with pytest.raises(TttError, match=match) as e:
        run(setup_of(), **kw)
    assert "\n" not in str(e.value)


def test_a_base_setup_takes_only_temperature_and_user_names_must_not_shadow_settings():
    base = dataclasses.replace(setup_of(), ttt=None)
    with pytest.raises(TttError, match="lr need a GC-TTT setup"):
        run(base, grid={"lr": [1e-3]})
    with pytest.raises(TttError, match="'lr' is not a name of your own"):
        Transforms(params={"lr": 1.0})


def test_traced_mix_draws_the_rows_of_the_static_split():
    from ttt.finetune import sample_ttt_rows
    from ttt.hparams import n_uniform

    w = jnp.zeros(DATA.n_rows, jnp.int32).at[jnp.arange(5, 40)].set(1)
    key = jax.random.key(3)
    for mix in (0.0, 0.3, 0.5, 1.0):
        static = sample_ttt_rows(key, w, 16, mix, DATA)
        traced = jax.jit(lambda m: sample_ttt_rows(key, w, 16, 0.0, DATA, m))(n_uniform(16, mix))
        np.testing.assert_array_equal(static, traced)
