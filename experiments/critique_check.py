"""Where the CoT reward model goes wrong on a finished run: in the fact its critique states first, or
in the comparison after it.

    python -m experiments.critique_check --out runs/code      # or runs/qa

qa's and code's critiques open with the fact a verdict needs (qa: "The passage says Omar lives in
Oslo."; code: "The spec asks for `x + y if x [>] 4 else x * y`.", the spec as code marked where the
response differs, so that on code the "fact" is the comparison too), then judge the response against it.
On the validation records (nothing here reads test), this sorts the CoT model's readings by whether
the fact it wrote is the critic's, and gives the span F1 of each group, and how often the model's
verdict on the whole response (some token blamed, or none) agrees with the critic's. A model that
states the fact right and still gets the verdict wrong cannot compare the response with what it
just wrote. Writes DIR/critique_check.json.
"""
import argparse
import json
import os
import re
import sys

from data.annotations import read_annotations
from experiments.run_folder import read_run
from experiments.measures import span_details
from reward import encode_records, span_metrics
from experiments.runstate import atomic_save, checked, fail, pick_device

# the fact a critique states first: code's wanted expression, qa's passage fact
STATED = {"code": re.compile(r"^(?:The spec asks for |The spec means |Wanted: )`([^`]*)`"),
          "qa": re.compile(r"^(?:The passage says |According to the passage, |In the passage, )([^.]*)\.")}


def stated(task, critique):
    """The fact the critique opens with, or None when it states none."""
    match = STATED[task].search(critique)
    return match.group(1) if match else None


def main(argv=None):
    """python -m experiments.critique_check --out DIR: the CoT reward model's stated facts, span F1 and
    verdicts on a finished code or qa run's validation records; writes DIR/critique_check.json."""
    parser = argparse.ArgumentParser(prog="python -m experiments.critique_check", description=main.__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/code", help="a finished code or qa run's folder (default runs/code)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, ...")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    run = read_run(args.out, pick_device(args.device))
    if run.task.NAME not in STATED:
        fail(f"{args.out} is a {run.task.NAME} run; the critique check reads code and qa runs")
    model, tokenizer = run.reward_models["cot"], run.tokenizer
    with open(os.path.join(args.out, "progress.json"), encoding="utf-8") as f:  # read_run has checked it
        annotations = json.load(f)["identity"].get("annotations") or args.out  # a run with --annotations DIR
    records = checked(read_annotations, annotations, check=None)["validation"]
    kept, items, _ = encode_records(tokenizer, records, model.gpt.config.block_size)
    critiques, deltas = model.predict(tokenizer, [r["prompt"] for r in kept], [r["response"] for r in kept])
    rows = [{"fact_right": stated(run.task.NAME, c) is not None and stated(run.task.NAME, c) == stated(run.task.NAME, r["textual_feedback"]),
             "verdict_right": (-1 in d) == (-1 in item["delta"]), "pred": d, "gold": item["delta"]}
            for r, item, c, d in zip(kept, items, critiques, deltas)]
    result = {}
    for group, members in (("all", rows), ("fact right", [r for r in rows if r["fact_right"]]),
                           ("fact wrong", [r for r in rows if not r["fact_right"]])):
        if not members:
            continue
        predicted, gold = [r["pred"] for r in members], [r["gold"] for r in members]
        metrics = {**span_metrics(predicted, gold), **span_details(predicted, gold)}
        result[group] = {"records": len(members), "positive_f1": metrics["positive_f1"],
                         "negative_f1": metrics["negative_f1"], "confusion": metrics["confusion"],
                         "verdict_agrees": sum(r["verdict_right"] for r in members) / len(members)}
    atomic_save(json.dumps(result, indent=1), os.path.join(args.out, "critique_check.json"))
    print(f"{run.task.NAME}: the CoT reward model on {len(rows)} validation records")
    print(f"{'records':14s} {'n':>5s} {'F1 +':>7s} {'F1 -':>7s} {'verdict agrees':>15s}")
    for group, r in result.items():
        print(f"{group:14s} {r['records']:5d} {r['positive_f1']:7.3f} {r['negative_f1']:7.3f} {r['verdict_agrees']:15.3f}")
    print(f"-> {os.path.join(args.out, 'critique_check.json')}")


if __name__ == "__main__":
    main()
