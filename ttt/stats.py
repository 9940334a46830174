"""The statistics behind every table and verdict: one implementation, used by `ttt report`, Table 1, the claims
table and the studies (docs/algorithm.md, "Statistics and verdicts").

The unit of evidence is the training seed: the episodes of one seed share its checkpoint, so they are not independent
draws (150 episodes of 3 seeds are 3 observations of the checkpoint's success, not 150). Hence:

- `paired`: B - A over seeds when both rows ran the same episodes on the same checkpoints (same digests): the per-seed
  differences, their mean, s.e. and a paired t-test (seeds - 1 degrees of freedom);
- `welch`: Welch's t-test over per-seed rates, for rows that cannot be paired;
- `clustered`: an episode-level difference with the standard error clustered by seed (with equal episodes per seed it
  equals the paired per-seed s.e.: the episode count adds no independent evidence);
- `bootstrap_ci`: the stratified bootstrap confidence interval of Agarwal et al. (2021, `rliable`): seeds resampled
  with replacement within each task, a fixed generator seed, the percentile interval;
- `iqm`, `prob_improvement`: the interquartile mean and the probability of improvement (rliable's definitions) where
  rows of several tasks or datasets are aggregated;
- `verdict`: the one verdict rule (`WORDS`, thresholds below).

`rliable` itself installs beside jax 0.10 / numpy 2, but brings pandas, seaborn, statsmodels and arch (nine packages)
for these few lines of numpy; `scipy.stats` (installed with jax) gives the t distribution.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

# The verdict rule's thresholds (docs/algorithm.md, "Statistics and verdicts").
CLEAR_P = 0.05  # p below this: a difference
WEAK_P = 0.20  # p below this (not below CLEAR_P), in the paper's direction: weak evidence
PAPER_Z = 2.0  # the paper's own direction: its difference over its combined s.e. beyond this
CEILING = 0.95  # a base at or above this has no room to gain (the paper's, or ours)
ROOM = 0.30  # our base this far from the paper's, on the side that changes the room to move: another operating point

GAIN, WEAK, SAME, NOT, INCOMPARABLE, MODIFIED = (
    "gain reproduced",
    "same direction, weak evidence",
    "no difference, as the paper",
    "not reproduced",
    "not comparable",
    "modified method (not scored)",
)
WORDS = (GAIN, WEAK, SAME, NOT, INCOMPARABLE, MODIFIED)
MARKS = {GAIN: "✓", WEAK: "~", SAME: "=", NOT: "✗", INCOMPARABLE: "n/c", MODIFIED: "mod"}


def mean_se(x) -> tuple[float, float]:
    """Mean and standard error (ddof 1) of per-seed values; s.e. nan for one value."""
    x = np.asarray(x, float).ravel()
    se = float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else math.nan
    return float(x.mean()), se


def _t_p(t: float, df: int) -> float:
    from scipy import stats

    return float(2 * stats.t.sf(abs(t), df))


@dataclass(frozen=True)
class Diff:
    """B - A: the difference of means, its s.e., the test's statistic and two-sided p, and which test it was."""

    diff: float
    se: float
    t: float
    p: float
    n: int  # seeds (paired) or the smaller row's seeds (Welch)
    test: str  # "paired" or "welch"


SPREAD_TOL = 1e-6  # per-seed rates are k / episodes (float32 in records): differences below this are rounding


def exact_no_spread_p(n_a: int, n_b: int | None = None) -> float:
    """The exact permutation test's two-sided p where the rows have no spread to test with t (`paired`, `unpaired`):
    every one of `n_a` paired differences equal and nonzero, p = 2 / 2^n_a (all sign flips; the observed signs and
    their mirror are the extreme ones); or, unpaired (`n_b` given), each row constant and the two different, p =
    2 / C(2n, n) for equal rows of n (1 / C(n_a + n_b, n_a) for unequal ones: no mirror). The smallest p the seeds can
    give: 0.25 for 3 paired seeds, 0.0625 for 5; 0.1 for two rows of 3."""
    if n_b is None:
        return 2.0 ** (1 - n_a)
    return (2.0 if n_a == n_b else 1.0) / math.comb(n_a + n_b, n_a)


