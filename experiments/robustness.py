"""The first look's speed finding under other PPO settings, each method choosing its own on
validation, with a budget counted in sampled answers (experiments/LOG.md, "The robustness grid",
fixed before its runs).

    python -m experiments.robustness --seeds 30 31 32 33 34 --out runs/robustness \\
        --record results/robustness.json

Per seed, text2grad.prepare builds the first look's pipeline once (data, tokenizer, pretraining,
SFT, the critic's annotations, Text2Grad's reward model); every setting of GRID then runs each
method of the 2 x 2 from that SFT policy (text2grad.train_method) on BUDGET sampled answers
(BUDGET / batch updates, minibatch MINIBATCH), evaluated after every update. The pipeline and each
(seed, setting) are units (experiments/fanout.py: with --ray, the 18 settings of a seed run side
by side once its pipeline is built). Each (seed, setting) is written to OUT/seed{N}/{setting}.json
as it finishes and read back, not run again, so a stopped run resumes where it stopped when the
same command runs again (the seed's pipeline is rebuilt, to float32 rounding the same).

What is read (LOG): per method, the setting with the highest mean validation area over the seeds
(`area`: the curve's mean height over the budget's samples); at it, the samples drawn when the
test curve holds landing.HOLD of the gap (`samples`, the value head's warm-up batch counted), the
critic calls by then and the end score; span against summed at the chosen settings and over the
grid. The tables: `tables(record)`, also `python -m experiments.report --from RECORD`.
"""
import argparse
import dataclasses
import itertools
import json
import math
import os
import sys
import time

import landing
from experiments import fanout, records
from experiments.fanout import Outcome
from experiments.runstate import atomic_save, checked, commit, fail, machine, pick_device, run_to_the_end
from experiments.stats import mean_ci95
from text2grad import CONTRASTS, first_look_config, prepare, train_method

GRID = {"batch": (16, 32, 64), "lr": (5e-5, 1e-4, 2e-4), "lam": (0.95, 1.0)}
BUDGET = 512  # sampled answers for the updates, the same in every setting
MINIBATCH = 16  # so every setting takes BUDGET / MINIBATCH * epochs gradient steps
METHODS = ("text2grad", "text2grad_last", "oracle", "oracle_scalar")
JUDGES = {"learned": CONTRASTS["placement, learned"], "critic": CONTRASTS["placement, critic"]}


def settings():
    """Every setting of GRID, in the grid's order (the order ties are broken in)."""
    return [dict(zip(GRID, values)) for values in itertools.product(*GRID.values())]


def name_of(setting):
    return f"b{setting['batch']}_lr{setting['lr']:g}_lam{setting['lam']:g}"


def shown(setting):
    return f"{setting['batch']}, {setting['lr']:g}, {setting['lam']:g}"


def config_of(seed, setting, device):
    """The first look's Config at one setting of the grid (every method at the setting's lambda)."""
    return first_look_config(seed=seed, device=device, figure="", ppo_batch_size=setting["batch"],
                             ppo_lr=setting["lr"], lam=setting["lam"],
                             updates=BUDGET // setting["batch"], minibatch_size=MINIBATCH,
                             eval_every=1, methods=",".join(METHODS))


def one_setting(shared, seed, setting, device, path):
    """Every method of METHODS at one setting from the seed's pipeline: its record, saved at path."""
    config, start, at = config_of(seed, setting, device), time.time(), commit()
    curves = {method: train_method(config, shared, method)[0]["curve"] for method in METHODS}
    record = {"seed": seed, "setting": setting, "commit": at, "machine": machine(), "device": device,
              "seconds": round(time.time() - start), "annotations": config.annotated,
              "sft": {"validation": shared["sft_point"][0], "test": shared["sft_point"][1]},
              "curves": {m: [[u, round(v, 5), round(t, 5)] for u, v, t, _ in curve] for m, curve in curves.items()}}
    atomic_save(json.dumps(record), path)
    print(f"seed {seed} {name_of(setting)}: {record['seconds']} s", flush=True)
    return record


def seed_units(units, seed, out, device, grid=None):
    """{setting name: a handle of units (experiments/fanout.Units)} for seed, each setting of grid
    (settings() by default) read back from OUT/seed{N}/{name}.json, or else a unit that runs it
    from the seed's pipeline (text2grad.prepare), a unit too, submitted only if one is missing."""
    folder = os.path.join(out, f"seed{seed}")
    os.makedirs(folder, exist_ok=True)
    done, shared = {}, None
    for setting in grid or settings():
        path = os.path.join(folder, f"{name_of(setting)}.json")
        if os.path.exists(path):
            with open(path) as f:
                done[name_of(setting)] = Outcome(json.load(f))
            continue
        if shared is None:
            shared = units.submit(f"seed {seed} pipeline", checked, prepare, config_of(seed, setting, device),
                                  lambda message: print(f"seed {seed}: {message}", flush=True))
        done[name_of(setting)] = units.submit(f"seed {seed} {name_of(setting)}", checked, one_setting, shared, seed,
                                              setting, device, path)
    return done


