"""report.py: what a run did, summarised in the terminal and on one self-contained HTML page.

    python -m experiments.report --out runs             # after python -m experiments.protocol; no training
    python -m experiments.report --out runs/code --record results/NAME.json   # and keep its numbers
    python -m experiments.report --from results/NAME.json                     # a record's RESULTS tables

For each results.json in --out (or its sub-folders, one per task of a --task all run) it writes
summary.json beside it (summary.py: intervals over seeds, paired differences), prints the tables (terminal.py), and
writes report.html next to it (and, for several tasks, one page for all in --out). The page is standard-library HTML with inline CSS and SVG: no
scripts, fonts or network, so it opens offline in any browser. It shows, per task:

    SFT            the SFT policy's greedy validation metrics against its training step
    results        the 2x2 of methods (who judges x where the reward lands), test metric per method
                   (mean and 95% interval over seeds), each method's GAE lambda and its validation
                   grid, the paired differences between methods
    curves         validation metric against PPO update, one line per method, interval shaded; the
                   value head's explained variance against update
    showcase       test responses of the SFT policy and of Text2Grad, every token coloured by its
                   delta, as the critic labelled it and as the reward model predicted it, with both
                   critiques
    reward model   the confusion matrix of token labels, span F1 (per seed, and cot - no_cot paired
                   over seeds, with --reward-seeds), and the alignment statistics

A K sweep's results.json (experiments/sweep.py, which also writes its page) gets its own section: updates to close 50% and 90% of the gap
against K (SVG), the ratios with their bootstrap intervals, test results, learning curves per K,
and the setting's measured properties.

All text that came from a model or a data file is escaped before it goes into the page.
"""
import argparse
import glob
import json
import os
from html import escape

from data import get_task
from experiments import first_looks, information, protocol_record, records, robustness, stats, terminal
from experiments.figures import COLOURS, LABELS, curves_svg, overopt_svg, sft_curve_series, thresholds_svg
from experiments.page import CSS, curves, delta_tokens, legend, num, row, swatch, table
from experiments.run_folder import read_json
from experiments.summary import summarise
from experiments.runstate import atomic_save, fail


# ---------------------------------------------------------------------------------------------
# Sections

def two_by_two(methods, metric):
    """The methods that separate who judges from where the reward lands, as a 2 x 2 of test scores (the
    learned row twice: Text2Grad's model on either token, and the scalar model on the last)."""
    cell = lambda n: (f"{swatch(n)}<br>{methods[n]['score']:.3f} ± {methods[n]['ci95']:.3f}" if n in methods else "-")
    return ("<p>Two questions, one change each: down a column only <i>who judges</i> changes (a learned reward "
            "model or the task's critic itself); across a row only <i>where the reward lands</i> (on every token, "
            f"or summed onto the last one). Test {metric}, mean ± 95% interval over seeds:</p>"
            + table(["who judges \\ where it lands", "every token (delta_t)", "last token (sum_t score_t)"],
                    [["learned reward model (Text2Grad's)", cell("text2grad"), cell("text2grad_last")],
                     ["learned reward model (scalar)", "-", cell("ppo_scalar")],
                     ["the critic itself", cell("oracle"), cell("oracle_scalar")]]))


def results_table(results, metric):
    methods = results["methods"]
    rows = []
    for name, m in methods.items():
        seeds = " ".join(f"{s:.3f}" for s in m["scores"])
        ev = m.get("explained_variance")
        rows.append([swatch(name), num(m["score"]), num(m["ci95"]), num(m["curve"][-1][1]), seeds,
                     "" if name == "sft" else str(m.get("lambda", "-")),
                     num(sum(ev) / len(ev), 2) if ev else "",
                     num(m.get("time_s"), 0) if name != "sft" else ""])
    return table(["method", f"test {metric} (mean)", "± 95%", "final validation", "per seed", "GAE lambda",
                  "explained variance, last update", "PPO time (s)"], rows)


