"""Test-time graph search's pure pieces (`ttt.graph`) on tiny hand-drawn graphs with hand-computed answers: step
counts from values, the long-edge penalty, shortest paths and successors, paths, the adaptive subgoal (and the
fallback to the goal when the goal's vertex is unreachable), vertices the same for the same key."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_same_values

from ttt.agents import get_backbone
from ttt.graph import (
    FAR_STEPS,
    TTGSConfig,
    choose_subgoal,
    path_from,
    penalised_weights,
    sample_vertices,
    shortest_to,
    slide_path,
    value_steps,
)

GCBC = get_backbone("gcbc")

INF = np.inf


def test_value_steps_inverts_ogbench_values():
    gamma = 0.99
    d = np.array([1.0, 10.0, 50.0])
    v = -(1 - gamma**d) / (1 - gamma)
    np.testing.assert_allclose(value_steps(jnp.asarray(v, jnp.float32), gamma), d, rtol=1e-3)
    assert float(value_steps(jnp.float32(jnp.nan), gamma)) == FAR_STEPS
    assert 0 <= float(value_steps(jnp.float32(0.0), gamma)) < 0.01  # V = 0 is clipped to -1e-3: ~0.001 steps
    assert float(value_steps(jnp.float32(-500.0), gamma)) > 500  # below -1/(1-gamma): clipped, very far


def test_long_edge_penalty_by_hand():
    """Up to tau an edge costs its distance; above it d * penalty^(d / tau); at least 1; no self-loops; an edge far
    beyond tau costs inf in float32."""
    d = jnp.array([[0.0, 0.3, 24.0], [48.0, 0.0, 30.0], [400.0, 12.0, 0.0]], jnp.float32)
    w = np.asarray(penalised_weights(d, tau=24.0, penalty=1000.0))
    assert np.isinf(np.diag(w)).all()
    assert w[0, 1] == 1.0  # at least 1
    assert w[0, 2] == 24.0 and w[2, 1] == 12.0  # at tau: not penalised
    np.testing.assert_allclose(w[1, 0], 48.0 * 1000.0**2, rtol=1e-5)  # 48 = 2 tau: 48 * 1000^2
    np.testing.assert_allclose(w[1, 2], 30.0 * 1000.0**1.25, rtol=1e-5)
    assert np.isinf(w[2, 0])  # 1000^(400/24) overflows float32
    assert (np.asarray(penalised_weights(d, 24.0, 1.0))[[1, 1], [0, 2]] == [48.0, 30.0]).all()  # penalty 1: none


def _graph(d):
    return jnp.asarray(np.array(d, np.float32))


# A hand-drawn graph: 0 -> 2 directly is 26 steps (just above tau 24), through 1 it is 14 + 14 = 28.
DETOUR = [[0, 14, 26, 40], [14, 0, 14, 30], [26, 14, 0, 6], [40, 30, 6, 0]]


def test_penalty_changes_the_shortest_path():
    """Without a penalty the direct 26-step edge wins (26 < 28); with the published penalty it costs 26 * 1000^(26
    /24), so the path goes through vertex 1."""
    plain = penalised_weights(_graph(DETOUR), 24.0, 1.0)
    cost, succ = shortest_to(plain, 2)
    np.testing.assert_array_equal(np.asarray(cost), [26, 14, 0, 6])
    np.testing.assert_array_equal(np.asarray(succ), [2, 2, 2, 2])
    cost, succ = shortest_to(penalised_weights(_graph(DETOUR), 24.0, 1000.0), 2)
    np.testing.assert_array_equal(np.asarray(cost), [28, 14, 0, 6])
    np.testing.assert_array_equal(np.asarray(succ), [1, 2, 2, 2])
    path, n, reachable, truncated = path_from(succ, cost, 0, 5)
    np.testing.assert_array_equal(np.asarray(path), [0, 1, 2, 2, 2])
    assert (int(n), bool(reachable), bool(truncated)) == (3, True, False)
    path, n, _, _ = path_from(succ, cost, 2, 5)  # the start is the target: one point
    assert int(n) == 1 and (np.asarray(path) == 2).all()


def test_shortest_to_matches_floyd_warshall():
    rng = np.random.default_rng(0)
    d = rng.uniform(0.5, 60.0, (9, 9)).astype(np.float32)
    w = np.asarray(penalised_weights(jnp.asarray(d), 24.0, 1000.0))
    fw = w.copy()
    np.fill_diagonal(fw, 0)
    for k in range(9):
        fw = np.minimum(fw, fw[:, k : k + 1] + fw[k : k + 1, :])
    for t in (0, 4, 8):
        cost, succ = shortest_to(jnp.asarray(w), t)
        np.testing.assert_allclose(np.asarray(cost), fw[:, t], rtol=1e-5)
        cost, succ = np.asarray(cost), np.asarray(succ)
        for i in range(9):  # following successors adds up to the cost
            if i != t:
                np.testing.assert_allclose(w[i, succ[i]] + cost[succ[i]], cost[i], rtol=1e-5)


def test_unreachable_goal_vertex():
    """Two islands {0, 1} and {2, 3} joined only by 400-step edges (inf once penalised): no path from 0 to 3."""
    d = [[0, 5, 400, 400], [5, 0, 400, 400], [400, 400, 0, 5], [400, 400, 5, 0]]
    cost, succ = shortest_to(penalised_weights(_graph(d), 24.0, 1000.0), 3)
    np.testing.assert_array_equal(np.isinf(np.asarray(cost)), [True, True, False, False])
    path, n, reachable, truncated = path_from(succ, cost, 0, 4)
    assert (int(n), bool(reachable), bool(truncated)) == (1, False, False)
    # The subgoal rule then gives the final goal (-1) even where a path point would qualify.
    k, _ = choose_subgoal(jnp.array([1.0, 2.0, 3.0, 4.0]), n, jnp.float32(100.0), jnp.float32(100.0), jnp.int32(0),
                          48.0, reachable)  # fmt: skip
    assert int(k) == -1


def test_long_path_is_truncated():
    n = 8  # a chain 0 -> 1 -> ... -> 7, each edge 2 steps, every other edge too long
    d = np.full((n, n), 500.0, np.float32)
    for i in range(n - 1):
        d[i, i + 1] = 2.0
    cost, succ = shortest_to(penalised_weights(jnp.asarray(d), 24.0, 1000.0), n - 1)
    np.testing.assert_array_equal(np.asarray(cost), 2.0 * np.arange(n - 1, -1, -1))
    path, k, reachable, truncated = path_from(succ, cost, 0, 4)
    np.testing.assert_array_equal(np.asarray(path), [0, 1, 2, 3])
    assert (int(k), bool(reachable), bool(truncated)) == (4, True, True)


def test_cut_path_slides_on_once_the_state_is_past_half_by_hand():
    """The chain 0 -> 1 -> ... -> 7 held 4 vertices at a time: at closest 1 the path stays; at closest 2 (half of 4)
    it is walked on from vertex 2; once the held path ends at the target it never moves again."""
    n = 8
    d = np.full((n, n), 500.0, np.float32)
    for i in range(n - 1):
        d[i, i + 1] = 2.0
    cost, succ = shortest_to(penalised_weights(jnp.asarray(d), 24.0, 1000.0), n - 1)
    path, k, _, _ = path_from(succ, cost, 0, 4)

    def slid(path, k, closest):
        path, k, closest, moved = slide_path(succ, cost, path, k, jnp.int32(closest))
        return np.asarray(path).tolist(), int(k), int(closest), bool(moved)

    assert slid(path, k, 1) == ([0, 1, 2, 3], 4, 1, False)  # under half: as it was
    assert slid(path, k, 2) == ([2, 3, 4, 5], 4, 0, True)  # the same vertices on from 2, then the next ones
    on, k_on, _, _ = path_from(succ, cost, 4, 4)  # [4, 5, 6, 7]: ends at the target
    assert slid(on, k_on, 3) == ([4, 5, 6, 7], 4, 3, False)
    short, k_short, _, _ = path_from(succ, cost, 5, 4)  # [5, 6, 7] padded: fewer than 4 vertices
    assert slid(short, k_short, 2) == ([5, 6, 7, 7], 3, 2, False)


@pytest.mark.parametrize(
    "d_path, d_goal, d_end, prev, want, want_closest",
    [
        ([3, 10, 40, 60, 0], 100, 5, 0, 2, 0),  # furthest point ahead within the threshold (48): 2
        ([30, 10, 40, 60, 0], 100, 5, 0, 2, 1),  # closest is point 1; 2 is the furthest within reach
        ([3, 10, 40, 60, 0], 100, 5, 2, 3, 2),  # never behind the last closest (2); none within reach ahead: 2 + 1
        ([3, 10, 40, 60, 0], 100, 100, 2, -1, 2),  # ... that is the last point, and it is far from the goal: goal
        ([3, 10, 40, 60, 0], 30, 5, 0, -1, 0),  # within the threshold of the goal: the goal
        ([50, 55, 60, 70, 0], 100, 5, 0, 1, 0),  # nothing within reach: the point after the closest
        ([90, 80, 70, 3, 0], 100, 5, 0, 3, 3),  # at the last point already, its end near the goal: the last point
    ],
)
def test_choose_subgoal_by_hand(d_path, d_goal, d_end, prev, want, want_closest):
    k, closest = choose_subgoal(jnp.array(d_path, jnp.float32), jnp.int32(4), jnp.float32(d_goal),
                                jnp.float32(d_end), jnp.int32(prev), 48.0)  # fmt: skip
    assert (int(k), int(closest)) == (want, want_closest)


def test_same_key_same_vertices():
    a = sample_vertices(jax.random.key(0), 1000, 50)
    b = sample_vertices(jax.random.key(0), 1000, 50)
    c = sample_vertices(jax.random.key(1), 1000, 50)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.array_equal(np.asarray(a), np.asarray(c))
    assert len(set(np.asarray(a).tolist())) == 50 and (np.asarray(a) < 1000).all()
    with pytest.raises(ValueError, match="n_vertices"):
        sample_vertices(jax.random.key(0), 10, 11)


def test_config_checks():
    with pytest.raises(ValueError, match="distance must be one of value, l2"):
        TTGSConfig(distance="euclid")
    with pytest.raises(ValueError, match="tau"):
        TTGSConfig(tau=0.0)
    with pytest.raises(ValueError, match="max_hops"):
        TTGSConfig(max_hops=1)


# ---------------------------------------------------------------------------------------------------------------
# The compiled episode with TTGS (`make_episodes(..., ttgs=...)`) on the wall-free toy point env.


def _episodes(ttgs, backbone_cfg=None):
    import equinox as eqx
    from test_episode import CFG, DATA, ENV, SAMPLER, SPEC, L, agents, keys_tasks

    from ttt.episode import make_episodes

    run = eqx.filter_jit(make_episodes(GCBC, backbone_cfg or CFG, SAMPLER, SPEC, None, L, ttgs=ttgs))
    rk, tk, tasks = keys_tasks(2)
    return run(agents(2), None, ENV, DATA, rk, tk, tasks), DATA


@pytest.mark.parametrize("distance", ["value", "l2"])
def test_episode_within_threshold_of_the_goal_is_the_base_policy(distance):
    """With a threshold no distance exceeds, every step's subgoal is the goal: the episodes equal the base
    policy's, and the metrics say every step acted towards the goal."""
    base, _ = _episodes(None)
    out, _ = _episodes(TTGSConfig(n_vertices=30, threshold=1e9, distance=distance, max_hops=8))
    assert_same_values(out.observations, base.observations)  # float32 rounding under the suite's XLA flags
    np.testing.assert_array_equal(np.asarray(out.rounds["ttgs_goal_frac"]), 1.0)
    assert "ttgs_goal_frac" not in base.rounds


