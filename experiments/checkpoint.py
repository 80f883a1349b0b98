"""experiments/checkpoint.py: a trained model in a file, handed from one stage of a run to the next.

    save_checkpoint(path, model, tokenizer, step)   weights, the GPT config, the tokenizer and the step
    load_checkpoint(path, device, tokenizer, config)   the model back (a GPT or a reward model), checked
                                                      against the tokenizer and config a run expects

"""
import os
from dataclasses import asdict

import torch

from data.tokenizer import Tokenizer
from guards import Guards
from model import GPT, GPTConfig
from reward import RewardModel
from experiments.runstate import atomic_save, fail


def save_checkpoint(path, model, tokenizer, step, **extra):
    """Weights, the GPT config, the tokenizer and the step; extra keys (a reward model's kind, cot and
    the guards its scalar target sums through) too."""
    config = model.gpt.config if isinstance(model, RewardModel) else model.config
    if isinstance(model, RewardModel):  # what load_checkpoint rebuilds it from
        extra = {"kind": model.kind, "cot": model.cot, "shaping": asdict(model.shaping), **extra}
    atomic_save({"model": model.state_dict(), "config": asdict(config), "tokenizer": tokenizer.to_json(),
                 "step": step, **extra}, path)


def load_checkpoint(path, device="cpu", tokenizer=None, config=None):
    """(model, tokenizer, step) from a checkpoint written by save_checkpoint: a GPT, or a
    RewardModel when the checkpoint records a reward model's kind. Given the tokenizer and the GPT
    config a run expects, a checkpoint made with others ends the run with one line."""
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
    except FileNotFoundError:
        fail(f"{path} is missing; start the run again without --resume")
    except Exception as error:  # a truncated or foreign file: pickle, zip and torch raise many kinds
        fail(f"{path} is not a checkpoint this code wrote ({type(error).__name__}); start again without --resume")
    if config is not None and ckpt["config"] != asdict(config):
        diff = ", ".join(f"{k} {ckpt['config'].get(k)} (expected {v})" for k, v in asdict(config).items()
                         if ckpt["config"].get(k) != v)
        fail(f"{path} holds a model of another size: {diff}; use the preset it was made with, or another --out")
    if tokenizer is not None and ckpt["tokenizer"] != tokenizer.to_json():
        fail(f"{path} was made with another tokenizer than {os.path.dirname(path) or '.'}/tokenizer.json; "
             f"use another --out")
    model = GPT(GPTConfig(**ckpt["config"]))
    if "kind" in ckpt and "shaping" not in ckpt:
        fail(f"{path} is a reward model from before its scalar target summed through the guards (commit f0294af); "
             f"start the run again without --resume, or use another --out")
    if "kind" in ckpt:
        model = RewardModel(model, ckpt["kind"], ckpt["cot"], Guards(**ckpt["shaping"]))
    model.load_state_dict(ckpt["model"])
    return model.to(device).eval(), Tokenizer.from_json(ckpt["tokenizer"]), ckpt["step"]
