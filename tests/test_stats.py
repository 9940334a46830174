"""ttt.stats against hand-computed cases, and the verdict rule: one hand-checked case per word."""

import itertools
import math

import numpy as np
import pytest

from ttt import stats
from ttt.stats import paired, unpaired, verdict


def test_paired_difference_by_hand():
    # d = [0.3, 0.2, 0.3]: mean 0.8/3, s.d. sqrt(1/300), s.e. s.d./sqrt(3) = 1/30, t = 8 on 2 d.f.;
    # the t(2) c.d.f. is 1/2 + t / (2 sqrt(t^2 + 2)), so p = 1 - 8 / sqrt(66)
    r = paired([0.2, 0.4, 0.6], [0.5, 0.6, 0.9])
    assert r.diff == pytest.approx(0.8 / 3)
    assert r.se == pytest.approx(1 / 30)
    assert r.t == pytest.approx(8.0)
    assert r.p == pytest.approx(1 - 8 / math.sqrt(66))
    assert (r.n, r.test) == (3, "paired")


def test_paired_without_spread():
    # every seed moved by the same +0.7: no t to test with; the exact sign-flip test over 3 seeds: of the 2^3 sign
    # patterns, all-plus and all-minus are the extreme ones, p = 2/8; over 5 seeds 2/32
    r = paired([0.2, 0.2, 0.2], [0.9, 0.9, 0.9])
    assert (r.t, r.p, r.se) == (math.inf, 0.25, 0.0) and r.diff == pytest.approx(0.7)
    assert paired([0.2] * 5, [0.1] * 5).p == 2 / 32 and paired([0.2] * 5, [0.1] * 5).t == -math.inf
    assert paired([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]).p == 1.0  # nothing moved
    # float32 rates (as records hold them) that all moved by +0.06 (k/50), or by +2/30 (k/30, not 6-decimal numbers):
    # no spread, not t = 1.4e7 or 2e5 from rounding noise
    f32 = lambda x: np.asarray(x, np.float32).astype(float).tolist()  # noqa: E731
    for a, b in (([0.10, 0.20, 0.16], [0.16, 0.26, 0.22]), ([1 / 30, 2 / 30, 4 / 30], [3 / 30, 4 / 30, 6 / 30])):
        for x, y in ((f32(a), f32(b)), (a, b)):
            r = paired(x, y)
            assert (r.t, r.p, r.se) == (math.inf, 0.25, 0.0), (x, y, r)
    with pytest.raises(ValueError, match="equal length"):
        paired([0.1, 0.2], [0.1, 0.2, 0.3])


def test_unpaired_without_spread_is_the_exact_permutation_test():
    # rows of 3, each constant: of the C(6, 3) = 20 relabellings only the observed one and its mirror are as extreme,
    # p = 2/20; rows of 3 and 4: no mirror, 1/C(7, 3) = 1/35; equal constant rows: p 1
    assert unpaired([0.7] * 3, [1.0] * 3).p == pytest.approx(0.1)
    assert unpaired([0.7] * 3, [1.0] * 4).p == pytest.approx(1 / 35)
    assert unpaired([0.5] * 3, [0.5] * 3).p == 1.0
    assert stats.exact_no_spread_p(3) == 0.25 and stats.exact_no_spread_p(5, 5) == pytest.approx(2 / 252)


def test_paired_is_not_welch():
    # Seeds that differ a lot from one another but move together: the paired test sees the common move (no spread:
    # the smallest p 3 seeds can give, 0.25), Welch the spread between seeds.
    a, b = [0.1, 0.5, 0.9], [0.2, 0.6, 1.0]
    assert paired(a, b).p == 0.25
    a2 = [0.1, 0.5, 0.9]
    b2 = [0.21, 0.6, 1.0]  # with a little spread: the paired t-test, far below Welch's p
    assert paired(a2, b2).p < 0.01
    assert unpaired(a, b).p > 0.7
    assert unpaired(a, b).diff == pytest.approx(0.1)