def test_episode_unreachable_goal_falls_back_to_the_goal():
    """Every edge longer than tau = 1e-6 steps and penalty 1e30: every edge costs inf, no path reaches the goal's
    vertex, the policy acts towards the goal (the base policy's episodes) and the round metrics count the plan."""
    base, _ = _episodes(None)
    cfg = TTGSConfig(n_vertices=30, tau=1e-6, penalty=1e30, threshold=1e-3, distance="l2", max_hops=8)
    out, _ = _episodes(cfg)
    assert_same_values(out.observations, base.observations)  # float32 rounding under the suite's XLA flags
    np.testing.assert_array_equal(np.asarray(out.rounds["ttgs_unreachable"]), 1)
    np.testing.assert_array_equal(np.asarray(out.rounds["ttgs_goal_frac"]), 1.0)


def test_episode_acts_towards_dataset_subgoals():
    """With a small threshold the policy is handed path points (dataset observations) on some steps, so the
    episodes differ from the base policy's; replanning every step it drifts from its subgoal counts plans."""
    base, data = _episodes(None)
    cfg = TTGSConfig(n_vertices=60, tau=6.0, threshold=4.0, distance="l2", max_hops=8, replan_factor=0.5,
                     replan_cooldown=3)  # fmt: skip
    out, _ = _episodes(cfg)
    frac = np.asarray(out.rounds["ttgs_goal_frac"])
    assert (frac < 1.0).all()
    assert not np.array_equal(np.asarray(out.observations), np.asarray(base.observations))
    assert (np.asarray(out.rounds["ttgs_plans"]) >= 1).all() and (np.asarray(out.rounds["ttgs_unreachable"]) == 0).all()


