"""The statistics the studies report: intervals over seeds, paired differences, a bootstrap, and
what is read off a learning curve.

Every PPO method starts from the same SFT policy and reward models and, for a given seed, draws the
same training prompts in the same order, so a seed is a *pair* (or a block, across methods): the
difference Text2Grad - scalar PPO on seed s removes what the two runs share (which prompts came
early, the SFT policy's quirks). Intervals on those differences are much tighter than the two
methods' own intervals side by side, and a verdict reads them: a difference whose interval excludes
0 is a difference.
"""
import math
import random

# two-sided 95% quantiles of Student's t, by degrees of freedom (n - 1)
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
       20: 2.086, 25: 2.060, 30: 2.042, 60: 2.000}


def mean_ci95(values):
    """Mean and the half-width of its 95% Student-t interval: mean +- t_{n-1} sd / sqrt(n) (past 20
    degrees of freedom, t of the nearest tabled ones below, slightly wide; the normal 1.96 past 120
    values); the half-width is 0 for a single value."""
    n = len(values)
    if n == 0:
        raise ValueError("no values to average")
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    t = 1.96 if n > 120 else T95[max(df for df in T95 if df <= n - 1)]
    return mean, t * sd / math.sqrt(n)


def paired_difference(a, b, groups=None):
    """a[s] - b[s] for the same seeds s: {"mean", "ci95" (half-width), "per_seed", "verdict"}, where
    the verdict is "higher" or "lower" when the interval excludes 0, "tie" when it does not.
    groups[s]: what run s shares with others (its reward model's seed). Runs that share a reward
    model are not independent, so the differences are averaged within each group first and the
    interval is over the group means ("units": how many); with every group a single run it is the
    plain paired interval."""
    if len(a) != len(b) or (groups is not None and len(groups) != len(a)):
        raise ValueError(f"paired values need the same seeds: {len(a)} against {len(b)}"
                         + ("" if groups is None else f", {len(groups)} groups"))
    if any(math.isnan(x) for x in list(a) + list(b)):  # NaN would read as a tie with p 1
        raise ValueError("a paired score is NaN: the run that wrote it diverged")
    differences = [x - y for x, y in zip(a, b)]
    units = unit_means(differences, groups)
    mean, half = mean_ci95(units)  # with unequal groups, the mean of the group means
    verdict = "tie" if len(units) < 2 or abs(mean) <= half else ("higher" if mean > 0 else "lower")
    return {"mean": mean, "ci95": half, "per_seed": differences, "units": len(units), "verdict": verdict,
            "p": t_test(units)}


def unit_means(values, groups=None):
    """The values averaged within each group (groups[s]: the reward model run s read), in order of
    first appearance: the independent units. Without groups, the values themselves."""
    if groups is None:
        return list(values)
    members = {}
    for g, v in zip(groups, values):
        members.setdefault(g, []).append(v)
    return [sum(vs) / len(vs) for vs in members.values()]