def test_welch_by_hand():
    # a = [0, 1], b = [2, 3]: means 0.5 and 2.5, variances 0.5 each, s.e. of the difference sqrt(0.5), t = -2 sqrt 2
    # on (0.25 + 0.25)^2 / (2 * 0.25^2 / 1) = 2 d.f.: p = 1 - |t| / sqrt(t^2 + 2) = 1 - sqrt(0.8)
    t, p = stats.welch([0, 1], [2, 3])
    assert t == pytest.approx(-2 * math.sqrt(2))
    assert p == pytest.approx(1 - math.sqrt(0.8))
    assert all(math.isnan(x) for x in stats.welch([1, 1], [1, 1]))


def test_clustered_se_equals_the_per_seed_se():
    # 3 seeds x 50 episodes: clustered by seed, 150 episodes are 3 observations (the old episode-level Welch read
    # them as 150 and found p < 0.001 here)
    rng = np.random.default_rng(0)
    a = (rng.random((3, 5, 10)) < np.array([0.2, 0.5, 0.8])[:, None, None]).astype(float)
    b = (rng.random((3, 5, 10)) < np.array([0.3, 0.6, 0.9])[:, None, None]).astype(float)
    c = stats.clustered(a, b)
    p = paired(a.mean(axis=(1, 2)), b.mean(axis=(1, 2)))
    assert c.diff == pytest.approx(p.diff) and c.se == pytest.approx(p.se) and c.p == pytest.approx(p.p)


def test_clustered_by_hand_unbalanced_free():
    # seeds' episode differences [1, 1] and [0, 0]: mean 0.5; cluster sums of (d - 0.5): +1 and -1;
    # variance 2 / 1 * (1 + 1) / 4^2 = 0.25, s.e. 0.5, t 1 on 1 d.f.: p = 0.5
    c = stats.clustered(np.array([[0, 0], [0, 0]]), np.array([[1, 1], [0, 0]]))
    assert (c.diff, c.se, c.t) == pytest.approx((0.5, 0.5, 1.0))
    assert c.p == pytest.approx(0.5)


def test_bootstrap_ci_one_task_by_hand():
    # seeds' differences [0, 1]: resampled means 0, 1/2, 1 with probabilities 1/4, 1/2, 1/4: the 95% interval is
    # [0, 1]; the central 40% is the middle value
    assert stats.bootstrap_ci([0, 0], [0, 1], seed=0) == (0.0, 1.0)
    assert stats.bootstrap_ci([0, 0], [0, 1], seed=0, level=0.4) == (0.5, 0.5)


def test_bootstrap_ci_is_stratified_by_task():
    # two tasks whose seeds cancel: seed 0 is [0, 1] over tasks, seed 1 [1, 0]. Resampling whole seeds always gives
    # a mean of 1/2; resampling within each task gives (m1 + m2) / 2 with m1, m2 in {0, 1/2, 1} independently:
    # 0 with probability 1/16, so the 95% interval is [0, 1] and the central 50% [1/4, 3/4]
    d = np.array([[0.0, 1.0], [1.0, 0.0]])
    assert stats.bootstrap_ci(np.zeros_like(d), d, seed=0) == (0.0, 1.0)
    assert stats.bootstrap_ci(np.zeros_like(d), d, seed=0, level=0.5) == (0.25, 0.75)


def test_bootstrap_ci_fixed_seed_matches_the_exact_distribution():
    # three seeds, one task: all 27 equally likely resamples enumerated give the exact distribution of the mean
    # (sums of 0..6 tenths with counts 1, 3, 6, 7, 6, 3, 1); its 2.5% and 97.5% points are 0 and 0.6 (each end has
    # probability 1/27 > 0.025), its quartiles 0.2 and 0.4. 10,000 draws on seed 0 agree, the same every time.
    d = np.array([0.0, 0.3, 0.6])
    means = np.array(sorted(np.mean(c) for c in itertools.product(d, repeat=3)))

    def exact(q):  # the smallest mean whose c.d.f. reaches q
        return means[int(np.ceil(q * len(means))) - 1]

    assert (exact(0.025), exact(0.975)) == pytest.approx((0.0, 0.6))
    lo, hi = stats.bootstrap_ci(np.zeros(3), d, seed=0)
    assert (lo, hi) == pytest.approx((exact(0.025), exact(0.975)), abs=1e-9)
    assert stats.bootstrap_ci(np.zeros(3), d, seed=0) == (lo, hi)
    assert stats.bootstrap_ci(np.zeros(3), d, seed=0, level=0.5) == pytest.approx((0.2, 0.4))


