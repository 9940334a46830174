"""Exact parity with the reference agents (OGBench's impls/, the GC-TTT authors' code): the same initial agent, the
same 100 batches, `ttt`'s own update; every loss term at every update, the final parameters and the forward outputs
against the reference's (fixtures: tests/fixtures/parity/, benchmarks/published/PARITY.md).

Tolerances (relative above 1, absolute below: `parity_cases.max_rel`), chosen from what float32 rounding gives and
what a real difference gives (benchmarks/studies/same-checkpoint.md):

- forward outputs 2e-5: the worst case seen is 3.4e-6 (a 29-input value net of three LayerNorm layers); float32's
  epsilon is 1.2e-7, and two XLA versions order sums differently;
- every loss term at every update 2e-5 (worst seen 1.1e-6), final parameters 1e-5 (worst seen 1.2e-7);
- QRL's training amplifies float32 rounding itself: a 1e-7 relative nudge of ttt's own initial parameters moves
  ttt's QRL losses by 2e-4 and its parameters by 4e-4 within 100 updates (from about update 64, as the
  constraint d(s, s') <= 1 starts to bind), exactly as far as the reference's differ; so QRL is held to the
  tolerances above over its first 60 updates and to 1e-3 after (`CHAOTIC`, benchmarks/published/parity_table.py);
- a real difference is far above: moving GC-IQL's target critic from the online critic AFTER the step instead of
  before (ttt's order until this fixture found it) moves the losses by 2e-3 and the parameters by 9e-5 within 100
  updates (`test_the_tolerances_catch_a_target_update_order`).
"""

from __future__ import annotations

import equinox as eqx
import pytest
from parity_cases import CASES, load_case, max_rel, replay

from ttt.checkpoint import TrainState, make_optimizer

FORWARD_TOL, LOSS_TOL, PARAM_TOL = 2e-5, 2e-5, 1e-5
CHAOTIC = {"ogbench-qrl": 60}  # case -> updates compared at the tight tolerances; 1e-3 after (see above)
LOOSE = 1e-3

pytestmark = pytest.mark.skipif(not CASES, reason="no parity fixtures")


def _check(r, name):
    tight = CHAOTIC.get(name)
    for k, (mine, theirs) in r.init_forward.items():
        assert mine.shape == theirs.shape, (name, k)
        assert max_rel(mine, theirs) < FORWARD_TOL, (name, k, max_rel(mine, theirs))
    for k, (mine, theirs) in r.final_forward.items():
        assert max_rel(mine, theirs) < (FORWARD_TOL if tight is None else LOOSE), (name, k, max_rel(mine, theirs))
    assert r.losses, name
    for k, (mine, theirs) in r.losses.items():
        assert max_rel(mine[:tight], theirs[:tight]) < LOSS_TOL, (name, k, max_rel(mine[:tight], theirs[:tight]))
        assert max_rel(mine, theirs) < LOOSE, (name, k, max_rel(mine, theirs))
    for path, mine, theirs in r.final:
        assert max_rel(mine, theirs) < (PARAM_TOL if tight is None else LOOSE), (name, path, max_rel(mine, theirs))


@pytest.mark.parametrize("name", CASES)
def test_update_and_forward_match_the_reference(name):
    case = load_case(name)
    r = replay(case)
    # Every loss term ttt computes is compared (the reference's grad/* statistics have no counterpart).
    ours = set(r.losses)
    assert any(k.endswith("_loss") for k in ours)
    theirs = {k[len("info__"):].replace(".", "/") for k in case.data if k.startswith("info__")}
    assert {k for k in theirs if k.endswith("_loss")} <= ours, sorted(theirs - ours)
    assert len(r.final) > 0 and r.init_forward and r.final_forward
    _check(r, name)


def test_the_tolerances_catch_a_target_update_order():
    """The old order (targets averaged from the critic after Adam's step) fails the same checks."""
    name = "ogbench-gciql-ddpgbc"
    if name not in CASES:
        pytest.skip("no GC-IQL fixture")

    def after_step(bb, cfg):
        opt = make_optimizer(cfg)

        def step(state, batch, key):
            (loss, m), g = eqx.filter_value_and_grad(bb.loss, has_aux=True)(state.agent, batch, key, cfg)
            u, o = opt.update(g, state.opt_state, eqx.filter(state.agent, eqx.is_array))
            return TrainState(bb.target_update(eqx.apply_updates(state.agent, u), cfg), o, state.step + 1), loss, m

        return step

    r = replay(load_case(name), after_step)
    assert max(max_rel(a, b) for a, b in r.losses.values()) > 10 * LOSS_TOL
    assert max(max_rel(a, b) for _, a, b in r.final) > 5 * PARAM_TOL
    with pytest.raises(AssertionError):
        _check(r, name)


def test_the_fixtures_are_the_reference_code_s_own_pickles():
    """The initial agents were written by the reference's save_agent (their bytes), with non-default sizes."""
    import hashlib

    seen_sizes = set()
    for name in CASES:
        case = load_case(name)
        for which in ("init", "final"):
            got = hashlib.sha256((case.dir / f"{which}.pkl").read_bytes()).hexdigest()
            assert got == case.meta["pickles"]["sha256"][f"{which}.pkl"], (name, which)
        seen_sizes.add((case.meta["obs_dim"], tuple(case.meta["config"]["actor_hidden_dims"])))
    assert {o for o, _ in seen_sizes} >= {2, 29} or len(CASES) < 2
    assert all(dims != (512, 512, 512) for _, dims in seen_sizes)