def _no_spread(diff: float, se: float, n: int, test: str, p_exact: float) -> Diff:
    """The one rule for rows without spread (within `SPREAD_TOL`), which leave no t to test with: where nothing moved
    (the difference within `SPREAD_TOL`) t is 0 and p 1; else t is +-inf and p the exact permutation test's, `p_exact`
    (`exact_no_spread_p`)."""
    if abs(diff) <= SPREAD_TOL:
        return Diff(diff, se, 0.0, 1.0, n, test)
    return Diff(diff, se, math.copysign(math.inf, diff), p_exact, n, test)


def paired(a, b) -> Diff:
    """Paired t-test of B - A over seeds (`a`, `b`: per-seed rates, seed i of both on one checkpoint and the same
    episodes). Differences without spread (within `SPREAD_TOL`: float32 rates that moved alike) have no t to test
    with: t is +-inf and p the exact sign-flip test's (`exact_no_spread_p`), or t 0 and p 1 where nothing moved."""
    a, b = np.asarray(a, float).ravel(), np.asarray(b, float).ravel()
    if a.shape != b.shape or len(a) < 2:
        raise ValueError(f"paired: per-seed rates of equal length >= 2 expected, got {len(a)} and {len(b)}")
    d = b - a
    m, se = mean_se(d)
    if np.ptp(d) <= SPREAD_TOL:  # every seed moved alike (float rounding aside)
        return _no_spread(m, 0.0, len(d), "paired", exact_no_spread_p(len(d)))
    return Diff(m, se, m / se, _t_p(m / se, len(d) - 1), len(d), "paired")


def welch(a, b) -> tuple[float, float]:
    """Welch's t-test of mean(a) against mean(b) (two-sided): (t, p); nan where undefined (fewer than 2 values or no
    variance in either)."""
    from scipy import stats

    # rates of float32 counts (0.2000000029...): rounded, so that equal rates have no spurious spread
    a, b = np.round(np.asarray(a, float).ravel(), 9), np.round(np.asarray(b, float).ravel(), 9)
    if len(a) < 2 or len(b) < 2 or (np.ptp(a) <= SPREAD_TOL and np.ptp(b) <= SPREAD_TOL):
        return math.nan, math.nan
    with warnings.catch_warnings():  # one row without spread: scipy warns of precision, the statistic is still right
        warnings.simplefilter("ignore", RuntimeWarning)
        t, p = stats.ttest_ind(a, b, equal_var=False)
    return float(t), float(p)


def unpaired(a, b) -> Diff:
    """B - A for rows that cannot be paired: Welch over per-seed rates; without spread in either row there is no t to
    test with: p is the exact permutation test's for different means (`exact_no_spread_p`) and 1 for equal ones."""
    a, b = np.asarray(a, float).ravel(), np.asarray(b, float).ravel()
    d = float(b.mean() - a.mean())
    se = math.hypot(mean_se(a)[1], mean_se(b)[1])
    n = min(len(a), len(b))
    t, p = welch(b, a)
    if math.isnan(p) and n >= 2:  # neither row has spread (one seed in a row: no test, the tables need 2 a row)
        return _no_spread(d, se, n, "welch", exact_no_spread_p(len(a), len(b)))
    return Diff(d, se, t, p, n, "welch")