def test_bootstrap_ci_unpaired_resamples_each_row():
    # A = [0, 0], B = [1, 1]: whatever the draw, B - A is 1
    assert stats.bootstrap_ci([0, 0], [1, 1], paired_rows=False, seed=3) == (1.0, 1.0)
    with pytest.raises(ValueError, match="one shape"):
        stats.bootstrap_ci([0, 0], [1, 1, 1])


def test_iqm_and_probability_of_improvement_by_hand():
    assert stats.iqm([1, 2, 3, 4, 5, 6, 7, 8]) == pytest.approx(4.5)  # the middle four: 3, 4, 5, 6
    assert stats.iqm([0, 0, 0, 10]) == pytest.approx(0.0)  # an outlier does not move it
    # task 1: X [1, 2] vs Y [0, 3]: 1 > 0, 2 > 0 of 4 pairs = 1/2; task 2: X [1, 1] vs Y [1, 0]: ties count a half,
    # (0.5 + 1 + 0.5 + 1) / 4 = 3/4; averaged over tasks 5/8
    x = np.array([[1, 1], [2, 1]])
    y = np.array([[0, 1], [3, 0]])
    assert stats.prob_improvement(x, y) == pytest.approx(5 / 8)
    assert stats.prob_improvement(y, y) == pytest.approx(0.5)


def test_paper_direction():
    assert stats.paper_direction(0.05, 0.01, 0.78, 0.02) == "gain"
    assert stats.paper_direction(0.52, 0.03, 0.58, 0.03) == "none"  # +0.06 under two combined s.e. (0.085)
    assert stats.paper_direction(0.73, 0.02, 0.31, 0.03) == "loss"
    assert stats.paper_direction(0.97, 0.01, 0.97, 0.01) == "none"


# One hand-checked case per word. Ours: per-seed rates of 3 seeds.
def _d(a, b):
    return paired(a, b), float(np.mean(a)), float(np.mean(b))


def test_word_gain_reproduced():
    d, a, b = _d([0.05, 0.10, 0.05], [0.80, 0.85, 0.90])  # d = [0.75, 0.75, 0.85]: t = 0.7833 / 0.0333 = 23.5
    v = verdict("gain", d, a, b, paper_base=0.05)
    assert v.word == "gain reproduced" and d.p == pytest.approx(1 - 23.5 / math.sqrt(23.5**2 + 2))


def test_word_same_direction_weak_evidence():
    # antmaze navigate GC-BC's shape: +0.10 on seeds that disagree: d = [0.2, 0.1, 0.0], t = 1.73, p 0.23 (not weak)
    d, a, b = _d([0.2, 0.2, 0.2], [0.4, 0.3, 0.2])
    assert verdict("gain", d, a, b, 0.29).word == "not reproduced" and 0.2 < d.p < 0.25
    # d = [0.15, 0.10, 0.05]: t = 0.1 / (0.05 / sqrt 3) = 3.46 on 2 d.f.: p 0.074
    d, a, b = _d([0.2, 0.2, 0.2], [0.35, 0.3, 0.25])
    v = verdict("gain", d, a, b, 0.29)
    assert v.word == "same direction, weak evidence" and d.p == pytest.approx(0.0742, abs=1e-3)


def test_word_no_difference_as_the_paper():
    d, a, b = _d([0.37, 0.35, 0.39], [0.36, 0.38, 0.37])  # +0.0 on noise
    assert verdict("none", d, a, b, 0.52).word == "no difference, as the paper"


