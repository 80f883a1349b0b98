"""What makes qa's look-up learnable at the default size: the SFT policy's greedy validation
right_answer, question kind by question kind, against training steps, for each lever.

    python -m experiments.lookup --out runs/lookup                 # every lever, about 20 min on 2 cores

A lever is a trunk (GPTConfig.canon: the canon layers, on or off) and a recipe (SFT alone from random
weights, or the pretraining stage's documents first, then the same SFT). Each lever trains the
default preset's GPT on qa's default data with the run's seed; only the validation split is read,
so a lever may be chosen here without touching test. Writes DIR/lookup.json:
{lever: {"pretraining": [(step, {kind: right_answer})], "sft": [...]}}, and prints the table.
"""
import argparse
import json
import os
import sys
import time

from dataclasses import replace

import torch

from data import document, qa
from data.tokenizer import Tokenizer, training_texts
from model import GPT, GPTConfig
from experiments.runstate import atomic_save, fail, pick_device
from sft import respond, train_sft
from experiments.protocol import PRESETS
from data import experiment_splits

# lever -> (canon layers?, pretraining?); kernel, steps and evaluation points are the default preset's
LEVERS = {"baseline": (False, False), "canon": (True, False), "pretraining": (False, True),
          "canon+pretraining": (True, True)}


def right_by_kind(model, tokenizer, examples):
    """Greedy right_answer on examples, per question kind and over all ("all")."""
    responses, _ = respond(model, tokenizer, [e.prompt for e in examples], desc=None)
    right = [(e.facts["kind"], qa.metrics(e, r)["right_answer"]) for e, r in zip(examples, responses)]
    kinds = {k: [v for kind, v in right if kind == k] for k in qa.QUESTION_KINDS}
    return {**{k: sum(v) / len(v) for k, v in kinds.items()}, "all": sum(v for _, v in right) / len(right)}


def study(lever, preset, splits, demonstrations, tokenizer, device, seed):
    """One lever's curves: {"pretraining": [(step, right_by_kind)], "sft": [...], "time_s": {...}}."""
    canon, pretrain = LEVERS[lever]
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=tokenizer.vocab_size, **preset["model"])
    model = GPT(config if canon else replace(config, canon=0)).to(device)
    every = preset["sft_eval_every"]
    check = lambda m: right_by_kind(m, tokenizer, splits["validation"])
    result, start = {"pretraining": [], "time_s": {}}, time.time()
    if pretrain:
        _, result["pretraining"] = train_sft(model, tokenizer, demonstrations, preset["pretrain_steps"],
                                             preset["batch_size"], preset["lr"], device, seed, evaluate=check,
                                             eval_every=every,
                                             document=lambda e, rng: document(qa, e, rng), desc=f"{lever}: base")
        result["time_s"]["pretraining"] = time.time() - start
    start = time.time()
    _, result["sft"] = train_sft(model, tokenizer, demonstrations, preset["sft_steps"], preset["batch_size"],
                                 preset["lr"], device, seed, evaluate=check, eval_every=every, desc=f"{lever}: sft")
    result["time_s"]["sft"] = time.time() - start
    return result


def main(argv=None):
    """python -m experiments.lookup --out DIR: each lever's per-kind validation right_answer curve
    on qa, into DIR/lookup.json (a lever already there, of the same seed, is kept)."""
    parser = argparse.ArgumentParser(prog="python -m experiments.lookup", description=main.__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/lookup", help="output folder (default runs/lookup)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, ...")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    preset, device = PRESETS["default"], pick_device(args.device)
    splits, demonstrations = experiment_splits(qa, preset, args.seed)
    tokenizer = Tokenizer.train(training_texts(qa, splits["train"]), preset["vocab_size"])
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "lookup.json")
    results = {}
    if os.path.exists(path):  # levers already studied, kept when they share this seed
        with open(path, encoding="utf-8") as f:
            results = json.load(f)
        if results.get("seed") != args.seed:
            fail(f"{path} holds levers of seed {results.get('seed')}, not {args.seed}; use another --out")
    results["seed"] = args.seed
    for lever in (lever for lever in LEVERS if lever not in results):
        results[lever] = study(lever, preset, splits, demonstrations, tokenizer, device, args.seed)
        atomic_save(json.dumps(results, indent=1), path)  # each lever kept as soon as it is done
    print("greedy validation right_answer by question kind; step counts SFT steps after any pretraining")
    print(f"{'lever':20s} {'stage':12s} {'step':>5s} " + " ".join(f"{k:>8s}" for k in (*qa.QUESTION_KINDS, "all")))
    for lever, result in results.items():
        if lever == "seed":
            continue
        for stage in ("pretraining", "sft"):
            for step, kinds in result[stage]:
                print(f"{lever:20s} {stage:12s} {step:5d} " + " ".join(f"{kinds[k]:8.3f}" for k in (*qa.QUESTION_KINDS, "all")))
    print(f"-> {path}")


if __name__ == "__main__":
    main()
