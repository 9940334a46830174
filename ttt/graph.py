"""Test-time graph search (TTGS: Opryshko, Quan, Voelcker, Du, Gilitschenski, arXiv 2510.07257; published code
ktolnos/TTGS, `impls/ttgs.py`) as pure, fixed-shape functions (docs/algorithm.md, "Test-time graph search").

No training at test time: dataset observations are the vertices of a dense directed graph whose edge weights are
distances in environment steps (from the backbone's value, or from goal coordinates), long edges are penalised, and
the frozen policy is handed, at every step, the furthest point of the shortest path from its state to the goal that
is still within `threshold` steps of it.

The pieces, each a pure function with a hand-checkable answer (tests/test_graph.py):

- `sample_vertices(key, n_rows, n)`: which rows are vertices (uniform without replacement; same key, same rows);
- `value_steps(values, gamma)`: steps to the goal from `V(s, g)` (the inverse of `V = -(1 - gamma^d) / (1 - gamma)`);
- `penalised_weights(dist, tau, penalty)`: the long-edge penalty (`d * penalty^(d / tau)` above `tau`, at least 1);
- `shortest_to(weights, target)`: shortest-path cost from every vertex to one vertex and each vertex's successor;
- `path_from(succ, cost, start, max_hops)`: the path from a vertex, padded to a fixed length;
- `choose_subgoal(...)`: the adaptive subgoal rule, with the fallback to the final goal;

and `make_ttgs(...)`, which composes them with a backbone's distance into the four functions the compiled episode
calls (`build` once per goal, `plan` at the start and at each replan, `subgoal` every step, `after_step`).
"""

from __future__ import annotations

import dataclasses
import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from ttt.agents.common import Backbone
from ttt.data.dataset import Dataset
from ttt.data.specs import DatasetSpec

DISTANCES = ("value", "l2")
PATHS = ("slide", "cut")
FAR_STEPS = 10000.0  # what a NaN step count becomes (the published code's constant)
TTGS_METRICS = ("ttgs_unreachable", "ttgs_plans", "ttgs_hops", "ttgs_truncated", "ttgs_goal_frac")


# The published per-dataset `tau` / `threshold` where they differ from the defaults 24 / 48 (TTGS's hyper-parameter
# table, impls/hyperparameters.sh: its GC-IQL and QRL columns); other backbones (GC-BC's critic, SAW) take GC-IQL's.
PUBLISHED_TAU_THRESHOLD: dict[str, dict[str, tuple[float, float]]] = {
    "gciql": {
        "pointmaze-large-stitch-v0": (48.0, 96.0),
        "pointmaze-giant-navigate-v0": (12.0, 24.0),
        "pointmaze-giant-stitch-v0": (6.0, 12.0),
        "antmaze-giant-navigate-v0": (12.0, 24.0),
        "antmaze-giant-stitch-v0": (12.0, 24.0),
    },
    "qrl": {
        "pointmaze-giant-stitch-v0": (12.0, 24.0),
        "antmaze-giant-navigate-v0": (12.0, 24.0),
        "antmaze-giant-stitch-v0": (12.0, 24.0),
    },
}


def published_tau_threshold(backbone: str, dataset: str | None) -> tuple[float, float]:
    """TTGS's published `(tau, threshold)` for a backbone on a dataset (`PUBLISHED_TAU_THRESHOLD`; else 24, 48)."""
    table = PUBLISHED_TAU_THRESHOLD["qrl" if backbone == "qrl" else "gciql"]
    return table.get(dataset, (TTGSConfig.tau, TTGSConfig.threshold))