def differences_table(paired):
    """{name: stats.paired_difference's dict} as a table: mean, half-width, per seed, verdict."""
    return table(["difference", "mean", "± 95%", "per seed", "verdict"],
                 [[escape(k), num(d["mean"]), num(d["ci95"]), " ".join(f"{x:+.3f}" for x in d["per_seed"]),
                   d["verdict"]] for k, d in paired.items()])


def paired_table(results):
    """Paired differences over seeds, and the lambda grid each method chose from."""
    out = []
    paired = results.get("paired", {})
    if paired and min(len(d["per_seed"]) for d in paired.values()) < 2:
        out.append('<p class="note">Paired differences between methods need two seeds or more: run with '
                   '--seeds 5 (add --resume to keep this run).</p>')
    elif paired:
        out.append("<p>Paired differences: the same seed gives every method the same training prompts, so the "
                   "difference is taken seed by seed, and its 95% Student-t interval is the verdict's ground "
                   "(with two seeds t is 12.7, so nearly every verdict is a tie: run more seeds).</p>"
                   + differences_table(paired))
        if "area" in results:
            out.append("<p>How soon, beside how far: the mean height of each run's validation curve (the area under "
                       "it over its updates), paired the same way.</p>" + differences_table(results["area"]))
    grid = results.get("lambda_grid", {})
    if grid:
        lambdas = sorted({lam for g in grid.values() for lam in g}, key=float)
        out.append("<p>GAE lambda, chosen per method on validation: the final validation score of one run per "
                   "lambda at the first seed (the chosen one in bold).</p>"
                   + table(["method"] + [f"lambda {lam}" for lam in lambdas],
                           [[swatch(n)] + [(f'<td class="num"><b>{g[lam]:.3f}</b></td>'
                                            if float(lam) == results["methods"][n].get("lambda") else num(g.get(lam)))
                                           for lam in lambdas] for n, g in grid.items()]))
    return "".join(out)


def explained_variance_series(results):
    """{method: {"curve": [[update, mean EV]], "curve_ci95": [[update, half-width]]}} from ppo_history,
    over the seeds of the method's chosen lambda (curves_svg's input shape)."""
    series = {}
    for name in results["methods"]:
        runs = [h for key, h in results.get("ppo_history", {}).items() if key.rsplit("/", 1)[0] == name]
        if not runs:
            continue
        curve, band = [], []
        for u in range(min(len(h) for h in runs)):
            mean, half = stats.mean_ci95([h[u]["explained_variance"] for h in runs])
            curve.append([u + 1, mean])
            band.append([u + 1, half])
        series[name] = {"curve": curve, "curve_ci95": band}
    return series


def showcase_section(entries, metric):
    out = ['<p>Each token is coloured by its delta: <span class="poor">&nbsp;poor (-1)&nbsp;</span> '
           '<span class="good">&nbsp;good (+1)&nbsp;</span> neutral (0) uncoloured. The critic is the '
           'task\'s programmatic annotator (the ground truth); the reward model is Text2Grad\'s, which writes '
           'its critique first and then labels the tokens. The reward model\'s deltas are the token scores '
           'Text2Grad\'s PPO gets for such responses (before the KL term, the length guard and the EOS '
           'penalty); the responses here are greedy test outputs (first seed), which PPO never scored.</p>']
    for entry in entries:
        card = [row("prompt", f'<div class="tokens">{escape(entry["prompt"])}</div>'),
                row("reference", f'<div class="tokens">{escape(entry["reference"])}</div>')]
        for name in ("sft", "text2grad"):
            side = entry.get(name)
            if side is None:
                continue
            card += [f'<div class="method" style="border-color:{COLOURS[name]}"><b>{LABELS[name]}</b> '
                     f'response, {metric} {side["score"]:.3f}</div>',
                     row("critic", delta_tokens(side["pieces"], side["critic"]["delta"])),
                     row("critic's critique", f'<span class="critique">{escape(side["critic"]["critique"])}</span>'),
                     row("reward model", delta_tokens(side["pieces"], side["reward_model"]["delta"])),
                     row("reward model's critique",
                         f'<span class="critique">{escape(side["reward_model"]["critique"])}</span>')]
        out.append(f'<div class="card">{"".join(card)}</div>')
    return "".join(out)