# ---------------------------------------------------------------------------------------------
# What a run is read for: each from the per-seed curves alone

def measured(run, method):
    """One (seed, setting) run's numbers for method: its validation area, its test hold in updates
    and in samples, the critic calls by then, its end score, and (read after the fact) the first
    update at or above the line, held or not (None: never)."""
    batch, curve, start = run["setting"]["batch"], run["curves"][method], run["sft"]["test"]
    area = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(curve, curve[1:])) / curve[-1][0]
    hold = landing.updates_to_hold([(u, test) for u, _, test in curve], start)
    level = start + landing.HOLD * (1 - start)
    samples = batch * (hold + 1)  # the warm-up's batch counted; never held: batch (U + 2)
    calls = samples if method.startswith("oracle") else run["annotations"]
    return {"area": area, "hold": hold, "samples": samples, "calls": calls,
            "held": hold <= curve[-1][0], "end": curve[-1][2],
            "reached": next((u for u, _, test in curve if test >= level), None)}


def ranked(runs):
    """{method: [setting names]}, by mean validation area over the seeds, highest first; ties: the
    grid's order. runs: {seed: {setting name: run}}."""
    names = [name_of(s) for s in settings()]
    mean_area = lambda method, name: sum(measured(r[name], method)["area"]
                                         for r in runs.values()) / len(runs)
    return {m: sorted(names, key=lambda name: (-mean_area(m, name), names.index(name)))
            for m in METHODS}


def chosen(runs):
    """{method: setting name}: the first of ranked."""
    return {method: names[0] for method, names in ranked(runs).items()}


def contrast(runs, span, summed, span_setting, summed_setting):
    """Span against summed, paired by seed: samples to hold per seed, sooner / tie / later, and the
    geometric mean of summed / span with the t-interval of its mean log."""
    pairs = [(measured(r[span_setting], span)["samples"], measured(r[summed_setting], summed)["samples"])
             for r in (runs[s] for s in sorted(runs, key=int))]
    logs = [math.log(b / a) for a, b in pairs]
    mean, half = mean_ci95(logs)
    return {"pairs": pairs, "sooner": sum(a < b for a, b in pairs), "tie": sum(a == b for a, b in pairs),
            "later": sum(a > b for a, b in pairs), "ratio": math.exp(mean),
            "ratio_ci95": [math.exp(mean - half), math.exp(mean + half)] if len(pairs) > 1 else None}


def tables(record):
    """[(title, markdown lines)]: the chosen settings, the contrasts at them, and the whole grid."""
    runs = record["runs"]
    seeds = sorted(runs, key=int)
    order = ranked(runs)
    picked, second = ({m: names[k] for m, names in order.items()} for k in (0, 1))
    row, header = records.row, records.header
    span_of = lambda: f"{seeds[0]}-{seeds[-1]}"
    lines = header(["method", "chosen: batch, lr, lambda", "validation area (over the runner-up, paired)",
                    f"samples to hold, per seed ({span_of()})", "critic calls by then", "test at the end"])
    for method in METHODS:
        at = [measured(runs[s][picked[method]], method) for s in seeds]
        margin = [a["area"] - measured(runs[s][second[method]], method)["area"] for a, s in zip(at, seeds)]
        setting = runs[seeds[0]][picked[method]]["setting"]
        lines.append(row([f"`{method}`", shown(setting),
                          f"{sum(m['area'] for m in at) / len(at):.3f} (+{mean_ci95(margin)[0]:.3f} ± "
                          f"{mean_ci95(margin)[1]:.3f})",
                          " ".join(str(m["samples"]) + ("" if m["held"] else "*") for m in at),
                          " ".join(str(m["calls"]) for m in at), records.interval([m["end"] for m in at])]))
    out = [(f"The robustness grid (facts, seeds {', '.join(seeds)}): each method at the setting it chose on "
            f"validation (the highest mean area under its validation curve over the budget of {record['budget']} "
            f"answers); test; samples: answers drawn when the test curve holds {record['hold']:.0%} of the gap "
            f"(the value warm-up's batch counted; * never held: the budget and two batches); end: mean ± 95% t",
            lines)]
    lines = header(["judge", "span / summed: batch, lr, lambda", "sooner, tie, later", "samples to hold, span / summed (mean)",
                    "ratio summed / span, geometric mean"])
    for which, at in (("", picked), (", runner-ups", second)):
        for judge, (span, summed) in JUDGES.items():
            c = contrast(runs, span, summed, at[span], at[summed])
            ci = "" if c["ratio_ci95"] is None else f" [{c['ratio_ci95'][0]:.2f}, {c['ratio_ci95'][1]:.2f}]"
            settings_of = [shown(runs[seeds[0]][at[m]]["setting"]) for m in (span, summed)]
            lines.append(row([judge + which, " / ".join(settings_of), f"{c['sooner']}, {c['tie']}, {c['later']}",
                              f"{sum(a for a, _ in c['pairs']) / len(seeds):.0f} / "
                              f"{sum(b for _, b in c['pairs']) / len(seeds):.0f}", f"{c['ratio']:.2f}{ci}"]))
    out.append((f"The robustness grid: span against summed, each at its chosen setting (then at its runner-up), "
                f"paired by seed ({len(seeds)} seeds; [ ] the t-interval of the mean log ratio, exponentiated)",
                lines))
    lines = header(["batch, lr, lambda"] + [f"{judge}: samples span / summed (sooner, tie, later)" for judge in JUDGES])
    for setting in settings():
        name, cells = name_of(setting), []
        for span, summed in JUDGES.values():
            c = contrast(runs, span, summed, name, name)
            cells.append(f"{sum(a for a, _ in c['pairs']) / len(seeds):.0f} / {sum(b for _, b in c['pairs']) / len(seeds):.0f}"
                         f" ({c['sooner']}, {c['tie']}, {c['later']})")
        lines.append(row([shown(setting)] + cells))
    out.append((f"The robustness grid, every setting: the mean over seeds of the samples to hold {record['hold']:.0%} "
                f"(test), span / summed, and the seeds where spans hold sooner, tie, later", lines))
    out.append(after_the_fact(runs, seeds))
    return out