@dataclasses.dataclass(frozen=True)
class TTGSConfig:
    """Static TTGS settings (the published defaults, `impls/main.py` and `impls/hyperparameters.sh`, where given).

    - `n_vertices` (published `random_size`, 4000): dataset rows drawn as vertices (`vertex_seed`, published 0);
    - `tau` (24; `make_setup` from a dict: the dataset's published value, `published_tau_threshold`): edges
      longer than `tau` steps are penalised, `d * penalty^(d / tau)` (`penalty` 1000, the
      published 'dynamic' mode); every weight is at least 1;
    - `threshold` (48): the subgoal is the furthest path point within `threshold` steps; within `threshold` of the
      goal, the goal itself;
    - `distance`: 'value' (steps from the backbone's `V(s, g)`, needs a value function) or 'l2' (the published
      `dist_mode='l2'`: goal-coordinate distance divided by the dataset's mean step length);
    - `max_hops` (ours): the path is held as `max_hops` vertices at a time (a fixed shape; the published code keeps
      all); a longer path counts in the round metric `ttgs_truncated`, and `path` says what follows its last vertex:
      'slide' (the default) walks on along the shortest-path successors once the state is past half of the held
      vertices, so the whole path is followed as the published code follows it; 'cut' (before 2026-11-28) ends it
      there, and past its last vertex the policy acts towards the final goal;
    - `replan_factor` (published default 0: off), `replan_cooldown` (50): replan from the current state when its
      distance to the current subgoal exceeds `replan_factor * threshold`, at most once per `replan_cooldown` steps;
    - `chunk`: rows of the vertex distance matrix per pass (memory only, not results).
    """

    n_vertices: int = 4000
    tau: float = 24.0
    threshold: float = 48.0
    penalty: float = 1000.0
    distance: str = "value"
    max_hops: int = 64
    path: str = "slide"
    replan_factor: float = 0.0
    replan_cooldown: int = 50
    vertex_seed: int = 0
    chunk: int = 64

    def __post_init__(self):
        def whole(x, lo):
            return isinstance(x, int) and not isinstance(x, bool) and x >= lo

        checks = (
            ("n_vertices", whole(self.n_vertices, 2), "an int >= 2"),
            ("tau", _finite(self.tau) and self.tau > 0, "a finite number > 0"),
            ("threshold", _finite(self.threshold) and self.threshold > 0, "a finite number > 0"),
            ("penalty", _finite(self.penalty) and self.penalty >= 1, "a finite number >= 1"),
            ("distance", self.distance in DISTANCES, f"one of {', '.join(DISTANCES)}"),
            ("max_hops", whole(self.max_hops, 2), "an int >= 2"),
            ("path", self.path in PATHS, f"one of {', '.join(PATHS)}"),
            ("replan_factor", _finite(self.replan_factor) and self.replan_factor >= 0, "a finite number >= 0 (0: off)"),
            ("replan_cooldown", whole(self.replan_cooldown, 0), "an int >= 0"),
            ("vertex_seed", whole(self.vertex_seed, 0), "an int >= 0"),
            ("chunk", whole(self.chunk, 1), "an int >= 1"),
        )
        for name, ok, valid in checks:
            if not ok:
                raise ValueError(f"TTGS {name} must be {valid}, got {getattr(self, name)!r}")