def t_test(values):
    """The two-sided p-value of Student's one-sample t-test of mean 0 over values (the paired
    differences' units); None with fewer than two values."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    if sd == 0:
        return 1.0 if mean == 0 else 0.0
    return t_p_value(mean / (sd / math.sqrt(n)), n - 1)


def t_p_value(t, df, steps=2000):
    """P(|T| >= |t|) for Student's t with df degrees of freedom. With x = sqrt(df) tan(theta) the
    density becomes proportional to cos(theta)^(df - 1) on [0, pi/2), so
        p = integral from atan(|t| / sqrt(df)) to pi/2 of cos^(df-1) / the same from 0,
    both by Simpson's rule on `steps` intervals: bounded, smooth, and the tail is integrated
    directly, so a huge t gives a tiny p, not 1 minus a rounded 1."""
    def simpson(a, b):
        h = (b - a) / steps
        f = lambda x: max(0.0, math.cos(x)) ** (df - 1)
        return h / 3 * (f(a) + f(b) + sum((4 if k % 2 else 2) * f(a + k * h) for k in range(1, steps)))
    start = math.atan(abs(t) / math.sqrt(df))
    return min(1.0, simpson(start, math.pi / 2) / simpson(0.0, math.pi / 2))


def holm(p_values):
    """Holm's step-down adjustment of a family of p-values, in their order: the k-th smallest (from
    k = 0) times (m - k), never below the adjusted value before it, at most 1. A contrast whose
    adjusted p is below alpha is a finding at family-wise error alpha. A p of None (a contrast with no interval) stays None and is not counted in the family."""
    tested = [i for i, p in enumerate(p_values) if p is not None]
    m, adjusted, running = len(tested), [None] * len(p_values), 0.0
    for k, i in enumerate(sorted(tested, key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - k) * p_values[i]))
        adjusted[i] = running
    return adjusted


def difference_text(d):
    """A paired difference as the tables print it: "+0.048 ± 0.035 (higher)", or, from a single unit
    (every seed on one reward model), "+0.118 (1 unit: no interval)"."""
    if d["units"] < 2:
        return f"{d['mean']:+.3f} (1 unit: no interval)"
    return f"{d['mean']:+.3f} ± {d['ci95']:.3f} ({d['verdict']})"


def sign_test(wins, losses):
    """Two-sided exact sign test: the chance, if either side were as likely to win each paired seed,
    of a split at least as uneven as wins against losses (ties left out). 1.0 with no untied pair."""
    n, k = wins + losses, max(wins, losses)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, j) for j in range(k, n + 1)) / 2 ** n)


def bootstrap_ci95(n, statistic, resamples=2000, seed=0):
    """The 2.5th and 97.5th percentiles of statistic(indices) over `resamples` draws of n indices
    with replacement (the percentile bootstrap): resample the units (responses, seeds), recompute."""
    rng = random.Random(seed)
    values = sorted(statistic([rng.randrange(n) for _ in range(n)]) for _ in range(resamples))
    return values[int(0.025 * resamples)], values[int(0.975 * resamples) - 1]


# ---------------------------------------------------------------------------------------------
# Learning curves [(update, score, ...)]

def updates_to_hold(curve, level):
    """The sustained crossing: the first update from which a learning curve [(update, score, ...)]
    stays at or above `level` (within 1e-9, so a level computed in floating point is met by the
    score it stands for: at SFT 0.2, half the gap is 0.6000000000000001) at every later point up
    to its last; None (censored) if its last point is below. A run that reaches the level and then
    collapses holds it only from wherever it last climbed back, or never. (landing.updates_to_hold,
    the first look's, reads the gap's share and counts never as the budget plus one.)"""
    held = None
    for p in curve:
        if p[1] < level - 1e-9:
            held = None
        elif held is None:
            held = p[0]
    return held


def kaplan_meier(times, reached):
    """The Kaplan-Meier estimate of the share of runs that have not yet reached a level, against the
    update: times[i] is run i's update of reaching it (reached[i] True) or its last update without
    reaching it (reached[i] False: censored, it might have reached it later). Returns [(t, S(t))] at
    each update where some run reached it:
        S(t) = prod over event updates t_j <= t of (1 - d_j / n_j),
    d_j the runs reaching it at t_j, n_j the runs still at risk there (not yet reached, not censored
    before t_j; a run censored at t_j counts as at risk at t_j). No run dropped or counted as budget + 1."""
    if len(times) != len(reached):
        raise ValueError(f"{len(times)} times against {len(reached)} flags")
    survival, curve = 1.0, []
    for t in sorted({t for t, r in zip(times, reached) if r}):
        at_risk = sum(u >= t for u in times)
        events = sum(u == t and r for u, r in zip(times, reached))
        survival *= 1 - events / at_risk
        curve.append((t, survival))
    return curve


def km_median(times, reached):
    """The first update at which the Kaplan-Meier estimate falls to 1/2 or below: the median updates
    to reach the level; None when fewer than half the runs are known to reach it (too censored)."""
    return next((t for t, s in kaplan_meier(times, reached) if s <= 0.5 + 1e-12), None)


def mean_curve(curves):
    """Point by point mean of learning curves [(update, score, ...)] that share their updates."""
    if len({tuple(p[0] for p in c) for c in curves}) != 1:
        raise ValueError("the curves do not share their updates")
    return [(points[0][0], sum(p[1] for p in points) / len(points)) for points in zip(*curves)]


def curve_area(curve):
    """The mean height of a learning curve [(update, score, ...)] over its updates, by the trapezoid
    rule: the area under it divided by its span. Sooner is higher at the same end."""
    span = curve[-1][0] - curve[0][0]
    if span <= 0:
        raise ValueError("a curve needs two updates or more")
    return sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(curve, curve[1:])) / span
