"""The first look over seeds: lambda chosen on validation, the finding confirmed on fresh seeds, and
a record of every number under results/.

    python -m experiments.first_looks --seeds 0 1 2 3 4 --lams 0.5 0.95         # choose lambda
    python -m experiments.first_looks --seeds 0 1 2 3 4 5 6 7 8 9 35 36 37 38 39 40 41 42 \\
        --confirm 0 1 2 3 4 5 6 7 8 9 --record results/first_look.json        # the findings

Each run is the whole first look (text2grad.run with first_look_config: its own data, SFT,
annotations, reward models and PPO), written to OUT/seed{N}[_lam{L}].json as it finishes; one already
there is read back, not run again. With --lams, every seed runs once per lambda of the grid (every
method at that lambda) and each method's lambda is chosen by its validation score over the last
quarter of the updates, averaged over the seeds (the sweep's rule: where a run ends up, not how fast
it rose); the test split is printed for none of them. Without --lams the runs take text2grad.LAMBDAS (put together from the grid's runs where they are
there: from_grid).

The finding (experiments/LOG.md, fixed on seeds 0-4 before seeds 5-9 ran): per placement contrast
(span method against the same scores summed on the last token), the updates each needs to hold
landing.HOLD of the gap from SFT to all right (landing.updates_to_hold, on the test curve); the
seeds where the span method holds it sooner; and the geometric mean over seeds of the ratio
summed / span. Beside it: the paired end scores and the first update's agreement with the critique (landing.landed). With --confirm the seeds
named there are the ones the finding was chosen on, and the others confirm it: printed apart.
"""
import argparse
import contextlib
import copy
import dataclasses
import io
import json
import math
import os
import sys
import time

import landing
from data import get_task
from experiments import fanout, records
from experiments.ppo_runs import choice_score
from experiments.records import header, interval
from experiments.runstate import atomic_save, checked, commit, fail, machine, pick_device, run_to_the_end
from experiments.stats import mean_ci95
from text2grad import CONTRASTS, LAMBDAS, METHODS, first_look_config, run

PLACEMENT = {name: CONTRASTS[name] for name in ("placement, learned", "placement, critic")}


def one_seed(seed, out, device, lam=None, **fields):
    """The first look at `seed` (figure off, its printing kept in OUT/NAME.txt), or its record read
    back from OUT/NAME.json; NAME is seed{N}, or seed{N}_lam{L} at one lambda for every method."""
    name = f"seed{seed}" + ("" if lam is None else f"_lam{lam}")
    path = os.path.join(out, f"{name}.json")
    if os.path.exists(path):
        with open(path) as f:
            record = json.load(f)
        if record["fields"] != fields:
            raise ValueError(f"{path} holds a run of {record['fields']}, not {fields}; use another --out")
        return record
    assembled = from_grid(seed, out, fields.get("task", "facts")) if lam is None else None
    if assembled:
        return assembled
    start, printed, at = time.time(), io.StringIO(), commit()  # the code as the run starts
    with contextlib.redirect_stdout(printed):
        table, landed = run(first_look_config(seed=seed, device=device, figure="", lam=lam, **fields))
    record = {"seed": seed, "lam": lam, "seconds": time.time() - start, "device": device,
              "machine": machine(), "commit": at, "fields": fields, "table": table, "landing": landed}
    os.makedirs(out, exist_ok=True)
    atomic_save(printed.getvalue(), os.path.join(out, f"{name}.txt"))
    atomic_save(json.dumps(record, indent=1), path)
    return record


def from_grid(seed, out, task):
    """Seed's first look at text2grad.LAMBDAS put together from its --lams runs (OUT/seed{N}_lam{L}),
    or None if one is missing: each method's PPO run depends on the seed and its own lambda only, not
    on the other methods (tests/test_run.py checks the same of the protocol's runs)."""
    lams = LAMBDAS[task]
    paths = {lam: os.path.join(out, f"seed{seed}_lam{lam}.json") for lam in set(lams.values())}
    if not all(map(os.path.exists, paths.values())):
        return None
    grid = {}
    for lam, path in paths.items():
        with open(path) as f:
            grid[lam] = json.load(f)
        if grid[lam]["fields"].get("task", "facts") != task:
            raise ValueError(f"{path} holds a run of {grid[lam]['fields']}; use another --out")
    record = copy.deepcopy(next(iter(grid.values())))
    for method in list(record["table"]):
        if method != "sft":
            record["table"][method] = grid[lams[method]]["table"][method]
            record["landing"][method] = grid[lams[method]]["landing"][method]
    return {**record, "lam": None, "from_grid": sorted(paths.values())}


