"""The value head under several settings, on a finished run: the evidence behind ppo.py's choice.

    python -m experiments.value_heads --out runs/summarize

The authors (through TRL) train the value head through the policy's trunk with a loss weight of
0.1, a value clip of 0.2 and the policy's learning rate; ours reads the trunk detached, with its own
learning rate, no clip, and a warm-up on SFT samples (ppo.py). This runs scalar PPO and Text2Grad
once under each setting of VALUE_SETTINGS, from the run's own SFT policy and reward models, and
reports how much of the returns' variance the value head explains at each update (training
rollouts) beside the final validation score. The test split is never read.
"""
import argparse
import copy
import json
import os
import sys

import ppo
from experiments.run_folder import read_run
from experiments.runstate import atomic_save, pick_device
from sft import MAX_NEW_TOKENS
from experiments.measures import primary_score
from experiments.ppo_runs import configs
from text2grad import reward_function

# The value-head settings main compares (PPOConfig fields); the last is PPOConfig's default.
# "authors" is close to the authors' (TRL's) setting: loss weight 0.1, value clip 0.2, the policy's
# learning rate, the head trained through the trunk; it keeps our MLP head and per-group gradient clip.
VALUE_SETTINGS = {
    "authors": dict(value_coef=0.1, value_clip=0.2, value_lr=None, detach_value=False, value_warmup_steps=0),
    "no clip": dict(value_coef=0.1, value_clip=None, value_lr=None, detach_value=False, value_warmup_steps=0),
    "own head": dict(value_warmup_steps=0),
    "own head, warm-up": {},
}


def main(argv=None):
    """python -m experiments.value_heads --out DIR: the value head under each of VALUE_SETTINGS, on a finished
    run's SFT policy and reward models: one PPO run per setting for scalar PPO and Text2Grad (the
    run's first seed, GAE lambda 0.95 as the authors use), explained variance per update and the final
    validation score. Writes DIR/value_settings.json; reads no test data."""
    parser = argparse.ArgumentParser(prog="python -m experiments.value_heads", description=main.__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/summarize", help="a finished run's folder (default: runs/summarize)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, ...")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    run = read_run(args.out, pick_device(args.device))
    task, preset, splits, policy, tokenizer = run.task, run.preset, run.splits, run.policy, run.tokenizer
    prompts = [tokenizer.prompt(e.prompt) for e in splits["train"]]
    validation = splits["validation"]

    results = {}
    for setting, fields in VALUE_SETTINGS.items():
        for name in ("ppo_scalar", "text2grad"):
            config, shaping, _ = configs({**preset["ppo"], "lam": 0.95, **fields}, max_new_tokens=MAX_NEW_TOKENS)
            model = ppo.PolicyWithValue(copy.deepcopy(policy), config.detach_value)
            curve, history, warmup = ppo.train(
                model, policy, prompts, reward_function(name, task, tokenizer, splits["train"], run.reward_models, shaping),
                tokenizer.eos_id, tokenizer.pad_id, config, seed=run.seed,
                evaluate=lambda gpt: primary_score(task, gpt, tokenizer, validation), eval_every=config.updates,
                desc=f"{setting}: {name}")
            ev = [h["explained_variance"] for h in history]
            results[f"{setting}/{name}"] = {"setting": fields, "explained_variance": ev, "warmup": warmup,
                                            "explained_variance_mc": [h["explained_variance_mc"] for h in history],
                                            "value_clip_fraction": [h["value_clip_fraction"] for h in history],
                                            "validation": curve[-1][1]}
            mc = results[f"{setting}/{name}"]["explained_variance_mc"]
            print(f"{setting:18s} {name:11s} explained variance, update 1 {ev[0]:+.2f}, last {ev[-1]:+.2f}, "
                  f"mean {sum(ev) / len(ev):+.2f} (against the reward-to-go: mean {sum(mc) / len(mc):+.2f}); "
                  f"final validation {task.PRIMARY} {curve[-1][1]:.3f}")
    atomic_save(json.dumps(results, indent=2), os.path.join(args.out, "value_settings.json"))
    print(f"-> {os.path.join(args.out, 'value_settings.json')}")


if __name__ == "__main__":
    main()
