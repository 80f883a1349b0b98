"""experiments/protocol_record.py: a protocol run's record (experiments.report --out DIR --record) and
a K sweep's, and the RESULTS tables each rebuilds (`tables`, `sweep_tables`): each method's test
score, the family of contrasts with Holm's adjustment, gold beside proxy, the reward models' fit and
the revising rows; a sweep's holds and contrasts per K."""
import copy

from experiments import stats
from experiments.protocol import COMPARISONS
from experiments.records import header, interval, row
from experiments.summary import shared, summarise


COLUMNS = {"ppo_scalar": "scalar PPO", "text2grad_last": "Text2Grad's model, last token",
           "text2grad": "Text2Grad", "oracle_scalar": "critic, last token", "oracle": "critic, every token"}
CONTRASTS = {("text2grad", "ppo_scalar"): "Text2Grad - scalar PPO (the paper's)",
             ("text2grad", "text2grad_last"): "placement, learned judge: Text2Grad - its model on the last token",
             ("oracle", "oracle_scalar"): "placement, the critic: every token - last token",
             ("oracle", "text2grad"): "the judge, every token: critic - Text2Grad's model",
             ("text2grad_last", "ppo_scalar"): "the judge, last token: Text2Grad's model - scalar model",
             ("oracle_scalar", "ppo_scalar"): "the critic's sum - the scalar model (last token)",
             ("oracle_scalar", "text2grad_last"): "the critic's sum - Text2Grad's model summed (last token)",
             ("text2grad", "oracle_scalar"): "the diagonal: Text2Grad - the critic's sum"}
# the prompt-only rows in the family (experiments/LOG.md, fixed before the seed-102 run), like for like
# (the critic's critique of a code answer states what the reference computes: at inference that row
# reads more than any RL arm does)
REVISED = {"revise_first": "prompt-only, like for like, first answer - Text2Grad",
           "revise_critic_1": "prompt-only, trained like for like, after one critique by the critic "
                              "(it names the right code) - Text2Grad"}


def compact(results, revise=None, revise_best=None):
    """A protocol record from results.json (and revise.json, revise_best.json): the showcase left
    out, each run's per-update log cut to its explained variance."""
    results = copy.deepcopy(results)
    results.pop("showcase", None)
    results["ppo_history"] = {key: [{"explained_variance": h["explained_variance"]} for h in history]
                              for key, history in results.get("ppo_history", {}).items()}
    return {"kind": "protocol", "results": results, "revise": revise, "revise_best": revise_best}


def family(record):
    """[(label, a's per-seed scores, b's, groups)]: the contrasts of final test scores the record's
    Holm adjustment runs over, COMPARISONS' order, then the like-for-like prompt-only rows."""
    methods = record["results"]["methods"]
    out = [(CONTRASTS[(a, b)], methods[a]["scores"], methods[b]["scores"], shared(methods, a, b))
           for a, b in COMPARISONS]
    best = record.get("revise_best")
    if best:
        seeds, t2g = best["seeds"], best["text2grad"]
        for name, label in REVISED.items():
            out.append((label, [s["rows"][name]["score"] for s in seeds], t2g["scores"][:len(seeds)],
                        [s["reward_seed"] for s in seeds]))
    return out


def p_text(p):
    """A p-value as the tables print it; "-" where there is none (fewer than two units)."""
    return "-" if p is None else f"{p:.3f}"


def difference_cell(d, n_favour, n):
    """+0.048 ± 0.035 (9 units; 9 of 9), or +0.118 (1 unit: no interval; 3 of 3)"""
    if d["units"] < 2:
        return f"{d['mean']:+.3f} (1 unit: no interval; {n_favour} of {n})"
    return f"{d['mean']:+.3f} ± {d['ci95']:.3f} ({d['units']} units; {n_favour} of {n})"