def _walk(mode, max_hops, xs_visited):
    """The subgoals (their x) TTGS hands out to a state visiting `xs_visited` on a line of vertices x = 0..7,
    neighbours 1 apart (tau 1.5: longer edges penalised), the goal at x = 7, threshold 1.5 (the next vertex)."""
    from ttt.data.specs import get_spec
    from ttt.graph import Graph, make_ttgs

    cfg = TTGSConfig(n_vertices=8, tau=1.5, threshold=1.5, distance="l2", max_hops=max_hops, path=mode)
    _, _, plan, subgoal, _ = make_ttgs(GCBC, None, get_spec("pointmaze-medium-navigate-v0"), cfg)
    xs = jnp.stack([jnp.arange(8.0), jnp.zeros(8)], axis=1)
    d = jnp.abs(xs[:, None, 0] - xs[None, :, 0])
    cost, succ = shortest_to(penalised_weights(d, cfg.tau, cfg.penalty), 7)
    graph = Graph(vertices=xs, cost=cost, succ=succ, target=jnp.int32(7), scale=jnp.float32(1.0))
    p = plan(None, graph, xs[xs_visited[0]], xs[7])
    handed = []
    for x in xs_visited:
        sub, p = subgoal(None, graph, p, xs[x], xs[7])
        handed.append(float(sub[0]))
    return handed, int(p.truncated)