def reward_model_section(results):
    rm, out = results.get("reward_model", {}), []
    names = [n for n in ("cot", "no_cot") if n in rm]
    rows = [[n, num(rm[n]["positive_f1"]), num(rm[n]["negative_f1"]), num(rm[n]["exact_span_match"]),
             num(rm[n].get("critique_rougeL"))] for n in names]
    out.append(table(["reward model", "span F1 positive", "span F1 negative", "exact spans", "critique ROUGE-L"], rows))
    seeded = {n: rm[n].get("seeds", {}) for n in names}
    if all(len(seeded[n].get("positive_f1", [])) > 1 for n in names) and names:
        rows = [[n, metric, " ".join(f"{v:.3f}" for v in seeded[n][metric])] for n in names
                for metric in ("positive_f1", "negative_f1")]
        out.append("<p>Span F1 of each reward-model seed (the first seed's model is the one PPO uses):</p>"
                   + table(["reward model", "label", "per seed"], rows))
        for metric, d in results.get("reward_paired", {}).items():
            out.append(f"<p>{metric}, cot - no_cot, paired over reward-model seeds: {d['mean']:+.3f} ± "
                       f"{d['ci95']:.3f} ({d['verdict']})</p>")
    if "scalar" in rm:
        seeded = rm["scalar"].get("seeds", {}).get("score_correlation", [])
        out.append(f'<p>Scalar reward model: correlation with its target (the critic\'s guarded scores, summed) '
                   f'{rm["scalar"]["score_correlation"]:.3f}' + (", per reward-model seed " + " ".join(
                       f"{v:.3f}" for v in seeded) if len(seeded) > 1 else "") + '.</p>')
    for n in names:
        matrix, cells = rm[n]["confusion"], []
        for g, counts in zip(("negative", "neutral", "positive"), matrix):
            total = max(1, sum(counts))
            cells.append([f"<b>{g}</b>"] + [f'<td class="num" style="background:rgba(31,111,180,{0.6 * c / total:.2f})">'
                                             f'{c} ({c / total:.0%})</td>' for c in counts])
        out.append(f"<p>{n}: test tokens, rows the critic's label, columns the prediction</p>"
                   + table(["critic \\ predicted", "negative", "neutral", "positive"], cells))
    alignment = results.get("alignment", {})
    rows = [[s, num(a["records"], 0), num(a.get("skipped"), 0), num(a["spans"], 0), num(a["unaligned"], 0),
             num(a["unaligned_rate"]), num(a["labelled_token_share"]), num(a.get("critiques_truncated"), 0)]
            for s, a in alignment.items() if isinstance(a, dict)]
    if rows:
        out.append("<p>Alignment of the critic's quoted spans to the tokens of the annotated samples:</p>"
                   + table(["split", "records", "skipped", "spans", "unaligned", "unaligned rate",
                            "labelled token share", "critiques truncated"], rows))
    return "".join(out)


def task_section(results):
    metric = get_task(results["task"]).PRIMARY
    task = escape(results["task"])
    seeds = len(results["methods"].get("text2grad", {}).get("scores", []))
    return "".join([
        f'<h2 id="{task}">Task: {task}</h2>',
        f'<p class="note">preset {escape(str(results.get("preset")))}, seed {results.get("seed")}, {seeds} PPO seed(s) '
        f'per method, device {escape(str(results.get("device")))}</p>',
        "<h3>Results</h3>", two_by_two(results["methods"], metric), results_table(results, metric),
        paired_table(results),
        "<h3>SFT</h3><p>Greedy validation metrics of the SFT policy against its training step.</p>",
        curves(sft_curve_series(results), "validation", x_label="SFT step"),
        f"<h3>Learning curves</h3><p>Validation {metric} (mean over seeds, 95% interval shaded) against PPO update.</p>",
        curves(results["methods"], f"validation {metric}"),
        "<h3>Over-optimisation</h3><p>On validation samples at each point of the curve (mean over seeds): the "
        "critic's score (gold, solid) and the method's own reward (proxy, dashed), in praised minus blamed tokens, "
        "against the square root of the KL to the SFT policy.</p>",
        overopt_svg(results["methods"]),
        "<p>The value head's explained variance, 1 - Var(R - V) / Var(R) over each update's rollout (mean over "
        "seeds): 0 is a value function no better than a constant, 1 a perfect one.</p>",
        curves(explained_variance_series(results), "explained variance"),
        "<h3>What was criticised, and what the reward model read</h3>",
        showcase_section(results["showcase"], metric),
        f'<h3 id="{task}-reward-model">The reward model</h3>', reward_model_section(results)])