def tables(record):
    """Each method's test score; the family of contrasts with p-values and Holm's adjustment, and
    beside it the curve heights (uncorrected); gold beside proxy; the prompt-only rows (uncorrected
    but for the family's two)."""
    results = record["results"]
    summary = summarise(results)
    methods, task, seed = summary["methods"], results["task"], results["seed"]
    units = sorted({s for m in results["methods"].values() for s in m.get("reward_seeds", [])})
    out = []
    lines = header(["task", "SFT"] + list(COLUMNS.values()))
    groups = {m: shared(results["methods"], m) for m in COLUMNS}  # the critic's runs: each its own unit
    lines.append(row([f"{task} (seed {seed})", f"{methods['sft']['score']:.3f}"]
                     + [interval(results["methods"][m]["scores"], groups=groups[m]) for m in COLUMNS]))
    out.append((f"{task} at seed {seed}: test, {len(methods['text2grad']['scores'])} PPO seeds on {len(units)} "
                f"reward models; each method's mean ± 95% t over the reward models (clustered: the runs on one "
                f"model averaged first" + (", here one run each)" if len(units) == len(methods['text2grad']['scores'])
                                            else ")"), lines))

    contrasts = family(record)
    ds = [stats.paired_difference(a, b, groups) for _, a, b, groups in contrasts]
    adjusted = stats.holm([d["p"] for d in ds])
    heights = {}  # how soon: the same contrast on the validation curve's mean height, uncorrected
    for key, d in summary["area"].items():
        a, b = key.split(" - ")
        n_favour = sum(x > y for x, y in zip(methods[a]["area"], methods[b]["area"]))
        heights[CONTRASTS[(a, b)]] = difference_cell(d, n_favour, len(d["per_seed"]))
    lines = header(["contrast", "final test score", "p", "Holm", "mean height of the validation curve (uncorrected)"])
    for (label, a, b, _), d, q in zip(contrasts, ds, adjusted):
        lines.append(row([label, difference_cell(d, sum(x > y for x, y in zip(a, b)), len(a)),
                          p_text(d["p"]), p_text(q), heights.get(label, "-")]))
    tested = sum(q is not None for q in adjusted)
    out.append((f"{task} at seed {seed}: the family of {len(ds)} contrasts, paired over units (runs on one "
                f"reward model averaged first; in brackets the units and the seeds favouring the first); p of the "
                f"t-test, Holm-adjusted over the family"
                + ("" if tested == len(ds) else f" (over the {tested} with a p; a single unit has none)")
                + "; beside it, how soon: the curve's height, not in the family", lines))

    ends = {m: [curve[-1][-1] for curve in results["methods"][m]["curves"]] for m in COLUMNS}
    if all(isinstance(e, dict) for points in ends.values() for e in points):  # the over-optimisation measurement
        lines = header(["method", "gold: the critic's praised - blamed tokens", "proxy: the method's own reward",
                        "KL to the SFT policy"])
        lines += [row([COLUMNS[m]] + [interval([e[key] for e in ends[m]], 2, groups[m])
                                      for key in ("gold", "proxy", "kl")]) for m in COLUMNS]
        out.append((f"{task} at seed {seed}: gold beside proxy at the last update (validation samples)", lines))

    fit = results["reward_model"]
    if all(len(fit.get(name, {}).get("seeds", {}).get("positive_f1", [])) > 1 for name in ("cot", "no_cot")):
        seeded = {name: fit[name]["seeds"] for name in ("cot", "no_cot")}
        metrics = ("positive_f1", "negative_f1", "exact_span_match")
        lines = header(["reward model", "praised span F1", "blamed span F1", "exact span match"])
        lines += [row([f"`{name}`"] + [interval(seeded[name][k]) for k in metrics]) for name in seeded]
        lines.append(row(["critique - no critique, paired (uncorrected)"] + [stats.difference_text(
            stats.paired_difference(seeded["cot"][k], seeded["no_cot"][k])) for k in metrics]))
        out.append((f"{task} at seed {seed}: the reward models' fit on test, mean ± 95% t over "
                    f"{len(seeded['cot']['positive_f1'])} reward-model seeds; the critique against its ablation",
                    lines))

    for key, title in (("revise_best", "like for like: its own answers the critic judged better"),
                       ("revise", "the reference: a ceiling with more information")):
        revise = record.get(key)
        if not revise:
            continue
        seeds, t2g = revise["seeds"], revise["text2grad"]
        lines = header(["row", "calls", "score", "minus Text2Grad, paired", "p (uncorrected)"])
        lines.append(row(["Text2Grad (one pass, no critique)", "1",
                          interval(t2g["scores"], groups=t2g.get("reward_seeds")), "-", "-"]))
        for name in seeds[0]["rows"]:
            runs = [s for s in seeds if name in s["rows"]]
            values = [s["rows"][name]["score"] for s in runs]
            calls = sum(s["rows"][name]["calls"] for s in runs) / len(runs)
            d = stats.paired_difference(values, t2g["scores"][:len(values)], [s["reward_seed"] for s in runs])
            in_family = key == "revise_best" and name in REVISED
            lines.append(row([f"`{name}`", f"{calls:.0f}", interval(values, groups=[s["reward_seed"] for s in runs]),
                              stats.difference_text(d),
                              "in the family: Holm above" if in_family else p_text(d["p"])]))
        made = [f"{s['turns']} turns, {s['kept_as_they_are']} kept as they are" for s in seeds[:1] if "turns" in s]
        out.append((f"{task} at seed {seed}: the revising policy, trained on {title} "
                    f"({revise['steps']} steps; seed {seeds[0]['seed']}: {seeds[0].get('critic_calls', '?')} critic "
                    f"calls{', ' + made[0] if made else ''}"
                    + (f"; choosing the steps read {revise['validation_critic_calls']} more on validation"
                       if "validation_critic_calls" in revise else "")
                    + "); calls: model calls per test answer", lines))
    return out


# The K sweep (experiments.sweep)

def sweep_tables(record):
    """Per K: each method's updates to hold 90% of the gap, per seed (the budget plus one eval where
    a seed never holds it), and its test score; the contrasts of COMPARISONS on the final test score
    and on the area under the test curve, paired over units, each p uncorrected."""
    results, out = record["results"], []
    for k in sorted(results["per_k"], key=int):
        r = results["per_k"][k]
        methods = r["methods"]
        lines = header(["method", "updates to hold 90%, per seed", f"test after {r['updates']} updates"])
        lines += [row([COLUMNS.get(name, name), " ".join(map(str, r["thresholds"][name]["0.9"]["per_seed"])),
                       interval(methods[name]["scores"], groups=shared(methods, name))]) for name in r["thresholds"]]
        runs = len(next(iter(methods.values()))["scores"])
        out.append((f"The K sweep at K = {k} (seed {results['seed']}; SFT "
                    f"{r['sft']['test']['sites_right']:.3f}), test, {runs} PPO seeds: mean ± 95% t over each method's "
                    f"units (a learned judge's runs on one reward model averaged first; the critic's each a unit)",
                    lines))
        lines = header(["contrast", "final test score", "p", "area under the test curve", "p"])
        for a, b in COMPARISONS:
            if a in methods and b in methods:
                groups = shared(methods, a, b)
                d, area = (stats.paired_difference(methods[a][key], methods[b][key], groups) for key in ("scores", "area"))
                lines.append(row([CONTRASTS[(a, b)], stats.difference_text(d), p_text(d["p"]),
                                  stats.difference_text(area), p_text(area["p"])]))
        out.append((f"The K sweep at K = {k}: paired over units (a learned judge's runs on one reward model "
                    f"averaged first; ± the 95% t half-width), p uncorrected", lines))
    return out