def _finite(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


# ---------------------------------------------------------------------------------------------------------------
# The pure pieces.


def sample_vertices(key: PRNGKeyArray, n_rows: int, n: int) -> Int[Array, " n"]:
    """`n` distinct row indices of `n_rows`, uniform without replacement; the same key gives the same rows."""
    if n > n_rows:
        raise ValueError(f"TTGS n_vertices ({n}) exceeds the dataset's rows ({n_rows})")
    return jax.random.choice(key, n_rows, (n,), replace=False).astype(jnp.int32)


def value_steps(values: Float[Array, "*b"], gamma: float) -> Float[Array, "*b"]:
    """Steps to the goal from OGBench-scale values `V = -(1 - gamma^d) / (1 - gamma)`: `log(1 + (1 - gamma) V) /
    log(gamma)`, with V clipped to `[-1 / (1 - gamma) + 1e-3, -1e-3]`, at least 0, NaN -> `FAR_STEPS` (as the
    published `_value_distance`)."""
    v = jnp.clip(values, -1.0 / (1.0 - gamma) + 1e-3, -1e-3)
    steps = jnp.maximum(jnp.log(v * (1.0 - gamma) + 1.0) / jnp.log(gamma), 0.0)
    return jnp.where(jnp.isnan(steps), FAR_STEPS, steps)


def penalised_weights(dist: Float[Array, "n n"], tau: float, penalty: float) -> Float[Array, "n n"]:
    """Edge weights from distances `dist[i, j]` (steps from vertex i to j): `d` up to `tau`, `d * penalty^(d /
    tau)` above it (the published 'dynamic' penalty: an edge the value cannot be trusted on costs more the longer it
    is; in float32 an edge beyond about 12.8 `tau` costs inf), at least 1; no self-loops (inf on the diagonal)."""
    n = dist.shape[0]
    w = jnp.where(dist > tau, dist * jnp.power(penalty, dist / tau), dist)
    w = jnp.maximum(w, 1.0)
    return jnp.where(jnp.eye(n, dtype=bool), jnp.inf, w)


def shortest_to(
    weights: Float[Array, "n n"], target: Int[Array, ""] | int
) -> tuple[Float[Array, " n"], Int[Array, " n"]]:
    """Shortest-path cost from every vertex to `target` and each vertex's successor on that path (`weights[i, j]`:
    the edge i -> j; inf: no edge).

    Bellman-Ford in its dense, vectorised form: `cost <- min(cost, min_j weights[:, j] + cost[j])`, a
    `lax.while_loop` until nothing changes (at most n - 1 passes; in practice the hop count of the longest shortest
    path, a few tens). Each pass is one O(n^2) min-plus product, which vectorises and vmaps; Dijkstra would need n
    sequential argmin steps, Floyd-Warshall n^3 work (6.4e10 at the published 4000 vertices). Weights are >= 1, so
    following successors strictly lowers the cost and ends at `target`. Successor ties: the lowest index. A vertex
    that cannot reach `target` has cost inf and is its own successor."""
    n = weights.shape[0]
    target = jnp.asarray(target, jnp.int32)
    cost0 = jnp.full((n,), jnp.inf, weights.dtype).at[target].set(0.0)

    def body(c):
        cost, _, it = c
        new = jnp.minimum(cost, jnp.min(weights + cost[None, :], axis=1)).at[target].set(0.0)
        return new, jnp.any(new < cost), it + 1

    cost, _, _ = jax.lax.while_loop(lambda c: c[1] & (c[2] < n), body, (cost0, jnp.bool_(True), jnp.int32(0)))
    succ = jnp.argmin(weights + cost[None, :], axis=1).astype(jnp.int32)
    me = jnp.arange(n, dtype=jnp.int32)
    succ = jnp.where(jnp.isfinite(cost) & (me != target), succ, me)
    return cost, succ


def path_from(
    succ: Int[Array, " n"], cost: Float[Array, " n"], start: Int[Array, ""] | int, max_hops: int
) -> tuple[Int[Array, " P"], Int[Array, ""], Bool[Array, ""], Bool[Array, ""]]:
    """The path `start, succ[start], ...` to the target as `max_hops` vertices (padded with its last vertex).

    Returns `(path, n_points, reachable, truncated)`: `n_points` the path's vertices kept (the start counts; 1 when
    `start` is the target or the target is unreachable), `reachable` whether `cost[start]` is finite, `truncated`
    whether the path has more than `max_hops` vertices (then the first `max_hops` are kept)."""
    start = jnp.asarray(start, jnp.int32)

    def step(v, _):
        return succ[v], v

    _, path = jax.lax.scan(step, start, None, length=max_hops)
    at_end = path == succ[path]  # the target (or an unreachable start): its own successor
    n_points = jnp.where(jnp.any(at_end), jnp.argmax(at_end) + 1, max_hops).astype(jnp.int32)
    path = jnp.where(jnp.arange(max_hops) < n_points, path, path[n_points - 1])
    return path, n_points, jnp.isfinite(cost[start]), ~jnp.any(at_end)


def slide_path(
    succ: Int[Array, " n"],
    cost: Float[Array, " n"],
    path: Int[Array, " P"],
    n_points: Int[Array, ""],
    closest: Int[Array, ""],
) -> tuple[Int[Array, " P"], Int[Array, ""], Int[Array, ""], Bool[Array, ""]]:
    """A held path that does not reach the target, walked on: when all `P` held vertices are path (`n_points == P`),
    the last is not the target (its own successor) and `closest` is at least `P // 2`, the path re-walked from
    `path[closest]` (the same vertices from there on, then the next ones: `P` again), with `closest` 0; else as it
    was. Returns `(path, n_points, closest, moved)`: so a path longer than `P` is followed whole, walked on at the
    step after the state's closest point passes half of the held vertices."""
    P = path.shape[0]
    last = path[P - 1]
    moved = (n_points == P) & (succ[last] != last) & (closest >= P // 2)
    new, new_n, _, _ = path_from(succ, cost, path[closest], P)
    keep = lambda a, b: jnp.where(moved, a, b)  # noqa: E731
    return keep(new, path), keep(new_n, n_points), keep(jnp.int32(0), closest).astype(jnp.int32), moved


def choose_subgoal(
    d_path: Float[Array, " P"],
    n_points: Int[Array, ""],
    d_goal: Float[Array, ""],
    d_end: Float[Array, ""],
    prev_closest: Int[Array, ""],
    threshold: float,
    reachable: Bool[Array, ""] | bool = True,
) -> tuple[Int[Array, ""], Int[Array, ""]]:
    """The subgoal's index on the path, or -1 for the final goal; and the path point the state is now at.

    `d_path[k]`: steps from the state to path point k (only `k < n_points` are read); `d_goal`: to the final goal;
    `d_end`: from the path's last point to the final goal; `prev_closest`: the previous step's `closest` (0 after a
    (re)plan). As the published `get_action_dijkstra_precompute` (its default `subgoal_ablt`):

    1. `closest` = the nearest path point, never behind `prev_closest`;
    2. within `threshold` steps of the goal: the goal;
    3. else the furthest point after `closest` with `d_path < threshold`;
    4. none: the point after `closest` (the last point at most); if that is the last point and `d_end > threshold`,
       the goal.

    Ours only: a path that does not reach the goal's vertex (`reachable` False: every route needs an edge whose
    penalised weight is inf) gives the goal (the fallback; the round metric `ttgs_unreachable` counts it). The
    published code follows such a path anyway and counts it in `inf_path_ratio`."""
    P = d_path.shape[0]
    idx = jnp.arange(P)
    on = idx < n_points
    closest = jnp.argmin(jnp.where(on, d_path, jnp.inf))
    closest = jnp.minimum(jnp.maximum(closest, prev_closest), n_points - 1).astype(jnp.int32)
    cand = on & (idx > closest) & (d_path < threshold)
    furthest = jnp.max(jnp.where(cand, idx, -1))
    nxt = jnp.minimum(closest + 1, n_points - 1)
    fallback = jnp.where((nxt == n_points - 1) & (d_end > threshold), -1, nxt)
    k = jnp.where(jnp.any(cand), furthest, fallback)
    k = jnp.where((d_goal <= threshold) | ~jnp.asarray(reachable), -1, k)
    return k.astype(jnp.int32), closest


# ---------------------------------------------------------------------------------------------------------------
# One backbone's TTGS: what the compiled episode calls.


class Graph(eqx.Module):
    """One goal's graph: the vertices' observations, each vertex's shortest-path cost to the goal's vertex and its
    successor there (`shortest_to`), the goal's vertex, and the distance scale (l2: the mean step length)."""

    vertices: Float[Array, "n obs"]
    cost: Float[Array, " n"]
    succ: Int[Array, " n"]
    target: Int[Array, ""]
    scale: Float[Array, ""]


class Plan(eqx.Module):
    """The current path and what the episode counts about it (carried from step to step)."""

    path: Int[Array, " P"]
    n_points: Int[Array, ""]
    d_end: Float[Array, ""]  # steps from the path's end to the goal ('slide': from the goal's vertex)
    reachable: Bool[Array, ""]
    closest: Int[Array, ""]
    since: Int[Array, ""]  # steps since the last (re)plan
    plans: Int[Array, ""]  # plans made (the first included)
    unreachable: Int[Array, ""]  # plans that found no path to the goal's vertex
    truncated: Int[Array, ""]  # plans longer than max_hops
    goal_steps: Int[Array, ""]  # steps acting towards the final goal
    steps: Int[Array, ""]  # steps acted


def distance_scale(ttgs: TTGSConfig, data: Dataset) -> Float[Array, ""]:
    """The l2 distance's normaliser (the published one: the mean step length in goal coordinates over the dataset's
    valid rows); 1 for the value distance. One pass over the dataset: once per dataset, not per goal."""
    if ttgs.distance != "l2":
        return jnp.float32(1.0)
    step = jnp.linalg.norm(data.goals[data.next_idx] - data.goals, axis=-1)
    scale = jnp.sum(jnp.where(data.valid, step, 0.0)) / jnp.maximum(jnp.sum(data.valid), 1)
    return jnp.maximum(scale, 1e-8)


def make_ttgs(backbone: Backbone, cfg, spec: DatasetSpec, ttgs: TTGSConfig):
    """`(distance, build, plan, subgoal, after_step)` of TTGS with one backbone; pure, unjitted, unbatched.

    - `distance(agent, scale, x, y) -> steps`: from observations `x` to `y` (broadcast batches);
    - `build(agent, data, goal) -> Graph`: once per goal: vertices, the n x n distance matrix (`chunk` rows per
      pass), penalised weights, the goal's vertex (the vertex nearest the goal), shortest paths to it;
    - `plan(agent, graph, obs, goal, prev=None) -> Plan`: the path from the vertex nearest `obs`;
    - `subgoal(agent, graph, plan, obs, goal) -> (subgoal observation, plan)`: every step;
    - `after_step(agent, graph, plan, obs, goal, sub, active) -> plan`: replanning (`replan_factor`).
    """
    if ttgs.distance == "value" and not backbone.has_value(cfg):
        raise ValueError(f"TTGS distance 'value' needs a value function, which this {backbone.name} agent lacks; "
                         "use distance 'l2'")  # fmt: skip
    gamma = float(getattr(cfg, "discount", 0.99))
    P = ttgs.max_hops

    def distance(agent, scale, x, y):
        x, y = jnp.broadcast_arrays(x, y)
        if ttgs.distance == "value":
            return value_steps(backbone.value(agent, x, y), gamma)
        return jnp.linalg.norm(spec.goal_coords(x) - spec.goal_coords(y), axis=-1) / scale

    def build(agent, data: Dataset, goal: Float[Array, " obs"], scale: Float[Array, ""] | None = None) -> Graph:
        """`scale`: `distance_scale(ttgs, data)`, a property of the dataset (pass it when building many graphs on
        one dataset; None computes it)."""
        rows = sample_vertices(jax.random.key(ttgs.vertex_seed), data.n_rows, ttgs.n_vertices)
        vertices = data.observations[rows]
        scale = distance_scale(ttgs, data) if scale is None else scale
        dist = jax.lax.map(lambda v: distance(agent, scale, v[None], vertices), vertices, batch_size=ttgs.chunk)
        weights = penalised_weights(dist, ttgs.tau, ttgs.penalty)
        target = jnp.argmin(distance(agent, scale, vertices, goal[None])).astype(jnp.int32)
        cost, succ = shortest_to(weights, target)
        return Graph(vertices=vertices, cost=cost, succ=succ, target=target, scale=jnp.asarray(scale, jnp.float32))

    def plan(agent, graph: Graph, obs, goal, prev: Plan | None = None) -> Plan:
        start = jnp.argmin(distance(agent, graph.scale, obs[None], graph.vertices)).astype(jnp.int32)
        path, n_points, reachable, truncated = path_from(graph.succ, graph.cost, start, P)
        end = path[n_points - 1]
        if ttgs.path == "slide":  # followed whole: a longer path's end is the goal's vertex, not its last held one
            end = jnp.where(truncated, graph.target, end)
        d_end = distance(agent, graph.scale, graph.vertices[end], goal)  # once per plan, not per step
        zero = jnp.int32(0)
        plans, unreach, trunc, goal_steps, steps = (
            (zero,) * 5 if prev is None else (prev.plans, prev.unreachable, prev.truncated, prev.goal_steps, prev.steps)
        )
        return Plan(path=path, n_points=n_points, d_end=d_end, reachable=reachable, closest=zero, since=zero,
                    plans=plans + 1, unreachable=unreach + (~reachable).astype(jnp.int32),
                    truncated=trunc + truncated.astype(jnp.int32), goal_steps=goal_steps, steps=steps)  # fmt: skip

    def subgoal(agent, graph: Graph, p: Plan, obs, goal) -> tuple[Float[Array, " obs"], Plan]:
        d_end = p.d_end  # from the path's end (under 'slide', the goal's vertex) to the goal
        if ttgs.path == "slide":  # a path longer than max_hops: walk on once the state is past half of it
            path, n_points, closest, _ = slide_path(graph.succ, graph.cost, p.path, p.n_points, p.closest)
            p = dataclasses.replace(p, path=path, n_points=n_points, closest=closest)
            # the held end of a longer path is not the path's end: its fallback is the next held vertex, never the
            # goal (the path walks on at the next step)
            last = p.path[-1]
            d_end = jnp.where((p.n_points == P) & (graph.succ[last] != last), 0.0, d_end)
        points = graph.vertices[p.path]
        d_path = distance(agent, graph.scale, obs[None], points)
        d_goal = distance(agent, graph.scale, obs, goal)
        k, closest = choose_subgoal(d_path, p.n_points, d_goal, d_end, p.closest, ttgs.threshold, p.reachable)
        sub = jnp.where(k < 0, goal, points[jnp.maximum(k, 0)])
        p = dataclasses.replace(p, closest=closest, goal_steps=p.goal_steps + (k < 0), steps=p.steps + 1,
                                since=p.since + 1)  # fmt: skip
        return sub, p

    def after_step(agent, graph: Graph, p: Plan, obs, goal, sub, active) -> Plan:
        if ttgs.replan_factor <= 0:
            return p
        far = distance(agent, graph.scale, obs, sub) > ttgs.replan_factor * ttgs.threshold
        ready = p.since >= ttgs.replan_cooldown
        return jax.lax.cond(active & far & ready, lambda: plan(agent, graph, obs, goal, p), lambda: p)

    return distance, build, plan, subgoal, after_step


def plan_metrics(p: Plan) -> dict[str, Array]:
    """The round metrics of a plan (`TTGS_METRICS`), cumulative over the episode so far: `ttgs_unreachable` plans
    that found no path to the goal's vertex (the policy then acts towards the goal), `ttgs_plans` plans made,
    `ttgs_hops` the current path's vertices, `ttgs_truncated` plans longer than `max_hops`, `ttgs_goal_frac` the
    fraction of steps that acted towards the final goal."""
    return {
        "ttgs_unreachable": p.unreachable,
        "ttgs_plans": p.plans,
        "ttgs_hops": p.n_points,
        "ttgs_truncated": p.truncated,
        "ttgs_goal_frac": p.goal_steps / jnp.maximum(p.steps, 1).astype(jnp.float32),
    }


# ---------------------------------------------------------------------------------------------------------------
# TTGS's tau and threshold from a checkpoint's own value horizon (issue 79, the second pointmaze recipe).
#
# The rule, stated before any of its rows ran (benchmarks/studies/pointmaze-beyond-2.md, "Protocol"):
#
# 1. The value horizon H of a checkpoint: draw `HORIZON_PAIRS` (state, goal) pairs of the training data's valid rows,
#    uniformly with replacement (NumPy's generator, seed 0: the same pairs for every checkpoint of a dataset; the
#    pairs of benchmarks/analyses/value_calibration.py), read each training seed's value as steps (`value_steps`, as
#    TTGS reads it), take each seed's `HORIZON_QUANTILE` quantile of those steps, and H = the median over the seeds.
#    A value that saturates (a short pre-training: a 10k-update GC-IQL value reads no pair beyond about 48 steps,
#    whatever its true distance) has H at its plateau; a value that reads the maze has H at the data's far distances.
# 2. threshold = round(H / 2) (halves up), held within [`HORIZON_THRESHOLD_MIN`, `HORIZON_THRESHOLD_MAX`]; tau =
#    threshold / 2. Half the horizon: under it the 10k value still tells near from far (value_calibration.json: a
#    reading under 24 steps is a pair under about 40-50 maze steps), and TTGS at threshold 24 reached 0.95 on medium
#    navigate where the published 48 (about H) gave 0.30. At most 48, TTGS's published default: a value that reads
#    further does not make the policy reach a subgoal further away. tau = threshold / 2: every published pair has
#    that ratio (24 / 48, 48 / 96, 12 / 24, 6 / 12).
#
# No dataset enters the rule: the same function of H on every maze.

HORIZON_PAIRS = 100_000
HORIZON_QUANTILE = 0.95
HORIZON_THRESHOLD_MIN = 2.0
HORIZON_THRESHOLD_MAX = 48.0  # TTGS's published default threshold


def horizon_pairs(valid, pairs: int = HORIZON_PAIRS, seed: int = 0):
    """`pairs` (state row, goal row) index pairs drawn uniformly, with replacement, from the rows where `valid` is
    True (NumPy's `default_rng(seed)`; the same draw as benchmarks/analyses/value_calibration.py's `pair_rows`)."""
    import numpy as np

    rows = np.flatnonzero(np.asarray(valid))
    if len(rows) == 0 or pairs < 1:
        raise ValueError(f"value horizon: need valid rows and pairs >= 1, got {len(rows)} rows, {pairs} pairs")
    rng = np.random.default_rng(seed)
    return rows[rng.integers(0, len(rows), pairs)], rows[rng.integers(0, len(rows), pairs)]


def value_horizon(steps, quantile: float = HORIZON_QUANTILE) -> tuple[float, list[float]]:
    """The value horizon H from `steps` (seeds, pairs): the value's steps of each seed on the same pairs. Returns
    `(H, per_seed)`: each seed's `quantile` quantile of its steps (NumPy's default, linear interpolation) and their
    median (the mean of the middle two for an even number of seeds)."""
    import numpy as np

    s = np.asarray(steps, np.float64)
    if s.ndim != 2 or s.shape[0] < 1 or s.shape[1] < 1:
        raise ValueError(f"value horizon: steps must be (seeds, pairs), got shape {s.shape}")
    if not 0.0 < quantile <= 1.0:
        raise ValueError(f"value horizon: quantile must be in (0, 1], got {quantile!r}")
    per_seed = np.quantile(s, quantile, axis=1)
    if not np.all(np.isfinite(per_seed)):
        raise ValueError(f"value horizon: non-finite quantile {per_seed.tolist()}")
    return float(np.median(per_seed)), [float(x) for x in per_seed]


def horizon_tau_threshold(horizon: float) -> tuple[float, float]:
    """TTGS's `(tau, threshold)` from a value horizon H (the rule above): threshold = round(H / 2), halves up, within
    [`HORIZON_THRESHOLD_MIN`, `HORIZON_THRESHOLD_MAX`]; tau = threshold / 2."""
    if not _finite(horizon) or horizon < 0:
        raise ValueError(f"value horizon must be a finite number >= 0, got {horizon!r}")
    threshold = float(math.floor(horizon / 2.0 + 0.5))
    threshold = min(max(threshold, HORIZON_THRESHOLD_MIN), HORIZON_THRESHOLD_MAX)
    return threshold / 2.0, threshold


def measure_value_horizon(
    backbone: Backbone,
    agents,
    observations,
    valid,
    gamma: float,
    pairs: int = HORIZON_PAIRS,
    seed: int = 0,
    chunk: int = 10_000,
) -> dict:
    """A checkpoint's value horizon and the rule's TTGS settings: `agents` the checkpoint's agents stacked over its
    training seeds (`Checkpoint.load().agent`), `observations` and `valid` its training data's
    (`Dataset.observations`, `Dataset.valid`), `gamma` its discount. The value is read in `chunk` pairs at a time
    (memory only). Returns a dict: `horizon` (H), `per_seed` (each seed's quantile), `tau`, `threshold`, `pairs`,
    `quantile`, `seed`, `gamma`."""
    import numpy as np

    i, j = horizon_pairs(valid, pairs, seed)
    obs = np.asarray(observations)
    n = -(-pairs // chunk) * chunk  # padded to whole chunks (the padding is dropped)
    pad = lambda idx: np.concatenate([idx, np.full(n - pairs, idx[0])]).reshape(-1, chunk)  # noqa: E731
    xs, gs = jnp.asarray(obs[pad(i)]), jnp.asarray(obs[pad(j)])

    @eqx.filter_jit
    def read(agents, xs, gs):
        one = lambda a: jax.lax.map(lambda xg: value_steps(backbone.value(a, xg[0], xg[1]), gamma), (xs, gs))  # noqa: E731
        return eqx.filter_vmap(one)(agents)  # (seeds, chunks, chunk)

    steps = np.asarray(read(agents, xs, gs))
    steps = steps.reshape(steps.shape[0], n)[:, :pairs]
    horizon, per_seed = value_horizon(steps)
    tau, threshold = horizon_tau_threshold(horizon)
    return dict(horizon=horizon, per_seed=per_seed, tau=tau, threshold=threshold, pairs=pairs,
                quantile=HORIZON_QUANTILE, seed=seed, gamma=float(gamma))  # fmt: skip