def sweep_section(results):
    """The K sweep (sweep.py): updates to threshold against K, the ratios, learning curves per K."""
    per_k, metric = results["per_k"], "sites_right"
    ks = sorted(per_k, key=int)
    names = list(per_k[ks[0]]["thresholds"])
    sites = results["sites"]
    site_rows = [[escape(kind), num(sites["sampled"]["wrong"][kind], 2), num(sites["greedy"]["wrong"][kind], 2)]
                 for kind in sites["sampled"]["wrong"]]
    rm = [[k, num(results["reward_per_k"][k]["positive_f1"]), num(results["reward_per_k"][k]["negative_f1"])] for k in ks]
    out = ['<h2 id="sweep">The K sweep: several independent flaws per response</h2>',
           f'<p class="note">task facts, preset {escape(str(results.get("preset")))}, {len(results["seeds"])} seeds per '
           f'method and K, device {escape(str(results.get("device")))}</p>'
           "<p>K is the number of independent sites per response, each a one-word choice the SFT policy gets wrong "
           "by habit. Scalar rewards sum the K verdicts onto the last token; span rewards put each verdict on its "
           "own tokens. Below: how many PPO updates each method needs to close a share of the gap from the SFT "
           "policy to every site right and hold it to the end of the budget (on the test curves, mean over "
           "seeds, 95% interval; a run that never holds it counts as the budget plus one: the bound the chart shows), against K.</p>"]
    for q in (str(t) for t in (0.5, 0.9)):
        out += [f"<h3>Updates to close {float(q):.0%} of the gap and hold it</h3>", thresholds_svg(per_k, q)]
    out.append("<h3>Ratios of updates needed</h3><p>Updates the scalar method's mean test curve needs to hold the "
               "level over the span method's, seeds paired; in brackets the percentile bootstrap over seeds (a mean "
               "curve that never holds it counts as the budget plus one: the share of resamples where one did is "
               "given). Beside it, the area under each run's test curve, span minus scalar, paired.</p>")
    out.append(table(["K", "gap closed"] + [escape(key) for key in per_k[ks[0]]["ratios"]["0.9"]],
                     [[k, f"{float(q):.0%}"] + [f'{v["ratio"]:.2f} [{v["ci95"][0]:.2f}, {v["ci95"][1]:.2f}]'
                                                + (f' ({v["censored"]:.0%} censored)' if v["censored"] else "")
                                                for v in per_k[k]["ratios"][q].values()]
                      for k in ks for q in per_k[k]["ratios"]]))
    out.append(table(["K"] + [f"area: {escape(key)}" for key in per_k[ks[0]]["area"]],
                     [[k] + [f'{d["mean"]:+.3f} ± {d["ci95"]:.3f}' for d in per_k[k]["area"].values()] for k in ks]))
    out.append("<h3>Test results</h3><p>Test sites right after the budget (mean ± 95% interval over seeds, the "
               "chosen &lambda;); the greedy test responses' length in tokens (the references' in the K column) and "
               "the share of their tokens the critic blames; at the last update, on validation samples, the KL to "
               "the SFT policy: a policy that games its reward grows long and far.</p>")
    out.append(table(["K (reference length)", "budget", "SFT"] + [LABELS.get(n, escape(n)) for n in names],
                     [[f'{k} ({per_k[k]["methods"][names[0]]["test_reference_length"]:.0f})', str(per_k[k]["updates"]),
                       num(per_k[k]["sft"]["test"][metric])]
                      + [f'{m["score"]:.3f} ± {m["ci95"]:.3f} ('
                         + (f'&lambda; {m["lambda"]}' if m["lambda"] is not None else f'GRPO, group {m["group"]}')
                         + f'; {m["test_length"]:.0f} tokens, '
                         f'blamed {m["test_blamed_share"]:.3f}, KL {m["final_kl"]:.1f})'
                         for m in (per_k[k]["methods"][n] for n in names)] for k in ks]))
    out.append("<h3>Over-optimisation</h3><p>On validation samples at every update (mean over seeds): the critic's "
               "score (gold, solid) and the method's own reward (proxy, dashed), both in praised minus blamed "
               "tokens, against the square root of the KL to the SFT policy. Where the proxy keeps rising and the "
               "gold turns, the reward is being gamed.</p>")
    for k in ks:
        out += [f"<h3>Learning curves, K = {k}</h3>", curves(per_k[k]["methods"], f"validation {metric}"),
                overopt_svg(per_k[k]["methods"], f"K = {k}"), f"<p>{legend(names)}</p>"]
    out += ["<h3>The setting, measured</h3><p>Share of each kind of site the SFT policy gets wrong, on validation "
            "prompts of every K: sampled at temperature 1 (what PPO starts from) and greedy (what the metric reads). "
            f"Correlation between two sites' errors (phi, sampled): mean {sites['sampled']['correlation']['mean'] or 0:.3f}, "
            f"largest |phi| {sites['sampled']['correlation']['max_abs'] or 0:.3f}.</p>",
            table(["site", "wrong, sampled", "wrong, greedy"], site_rows),
            "<p>The reward model (with critique) on test annotations per K, span F1:</p>",
            table(["K", "good spans", "poor spans"], rm)]
    return "".join(out)