def test_word_not_reproduced():
    d, a, b = _d([0.28, 0.28, 0.28], [0.20, 0.21, 0.22])  # a clear loss where the paper gains
    assert verdict("gain", d, a, b, 0.21).word == "not reproduced"
    d, a, b = _d([0.05, 0.10, 0.05], [0.80, 0.85, 0.90])  # a clear gain where the paper finds none
    assert verdict("none", d, a, b, 0.10).word == "not reproduced"


def test_word_not_comparable():
    d, a, b = _d([0.55, 0.60, 0.62], [0.68, 0.69, 0.70])
    # the paper's base at its ceiling (SAW antmaze navigate 0.97 -> 0.97)
    v = verdict("none", d, a, b, paper_base=0.97)
    assert v.word == "not comparable" and "ceiling" in v.why
    # our base 0.30 or more from the paper's on the side that changes the room: an expected no difference with our
    # base 0.59 against the paper's 0.91 (QRL navigate), an expected gain with ours far above the paper's
    assert verdict("none", d, a, b, paper_base=0.91).word == "not comparable"
    assert verdict("gain", d, a, b, paper_base=0.20).word == "not comparable"
    # below the paper's base for an expected gain leaves more room, not less: scored
    assert verdict("gain", d, a, b, paper_base=0.90).word == "gain reproduced"
    # both our rows at 1.00 where no difference is expected: nothing could differ but a loss
    d, a, b = _d([1.0, 1.0, 1.0], [1.0, 1.0, 1.0])
    assert verdict("none", d, a, b).word == "not comparable"


def test_word_modified_method():
    d, a, b = _d([0.2, 0.2, 0.2], [0.9, 0.9, 0.9])
    assert verdict("gain", d, a, b, 0.21, modified=True).word == "modified method (not scored)"


def test_an_expected_loss_and_bad_input():
    d, a, b = _d([0.75, 0.70, 0.74], [0.30, 0.33, 0.31])
    assert verdict("loss", d, a, b).word == "loss reproduced"
    with pytest.raises(ValueError, match="expect"):
        verdict("up", d, a, b)
    assert set(stats.MARKS) == set(stats.WORDS)


def _rec(success, sha=None, data=None, **run):
    r = {"success": success, "checkpoint": "ckpt/pointmaze-medium-navigate-v0/gcbc-cpu-ffd6aecf7f40", "run": run}
    if sha is not None:
        r["checkpoint_sha256"] = sha
    if data is not None:
        r["dataset_hash"] = data
    return r


def test_a_record_without_a_digest_is_never_paired():
    base = [[[0, 0]], [[0, 1]], [[1, 1]]]  # 3 seeds x 1 task x 2 episodes
    ttt = [[[1, 0]], [[1, 1]], [[1, 1]]]
    # the same checkpoint path, tasks and episodes, but no digest on one side or both: not paired, Welch
    for a, b in ((_rec(base), _rec(ttt)), (_rec(base, "s1"), _rec(ttt)), (_rec(base), _rec(ttt, "s1"))):
        assert not stats.pairable(a, b) and not stats.pairable(b, a)
        assert stats.compare_records(a, b).test == "welch"
    # equal digests: paired; another checkpoint, dataset, task list or episode count: not
    assert stats.pairable(_rec(base, "s1", "d1", tasks=[1]), _rec(ttt, "s1", "d1", tasks=[1]))
    assert stats.compare_records(_rec(base, "s1"), _rec(ttt, "s1")).test == "paired"
    one = stats.compare_records(_rec(base[:1], "s1"), _rec(ttt[:1], "s1"))  # one seed: nothing to pair, no error
    assert one.test == "welch" and one.diff == pytest.approx(np.mean(ttt[0]) - np.mean(base[0]))
    assert not stats.pairable(_rec(base, "s1"), _rec(ttt, "s2"))
    assert not stats.pairable(_rec(base, "s1", "d1"), _rec(ttt, "s1", "d2"))
    assert not stats.pairable(_rec(base, "s1", tasks=[1]), _rec(ttt, "s1", tasks=[2]))
    assert not stats.pairable(_rec(base, "s1"), _rec([[[1]], [[1]], [[1]]], "s1"))
