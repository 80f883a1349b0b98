"""The first look over seeds: what of `python text2grad.py` holds on any seed, and how far each of
its numbers moves from seed to seed.

    python -m experiments.first_looks --seeds 0 1 2 3 4 --out runs/first_looks   # ~6 min a seed
    python -m experiments.first_looks --seeds 5 6 7 8 9 --out runs/first_looks --confirm 0 1 2 3 4

Each seed is the whole first look (text2grad.run: its own data, SFT, annotations, reward models
and PPO), written to OUT/seed{N}.json as it finishes; a seed already there is read back, not run
again. Then the spread: each method's test score and watched share, each contrast, and the landing
share of each method's first update (landing.py), as the mean, the standard deviation over the
seeds and, for a difference, how many seeds it is positive on. With --confirm, the seeds named
there are the ones a finding was chosen on and the others confirm it: each group is printed apart.
"""
import argparse
import contextlib
import io
import json
import math
import os
import sys
import time

from experiments.runstate import atomic_save, pick_device
from text2grad import CONTRASTS, METHODS, Config, run


def one_seed(seed, out, device, **fields):
    """The first look at `seed` (text2grad.run, figure off, its printing kept in OUT/seed{N}.txt),
    or its record read back from OUT/seed{N}.json."""
    path = os.path.join(out, f"seed{seed}.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    start, printed = time.time(), io.StringIO()
    with contextlib.redirect_stdout(printed):
        table, landed = run(Config(seed=seed, device=device, figure="", **fields))
    record = {"seed": seed, "seconds": time.time() - start, "device": device, "fields": fields,
              "table": table, "landing": landed}
    os.makedirs(out, exist_ok=True)
    atomic_save(printed.getvalue(), os.path.join(out, f"seed{seed}.txt"))
    atomic_save(json.dumps(record, indent=1), path)
    return record


def spread(values):
    """(mean, standard deviation over the values (n - 1), n)."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else float("nan")
    return mean, sd, n


def numbers(record):
    """{name: value} of one seed: each method's test score and watched share, what RL did (each
    method's test score minus SFT's), each contrast on test, each method's landing share, the
    placement contrasts of it and of the curve's first two points after the start ("early"),
    and each method's validation curve."""
    table, landed = record["table"], record["landing"]
    out = {}
    for method, row in table.items():
        out[f"test {method}"], out[f"watched {method}"] = row["test"]
        curve = [score for score, _ in row["curve"]]
        out[f"curve {method}"] = curve
    for method, row in table.items():  # what RL did: the first look's finding
        if method != "sft":
            out[f"RL, {method} - sft"] = row["test"][0] - table["sft"]["test"][0]
    pairs = {name: (a, b) for name, (a, b) in CONTRASTS.items() if a in table and b in table}
    for name, (a, b) in pairs.items():
        out[f"test {name}"] = table[a]["test"][0] - table[b]["test"][0]
    for method in landed:
        out[f"landing {method}"] = landed[method]["landing_share"]
    for name, (a, b) in pairs.items():
        if name.startswith("placement"):
            out[f"landing {name}"] = landed[a]["landing_share"] - landed[b]["landing_share"]
            early = [x[0] - y[0] for x, y in zip(table[a]["curve"][1:3], table[b]["curve"][1:3])]
            out[f"early {name}"] = sum(early) / len(early)  # validation, the 1st and 2nd points
    out["blamed tokens"] = next(iter(landed.values()))["blamed_tokens"]
    return out


def summary(records, title):
    """Print the spread of every number over the records, and each method's mean validation curve
    with its largest fall between adjacent points."""
    per_seed = [numbers(r) for r in records]
    seeds = ", ".join(str(r["seed"]) for r in records)
    print(f"\n{title}: seeds {seeds} ({len(records)}), "
          f"{max(r['seconds'] for r in records):.0f} s at most a seed")
    print(f"{'':44s} {'mean':>7s} {'sd':>6s}  positive")
    for key in per_seed[0]:
        if key.startswith("curve"):
            continue
        mean, sd, n = spread([p[key] for p in per_seed])
        positive = sum(p[key] > 0 for p in per_seed)
        sign = f"{positive} of {n}" if " - " in key or "placement" in key or "judge" in key else ""
        print(f"{key:44s} {mean:7.3f} {sd:6.3f}  {sign}")
    print("mean validation curve (largest fall between adjacent points)")
    for method in records[0]["table"]:
        curves = [p[f"curve {method}"] for p in per_seed]
        mean = [sum(c[j] for c in curves) / len(curves) for j in range(len(curves[0]))]
        fall = max([mean[j] - mean[j + 1] for j in range(len(mean) - 1)] + [0.0])
        print(f"  {method:16s} {' '.join(f'{v:.3f}' for v in mean)}  ({fall:.3f})")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.first_looks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(5)), help="the seeds to run or read")
    parser.add_argument("--out", default="runs/first_looks", help="where each seed's record goes")
    parser.add_argument("--confirm", type=int, nargs="*", default=[],
                        help="the seeds the finding was chosen on: printed apart from the others")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, mps, ...")
    parser.add_argument("--task", default="summarize", help="the first look's task")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    device = pick_device(args.device)
    os.makedirs(args.out, exist_ok=True)
    records = []
    for seed in args.seeds:
        records.append(one_seed(seed, args.out, device, task=args.task))
        print(f"seed {seed}: {records[-1]['seconds']:.0f} s", flush=True)
    chosen = [r for r in records if r["seed"] in args.confirm]
    others = [r for r in records if r["seed"] not in args.confirm]
    if chosen:
        summary(chosen, "chosen on")
    summary(others, "confirmed on" if chosen else "the first look over seeds")


if __name__ == "__main__":
    main()
