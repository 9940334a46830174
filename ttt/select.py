"""GC-TTT's selection of relevant, optimal sub-trajectories, as pure fixed-shape JAX transforms (docs/algorithm.md,
"The round" and the rules).

Once per evaluation episode (goal g*), `precompute` builds `GoalTables`: rewards, sub-trajectory ends, return
estimates and eligible starts, with O(|D|) within-episode reverse scans. Every round (current state s),
`relevance` marks eligible rows near s, `select` keeps the `ceil(q * n_rel)` relevant rows with the highest
return (ties broken at random), and `train_weights` counts the selected sub-trajectories covering each row (from which
`ttt.finetune.sample_ttt_rows` draws training rows). The selection API is one value and one function: `Transforms`,
the stages as functions of a `Context`, and `round_weights(ctx, transforms)`, one round; the rules are declared once,
in `RULES`.

Shapes never depend on data (masks, ranks over masked scores, cumulative-sum + `searchsorted` sampling; no
boolean indexing), so everything jits once per (config, shapes) and vmaps over goals, states and keys. The
`Dataset` is always an argument, never closed over; the config is static (hashable).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, Key

from ttt.data.dataset import Dataset
from ttt.errors import TttError
from ttt.hparams import TRACED, HParams, q_fraction

Mode = Literal["critic", "mc", "fixed"]
Rule = Literal["paper", "episodes", "mc-episodes"]
RelevanceKind = Literal["distance", "value"]
_MODES = ("critic", "mc", "fixed")
# The rule a mode gets when none is named: with a critic the published code's, which the selection study found to
# work with a short-trained critic where the paper's text does not (benchmarks/studies/selection-study.md); without
# one, the paper's Monte-Carlo rule (as good on navigate, and it replans every K steps).
DEFAULT_RULES = {"critic": "episodes", "mc": "paper", "fixed": "paper"}
_BIG = float(jnp.finfo(jnp.float32).max) / 2  # "very far": NaN or out-of-range predicted steps
_NO_INT = 2**30  # "none" for integer per-episode scores
_RELEVANCES = ("distance", "value")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_real(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


@dataclasses.dataclass(frozen=True)
class SelectConfig:
    """Static selection configuration (docs/algorithm.md, "The round").

    - `q`: fraction of relevant sub-trajectories KEPT, in (0, 1] (paper: 0.05). It is used as the nearest
      fraction with denominator <= 10,000, so `ceil(q * n_rel)` is exact integer arithmetic (0.07 * 100 -> 7).
    - `eps_rel`: distance-relevance radius (`d(s, s_j) < eps_rel`); None: the environment's goal threshold.
    - `h_min`: critic mode's shortest sub-trajectory; rows with `j + h_min > ep_end[j]` are not eligible.
    - `mode`: sub-trajectory ends: 'critic' (argmax V over `[j + h_min, ep_end]`), 'mc' (first arrival within
      eps, critic-free), 'fixed' (`min(j + H - 1, ep_end)`; returns use the critic formula when values are
      given, else the Monte-Carlo rule with the arrival searched inside the span).
    - `H`: the fixed span length (rows, >= 2), only with mode='fixed'.
    - `gamma`: discount in [0, 1) (`make_setup` passes the backbone's `discount`).
    - `mix`: fraction of each TTT batch drawn uniformly from the dataset, [0, 1].
    - `noise_alpha`: value-noise scale, `G += N(0, (alpha * mean|G over relevant|)^2)`, >= 0.
    - `relevance`: 'distance' or 'value' (`V(s | s_j) > c_rel`; `c_rel` required then).
    - `rule`: how relevant rows become training rows (docs/algorithm.md); None: the mode's default,
      `DEFAULT_RULES` (critic: 'episodes'; mc and fixed: 'paper'):
      'paper' (the paper's text: every relevant row starts a sub-trajectory, the top `q` fraction by return kept);
      'episodes' (the published code's critic rule, needs mode='critic': per dataset episode, from its first
      relevant row f to the row b >= f + h_min with the fewest value-predicted steps to the goal; the
      `n_episodes` episodes with the fewest steps at b kept, rows [f, b) trained on);
      'mc-episodes' (the published code's critic-free rule, needs mode='mc': per episode, the relevant row s with
      the fewest steps c to its next goal row; episodes with c at or below the `q`-quantile (numpy's linear
      interpolation) of c over episodes kept, rows [s, s + c + slack) trained on, cut at the episode's end).
    - `n_episodes`: episodes kept by rule 'episodes' (published: 10). `slack`: rows past the goal row kept by
      rule 'mc-episodes' (published: 10).
    """

    q: float = 0.05
    eps_rel: float | None = None
    h_min: int = 10
    mode: Mode = "critic"
    H: int | None = None
    gamma: float = 0.99
    mix: float = 0.0
    noise_alpha: float = 0.0
    relevance: RelevanceKind = "distance"
    c_rel: float | None = None
    rule: Rule | None = None
    n_episodes: int = 10
    slack: int = 10

    def __post_init__(self):
        if not (_is_real(self.q) and 0.0 < self.q <= 1.0):
            raise ValueError(
                f"SelectConfig.q (fraction of relevant sub-trajectories kept) must be in (0, 1], got {self.q!r}"
            )
        if self.eps_rel is not None and not (_is_real(self.eps_rel) and self.eps_rel > 0):
            raise ValueError(f"SelectConfig.eps_rel must be > 0 (or None for the goal threshold), got {self.eps_rel!r}")
        if not (_is_int(self.h_min) and self.h_min >= 1):
            raise ValueError(f"SelectConfig.h_min must be an int >= 1, got {self.h_min!r}")
        if self.mode not in _MODES:
            raise ValueError(f"SelectConfig.mode must be one of {', '.join(_MODES)}, got {self.mode!r}")
        if self.mode == "fixed":
            if not (_is_int(self.H) and self.H >= 2):
                raise ValueError(f"SelectConfig.H must be an int >= 2 with mode='fixed', got {self.H!r}")
        elif self.H is not None:
            raise ValueError(f"SelectConfig.H is only used with mode='fixed', got H={self.H!r} with mode={self.mode!r}")
        if not (_is_real(self.gamma) and 0.0 <= self.gamma < 1.0):
            raise ValueError(f"SelectConfig.gamma must be in [0, 1), got {self.gamma!r}")
        if not (_is_real(self.mix) and 0.0 <= self.mix <= 1.0):
            raise ValueError(f"SelectConfig.mix must be in [0, 1], got {self.mix!r}")
        if not (_is_real(self.noise_alpha) and self.noise_alpha >= 0.0):
            raise ValueError(f"SelectConfig.noise_alpha must be >= 0, got {self.noise_alpha!r}")
        if self.relevance not in _RELEVANCES:
            raise ValueError(f"SelectConfig.relevance must be one of {', '.join(_RELEVANCES)}, got {self.relevance!r}")
        if self.relevance == "value" and not _is_real(self.c_rel):
            raise ValueError(f"SelectConfig.c_rel must be a finite number with relevance='value', got {self.c_rel!r}")
        if self.rule is not None and self.rule not in RULES:
            raise ValueError(f"SelectConfig.rule must be one of {', '.join(RULES)}, got {self.rule!r}")
        if not (_is_int(self.n_episodes) and self.n_episodes >= 1):
            raise ValueError(f"SelectConfig.n_episodes must be an int >= 1, got {self.n_episodes!r}")
        if not (_is_int(self.slack) and self.slack >= 0):
            raise ValueError(f"SelectConfig.slack must be an int >= 0, got {self.slack!r}")
        need = None if self.rule is None else RULES[self.rule].mode  # an explicit rule must fit the mode
        if need is not None and self.mode != need:
            raise ValueError(
                f"SelectConfig.rule={self.rule!r} needs mode={need!r} "
                f"({'a critic' if need == 'critic' else 'no critic'}), got mode={self.mode!r}"
            )
        if "noise_alpha" in RULES[self.rule_used].ignores and self.noise_alpha > 0:
            raise ValueError(
                f"SelectConfig.noise_alpha applies to rule 'paper' only, got rule={self.rule_used!r} (set rule='paper')"
            )

    @property
    def rule_used(self) -> str:
        """The rule in force: `rule`, or the mode's default (`DEFAULT_RULES`) when it is None."""
        return DEFAULT_RULES[self.mode] if self.rule is None else self.rule


class GoalTables(eqx.Module):
    """Per-goal quantities over all dataset rows, computed once per evaluation episode.

    `ends[j]`: last row `e_j` of the sub-trajectory starting at `j` (`j <= e_j <= ep_end[j]`); `returns[j]`:
    its return estimate `G_j`; `eligible[j]`: whether `j` may start a sub-trajectory; `reaches[j]`: whether
    some row of `[j, e_j]` lies within eps of the goal. Optional (None when unknown): `first_hit[j]`, the first row
    at or after `j` within eps of the goal (`n_rows` if none; in `j`'s episode iff `<= ep_end[j]`); `steps[j]`,
    the steps to the goal that the values predict, `log(1 + (1 - gamma) V) / log(gamma)` (`_BIG` where V is NaN or
    <= -1/(1 - gamma)); `oracle_steps[j]`, the true shortest-path steps to the goal (diagnostics, `ttt.envs.oracle`).

    With the lazy value pass (`ttt.episode.TTTConfig.value_cap`) the tables also carry its cache: `values[j]`, the
    values computed so far (NaN elsewhere), and `computed[j]`, whether row `j` holds its value. The value-derived
    fields (`ends`, `returns`, `reaches`, `steps`) are then meaningful on the rows whose span is computed only,
    the only rows a built-in rule or diagnostic reads (a relevant row and the rows after it in its episode).
    """

    rewards: Float[Array, " rows"]
    ends: Int[Array, " rows"]
    returns: Float[Array, " rows"]
    eligible: Bool[Array, " rows"]
    reaches: Bool[Array, " rows"]
    first_hit: Int[Array, " rows"] | None = None
    steps: Float[Array, " rows"] | None = None
    oracle_steps: Float[Array, " rows"] | None = None
    values: Float[Array, " rows"] | None = None
    computed: Bool[Array, " rows"] | None = None


class Selection(eqx.Module):
    """One round's selection: the kept rows, the score of the worst kept row (C; NaN if none) and the counts."""

    mask: Bool[Array, " rows"]
    threshold: Float[Array, ""]
    n_rel: Int[Array, ""]
    n_selected: Int[Array, ""]


class Spans(eqx.Module):
    """One round's sub-trajectories under a selection rule: span `j` runs from row `j` to row `ends[j]` (rows
    `[j, ends[j])` are trained on). `candidates`: the spans the rule ranked (rule 'paper': every relevant row;
    the episode rules: one span per episode that has one); `mask`: the spans kept; `threshold`: the score of the
    worst kept span (NaN if none); `relevant`: the relevant rows the rule started from."""

    candidates: Bool[Array, " rows"]
    mask: Bool[Array, " rows"]
    ends: Int[Array, " rows"]
    threshold: Float[Array, ""]
    relevant: Bool[Array, " rows"]


def _goal_distance(data: Dataset, xy: Float[Array, " goal"]) -> Float[Array, " rows"]:
    return jnp.sqrt(jnp.sum(jnp.square(data.goals - xy), axis=-1))


def _suffix_argmax(values: Float[Array, " rows"], is_last: Bool[Array, " rows"]) -> Int[Array, " rows"]:
    """`out[i] = argmax_{e in [i, ep_end[i]]} values[e]`, ties -> earliest row (reverse segmented scan)."""
    rows = jnp.arange(values.shape[0], dtype=jnp.int32)

    # associative_scan(reverse=True) calls combine(later, earlier): `later` folds a block of higher rows,
    # `earlier` the adjacent block of lower rows. A block holding an episode's last row starts a new segment.
    def combine(later, earlier):
        f_l, v_l, i_l = later
        f_e, v_e, i_e = earlier
        take_later = (v_l > v_e) & ~f_e  # ties keep the earlier (lower) row
        return f_l | f_e, jnp.where(take_later, v_l, v_e), jnp.where(take_later, i_l, i_e)

    _, _, idx = jax.lax.associative_scan(combine, (is_last, values, rows), reverse=True)
    return idx


def _discounted_suffix_sum(
    rewards: Float[Array, " rows"], is_last: Bool[Array, " rows"], gamma: float
) -> Float[Array, " rows"]:
    """`S_j = sum_{t=j}^{ep_end[j]} gamma^{t-j} R_t`: the recurrence `S_j = R_j + gamma S_{j+1}` (reset at episode
    ends) as a reverse scan over affine maps, so no `gamma^-j` factor appears."""
    a = jnp.where(is_last, 0.0, jnp.float32(gamma))

    def combine(later, earlier):
        a_l, b_l = later
        a_e, b_e = earlier
        return a_e * a_l, b_e + a_e * b_l

    _, s = jax.lax.associative_scan(combine, (a, rewards), reverse=True)
    return s


def precompute(
    data: Dataset,
    goal_xy: Float[Array, " goal"],
    values: Float[Array, " rows"] | None,
    cfg: SelectConfig,
    goal_eps: float | Float[Array, ""],
) -> GoalTables:
    """Rewards, ends, returns and eligible starts for goal `goal_xy` (goal coordinates, like `data.goals`).

    `values[j] = V(s_j | g*)` for every row; required with mode='critic', optional with 'fixed', unused by 'mc'.
    `goal_eps` is the environment's success threshold. O(|D|); call once per goal.
    """
    n = data.n_rows
    rows = jnp.arange(n, dtype=jnp.int32)
    ep_end = data.ep_end.astype(jnp.int32)
    is_last = rows == ep_end
    hit = _goal_distance(data, goal_xy) <= goal_eps
    rewards = jnp.where(hit, 0.0, -1.0).astype(jnp.float32)
    # First row at or after j within eps of g* (n if none); it lies in j's episode iff it is <= ep_end[j].
    first_hit = jax.lax.cummin(jnp.where(hit, rows, n), reverse=True)

    if cfg.mode == "critic":
        if values is None:
            raise ValueError("precompute: mode='critic' needs values (V(s_j | g*) for every row)")
        values = jnp.asarray(values, jnp.float32)
        best = _suffix_argmax(values, is_last)
        ends = best[jnp.minimum(rows + cfg.h_min, ep_end)]  # clipped start: ineligible rows still end in-episode
    elif cfg.mode == "mc":
        ends = jnp.minimum(first_hit, ep_end)
    else:
        ends = jnp.minimum(rows + (cfg.H - 1), ep_end)
    reaches = first_hit <= ends

    gamma = jnp.float32(cfg.gamma)
    if cfg.mode == "critic" or (cfg.mode == "fixed" and values is not None):
        values = jnp.asarray(values, jnp.float32)
        s = _discounted_suffix_sum(rewards, is_last, cfg.gamma)
        gk = jnp.power(gamma, (ends - rows).astype(jnp.float32))  # gamma^(H_j - 1)
        returns = s - gk * s[ends] + gk * values[ends]
    else:
        k = jnp.where(reaches, first_hit - rows, 0).astype(jnp.float32)
        returns = jnp.where(reaches, -(1.0 - jnp.power(gamma, k)) / (1.0 - gamma), -1.0 / (1.0 - gamma))

    eligible = data.valid & (ends > rows)
    if cfg.mode == "critic":
        eligible = eligible & (rows + cfg.h_min <= ep_end)
    steps = None if values is None else predicted_steps(values, cfg.gamma)
    return GoalTables(
        rewards=rewards, ends=ends, returns=returns, eligible=eligible, reaches=reaches, first_hit=first_hit,
        steps=steps,
    )  # fmt: skip


def predicted_steps(values: Float[Array, " rows"], gamma: float) -> Float[Array, " rows"]:
    """Steps to the goal that values on OGBench's scale (`V = -(1 - gamma^d) / (1 - gamma)`) predict:
    `d = log(1 + (1 - gamma) V) / log(gamma)`. NaN, `V <= -1 / (1 - gamma)` (never arriving) and any other
    non-finite result count as very far (`_BIG`), as in the published code."""
    v = jnp.asarray(values, jnp.float32)
    d = jnp.log1p((1.0 - gamma) * v) / jnp.log(jnp.float32(gamma))
    return jnp.where(jnp.isfinite(d), d, _BIG).astype(jnp.float32)


def steps_to_values(steps: Float[Array, " rows"], gamma: float) -> Float[Array, " rows"]:
    """The inverse of `predicted_steps`: OGBench's value of a goal `steps` steps away, `-(1 - gamma^d)/(1 - gamma)`."""
    d = jnp.asarray(steps, jnp.float32)
    return (-(1.0 - jnp.power(jnp.float32(gamma), d)) / (1.0 - gamma)).astype(jnp.float32)


def relevance(
    tables: GoalTables,
    data: Dataset,
    state_xy: Float[Array, " goal"],
    cfg: SelectConfig,
    goal_eps: float | Float[Array, ""],
    row_values: Float[Array, " rows"] | None = None,
    params: HParams | None = None,
) -> Bool[Array, " rows"]:
    """Eligible rows relevant to the current state (`state_xy`: its GOAL COORDINATES): `d(s, s_j) < eps_rel`
    (`params.eps_rel` when given, else `cfg.eps_rel`, default `goal_eps`), or with relevance='value',
    `row_values[j] = V(s | s_j) > c_rel`."""
    if cfg.relevance == "distance":
        eps_rel = goal_eps if cfg.eps_rel is None else cfg.eps_rel
        eps_rel = eps_rel if params is None else params.eps_rel
        near = _goal_distance(data, state_xy) < eps_rel
    else:
        if row_values is None:
            raise ValueError("relevance: relevance='value' needs row_values (V(s | s_j) for every row)")
        near = row_values > cfg.c_rel
    return near & tables.eligible


def n_keep(n_rel: Int[Array, ""] | int, q: float | tuple) -> Int[Array, ""]:
    """`ceil(q * n_rel)` in exact integer arithmetic (q as its nearest fraction with denominator <= 10,000, or
    given as a (numerator, denominator) pair of ints or traced int arrays), and at least 1 when `n_rel >= 1`."""
    num, den = q if isinstance(q, tuple) else q_fraction(q)
    n_rel = jnp.asarray(n_rel, jnp.int32)
    k = (n_rel // den) * num + ((n_rel % den) * num + den - 1) // den  # no int32 overflow: (n % den) * num < 1e8
    return jnp.maximum(k, jnp.minimum(n_rel, 1))


def _sortable(x: Float[Array, " rows"]) -> Array:
    """float32 -> uint32 with the same order (-0.0 counted as +0.0)."""
    bits = jax.lax.bitcast_convert_type(x.astype(jnp.float32) + 0.0, jnp.uint32)
    return jnp.where(bits >> 31 == 1, ~bits, bits | jnp.uint32(1 << 31))


def _kth_largest(keys: Array, mask: Bool[Array, " rows"], k: Int[Array, ""]) -> Array:
    """The k-th largest uint32 of `keys[mask]` (k >= 1), by bisection on its bits: 32 counting passes, O(|D|)."""

    def bit(i, t):
        cand = t | (jnp.uint32(1) << (31 - i).astype(jnp.uint32))
        return jnp.where(jnp.sum(mask & (keys >= cand), dtype=jnp.int32) >= k, cand, t)

    return jax.lax.fori_loop(0, 32, bit, jnp.uint32(0))


def _mix32(x: Array) -> Array:
    """murmur3's 32-bit finaliser: a bijection of uint32 that scrambles its input."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def select(
    key: Key[Array, ""],
    tables: GoalTables,
    rel: Bool[Array, " rows"],
    cfg: SelectConfig,
    params: HParams | None = None,
) -> Selection:
    """Keep exactly `ceil(q * n_rel)` relevant rows with the highest `G` (after optional value noise); ties are
    broken at random with `key`. `q` and the noise scale are `params`' (traced) when given, else `cfg`'s.

    No sort: the k-th best score is found by bisection on its bits (32 counting passes over the rows), then the
    rows tied with it are ranked by a random permutation of the row ids (`_mix32` of the id xor two random words:
    distinct per row), whose cut-off is found the same way. O(|D|) and fixed-shape.
    """
    k_noise, k_tie = jax.random.split(key)
    n = rel.shape[0]
    n_rel = jnp.sum(rel, dtype=jnp.int32)
    scores = tables.returns
    alpha = cfg.noise_alpha if params is None else params.noise_alpha
    if params is not None or cfg.noise_alpha > 0:  # traced alpha: alpha 0 adds exactly 0
        mean_abs = jnp.sum(jnp.where(rel, jnp.abs(scores), 0.0)) / jnp.maximum(n_rel, 1)
        scores = scores + alpha * mean_abs * jax.random.normal(k_noise, (n,), scores.dtype)
    k = n_keep(n_rel, cfg.q if params is None else (params.q_num, params.q_den))
    k1 = jnp.maximum(k, 1)
    keys = _sortable(scores)
    cut = _kth_largest(keys, rel, k1)
    above = rel & (keys > cut)
    tied = rel & (keys == cut)
    salt = jax.random.bits(k_tie, (2,), jnp.uint32)
    tie = _mix32(_mix32(jnp.arange(n, dtype=jnp.uint32) ^ salt[0]) ^ salt[1])  # a permutation of the row ids
    m = k1 - jnp.sum(above, dtype=jnp.int32)  # >= 1 tied rows still to keep
    tie_cut = _kth_largest(tie, tied, m)
    mask = (above | (tied & (tie >= tie_cut))) & (k > 0)
    threshold = jnp.where(k > 0, jnp.min(jnp.where(mask, scores, jnp.inf)), jnp.nan)
    return Selection(mask=mask, threshold=threshold, n_rel=n_rel, n_selected=k)


def span_weights(mask: Bool[Array, " rows"], ends: Int[Array, " rows"], data: Dataset) -> Int[Array, " rows"]:
    """Per-row count of kept spans covering it (span `j` covers `j <= t < ends[j]`), valid rows only: a
    difference array and one cumulative sum, O(|D|)."""
    s = mask.astype(jnp.int32)
    diff = jnp.concatenate([s, jnp.zeros(1, jnp.int32)]).at[ends].add(-s)
    return jnp.where(data.valid, jnp.cumsum(diff[:-1]), 0)


def train_weights(tables: GoalTables, data: Dataset, selected: Bool[Array, " rows"]) -> Int[Array, " rows"]:
    """Per-row count of selected sub-trajectories covering it (`j <= t < e_j`): difference array + cumsum."""
    return span_weights(selected, tables.ends, data)


def _segment_min(x: Array, data: Dataset) -> Array:
    """Minimum of `x` over each dataset episode: shape (episodes,)."""
    return jax.ops.segment_min(x, data.ep_id.astype(jnp.int32), num_segments=data.n_episodes, indices_are_sorted=True)


def episode_spans(tables: GoalTables, data: Dataset, rel: Bool[Array, " rows"], cfg: SelectConfig) -> Spans:
    """Rule 'episodes' (the published code's critic rule). Per dataset episode: `f` = its first relevant row;
    candidate ends are its rows `b >= f + h_min` (the episode's last row included); `b` = the candidate with the
    fewest predicted steps to the goal (`tables.steps`; ties: the earliest row); the episode scores those steps.
    The `n_episodes` best-scoring episodes (ties: the lower episode) that have a candidate are kept: span `[f, b)`.
    Fixed shapes: segment minima over episodes and one `top_k` over episodes, O(|D| + E log n_episodes)."""
    if tables.steps is None:
        raise ValueError("rule 'episodes' needs the values' predicted steps (GoalTables.steps): use mode='critic'")
    n, E = data.n_rows, data.n_episodes
    rows = jnp.arange(n, dtype=jnp.int32)
    ep = data.ep_id.astype(jnp.int32)
    f = _segment_min(jnp.where(rel, rows, n), data)[ep]  # first relevant row of each row's episode (n: none)
    cand = (f < n) & (rows >= f + cfg.h_min)
    d = jnp.where(cand, tables.steps, jnp.inf)
    best = _segment_min(d, data)  # (E,) fewest predicted steps; inf: no candidate
    b = _segment_min(jnp.where(cand & (d == best[ep]), rows, n), data)[ep]
    has = jnp.isfinite(best)
    _, top = jax.lax.top_k(-best, min(cfg.n_episodes, E))  # equal scores: the lower episode first
    kept = jnp.zeros((E,), bool).at[top].set(True) & has
    starts = rows == f
    candidates = starts & has[ep]
    mask = starts & kept[ep]
    threshold = jnp.where(jnp.any(kept), jnp.max(jnp.where(kept, best, -jnp.inf)), jnp.nan)
    return Spans(
        candidates=candidates,
        mask=mask,
        ends=jnp.where(candidates, b, rows),
        threshold=threshold,
        relevant=rel,
    )


def quantile_cut(
    scores: Int[Array, " n"], ok: Bool[Array, " n"], q: float | tuple
) -> tuple[Bool[Array, " n"], Array]:
    """Which integer `scores[ok]` lie at or below their `q`-quantile (numpy's default linear interpolation), in
    exact integer arithmetic (q as its nearest fraction with denominator <= 10,000, or a (numerator, denominator)
    pair), and the quantile itself (NaN when no score is ok). One sort of `n` entries."""
    num, den = q if isinstance(q, tuple) else q_fraction(q)
    m = jnp.sum(ok, dtype=jnp.int32)
    srt = jnp.sort(jnp.where(ok, scores, _NO_INT).astype(jnp.int32))
    pos = num * jnp.maximum(m - 1, 0)  # the quantile sits at sorted position pos / den
    lo = pos // den
    rem = pos % den
    a = srt[lo]
    hi_v = srt[jnp.minimum(lo + 1, jnp.maximum(m - 1, 0))]
    s = jnp.where(ok, scores, a).astype(jnp.int32)
    keep = ok & (den * (s - a) <= rem * (hi_v - a)) & (m > 0)
    value = jnp.where(m > 0, a + (rem / den) * (hi_v - a), jnp.nan)
    return keep, value


def mc_episode_spans(
    tables: GoalTables, data: Dataset, rel: Bool[Array, " rows"], cfg: SelectConfig, params: HParams | None = None
) -> Spans:
    """Rule 'mc-episodes' (the published code's critic-free rule). For each relevant row `j` with a goal row
    ahead in its episode, `c_j` = steps to the first one (>= 1); per episode, `s` = the relevant row with the
    fewest (ties: the earliest) and `c` its count. Episodes with `c` at or below the `q`-quantile of `c` over the
    episodes that have one are kept: span `[s, min(s + c + slack, ep_end))`. O(|D| + E log E)."""
    if tables.first_hit is None:
        raise ValueError("rule 'mc-episodes' needs GoalTables.first_hit (from select.precompute)")
    n = data.n_rows
    rows = jnp.arange(n, dtype=jnp.int32)
    ep = data.ep_id.astype(jnp.int32)
    ep_end = data.ep_end.astype(jnp.int32)
    fh = tables.first_hit
    c = jnp.where(rel & (fh <= ep_end) & (fh > rows), fh - rows, _NO_INT)
    c_ep = _segment_min(c, data)
    has = c_ep < _NO_INT
    s = _segment_min(jnp.where((c < _NO_INT) & (c == c_ep[ep]), rows, n), data)[ep]
    keep_ep, cut = quantile_cut(c_ep, has, cfg.q if params is None else (params.q_num, params.q_den))
    starts = rows == s
    candidates = starts & has[ep]
    mask = starts & keep_ep[ep]
    ends = jnp.where(candidates, jnp.minimum(rows + c_ep[ep] + cfg.slack, ep_end), rows)
    return Spans(candidates=candidates, mask=mask, ends=ends, threshold=cut.astype(jnp.float32), relevant=rel)


def _spearman_first(mask: Bool[Array, " rows"], x: Float[Array, " rows"], y: Float[Array, " rows"], m: int):
    """Spearman rank correlation of `x` and `y` over the first `m` rows where `mask` (file order; episodes are
    independent draws, so this is a fixed-size sample of them); ordinal ranks; NaN with fewer than 3 rows."""
    cs = jnp.cumsum(mask.astype(jnp.int32))
    idx = jnp.minimum(jnp.searchsorted(cs, jnp.arange(1, m + 1, dtype=jnp.int32), side="left"), mask.shape[0] - 1)
    ok = jnp.arange(m) < cs[-1]
    cnt = jnp.sum(ok)

    def ranks(v):
        v = jnp.where(ok, v[idx], jnp.inf)
        return jnp.argsort(jnp.argsort(v)).astype(jnp.float32)

    rx, ry = ranks(x), ranks(y)
    mean = (cnt.astype(jnp.float32) - 1) / 2
    dx, dy = jnp.where(ok, rx - mean, 0.0), jnp.where(ok, ry - mean, 0.0)
    r = jnp.sum(dx * dy) / jnp.sqrt(jnp.sum(dx * dx) * jnp.sum(dy * dy))
    return jnp.where(cnt >= 3, r, jnp.nan)


SPEARMAN_SAMPLE = 2048  # relevant rows the per-round critic-vs-oracle rank correlation uses


def span_metrics(tables: GoalTables, data: Dataset, sp: Spans, weights: Array) -> dict[str, Array]:
    """The round metrics of a selection (ROUND_METRICS in ttt.episode): counts, goal reach, the longest kept span
    and, when `tables.oracle_steps` is known, the ranking diagnostics."""
    rows = jnp.arange(data.n_rows, dtype=jnp.int32)
    n_sel = jnp.sum(sp.mask, dtype=jnp.int32)
    reach = tables.reaches if tables.first_hit is None else tables.first_hit <= sp.ends
    nan = jnp.full((), jnp.nan, jnp.float32)
    out = {
        "n_rel": jnp.sum(sp.relevant, dtype=jnp.int32),
        "n_selected": n_sel,
        "threshold": sp.threshold.astype(jnp.float32),
        "empty": n_sel == 0,
        "n_train_rows": jnp.sum(weights > 0, dtype=jnp.int32),
        "reach_frac": jnp.where(n_sel > 0, jnp.sum(sp.mask & reach) / jnp.maximum(n_sel, 1), nan),
        "max_span": jnp.max(jnp.where(sp.mask, sp.ends - rows, 0)).astype(jnp.int32),
        "spearman": nan,
        "oracle_end_sel": nan,
        "oracle_end_all": nan,
    }
    o = tables.oracle_steps
    if o is not None:
        at_end = o[sp.ends]
        n_cand = jnp.sum(sp.candidates)
        out["oracle_end_sel"] = jnp.where(
            n_sel > 0, jnp.sum(jnp.where(sp.mask, at_end, 0.0)) / jnp.maximum(n_sel, 1), nan
        )
        out["oracle_end_all"] = jnp.where(
            n_cand > 0, jnp.sum(jnp.where(sp.candidates, at_end, 0.0)) / jnp.maximum(n_cand, 1), nan
        )
        if tables.steps is not None:
            out["spearman"] = _spearman_first(sp.relevant, tables.steps, o, SPEARMAN_SAMPLE).astype(jnp.float32)
    return out


class Context(eqx.Module):
    """What every selection transform sees: one value, so a rule of your own is one function of it
    (docs/extending.md). Built by the episode for each transform call; a field that a stage has not reached yet is
    None.

    - `data`: the `Dataset`; `cfg`: the static `SelectConfig`; `goal_eps`: the environment's success radius;
    - `goal`: the episode's goal OBSERVATION; `goal_xy`: its GOAL COORDINATES (like `data.goals`, e.g. maze xy);
    - `obs`: the current observation and `state_xy` its goal coordinates (None in `precompute`, which runs once
      per episode before the first round);
    - `round`: the round's index from 0 (None in `precompute`); `key`: the round's selection key (`precompute`:
      None);
    - `values`: `V(s_j | g*)` of every row (None when selection needs no values); `row_values`: `V(s | s_j)`
      (relevance 'value' only, else None);
    - `params`: the traced settings (`ttt.hparams.HParams`: `lr`, `q`, `eps_rel`, `mix`, `noise_alpha`, ...)
      and your own by name in `params.user` (declared with `Transforms(params={...})`; swept by
      `evaluate(..., grid=...)`);
    - `tables`: the episode's `GoalTables` (None in `precompute`); `relevant`: the relevant rows (from `select`
      on); `selection`: the kept rows (in `weights`).
    """

    data: Dataset
    goal_eps: float | Float[Array, ""]
    cfg: SelectConfig = eqx.field(static=True)
    goal_xy: Float[Array, " goal"] | None = None
    params: HParams | None = None
    goal: Float[Array, " obs"] | None = None
    obs: Float[Array, " obs"] | None = None
    state_xy: Float[Array, " goal"] | None = None
    round: Int[Array, ""] | None = None
    key: Key[Array, ""] | None = None
    values: Float[Array, " rows"] | None = None
    row_values: Float[Array, " rows"] | None = None
    tables: GoalTables | None = None
    relevant: Bool[Array, " rows"] | None = None
    selection: Selection | None = None


def precompute_ctx(ctx: Context) -> GoalTables:
    """`precompute` as a transform of the context (the default `Transforms.precompute`)."""
    return precompute(ctx.data, ctx.goal_xy, ctx.values, ctx.cfg, ctx.goal_eps)


def relevance_ctx(ctx: Context) -> Bool[Array, " rows"]:
    """`relevance` as a transform of the context (the default `Transforms.relevance`)."""
    return relevance(ctx.tables, ctx.data, ctx.state_xy, ctx.cfg, ctx.goal_eps, ctx.row_values, ctx.params)


def select_ctx(ctx: Context) -> Selection:
    """`select` (the top-q filter) as a transform of the context (the default `Transforms.select`)."""
    return select(ctx.key, ctx.tables, ctx.relevant, ctx.cfg, ctx.params)


def weights_ctx(ctx: Context) -> Int[Array, " rows"]:
    """`train_weights` of the kept rows as a transform of the context (the default `Transforms.weights`)."""
    return train_weights(ctx.tables, ctx.data, ctx.selection.mask)


CONTEXT_DEFAULTS = {"precompute": precompute_ctx, "relevance": relevance_ctx, "select": select_ctx,
                    "weights": weights_ctx}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Transforms:
    """The selection stages a round composes, each a function of one `Context` (the dataset, the goal, the current
    state, the round, the key, the tables, the traced settings and your own parameters): the one selection API. Swap
    any to build a variant, e.g. `Transforms(select=nearest_starts, params={"k": 8})`, then pass it to
    `make_setup(..., transforms=...)`, `make_episodes` or `make_round_fns`. All must be pure and fixed-shape
    (docs/extending.md).

    - `precompute(ctx) -> GoalTables` (once per episode: ends, returns, ...; `ctx.values` are `V(s_j | g*)`);
    - `relevance(ctx) -> Bool[rows]` (`ctx.tables`, `ctx.state_xy`);
    - `select(ctx) -> Selection` (the percentile filter of rule 'paper'; `ctx.relevant`, `ctx.key`);
    - `weights(ctx) -> Int[rows]` (training-row weights of rule 'paper'; `ctx.selection`);
    - `params`: your transforms' own numbers, `{name: value}`; they reach them as `ctx.params.user[name]`, traced,
      so `evaluate(..., params={name: v})` or `grid={name: [...]}` changes them without compiling again.

    The defaults are the library's own (`precompute_ctx`, `relevance_ctx`, `select_ctx`, `weights_ctx`, which a
    transform of yours may call on a modified context). A function of more than one argument is refused, naming it;
    a `select` or `weights` of your own needs rule 'paper' (`ttt.checks.check_transforms`).
    """

    precompute: Callable = precompute_ctx
    relevance: Callable = relevance_ctx
    select: Callable = select_ctx
    weights: Callable = weights_ctx
    params: Any = ()

    def __post_init__(self):
        p = self.params
        items = p.items() if isinstance(p, Mapping) else p
        try:
            pairs = tuple(sorted((k, float(v)) for k, v in items))
        except (TypeError, ValueError):
            raise TttError(f"Transforms.params must map names to numbers, e.g. {{'k': 8}}, got {p!r}") from None
        for k, v in pairs:
            if not (isinstance(k, str) and k.isidentifier()) or k in TRACED:
                raise TttError(f"Transforms.params: {k!r} is not a name of your own (an identifier, none of "
                               f"{', '.join(TRACED)}: those are settings)")  # fmt: skip
            if not math.isfinite(v):
                raise TttError(f"Transforms.params: {k} must be a finite number, got {v!r}")
        object.__setattr__(self, "params", pairs)


def _paper_spans(ctx: Context, select_fn) -> tuple[Spans, Selection]:
    """Rule 'paper': every relevant row starts a span; `select_fn(ctx)` keeps some (default: the top `q` fraction by
    return)."""
    sel = select_fn(ctx)
    rel = ctx.relevant
    return Spans(candidates=rel, mask=sel.mask, ends=ctx.tables.ends, threshold=sel.threshold, relevant=rel), sel


@dataclasses.dataclass(frozen=True)
class SelectionRule:
    """One selection rule, declared once (docs/algorithm.md): `spans(ctx, select_fn) -> (Spans, Selection | None)`
    (the spans kept from `ctx.relevant`; the `Selection` where a `select` transform made it); the `mode` it needs
    (None: any); the selection settings it never reads (`ignores`: a grid over one would give identical points);
    whether a `select` / `weights` transform of yours applies to it (`refinable`); and what of the value-derived
    tables it reads (`reads`: 'steps', the predicted steps alone, or 'tables', ends and returns too), which the lazy
    value pass refreshes."""

    spans: Callable
    mode: str | None
    ignores: tuple[str, ...]
    refinable: bool
    reads: str


RULES: dict[str, SelectionRule] = {
    "paper": SelectionRule(_paper_spans, None, ("n_episodes", "slack"), True, "tables"),
    "episodes": SelectionRule(lambda ctx, _: (episode_spans(ctx.tables, ctx.data, ctx.relevant, ctx.cfg), None),
                              "critic", ("q", "noise_alpha", "slack"), False, "steps"),
    "mc-episodes": SelectionRule(
        lambda ctx, _: (mc_episode_spans(ctx.tables, ctx.data, ctx.relevant, ctx.cfg, ctx.params), None),
        "mc", ("noise_alpha", "n_episodes"), False, "tables"),
}  # fmt: skip
# The selection settings each rule never reads: grids, `load_run` and `ttt eval` refuse them (docs/algorithm.md).
IGNORED_BY_RULE = {name: rule.ignores for name, rule in RULES.items()}


def round_spans(ctx: Context, select_fn: Callable = select_ctx) -> tuple[Spans, Selection | None]:
    """The spans one round keeps from `ctx.relevant` (a context holding the round's tables, state and key), under
    `ctx.cfg.rule_used` (`RULES`): rule 'paper' keeps what `select_fn(ctx)` selects and returns that `Selection` too;
    the episode rules (the published code's) keep their own spans (selection None)."""
    return RULES[ctx.cfg.rule_used].spans(ctx, select_fn)


def round_weights(ctx: Context, transforms: Transforms = Transforms()):
    """One round, the one entry point every caller goes through: `transforms.relevance(ctx)` (skipped where
    `ctx.relevant` is given) -> the rule's spans (`round_spans`; rule 'paper': `transforms.select(ctx)`, then
    `transforms.weights(ctx)`) -> `(weights, metrics)`. A round at a state of plain arguments:
    `round_weights(Context(data=..., goal_eps=..., cfg=..., state_xy=..., key=..., tables=...))`.

    Metrics (`span_metrics`): `n_rel`, `n_selected` (spans kept), `threshold` (the worst kept score; NaN when
    empty), `empty` (nothing kept: the caller keeps the pre-trained agent), `n_train_rows` (rows with weight > 0),
    `reach_frac` (kept spans that reach the goal), `max_span` (rows in the longest kept span), and with an oracle
    `spearman`, `oracle_end_sel`, `oracle_end_all`."""
    if ctx.relevant is None:
        ctx = dataclasses.replace(ctx, relevant=transforms.relevance(ctx))
    sp, sel = round_spans(ctx, transforms.select)
    if sel is not None:
        weights = transforms.weights(dataclasses.replace(ctx, selection=sel))
    else:
        weights = span_weights(sp.mask, sp.ends, ctx.data)
    return weights, span_metrics(ctx.tables, ctx.data, sp, weights)


def training_rows(
    rule: Rule,
    data: Dataset,
    state: Float[Array, " goal"],
    goal: Float[Array, " goal"],
    values: Float[Array, " rows"] | None = None,
    *,
    goal_eps: float,
    key: Key[Array, ""] | None = None,
    **params,
) -> Int[Array, " rows"]:
    """The per-row training weights of one round (0/1 for the episode rules; span counts for 'paper').

    Arguments:
    - `rule`: 'paper', 'episodes' (needs `values`) or 'mc-episodes' (critic-free).
    - `data`: the dataset; `state`, `goal`: the current state's and the episode goal's GOAL COORDINATES (like
      `data.goals`, e.g. maze xy).
    - `values`: `V(s_j | goal)` of every row on OGBench's scale; given, rule 'paper' ranks by the critic's
      returns, else by Monte-Carlo returns.
    - `goal_eps`: the environment's success radius (pointmaze 1.0, antmaze 0.5, cube 0.04).
    - `key`: breaks rule 'paper's ties (default `jax.random.key(0)`).
    - `**params`: any `SelectConfig` field: `q` (paper: fraction kept, default 0.05; mc-episodes: the episode
      quantile, published 0.2), `eps_rel` (relevance radius, default `goal_eps`), `h_min` (shortest span with a
      critic; the published `min_steps`, 10), `n_episodes` (10), `slack` (10), `gamma` (0.99;
      give the backbone's discount when `values` come from it), ...

    Pure and fixed-shape: jit it with `rule` and `params` static.
    """
    if rule not in RULES:
        raise TttError(f"training_rows: rule must be one of {', '.join(RULES)}, got {rule!r}")
    fields = [f.name for f in dataclasses.fields(SelectConfig) if f.name not in ("mode", "rule")]
    if "mode" in params or "rule" in params:
        raise TttError("training_rows: mode and rule follow from the `rule` argument and `values`; pass neither")
    unknown = sorted(set(params) - set(fields))
    if unknown:
        raise TttError(f"training_rows: unknown parameter(s) {', '.join(unknown)}; valid: {', '.join(fields)}")
    mode = RULES[rule].mode or ("critic" if values is not None else "mc")
    if mode == "mc" and values is not None and RULES[rule].mode:
        raise TttError(f"training_rows: rule {rule!r} is critic-free; pass values=None")
    if mode == "critic" and values is None:
        raise TttError(f"training_rows: rule {rule!r} needs values (V(s_j | goal) for every row)")
    dim = data.goals.shape[-1]
    for name, x in (("state", state), ("goal", goal)):
        if jnp.shape(x) != (dim,):
            raise TttError(f"training_rows: {name} must be goal coordinates like data.goals, shape ({dim},), got "
                           f"shape {jnp.shape(x)}; pass one vector (vmap for a batch)")  # fmt: skip
    if values is not None and jnp.shape(values) != (data.n_rows,):
        raise TttError(f"training_rows: values must hold one value per dataset row, shape ({data.n_rows},), got "
                       f"shape {jnp.shape(values)}")  # fmt: skip
    if not (isinstance(goal_eps, int | float) and not isinstance(goal_eps, bool) and math.isfinite(goal_eps)
            and goal_eps > 0):  # fmt: skip
        raise TttError(f"training_rows: goal_eps (the success radius) must be a finite number > 0, got {goal_eps!r}")
    try:
        SelectConfig(rule=rule, mode=mode, **params)
    except ValueError as e:
        raise TttError(f"training_rows: {e}") from None
    cfg = SelectConfig(rule=rule, mode=mode, **params)
    key = jax.random.key(0) if key is None else key
    tables = precompute(data, jnp.asarray(goal, jnp.float32), values, cfg, goal_eps)
    ctx = Context(data=data, goal_eps=goal_eps, cfg=cfg, state_xy=jnp.asarray(state, jnp.float32), key=key,
                  tables=tables)  # fmt: skip
    return round_weights(ctx)[0]