@pytest.mark.parametrize("mode", ["cut", "slide"])
def test_walking_a_path_longer_than_max_hops(mode):
    """4 vertices held of the 8-vertex path. Walking the line, 'cut' hands out the goal once the state is at the
    last held vertex (x = 3, 4 from the goal); 'slide' walks the path on and hands out x + 1 all the way. A state
    that jumps to the last held vertex gets that vertex under 'slide' (the held end is not the path's end), then
    the path walks on."""
    handed, truncated = _walk(mode, 4, [0, 1, 2, 3, 4, 5, 6])
    assert truncated == 1
    jump, _ = _walk(mode, 4, [0, 3, 4])
    if mode == "cut":
        assert handed == [1.0, 2.0, 3.0, 7.0, 7.0, 7.0, 7.0]  # past x = 3 (the last held vertex): the goal
        assert jump == [1.0, 7.0, 7.0]
    else:
        assert handed == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]  # x = 6 is within 1.5 of the goal: the goal itself
        assert jump == [1.0, 3.0, 5.0]


def test_a_path_that_fits_max_hops_exactly_is_the_same_whether_it_slides():
    """8 vertices held of the 8-vertex path (the boundary: the held end is the target): 'slide' never moves it, so
    both modes hand out the same subgoals, jumps included."""
    for visited in ([0, 1, 2, 3, 4, 5, 6], [0, 3, 4, 6]):
        cut, t_cut = _walk("cut", 8, visited)
        slide, t_slide = _walk("slide", 8, visited)
        assert cut == slide and t_cut == t_slide == 0