def after_the_fact(runs, seeds):
    """(title, lines): what the grid shows beyond the protocol, read after it ran: the first update at
    the line, held or not, span against summed over every (seed, setting) pair; and per learning rate
    the runs that drop back below the line after first reaching it, of those that reach it."""
    every = [(runs[s][name_of(setting)], setting) for s in seeds for setting in settings()]
    lines = records.header(["after the fact, not the protocol's"] + list(JUDGES))
    cells = []
    for span, summed in JUDGES.values():
        pairs = [(measured(r, span)["reached"], measured(r, summed)["reached"]) for r, _ in every]
        pairs = [(math.inf if a is None else a, math.inf if b is None else b) for a, b in pairs]
        cells.append(f"{sum(a < b for a, b in pairs)}, {sum(a == b for a, b in pairs)}, "
                     f"{sum(a > b for a, b in pairs)}")
    lines.append(records.row(["first update at the line, held or not: spans sooner, tie, later "
                              f"({len(every)} pairs)"] + cells))
    for lr in GRID["lr"]:
        cells = []
        for pair in JUDGES.values():
            counts = []
            for method in pair:
                at = [measured(r, method) for r, setting in every if setting["lr"] == lr]
                reached = [m for m in at if m["reached"] is not None]
                counts.append(f"{sum(m['hold'] > m['reached'] for m in reached)} of {len(reached)}")
            cells.append(" / ".join(counts))
        lines.append(records.row([f"lr {lr:g}: runs that drop back after reaching the line, span / summed"]
                                 + cells))
    return ("The robustness grid, read after the fact (test): where the curves first reach the line, and "
            "which drop back below it", lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.robustness", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[30, 31, 32, 33, 34], help="the seeds to run or read")
    parser.add_argument("--out", default="runs/robustness", help="where each (seed, setting) run goes")
    parser.add_argument("--record", default="", help="write the per-seed curves here (results/NAME.json)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, mps, ...")
    fanout.add_flags(parser)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    fanout.check_flags(parser, args)
    device = pick_device(args.device)
    if args.record and not records.writable(args.record):
        fail(f"--record {args.record}: not in a folder this run can write to")
    args.out = os.path.abspath(args.out)  # where a Ray worker writes, wherever it was started
    units = fanout.Units(args.ray, out=args.out, cpus=args.unit_cpus, gpus=args.unit_gpus, device=device)
    with units:
        handles = {str(seed): seed_units(units, seed, args.out, device) for seed in args.seeds}
        runs = {seed: units.wait(seed_handles) for seed, seed_handles in handles.items()}
        if args.ray:
            units.report()
    record = {"kind": "robustness", "command": "python -m experiments.robustness " + " ".join(argv),
              "grid": GRID, "budget": BUDGET, "minibatch": MINIBATCH, "hold": landing.HOLD,
              "config": dataclasses.asdict(config_of(args.seeds[0], settings()[0], device)),
              "commits": sorted({r["commit"] for seed in runs.values() for r in seed.values()}),
              "machines": sorted({r["machine"] for seed in runs.values() for r in seed.values()}),
              "units": units.record(), "runs": runs}
    for title, lines in tables(record):
        print(f"\n{title}\n" + "\n".join(lines))
    if args.record:
        checked(records.write, args.record, record)
        print(f"written: {args.record}; its tables: python -m experiments.report --from {args.record}")


if __name__ == "__main__":
    run_to_the_end(main, "runs/robustness", "text2grad robustness", "again (what is written is read back)")