def clustered(a, b) -> Diff:
    """An episode-level B - A with the standard error clustered by seed (the first axis): `a`, `b` of shape
    (seeds, ...) with the same episodes. The cluster-robust variance of the mean difference,
    G / (G - 1) * sum_g (sum_i in g (d_i - mean d))^2 / n^2, with a t test on G - 1 degrees of freedom."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.shape != b.shape or a.ndim < 1 or a.shape[0] < 2:
        raise ValueError(f"clustered: equal shapes with >= 2 seeds expected, got {a.shape} and {b.shape}")
    d = (b - a).reshape(a.shape[0], -1)
    g, n = d.shape[0], d.size
    m = float(d.mean())
    var = g / (g - 1) * float(((d - m).sum(axis=1) ** 2).sum()) / n**2
    se = math.sqrt(var)
    if np.ptp(d.mean(axis=1)) <= SPREAD_TOL:  # every seed moved alike: no spread, the sign-flip test over seeds
        return _no_spread(m, 0.0, g, "clustered", exact_no_spread_p(g))
    return Diff(m, se, m / se, _t_p(m / se, g - 1), g, "clustered")


def bootstrap_ci(a, b=None, *, paired_rows: bool = True, reps: int = 10_000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:  # fmt: skip
    """The stratified bootstrap's percentile interval of the mean over a (seeds, tasks) matrix (rliable's: the seeds
    resampled with replacement within each task). With `b`: of mean(B) - mean(A); paired rows resample one set of seed
    indices for both (the difference per seed and task), unpaired rows resample each row's seeds apart. A fixed `seed`
    makes the interval the same on every machine."""
    rng = np.random.default_rng(seed)

    def means(x):  # per draw: per task, the seeds drawn with replacement; the mean over seeds and tasks
        idx = rng.integers(0, x.shape[0], size=(reps, *x.shape))
        return np.take_along_axis(x[None], idx, axis=1).mean(axis=(1, 2))

    a = _matrix(a)
    if b is None:
        draws = means(a)
    else:
        b = _matrix(b)
        if paired_rows:
            if a.shape != b.shape:
                raise ValueError(f"bootstrap_ci: paired rows of one shape expected, got {a.shape} and {b.shape}")
            draws = means(b - a)  # the same seeds for A and B
        else:
            draws = means(b) - means(a)
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def _matrix(x) -> np.ndarray:
    """(seeds, tasks) as floats; per-seed values (seeds,) as one task."""
    x = np.asarray(x, float)
    return x[:, None] if x.ndim == 1 else x.reshape(x.shape[0], x.shape[1], -1).mean(axis=2)


def iqm(x) -> float:
    """The interquartile mean: the mean of the middle 50% of all values (rliable: scipy's trim_mean at 0.25)."""
    from scipy import stats

    return float(stats.trim_mean(np.asarray(x, float).ravel(), proportiontocut=0.25))


def prob_improvement(x, y) -> float:
    """P(X > Y) (rliable's probability of improvement): per task the Mann-Whitney probability that a run of X beats
    a run of Y (ties count a half), averaged over tasks; `x`, `y` of shape (runs, tasks)."""
    x, y = _matrix(x), _matrix(y)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"prob_improvement: the same tasks expected, got {x.shape[1]} and {y.shape[1]}")
    per_task = [((xi[:, None] > yi[None]) + 0.5 * (xi[:, None] == yi[None])).mean()
                for xi, yi in zip(x.T, y.T, strict=True)]  # fmt: skip
    return float(np.mean(per_task))


# ------------------------------------------------------------------------------------------------ the verdict


def paper_direction(base: float, base_se: float, treat: float, treat_se: float) -> str:
    """The paper's own direction from its printed means and s.e.: "gain" or "loss" beyond PAPER_Z combined s.e.,
    else "none"."""
    d, se = treat - base, math.hypot(base_se, treat_se)
    if (se == 0 and d == 0) or abs(d) <= PAPER_Z * se:
        return "none"
    return "gain" if d > 0 else "loss"


@dataclass(frozen=True)
class Verdict:
    word: str  # one of WORDS ("loss reproduced" for an expected loss)
    why: str  # the rule's reason in a few words

    def __str__(self) -> str:
        return f"{self.word} ({self.why})" if self.why else self.word