def choose_lambdas(by_lam):
    """{method: lambda} from {lambda: [records]}: the lambda whose validation score over the last
    quarter of the updates (ppo_runs.choice_score, the K sweep's rule), averaged over the seeds, is
    highest (ties: the larger lambda); printed with the scores."""
    print("\nlambda chosen on validation (mean over seeds of the last quarter of the updates)")
    chosen = {}
    for method in METHODS:
        scores = {lam: sum(choice_score(r["table"][method]["curve"], "last_quarter") for r in records) / len(records)
                  for lam, records in by_lam.items() if method in records[0]["table"]}
        if scores:
            chosen[method] = max(sorted(scores, reverse=True), key=scores.get)
            print(f"  {method:16s} " + "  ".join(f"{lam}: {s:.3f}" for lam, s in scores.items())
                  + f"  -> {chosen[method]}")
    return chosen


def per_seed(record):
    """{method: {"lambda", "validation", "test_curve", "hold", "test", "watched", "agreement", "even"}}
    for one seed: the numbers its tables read."""
    table, landed = record["table"], record["landing"]
    start = table["sft"]["test"][0]
    out = {}
    for method, row in table.items():
        curve = [(update, test) for update, _, test, _ in row["curve"]]
        out[method] = {"lambda": row["lambda"], "validation": [p[1] for p in row["curve"]],
                       "test_curve": [test for _, test in curve], "test": row["test"][0],
                       "watched": row["test"][1],
                       "hold": None if method == "sft" else landing.updates_to_hold(curve, start),
                       "agreement": landed.get(method, {}).get("agreement"),
                       "even": landed.get(method, {}).get("even")}
    return out


def mean_sd(values):
    """(mean, standard deviation over the values (n - 1))."""
    n = len(values)
    mean = sum(values) / n
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else float("nan")


def finding(seeds):
    """The finding over per_seed dicts: per placement contrast, the seeds where the span method held
    sooner, the geometric mean of summed / span, and paired over seeds (mean, 95% t half-width)
    the updates saved, the end scores and the agreements."""
    out = {}
    for name, (span, summed) in PLACEMENT.items():
        if span not in seeds[0] or summed not in seeds[0]:
            continue
        ratios = [s[summed]["hold"] / max(1, s[span]["hold"]) for s in seeds]
        log_mean, half = mean_ci95([math.log(r) for r in ratios]) if len(ratios) > 1 else (0, math.nan)
        ends = [s[span]["test"] - s[summed]["test"] for s in seeds]
        shares = [s[span]["agreement"] - s[summed]["agreement"] for s in seeds]
        out[name] = {"span": span, "summed": summed, "sooner": sum(r > 1 for r in ratios),
                     "later": sum(r < 1 for r in ratios), "seeds": len(seeds),
                     "holds": [[s[span]["hold"], s[summed]["hold"]] for s in seeds],
                     "geometric_mean_ratio": math.exp(sum(map(math.log, ratios)) / len(ratios)),
                     # the t-interval of the mean log ratio, exponentiated
                     "ratio_ci95": [math.exp(log_mean - half), math.exp(log_mean + half)],
                     # paired over seeds: (mean, half-width of the 95% t-interval)
                     "end": mean_ci95(ends), "end_positive": sum(e > 0 for e in ends),
                     "agreement": mean_ci95(shares), "agreement_positive": sum(x > 0 for x in shares),
                     "updates_saved": mean_ci95([s[summed]["hold"] - s[span]["hold"] for s in seeds])}
    return out