def render(all_results):
    """The page for a list of results dicts (one per task)."""
    tasks = " · ".join(f'<a href="#{escape(r["task"])}">{escape(r["task"])}</a>' for r in all_results)
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>text2grad report</title>"
            f"<style>{CSS}</style></head><body><h1>text2grad report</h1>"
            "<p>Text2Grad turns a critique into per-token rewards: the reward model writes what is wrong, labels "
            "the tokens it blames and praises, and PPO pushes down the blamed ones. Scalar PPO gets one number "
            f"per response instead. Tasks: {tasks}.</p>"
            + "".join(sweep_section(r) if r.get("kind") == "sweep" else task_section(r) for r in all_results)
            + "</body></html>\n")


# ---------------------------------------------------------------------------------------------

def find_results(folder):
    """[(folder holding it, its results dict)] for results.json in folder, or else in each sub-folder
    (a --task all run), in task order. Raises ValueError with a one-line message when there are none
    or one is unreadable."""
    own = os.path.join(folder, "results.json")
    paths = [own] if os.path.exists(own) else sorted(glob.glob(os.path.join(folder, "*", "results.json")))
    if not paths:
        raise ValueError(f"no results.json in {folder} or its sub-folders; run python -m experiments.protocol first")
    out = []
    for path in paths:
        results = read_json(path)
        if not isinstance(results, dict) or not ({"task", "methods"} <= results.keys() or "per_k" in results):
            raise ValueError(f"{path} is not a text2grad results file (no task or methods)")
        out.append((os.path.dirname(path), results))
    order = ["summarize", "code", "qa"]
    return sorted(out, key=lambda r: order.index(r[1]["task"]) if r[1]["task"] in order else len(order))


def summarised(folder, results):
    """A task's summary (summary.py); a K sweep's results.json is its own summary."""
    if results.get("kind") == "sweep":
        return results
    return summarise(results)


