"""experiments/records.py: what a lab command's tables read, kept in the repository under results/.

A run folder holds checkpoints and samples (git-ignored, and gone once its machine is); a record holds
the numbers RESULTS.md's tables read: per seed and method the curves, the test scores and the measures
beside them (a protocol run's also its reward models' fit), and where they came from (the commits
and the machine; the command and config where the command knows them).

    python -m experiments.report --from results/NAME.json     # the run's RESULTS tables, no model

    write(path, record)    save a record (a dict with "kind"), keeping results/ at most LIMIT bytes
    read(path)             a record back; ValueError, one line, for anything that is not one
    tables(record)         [(title, markdown lines)]: the tables RESULTS.md shows, rebuilt
                           from the per-seed numbers alone (nothing summarised is read back)

Kinds: "first_look" (experiments.first_looks --record), "information" (experiments.information
--record), "protocol" (experiments.report --out DIR --record: results.json with the revising rows
beside it, the showcase left out and each run's per-update log cut to its explained variance) and
"sweep" (the same command on a K sweep's folder: its results.json, which holds each seed's
thresholds, scores and areas). Their keys: DETAILS.md, "Records".
"""
import copy
import json
import os

from data import get_task
from experiments import stats
from experiments.runstate import atomic_save

LIMIT = 5 * 2 ** 20  # bytes: everything under results/ together


def write(path, record):
    """Save record (a dict with "kind") as JSON at path, unless the folder's files would then pass
    LIMIT bytes together: ValueError, and nothing written."""
    text = json.dumps(record, indent=1)
    folder = os.path.dirname(os.path.abspath(path))
    others = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)
                 if os.path.isfile(os.path.join(folder, f)) and f != os.path.basename(path)) \
        if os.path.isdir(folder) else 0
    if others + len(text.encode()) > LIMIT:
        raise ValueError(f"{path}: {len(text.encode()) / 2 ** 20:.1f} MB would take {folder} past "
                         f"{LIMIT / 2 ** 20:.0f} MB; leave out what no table reads")
    os.makedirs(folder, exist_ok=True)
    atomic_save(text, path)


def read(path):
    """The record at path; ValueError with one line when it is missing, not JSON, or no record."""
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except OSError as error:
        raise ValueError(f"cannot read {path} ({error.strerror or error})") from None
    except ValueError:
        raise ValueError(f"{path} is not JSON") from None
    except RecursionError:  # JSON nested deeper than Python's parser goes
        raise ValueError(f"{path} is not a record (nested too deep)") from None
    if not isinstance(record, dict) or record.get("kind") not in TABLES:
        raise ValueError(f"{path} is not a record (no kind among {', '.join(TABLES)})")
    return record


def tables(record):
    """[(title, [markdown lines])]: the record's RESULTS tables."""
    return TABLES[record["kind"]](record)


def interval(values, digits=3, groups=None):
    """ "mean ± half-width" of the 95% t-interval over the values; with groups (the reward model
    each run read), over the units: the runs on one model averaged first. One unit: its mean alone."""
    units = stats.unit_means(values, groups)
    if len(units) < 2:
        return f"{units[0]:.{digits}f} (1 unit)"
    mean, half = stats.mean_ci95(units)
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


def row(cells):
    return "| " + " | ".join(cells) + " |"


def header(cells):
    return [row(cells), row(["---"] * len(cells))]


# ---------------------------------------------------------------------------------------------
# The first look over seeds (experiments.first_looks)