def summary(records, title):
    """Print each method's spread over the records, then the finding on them."""
    seeds = [per_seed(r) for r in records]
    print(f"\n{title}: seeds {', '.join(str(r['seed']) for r in records)} "
          f"({max(r['seconds'] for r in records):.0f} s at most a seed)")
    print(f"{'method':16s} {'test':>13s} {'hold, per seed':>30s} {'agreement':>15s}")
    for method in seeds[0]:
        test = mean_ci95([s[method]["test"] for s in seeds])
        holds = " ".join(str(s[method]["hold"]) for s in seeds) if method != "sft" else "-"
        shares = [s[method]["agreement"] for s in seeds if s[method]["agreement"] is not None]
        share = "{:6.2f} sd {:4.2f}".format(*mean_sd(shares)) if shares else "-"
        print(f"{method:16s} {test[0]:.3f} ± {test[1]:.3f} {holds:>30s} {share:>15s}")
    found = finding(seeds)
    for name, f in found.items():
        print(f"{name}: {f['span']} held {landing.HOLD:.0%} sooner than {f['summed']} on {f['sooner']} of "
              f"{f['seeds']} seeds (later on {f['later']}); geometric mean ratio {f['geometric_mean_ratio']:.2f} "
              f"[{f['ratio_ci95'][0]:.2f}, {f['ratio_ci95'][1]:.2f}]; "
              f"{f['updates_saved'][0]:.1f} ± {f['updates_saved'][1]:.1f} updates sooner; "
              f"end {f['end'][0]:+.3f} ± {f['end'][1]:.3f} ({f['end_positive']} positive); agreement "
              f"{f['agreement'][0]:+.2f} ± {f['agreement'][1]:.2f} ({f['agreement_positive']} positive)")
    return seeds, found


