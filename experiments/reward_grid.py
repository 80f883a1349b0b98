"""Each reward model's learning rate and steps, chosen on validation by its own measure: the scalar
reward model given the same search as Text2Grad's, before the two are compared through PPO.

    python -m experiments.reward_grid --out runs/code

On a run's folder (`python -m experiments.protocol`, its reward models finished): the run's SFT
policy, tokenizer and annotations of the train and validation splits. For cot and scalar, one model
per learning rate x steps of the grid, each from a copy of the SFT policy with the run's seed, read
on the validation records only:
  cot     the mean of its praised and blamed span F1 (reward.span_metrics)
  scalar  the correlation of its score with its target (reward.scalar_targets: the critic's labels
          through the run's guards, summed)
Each point is a unit (experiments/fanout.py: with --ray, side by side), written to
DIR/reward_grid/ as it finishes and read back when the same command runs again on the same SFT
policy and annotations. Prints the table
and each model's choice, and writes reward_grid.json. The test split is never read; the run's own
reward models are not changed.
"""
import argparse
import copy
import hashlib
import json
import os
import sys
import time

from data.annotations import read_annotations
from experiments.ppo_runs import configs
from experiments.protocol import encode_splits
from experiments import fanout
from experiments.run_folder import read_json, read_run
from experiments.runstate import atomic_save, checked, pick_device, run_to_the_end
from reward import RewardModel, evaluate_reward_model, train_reward_model
from text2grad import REWARD_MODELS

LRS = (5e-4, 2e-3, 5e-3)
STEPS = (1, 4)  # times the preset's reward_steps


def measure(kind, metrics):
    """The one number a reward model of `kind` is chosen by, from evaluate_reward_model's metrics."""
    return metrics["score_correlation"] if kind == "scalar" else (metrics["positive_f1"] + metrics["negative_f1"]) / 2


def grid_point(policy, tokenizer, name, items, records, preset, shaping, seed, lr, steps, path):
    """One reward model of the grid: `name` from a copy of the SFT policy, trained at (lr, steps),
    read on the validation records; its entry, written to path as it finishes."""
    start, device = time.time(), next(policy.parameters()).device
    kind, cot = REWARD_MODELS[name]
    model = RewardModel(copy.deepcopy(policy), kind, cot, shaping).to(device)
    train_reward_model(model, tokenizer, items["train"], steps, preset["batch_size"], lr, device, seed,
                       desc=f"{name}, lr {lr:g}, {steps} steps")
    metrics, _, _ = evaluate_reward_model(model, tokenizer, records["validation"], items["validation"])
    entry = {"lr": lr, "steps": steps, "validation": measure(kind, metrics), "time_s": time.time() - start}
    atomic_save(json.dumps(entry), path)
    return entry


def main(argv=None):
    """python -m experiments.reward_grid --out DIR: each reward model over a grid of learning rates and
    steps, chosen on validation by its own measure. Writes DIR/reward_grid.json; reads no test data."""
    parser = argparse.ArgumentParser(prog="python -m experiments.reward_grid", description=main.__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/code", help="a run's folder with its reward models finished (default: runs/code)")
    parser.add_argument("--lrs", nargs="+", type=float, default=list(LRS), help=f"learning rates (default: {LRS})")
    parser.add_argument("--steps", nargs="+", type=int, default=None,
                        help=f"training steps (default: {STEPS} times the preset's reward_steps)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, ...")
    fanout.add_flags(parser)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    fanout.check_flags(parser, args)
    if any(lr <= 0 for lr in args.lrs) or any(s <= 0 for s in args.steps or []):
        parser.error("--lrs and --steps must be positive")
    run = read_run(args.out, pick_device(args.device))
    device, preset, tokenizer = next(run.policy.parameters()).device, run.preset, run.tokenizer
    steps = args.steps or [k * preset["reward_steps"] for k in STEPS]
    records = checked(read_annotations, args.out, check=None, splits=("train", "validation"))  # never the test split
    records, items, _ = checked(encode_splits, tokenizer, records, run.policy.config.block_size, args.out, preset["batch_size"])
    shaping = configs(preset["ppo"])[1]  # the guards the run's PPO was paid through, as the reward stage's

    # one file per point, so that a stopped grid resumes; kept apart by what the models read (the SFT
    # policy and the annotations), so that points of an earlier run in this folder are not read back
    read = hashlib.sha256()
    for name in ("sft.pt", "annotations_train.jsonl", "annotations_validation.jsonl"):
        with open(os.path.join(args.out, name), "rb") as f:
            read.update(f.read())
    folder = os.path.join(os.path.abspath(args.out), "reward_grid", read.hexdigest()[:12])
    os.makedirs(folder, exist_ok=True)
    units = fanout.Units(args.ray, out=args.out, cpus=args.unit_cpus, gpus=args.unit_gpus, device=device)
    points = {(name, lr, n): os.path.join(folder, f"{name}_lr{lr:g}_steps{n}_seed{run.seed}.json")
              for name in ("cot", "scalar") for lr in args.lrs for n in steps}
    with units:
        handles = {}
        for (name, lr, n), path in points.items():
            if os.path.exists(path):
                handles[name, lr, n] = fanout.Outcome(checked(read_json, path))
            else:
                handles[name, lr, n] = units.submit(f"{name} lr {lr:g} steps {n}", checked, grid_point, run.policy,
                                                    tokenizer, name, items, records, preset, shaping, run.seed, lr,
                                                    n, path)
        entries = units.wait(handles)
        if args.ray:
            units.report()
    results = {}
    for name in ("cot", "scalar"):
        kind = REWARD_MODELS[name][0]
        grid = [entries[key] for key in points if key[0] == name]
        for entry in grid:
            print(f"[{run.task.NAME}] {name:6s} lr {entry['lr']:<8g} steps {entry['steps']:5d}: validation "
                  f"{'correlation with its target' if kind == 'scalar' else 'mean span F1'} {entry['validation']:.3f}")
        best = max(grid, key=lambda entry: entry["validation"])
        results[name] = {"grid": grid, "chosen": {"lr": best["lr"], "steps": best["steps"]},
                         "measure": "score_correlation" if kind == "scalar" else "mean of positive_f1 and negative_f1"}
        print(f"[{run.task.NAME}] {name}: chosen lr {best['lr']:g}, {best['steps']} steps (validation {best['validation']:.3f})")
    results["units"] = units.record()
    atomic_save(json.dumps(results, indent=2), os.path.join(args.out, "reward_grid.json"))
    print(f"-> {os.path.join(args.out, 'reward_grid.json')}")


if __name__ == "__main__":
    run_to_the_end(main, "runs/code", "text2grad reward_grid", "again (each finished point is read back)")