def verdict(expect: str, ours: Diff, our_base: float, our_treat: float, paper_base: float | None = None,
            modified: bool = False) -> Verdict:  # fmt: skip
    """The one verdict rule. `expect`: the paper's direction for B - A ("gain", "loss", "none"); `ours`: B - A
    (`paired` where the rows share digests, else `unpaired`); our rows' means; the paper's base where it prints one.

    1. A modified method (not the paper's) is not scored.
    2. Not comparable: the paper's base at its ceiling (>= CEILING) for an expected gain or no difference (its row could
       not show a gain); ours at the ceiling (an expected gain from a base >= CEILING; an expected no difference with
       both rows >= CEILING); our base more than ROOM from the paper's on the side that changes the room to move (above
       it for an expected gain, below it for an expected no difference).
    3. Else p (`ours.p`) decides: expected gain or loss: reproduced when p < CLEAR_P in that direction, same direction,
       weak evidence when p < WEAK_P, else not reproduced; expected no difference: no difference, as the paper when
       p >= CLEAR_P, else not reproduced."""
    if modified:
        return Verdict(MODIFIED, "")
    if expect not in ("gain", "loss", "none"):
        raise ValueError(f"verdict: expect is 'gain', 'loss' or 'none', not {expect!r}")
    if paper_base is not None and paper_base >= CEILING and expect != "loss":
        return Verdict(INCOMPARABLE, f"the paper's base {paper_base:.2f} at its ceiling")
    if expect == "gain" and our_base >= CEILING:
        return Verdict(INCOMPARABLE, f"our base {our_base:.2f} at the ceiling")
    if expect == "none" and min(our_base, our_treat) >= CEILING:
        return Verdict(INCOMPARABLE, "both our rows at the ceiling")
    if paper_base is not None:
        gap = our_base - paper_base
        if expect == "gain" and gap > ROOM:
            return Verdict(INCOMPARABLE, f"our base {gap:+.2f} from the paper's")
        if expect == "none" and -gap > ROOM:
            return Verdict(INCOMPARABLE, f"our base {gap:+.2f} from the paper's")
    p, d = ours.p, ours.diff
    if expect == "none":
        return Verdict(SAME if p >= CLEAR_P else NOT, f"p {p:.2g}")
    right = d > 0 if expect == "gain" else d < 0
    if right and p < CLEAR_P:
        return Verdict(GAIN if expect == "gain" else "loss reproduced", f"p {p:.2g}")
    if right and p < WEAK_P:
        return Verdict(WEAK, f"p {p:.2g}")
    return Verdict(NOT, f"p {p:.2g}")


# ------------------------------------------------------------------------------------------- pairing records


def digests(rec: dict) -> tuple[str | None, str | None]:
    """An evaluation record's checkpoint digest (the state file's sha256) and dataset digest, None where it has none
    (records before 27 Nov 2026, unless backfilled: benchmarks/studies/backfill_digests.py)."""
    return rec.get("checkpoint_sha256"), rec.get("dataset_hash")


def pairable(a: dict, b: dict) -> bool:
    """Two evaluation records ran the same episodes on the same checkpoints: both carry a checkpoint digest and the
    digests are equal, the dataset digests agree where both carry one, and the episodes (success array's shape, and
    the tasks and evaluation seed where the records name them) are the same. A record without a checkpoint digest is
    never paired: a path or a configuration does not show it (the same configuration pre-trained on another machine
    differs, and a cache path is reused)."""
    (ca, da), (cb, db) = digests(a), digests(b)
    if not ca or not cb or ca != cb or (da and db and da != db):
        return False
    if np.shape(a.get("success")) != np.shape(b.get("success")):
        return False
    ra, rb = a.get("run") or {}, b.get("run") or {}
    return all(ra.get(k) == rb.get(k) for k in ("tasks", "eval_seed") if k in ra and k in rb)


def paired_test(a: dict, b: dict) -> bool:
    """Whether B - A is tested seed by seed: the records are `pairable` and hold 2 seeds or more (one seed has no
    spread to test; it falls to `welch`, undefined there)."""
    return pairable(a, b) and np.shape(a["success"])[0] >= 2


def compare_records(a: dict, b: dict) -> Diff:
    """B - A over seeds: `paired` where `paired_test` allows, else `unpaired` (Welch)."""
    sa, sb = (np.asarray(r["success"], float) for r in (a, b))
    ra, rb = (s.reshape(s.shape[0], -1).mean(axis=1) for s in (sa, sb))
    return paired(ra, rb) if paired_test(a, b) else unpaired(ra, rb)