def write_report(folder):
    """For each results.json in folder (or its sub-folders): summary.json and sft_curve.svg beside
    it, the tables printed, and report.html; with several, one more report.html in folder for all.
    Returns the summaries."""
    found = find_results(folder)
    summaries = []
    for where, results in found:
        summary = summarised(where, results)
        summaries.append(summary)
        if summary.get("kind") == "sweep":
            terminal.print_sweep(summary)
        else:
            atomic_save(json.dumps(summary, indent=2), os.path.join(where, "summary.json"))
            if summary["sft_training"]["curve"]:
                atomic_save(curves_svg(sft_curve_series(summary), "validation", x_label="SFT step", standalone=True),
                            os.path.join(where, "sft_curve.svg"))
            task = get_task(summary["task"])
            terminal.print_reward_models(task, summary)
            terminal.print_results(task, summary)
            terminal.print_showcase(summary["showcase"][:3])
        atomic_save(render([summary]), os.path.join(where, "report.html"))
        print(f"-> {os.path.join(where, 'report.html')}")
    if len(found) > 1:
        atomic_save(render(summaries), os.path.join(folder, "report.html"))
        print(f"all tasks -> {os.path.join(folder, 'report.html')}")
    return summaries


def write_record(folder, path):
    """The record (experiments.records) of the one finished run in folder, at path."""
    found = find_results(folder)
    if len(found) != 1:
        raise ValueError(f"--record writes one run's record: {folder} holds {len(found)} runs; name one task's folder")
    where, results = found[0]
    if results.get("kind") == "sweep":
        records.write(path, {"kind": "sweep", "results": results, "folder": where, "commits": results.get("commits"),
                             "machine": results.get("machine")})
        print(f"record -> {path}; its tables: python -m experiments.report --from {path}")
        return
    beside = {name: read_json(os.path.join(where, f"{name}.json")) if os.path.exists(os.path.join(where, f"{name}.json"))
              else None for name in ("revise", "revise_best")}
    record = protocol_record.compact(results, **beside)
    records.write(path, {**record, "command": results.get("command"), "commits": results.get("commits"),
                         "machine": results.get("machine"), "folder": where})
    print(f"record -> {path}; its tables: python -m experiments.report --from {path}")


TABLES = {"first_look": first_looks.tables, "information": information.tables,
          "robustness": robustness.tables, "protocol": protocol_record.tables,
          "sweep": protocol_record.sweep_tables}


def tables(record):
    """[(title, markdown lines)]: the RESULTS tables a record rebuilds, by the study of its kind."""
    return TABLES[record["kind"]](record)


def main(argv=None):
    """python -m experiments.report --out DIR: summarise DIR's results.json, print it, draw report.html."""
    parser = argparse.ArgumentParser(prog="python -m experiments.report", description=(
        "Summarise a finished run (DIR/results.json, or each DIR/*/results.json for a --task all run): "
        "summary.json (means and 95% intervals over seeds, paired differences), the tables in "
        "the terminal, and report.html. "
        "No training."))
    parser.add_argument("--out", help="the run's output directory (default: runs)")
    parser.add_argument("--record", metavar="PATH", help="then write the run's record there (results/NAME.json: "
                        "results.json without its showcase, with revise.json and revise_best.json beside it)")
    parser.add_argument("--from", dest="source", metavar="RECORD", help="print the RESULTS tables of a record "
                        "(results/NAME.json) and stop: no run folder, no model, no training")
    args = parser.parse_args(argv)
    if args.source is not None:
        if args.record is not None or args.out is not None:
            parser.error("--from reads a record and writes nothing: give it alone")
        if not args.source:
            parser.error("--from needs a record's path (results/NAME.json)")
        try:
            for title, lines in tables(records.read(args.source)):
                print(f"\n{title}\n\n" + "\n".join(lines))
        except ValueError as error:
            message = str(error)
            fail(message if args.source in message else f"{args.source}: {message}")
        except (KeyError, TypeError, AttributeError, IndexError, RecursionError) as error:
            fail(f"{args.source} lacks what its tables need ({type(error).__name__}: {error})")
        return
    args.out = args.out or "runs"
    try:
        write_report(args.out)
        if args.record:
            write_record(args.out, args.record)
    except ValueError as error:
        fail(str(error))
    except (KeyError, TypeError, AttributeError, IndexError) as error:
        fail(f"a results.json in {args.out} lacks what the report needs ({type(error).__name__}: {error}); "
             f"run the experiment again")
    except OSError as error:
        fail(f"cannot write the report ({error.strerror or error}: {error.filename or args.out})")


if __name__ == "__main__":
    main()
