"""stats.py against hand-worked values."""
import math

import pytest

from experiments import stats


def test_mean_ci95_hand_worked():
    mean, half = stats.mean_ci95([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.303 / math.sqrt(3))  # sd 1, t(2) = 4.303
    mean, half = stats.mean_ci95([0.0, 1.0, 0.0, 1.0, 0.0])  # sd sqrt(0.3), t(4) = 2.776
    assert mean == 0.4 and half == pytest.approx(2.776 * math.sqrt(0.3) / math.sqrt(5))
    assert stats.mean_ci95([0.5]) == (0.5, 0.0)


def test_paired_difference_is_tighter_than_the_two_intervals():
    # the seeds move both methods together; b is always 0.01 below a
    a, b = [0.90, 0.80, 0.95, 0.85, 0.70], [0.89, 0.79, 0.94, 0.84, 0.69]
    d = stats.paired_difference(a, b)
    assert d["mean"] == pytest.approx(0.01) and d["ci95"] == pytest.approx(0.0, abs=1e-12)
    assert d["per_seed"] == pytest.approx([0.01] * 5) and d["verdict"] == "higher"
    assert stats.mean_ci95(a)[1] > 0.1  # side by side, the two intervals overlap completely
    # differences 1, -1, 1, -1 (mean 0): a tie; differences -1, -2, -3: lower
    assert stats.paired_difference([1, 0, 1, 0], [0, 1, 0, 1])["verdict"] == "tie"
    d = stats.paired_difference([0, 0, 0], [1, 2, 3])
    assert d["mean"] == -2 and d["ci95"] == pytest.approx(4.303 / math.sqrt(3)) and d["verdict"] == "tie"
    assert stats.paired_difference([0, 0, 0, 0, 0], [1, 2, 3, 2, 1])["verdict"] == "lower"
    with pytest.raises(ValueError):
        stats.paired_difference([1, 2], [1])


def test_bootstrap_ci95_of_a_mean():
    values = [0.0, 1.0]
    low, high = stats.bootstrap_ci95(2, lambda rows: sum(values[i] for i in rows) / len(rows), resamples=4000)
    assert (low, high) == (0.0, 1.0)  # both-first and both-second each come up with probability 1/4
    constant = stats.bootstrap_ci95(10, lambda rows: 3.0)
    assert constant == (3.0, 3.0)
    # a large sample: the interval of a mean of 0/1 values is close to mean +- 1.96 sd / sqrt(n)
    values = [k % 2 for k in range(400)]
    low, high = stats.bootstrap_ci95(400, lambda rows: sum(values[i] for i in rows) / 400, resamples=2000)
    assert low == pytest.approx(0.5 - 1.96 * 0.5 / 20, abs=0.01) and high == pytest.approx(0.5 + 1.96 * 0.5 / 20, abs=0.01)


def close(points, expected):
    """Lists of (update, value) pairs equal: the same updates, values within 1e-9."""
    return len(points) == len(expected) and all(t == u and abs(v - w) < 1e-9 for (t, v), (u, w) in zip(points, expected))


def test_kaplan_meier_by_hand():
    # five runs: reached at 2, 3, 5; censored (never reached within their budget) at 3 and 6
    times, reached = [2, 3, 3, 5, 6], [True, True, False, True, False]
    # t = 2: 5 at risk, 1 reaches it: 4/5; t = 3: 4 at risk (the run censored at 3 still counts), 1
    # reaches it: 4/5 * 3/4 = 3/5; t = 5: 2 at risk, 1 reaches it: 3/5 * 1/2 = 3/10
    assert close(stats.kaplan_meier(times, reached), [(2, 0.8), (3, 0.6), (5, 0.3)])
    assert stats.km_median(times, reached) == 5
    # no censoring: the empirical share not yet reached, and the ordinary median
    assert close(stats.kaplan_meier([1, 2, 2, 4], [True] * 4), [(1, 0.75), (2, 0.25), (4, 0.0)])
    assert stats.km_median([1, 2, 2, 4], [True] * 4) == 2
    # too censored for a median: only one of four known to reach it
    assert stats.km_median([3, 4, 4, 4], [True, False, False, False]) is None


def test_curve_area_and_mean_curve_by_hand():
    # trapezoids over updates 0, 2, 6: (2 * (0.2 + 0.6) / 2 + 4 * (0.6 + 1.0) / 2) / 6 = (0.8 + 3.2) / 6
    assert stats.curve_area([(0, 0.2), (2, 0.6), (6, 1.0)]) == pytest.approx(4.0 / 6)
    sooner, later = [(0, 0.2), (2, 1.0), (6, 1.0)], [(0, 0.2), (2, 0.2), (6, 1.0)]
    assert stats.curve_area(sooner) > stats.curve_area(later)  # the same end, reached sooner
    assert close(stats.mean_curve([sooner, later]), [(0, 0.2), (2, 0.6), (6, 1.0)])
    with pytest.raises(ValueError, match="share their updates"):
        stats.mean_curve([sooner, [(0, 0.2), (3, 1.0), (6, 1.0)]])


def test_paired_difference_averages_the_runs_of_a_reward_model_first():
    a, b = [1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0]
    plain = stats.paired_difference(a, b)  # mean 2.5, sd sqrt(5/3), t_3 3.182: half 3.182 * 1.2910 / 2
    assert plain["mean"] == pytest.approx(2.5) and plain["ci95"] == pytest.approx(3.182 * (5 / 3) ** 0.5 / 2)
    assert plain["units"] == 4
    # runs 0 and 2 read reward seed 0, runs 1 and 3 seed 1: units 2 and 3, sd sqrt(1/2), t_1 12.706
    grouped = stats.paired_difference(a, b, groups=[0, 1, 0, 1])
    assert grouped["mean"] == pytest.approx(2.5) and grouped["ci95"] == pytest.approx(12.706 * 0.5 ** 0.5 / 2 ** 0.5)
    assert grouped["units"] == 2 and grouped["verdict"] == "tie" and grouped["per_seed"] == a
    # every run its own reward seed: the plain interval
    assert stats.paired_difference(a, b, groups=[0, 1, 2, 3])["ci95"] == pytest.approx(plain["ci95"])
    assert stats.difference_text(grouped) == "+2.500 ± 6.353 (tie)"  # 12.706 * 0.5 = 6.353
    one = stats.paired_difference(a, b, groups=[7, 7, 7, 7])  # every seed on one reward model: one unit
    assert one["units"] == 1 and stats.difference_text(one) == "+2.500 (1 unit: no interval)"
    with pytest.raises(ValueError, match="3 groups"):  # a group for every seed, never a silent cut
        stats.paired_difference(a, b, groups=[0, 1, 0])


def test_sign_test_against_the_binomial_by_hand():
    # 8 of 8: 2 * (1/256); 7 of 8: 2 * (8 + 1)/256; 4 of 8: capped at 1; nothing untied: 1
    assert stats.sign_test(8, 0) == pytest.approx(2 / 256) and stats.sign_test(0, 8) == pytest.approx(2 / 256)
    assert stats.sign_test(7, 1) == pytest.approx(18 / 256)
    assert stats.sign_test(4, 4) == 1.0 and stats.sign_test(0, 0) == 1.0


def test_t_p_value_against_closed_forms_and_the_table():
    # one degree of freedom is the Cauchy distribution: P(|T| >= t) = 1 - 2 atan(t) / pi
    for t in (0.5, 1.0, 3.0):
        assert stats.t_p_value(t, 1) == pytest.approx(1 - 2 * math.atan(t) / math.pi, abs=1e-6)
    # two: P(|T| >= t) = 1 - t / sqrt(t^2 + 2)
    for t in (0.3, 1.0, 4.0):
        assert stats.t_p_value(-t, 2) == pytest.approx(1 - t / math.sqrt(t * t + 2), abs=1e-6)
    # the 95% quantiles of the table give p = 0.05 (they are rounded to 3 decimals)
    for df in (3, 5, 8, 20):
        assert stats.t_p_value(stats.T95[df], df) == pytest.approx(0.05, abs=2e-4)
    assert stats.t_p_value(0.0, 4) == pytest.approx(1.0)


def test_t_test_and_the_paired_p():
    # differences 1, 2, 3: mean 2, sd 1, t = 2 sqrt(3) on 2 degrees of freedom
    t = 2 * math.sqrt(3)
    assert stats.t_test([1, 2, 3]) == pytest.approx(1 - t / math.sqrt(t * t + 2), abs=1e-6)
    assert stats.paired_difference([1, 2, 3], [0, 0, 0])["p"] == pytest.approx(stats.t_test([1, 2, 3]))
    assert stats.t_test([0.5, 0.5]) == 0.0 and stats.t_test([0.0, 0.0]) == 1.0 and stats.t_test([1.0]) is None


def test_holm_hand_worked():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04 -> kept monotone: 0.06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert stats.holm([]) == []
    assert stats.holm([0.01, None, 0.02]) == pytest.approx([0.02, None, 0.02])  # None: no interval, not counted


def test_t_p_value_far_in_the_tail():
    # two degrees of freedom: 1 - t / sqrt(t^2 + 2) = 2 / (sqrt(t^2 + 2) (sqrt(t^2 + 2) + t)), exact in floats
    for t in (1e3, 1e5):
        want = 2 / (math.sqrt(t * t + 2) * (math.sqrt(t * t + 2) + t))
        assert stats.t_p_value(t, 2) == pytest.approx(want, rel=1e-3)
    # larger t, smaller p, at every df
    for df in (1, 4, 8):
        values = [stats.t_p_value(t, df) for t in (10, 100, 1e3, 1e4, 1e6)]
        assert all(a > b for a, b in zip(values, values[1:])), values


def test_a_nan_score_is_refused_not_read_as_a_tie():
    # beside it, finite scores: differences 0.1 and 0.1 by hand, no spread, so p 0
    d = stats.paired_difference([0.5, 0.7], [0.4, 0.6])
    assert d["mean"] == pytest.approx(0.1) and d["p"] == 0.0
    with pytest.raises(ValueError, match="NaN"):
        stats.paired_difference([math.nan, 0.7, 0.6], [0.4, 0.6, 0.5])


def test_the_critics_runs_are_their_own_units_a_learned_judges_share_their_model():
    from experiments import optimisers
    a = {"scores": [0.5, 0.7, 0.6, 0.9], "reward_seeds": [1, 1, 2, 2]}
    b = {"scores": [0.4, 0.4, 0.4, 0.4], "reward_seeds": [1, 1, 2, 2]}
    assert optimisers.paired(a, b, ["oracle", "oracle_scalar"])["units"] == 4
    learned = optimisers.paired(a, b, ["text2grad", "text2grad_last"])
    # units: (0.1 + 0.3) / 2 and (0.2 + 0.5) / 2, by hand
    assert learned["units"] == 2 and learned["mean"] == pytest.approx((0.2 + 0.35) / 2)
    assert optimisers.paired(a, b, ["oracle", "text2grad"])["units"] == 2  # one side reads a model