def tables(record):
    """The first look's table: per placement contrast (span / summed), for the seeds the findings
    were chosen on (record["confirm"]) and then the others: each seed's updates to hold, the seeds
    where the span method held sooner, the geometric-mean ratio with the t-interval of its mean
    log; over all seeds the end scores; per group the first update's agreement with the critique
    (and its even-push baseline), paired over seeds."""
    names = sorted(record["seeds"], key=int)
    groups = [[s for s in names if int(s) in record["confirm"]],
              [s for s in names if int(s) not in record["confirm"]]]
    groups = [g for g in groups if g]
    seeds = {s: record["seeds"][s] for s in names}
    span_of = lambda g: f"{g[0]}-{g[-1]}" if len(g) > 1 else g[0]
    both = " / ".join(span_of(g) for g in groups)
    signs = lambda values: f"{sum(v > 0 for v in values)} higher, {sum(v < 0 for v in values)} lower"
    rows = {}
    for name, (a, b) in PLACEMENT.items():
        found = [finding([seeds[s] for s in g])[name] for g in groups]
        ends = [seeds[s][a]["test"] - seeds[s][b]["test"] for s in names]
        cells = {f"updates to hold {record['hold']:.0%} of the gap, per seed ({span_of(g)})":
                 " ".join(str(seeds[s][a]["hold"]) for s in g) + " / "
                 + " ".join(str(seeds[s][b]["hold"]) for s in g) for g in groups}
        cells[f"spans sooner, seeds {both}"] = " / ".join(f"{f['sooner']} of {f['seeds']}" for f in found)
        cells[f"ratio summed / span, geometric mean, seeds {both}"] = " / ".join(
            f"{f['geometric_mean_ratio']:.2f} [{f['ratio_ci95'][0]:.2f}, {f['ratio_ci95'][1]:.2f}]"
            if f["seeds"] > 1 else f"{f['geometric_mean_ratio']:.2f} (1 seed)" for f in found)
        cells[f"end score after update {record['config']['updates']}, all {len(names)} seeds"] = (
            interval([seeds[s][a]["test"] for s in names]) + " / " + interval([seeds[s][b]["test"] for s in names]))
        cells["end, span - summed, paired"] = "{:+.3f} ± {:.3f}".format(*mean_ci95(ends)) + f" ({signs(ends)})"
        for g in groups:
            mean = lambda m, key: sum(seeds[s][m][key] for s in g) / len(g)
            cells[f"agreement of the first update, seeds {span_of(g)} (even push)"] = (
                f"{mean(a, 'agreement'):.2f} / {mean(b, 'agreement'):.2f} ({mean(a, 'even'):.2f})")
        for g in groups:  # how soon, without a threshold: read after the fact
            height = lambda s, m: sum(seeds[s][m]["test_curve"][1:]) / (len(seeds[s][m]["test_curve"]) - 1)
            differences = [height(s, a) - height(s, b) for s in g]
            cells[f"test curve's mean height after SFT, span - summed, seeds {span_of(g)} (after the fact)"] = (
                ("{:+.3f} ± {:.3f}" if len(g) > 1 else "{:+.3f} (1 seed)").format(*mean_ci95(differences))
                + f" ({signs(differences)})")
        for g, f in zip(groups, found):
            differences = [seeds[s][a]["agreement"] - seeds[s][b]["agreement"] for s in g]
            cells[f"agreement, span - summed, paired, seeds {span_of(g)}"] = (
                ("{:+.2f} ± {:.2f}" if len(g) > 1 else "{:+.2f} (1 seed)").format(*f["agreement"])
                + f" ({signs(differences)})")
        rows[name] = cells
    judges = {"placement, learned": "learned", "placement, critic": "critic"}
    lines = header([""] + [f"{judges[name]}: `{a}` / `{b}`" for name, (a, b) in PLACEMENT.items()])
    labels = list(rows["placement, learned"])
    lines += [records.row([label] + [rows[name][label] for name in PLACEMENT]) for label in labels]
    metric = get_task(record["task"]).PRIMARY
    chosen = (f"; seeds {span_of(groups[0])} were read before the findings were fixed, the others are "
              f"fresh" if len(groups) > 1 else "")
    return [(f"The first look over seeds ({record['task']}, test {metric}, {len(names)} independent seeds{chosen}): "
             f"± the 95% t half-width over seeds; [ ] the t-interval of the mean log ratio, exponentiated; no "
             f"interval corrected for the others", lines)]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.first_looks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(5)), help="the seeds to run or read")
    parser.add_argument("--out", default="runs/first_looks", help="where each run's record goes")
    parser.add_argument("--lams", type=float, nargs="*", default=[],
                        help="the lambda grid: choose each method's lambda on validation")
    parser.add_argument("--confirm", type=int, nargs="*", default=[],
                        help="the seeds the finding was chosen on: printed apart from the others")
    parser.add_argument("--record", default="", help="write the per-seed numbers here (results/NAME.json)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, mps, ...")
    parser.add_argument("--task", default="facts", help="the first look's task")
    fanout.add_flags(parser)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    fanout.check_flags(parser, args)
    device = pick_device(args.device)
    if args.record and not records.writable(args.record):
        fail(f"--record {args.record}: not in a folder this run can write to")
    os.makedirs(args.out, exist_ok=True)
    args.out = os.path.abspath(args.out)  # where a Ray worker writes, wherever it was started
    units = fanout.Units(args.ray, out=args.out, cpus=args.unit_cpus, gpus=args.unit_gpus, device=device)
    lams = args.lams or [None]  # None: text2grad.LAMBDAS
    with units:
        runs = units.wait({(seed, lam): units.submit(f"seed {seed}" + ("" if lam is None else f" lambda {lam}"),
                                                     checked, one_seed, seed, args.out, device, lam, task=args.task)
                           for seed in args.seeds for lam in lams})
        if args.ray:
            units.report()
    for (seed, lam), seed_record in runs.items():
        print(f"seed {seed}" + ("" if lam is None else f", lambda {lam}") + f": {seed_record['seconds']:.0f} s")
    if args.lams:
        choose_lambdas({lam: [runs[seed, lam] for seed in args.seeds] for lam in args.lams})
        return
    done = [runs[seed, None] for seed in args.seeds]
    chosen = [r for r in done if r["seed"] in args.confirm]
    others = [r for r in done if r["seed"] not in args.confirm]
    if chosen:
        summary(chosen, "chosen on")
    summary(others, "confirmed on" if chosen else "the first look over seeds")
    if args.record:
        seeds, found = summary(done, "all seeds")
        record = {"kind": "first_look", "command": "python -m experiments.first_looks " + " ".join(argv),
                  "task": args.task, "confirm": sorted(args.confirm), "hold": landing.HOLD,
                  "commits": sorted({r["commit"] for r in done}), "machines": sorted({r["machine"] for r in done}),
                  "config": dataclasses.asdict(first_look_config(**done[0]["fields"])),
                  "seconds": {r["seed"]: round(r["seconds"]) for r in done}, "units": units.record(),
                  "seeds": {r["seed"]: s for r, s in zip(done, seeds)},
                  "finding": {"chosen on": finding([s for r, s in zip(done, seeds) if r["seed"] in args.confirm])
                              if chosen else None,
                              "confirmed on": finding([s for r, s in zip(done, seeds)
                                                       if r["seed"] not in args.confirm]),
                              "all": found}}
        checked(records.write, args.record, record)
        print(f"written: {args.record}; its table: python -m experiments.report --from {args.record}")


if __name__ == "__main__":
    run_to_the_end(main, "runs/first_looks", "text2grad first_looks", "again (what is written is read back)")