@pytest.mark.parametrize("mode, rule", [("critic", "episodes"), ("mc", "paper")])
def test_ttt_towards_a_subgoal_that_is_the_goal_is_gc_ttt(mode, rule):
    """Variant ttt+ttgs with a threshold no distance exceeds: every round's subgoal is the goal, so its selections,
    fine-tuning and episodes are GC-TTT's (the tables prepared anew each round equal the carried ones); with a small
    threshold the rounds aim at path points and the episodes differ."""
    import equinox as eqx
    from test_episode import CFG, DATA, ENV, SAMPLER, SPEC, L, agents, keys_tasks, ttt_cfg

    from ttt.episode import make_episodes

    rk, tk, tasks = keys_tasks(2)
    ag = agents(2)

    def run(ttgs):
        program = eqx.filter_jit(make_episodes(GCBC, CFG, SAMPLER, SPEC, ttt_cfg(mode, rule=rule), L, ttgs=ttgs))
        return program(ag, None, ENV, DATA, rk, tk, tasks)

    gc_ttt = run(None)
    same = run(TTGSConfig(n_vertices=30, threshold=1e9, distance="l2", max_hops=8))
    assert_same_values(same.observations, gc_ttt.observations)
    for name in ("n_rel", "n_selected", "n_train_rows"):
        np.testing.assert_array_equal(same.rounds[name], gc_ttt.rounds[name])
    assert (np.asarray(gc_ttt.rounds["n_selected"]) > 0).any()
    other = run(TTGSConfig(n_vertices=60, tau=6.0, threshold=4.0, distance="l2", max_hops=8))
    assert (np.asarray(other.rounds["ttgs_goal_frac"]) < 1).all()
    assert not np.array_equal(np.asarray(other.observations), np.asarray(gc_ttt.observations))


def test_l2_distance_scale_is_the_mean_valid_step_by_hand():
    """The l2 normaliser is the mean step length in goal coordinates over the rows that carry an action (each
    episode's final row has none): episode A steps 3 then 4 (a 3-4-5 walk: lengths 3, 4), episode B one step of 5,
    so (3 + 4 + 5) / 3 = 4; the value distance's scale is 1."""
    from ttt.data.dataset import Dataset
    from ttt.graph import distance_scale

    obs = np.array([[0, 0], [3, 0], [3, 4], [10, 10], [13, 14]], np.float32)
    terminals = np.array([0, 0, 1, 0, 1], bool)
    data = Dataset.from_arrays(obs, np.zeros((5, 2), np.float32), terminals)
    assert float(distance_scale(TTGSConfig(distance="l2"), data)) == pytest.approx(4.0)
    assert float(distance_scale(TTGSConfig(distance="value"), data)) == 1.0


def test_tau_and_threshold_default_to_the_published_ones_per_dataset():
    """TTGS's hyper-parameter table sets tau / threshold per dataset (GC-IQL column: giant navigate 12 / 24, giant
    stitch 6 / 12, large stitch 48 / 96; QRL's differs); unset fields take them, set fields and configs stay."""
    from ttt.data.specs import get_spec
    from ttt.graph import TTGSConfig
    from ttt.presets import agent_backbone, make_configs
    from ttt.setups import make_setup

    def resolved(agent, dataset, ttgs=None):
        spec = get_spec(dataset)
        cfg, sampler = make_configs(agent, spec, "cpu")
        g = make_setup("ttgs", agent_backbone(agent), cfg, sampler, spec, 1000, ttgs=ttgs).ttgs
        return g.tau, g.threshold

    assert resolved("gciql", "pointmaze-giant-navigate-v0") == (12.0, 24.0)
    assert resolved("gcbc", "pointmaze-giant-stitch-v0") == (6.0, 12.0)  # GC-BC's critic: GC-IQL's column
    assert resolved("gciql", "pointmaze-large-stitch-v0") == (48.0, 96.0)
    assert resolved("qrl", "pointmaze-giant-navigate-v0") == (24.0, 48.0)  # QRL's column differs
    assert resolved("qrl", "pointmaze-giant-stitch-v0") == (12.0, 24.0)
    assert resolved("gciql", "pointmaze-medium-navigate-v0") == (24.0, 48.0)
    assert resolved("gciql", "pointmaze-giant-navigate-v0", {"tau": 30.0}) == (30.0, 24.0)
    assert resolved("gciql", "pointmaze-giant-navigate-v0", TTGSConfig()) == (24.0, 48.0)  # a config as it is
