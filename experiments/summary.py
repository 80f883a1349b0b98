"""What a run's results.json says over seeds: the means with 95% intervals, the paired differences
the experiment fixed in advance (experiments.protocol.COMPARISONS), and how soon (each validation
curve's mean height, paired the same way).

The run (experiments/protocol.py) records each seed's numbers; this file summarises them, and the report
(report.py) and the terminal tables (terminal.py) read the summary:

    summarise(results)          results.json -> the summary (a copy, with these keys added):
        methods[name]           score, ci95: the test metric's mean over seeds and the half-width
                                of its 95% interval; curve, curve_ci95: the same per point of the
                                validation curve (in place of the per-seed curves); overopt: the
                                over-optimisation measurement per point, mean over seeds
        paired["a - b"]         a - b seed by seed, its interval and verdict (stats.paired_difference;
                                runs that read one reward-model seed averaged first)
        reward_paired[metric]   cot - no_cot span F1 over the reward-model seeds (with 2 or more)
        area["a - b"]           the same for the mean height of each run's validation curve
"""
import copy

from experiments import stats
from experiments.protocol import COMPARISONS
from text2grad import METHODS


def shared(methods, *names):
    """The reward-model seed each run of the first of `names` judged by a learned model read: what
    its runs share, so runs on one model are averaged into one unit (stats.unit_means). None when
    the critic judges every one of `names`: the critic's runs read no reward model and share
    nothing, so each seed is its own unit."""
    learned = [name for name in names if reads_a_model(name)]
    return methods[learned[0]].get("reward_seeds") if learned else None


def reads_a_model(name):
    """Whether method `name` is judged by a learned reward model (METHODS), not by the critic."""
    return name in METHODS and METHODS[name][0] != "critic"


def summarise_methods(methods):
    """{name: a method's per-seed results} -> the same with score, ci95 (over its units: shared), curve
    and curve_ci95 (the mean validation curve, point by point, over its runs) in place of the per-seed
    curves."""
    out = {}
    for name, m in methods.items():
        m = dict(m)
        curves = m.pop("curves")
        points = [[u, stats.mean_ci95([curve[k][1] for curve in curves])] for k, (u, *_) in enumerate(curves[0])]
        m["score"], m["ci95"] = stats.mean_ci95(stats.unit_means(m["scores"], shared(methods, name)))
        m["curve"], m["curve_ci95"] = [[u, mean] for u, (mean, _) in points], [[u, half] for u, (_, half) in points]
        if isinstance(curves[0][0][-1], dict):  # the over-optimisation measurement, last in every point
            m["overopt"] = overoptimisation(curves)
        out[name] = m
    return out


def overoptimisation(curves):
    """The over-optimisation measurement (experiments.measures.overoptimisation, the last element of each curve
    point) averaged over the seeds' curves, point by point: [{"update", "proxy", "gold", "kl", "length",
    "criticised", "sqrt_kl"}], sqrt_kl the square root of the mean KL (clamped at 0)."""
    out = []
    for j, p in enumerate(curves[0]):
        points = [curve[j][-1] for curve in curves]
        mean = {key: sum(q[key] for q in points) / len(points) for key in points[0]}
        out.append({"update": p[0], **mean, "sqrt_kl": max(0.0, mean["kl"]) ** 0.5})
    return out


def summarise(results):
    """The summary of one task's results.json (see the module docstring)."""
    summary = copy.deepcopy(results)
    methods = summary["methods"] = summarise_methods(results["methods"])
    rm = results["reward_model"]
    if len(rm["cot"]["seeds"]["positive_f1"]) > 1:  # the critique's worth, beyond seed-to-seed variation
        summary["reward_paired"] = {metric: stats.paired_difference(rm["cot"]["seeds"][metric], rm["no_cot"]["seeds"][metric])
                                    for metric in ("positive_f1", "negative_f1")}
    summary["paired"] = {f"{a} - {b}": stats.paired_difference(methods[a]["scores"], methods[b]["scores"],
                                                               shared(methods, a, b))
                         for a, b in COMPARISONS}
    # How soon, beside how far: the mean height of each run's validation curve (stats.curve_area), paired
    for name in METHODS:
        methods[name]["area"] = [stats.curve_area(curve) for curve in results["methods"][name]["curves"]]
    summary["area"] = {f"{a} - {b}": stats.paired_difference(methods[a]["area"], methods[b]["area"],
                                                             shared(methods, a, b))
                       for a, b in COMPARISONS}
    return summary