def first_look_tables(record):
    """The first look's table: per placement contrast (span / summed), each seed's updates to hold,
    the seeds where the span method held sooner (the seeds the finding was chosen on, then the
    others), the geometric-mean ratio with the t-interval of its mean log, the end scores and the
    landing shares, each paired over seeds."""
    from experiments.first_looks import PLACEMENT, finding
    seeds = [record["seeds"][s] for s in sorted(record["seeds"], key=int)]
    names = sorted(record["seeds"], key=int)
    chosen = [record["seeds"][str(s)] for s in record["confirm"]]
    others = [record["seeds"][s] for s in names if int(s) not in record["confirm"]]
    found = finding(seeds)
    first, then = (finding(chosen), finding(others)) if chosen and others else (None, found)
    judges = {"placement, learned": "learned", "placement, critic": "critic"}
    span = lambda s: f"{min(s, key=int)}-{max(s, key=int)}"
    cells = {name: [] for name in PLACEMENT}
    for name, (a, b) in PLACEMENT.items():
        f = found[name]
        higher = lambda values: (sum(v > 0 for v in values), sum(v < 0 for v in values))
        ends = [s[a]["test"] - s[b]["test"] for s in seeds]
        shares = [s[a]["landing_share"] - s[b]["landing_share"] for s in seeds]
        cells[name] = [
            " ".join(str(s[a]["hold"]) for s in seeds) + " / " + " ".join(str(s[b]["hold"]) for s in seeds),
            (f"{first[name]['sooner']} of {first[name]['seeds']} / " if first else "")
            + f"{then[name]['sooner']} of {then[name]['seeds']}",
            f"{f['geometric_mean_ratio']:.2f} [{f['ratio_ci95'][0]:.2f}, {f['ratio_ci95'][1]:.2f}]",
            interval([s[a]["test"] for s in seeds]) + " / " + interval([s[b]["test"] for s in seeds]),
            "{:+.3f} ± {:.3f}".format(*stats.mean_ci95(ends)) + " ({} higher, {} lower)".format(*higher(ends)),
            f"{sum(s[a]['landing_share'] for s in seeds) / len(seeds):.2f} / "
            f"{sum(s[b]['landing_share'] for s in seeds) / len(seeds):.2f}",
            "{:+.2f} ± {:.2f}".format(*stats.mean_ci95(shares))
            + f" ({higher(shares)[0]} of {len(seeds)} higher)"]
    labels = [f"updates to hold {record['hold']:.0%} of the gap, per seed ({span(names)})",
              (f"spans sooner, seeds {span([str(s) for s in record['confirm']])} / "
               f"{span([s for s in names if int(s) not in record['confirm']])}" if first else "spans sooner"),
              f"ratio summed / span, geometric mean of {len(seeds)}",
              f"end score (after update {record['config']['updates']})",
              "end, span - summed, paired", "landing share of the first update",
              "landing share, span - summed, paired"]
    lines = header([""] + [f"{judges[name]}: `{a}` / `{b}`" for name, (a, b) in PLACEMENT.items()])
    lines += [row([label] + [cells[name][k] for name in PLACEMENT]) for k, label in enumerate(labels)]
    metric = get_task(record["task"]).PRIMARY
    return [(f"The first look over seeds ({record['task']}, test {metric}, {len(seeds)} independent seeds; the "
             f"finding was fixed on seeds {', '.join(map(str, record['confirm']))}): ± the 95% t half-width over "
             f"seeds; [ ] the t-interval of the mean log ratio, exponentiated; no interval corrected for the "
             f"others", lines)]


# ---------------------------------------------------------------------------------------------
# What each method is given (experiments.information)

def information_tables(record):
    """The rows of experiments.information, each mean ± 95% t half-width over the seeds, with the
    share of answers the critic passes and what the row was given; a placement pair on one line."""
    from experiments.information import ROWS, given_rows
    rows = given_rows(record["seeds"], record["task"])
    passed = lambda golds: f"{sum(g['passed'] for g in golds) / len(golds):.2f}" if all(golds) else "-"
    groups = [(f"{start}: {a}", f"{start}: {b}") if b else (f"{start}: {a}",)
              for start in ("demonstrations", "references")
              for a, b in (("sft", None), ("text2grad", "text2grad_last"), ("oracle", "oracle_scalar"))]
    groups[3:3] = [(f"demonstrations: {name}",) for name in ROWS]  # the rows without RL, from the flawed SFT
    lines = header(["row", "score", "passed", "given"])
    for group in groups:
        if all(name in rows for name in group):
            start = group[0].split(": ")[0]
            lines.append(row([f"{start}: " + " / ".join(f"`{name.split(': ')[1]}`" for name in group),
                              " / ".join(interval(rows[name][0]) for name in group),
                              " / ".join(passed(rows[name][1]) for name in group), rows[group[0]][2]]))
    metric = get_task(record["task"]).PRIMARY
    return [(f"What each method is given ({record['task']}, test {metric}, {len(record['seeds'])} seeds): ± the "
             f"95% t half-width over seeds; passed: the share of test answers the critic passes (mean over "
             f"seeds); given: the critic calls and samples a row read, the most over seeds", lines)]


# ---------------------------------------------------------------------------------------------
# The experiment (experiments.protocol, experiments.revise)

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
    from experiments.protocol import COMPARISONS
    from experiments.summary import shared
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


def protocol_tables(record):
    """Each method's test score; the family of contrasts with p-values and Holm's adjustment, and
    beside it the curve heights (uncorrected); gold beside proxy; the prompt-only rows (uncorrected
    but for the family's two)."""
    from experiments.summary import shared, summarise
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


# ---------------------------------------------------------------------------------------------
# The K sweep (experiments.sweep)

def sweep_tables(record):
    """Per K: each method's updates to hold 90% of the gap, per seed (the budget plus one eval where
    a seed never holds it), and its test score; the contrasts of COMPARISONS on the final test score
    and on the area under the test curve, paired over units, each p uncorrected."""
    from experiments.protocol import COMPARISONS
    from experiments.summary import shared
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


TABLES = {"first_look": first_look_tables, "information": information_tables, "protocol": protocol_tables,
          "sweep": sweep_tables}
