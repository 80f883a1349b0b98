"""runstate.py: what a run keeps between its stages, and how it stops on bad input.

    fail(message)              one line on stderr and exit status 2, never a traceback
    checked(function, ...)     function's result, or its ValueError's line through fail
    pick_device(name)          "auto" or a device torch can use here
    save_checkpoint / load_checkpoint   a GPT or reward model with its config, tokenizer and step
    Progress(out, identity, resume, every_s)   progress.json: the stages finished and what they
                               measured, so that --resume skips them; the training loops' snapshots

text2grad.py (the main run) and sweep.py (the K sweep) build their stages on these.
"""
import glob
import json
import os
import sys
import time
from dataclasses import asdict

import torch

import parallel
from checkpoint import Interrupted, Snapshots, atomic_save, stop_requested
from data.tokenizer import Tokenizer
from model import GPT, GPTConfig
from reward import RewardModel


def fail(message):
    """Bad input ends the run with one line on stderr and exit status 2, never a traceback."""
    prefix = f"text2grad (rank {parallel.rank()})" if parallel.world_size() > 1 else "text2grad"
    print(f"{prefix}: error: {message}", file=sys.stderr)
    sys.exit(2)


def checked(function, *args, **kwargs):
    """function(*args, **kwargs); a ValueError it raises (one line naming the bad input) ends the run."""
    try:
        return function(*args, **kwargs)
    except ValueError as error:
        fail(str(error))


def pick_device(name):
    """The device to run on; a device torch cannot use ends the run before any work is done.

    A CUDA device is checked by count, without touching it: under torchrun every rank would
    otherwise create a context on cuda:0 before parallel.init moves it to its own GPU. On CUDA,
    float32 matmuls may use TF32 (a 10-bit mantissa, as the bf16 forward's are coarser still)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        fail(f"--device {name} is not a device name; try cpu, cuda or cuda:N")
    if device.type == "cuda":
        if not torch.cuda.is_available() or (device.index or 0) >= torch.cuda.device_count():
            fail(f"--device {name} is not available here ({torch.cuda.device_count()} CUDA devices); "
                 "try --device cpu")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        return name
    try:
        torch.zeros(1, device=device)
    except (RuntimeError, ValueError, AssertionError) as error:
        fail(f"--device {name} is not available here ({type(error).__name__}); try --device cpu")
    return name


def save_checkpoint(path, model, tokenizer, step, **extra):
    """Weights, the GPT config, the tokenizer and the step; extra keys (a reward model's kind) too."""
    config = model.gpt.config if isinstance(model, RewardModel) else model.config
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
    if "kind" in ckpt:
        model = RewardModel(model, ckpt["kind"], ckpt["cot"])
    model.load_state_dict(ckpt["model"])
    return model.to(device).eval(), Tokenizer.from_json(ckpt["tokenizer"]), ckpt["step"]


class Progress:
    """progress.json in the output folder: the stages already finished and what they measured, so
    that --resume skips them. A stage writes its own files first, then is marked finished here
    (atomically). Training loops inside a stage keep a snapshot, {name}.partial.pt, that --resume
    continues from. After each stage, a pending Ctrl-C stops the run (checkpoint.Interrupted)."""

    def __init__(self, out, identity, resume, every_s):
        self.out, self.identity, self.every_s, self.done = out, identity, every_s, {}
        self.path = os.path.join(out, "progress.json")
        if resume and not os.path.exists(self.path):  # this task never finished a stage (--task all)
            print(f"--resume: {out} has no finished stage; starting it from the beginning")
            resume = False
        if not resume:
            for stale in glob.glob(os.path.join(out, "*.partial.pt")) if parallel.main_process() else []:
                os.remove(stale)
            parallel.barrier()
            return
        try:
            with open(self.path, encoding="utf-8") as f:
                saved = json.load(f)
            old, self.done = saved["identity"], saved["done"]
        except (ValueError, KeyError, TypeError):
            fail(f"--resume: {self.path} is damaged; run without --resume to start again")
        for key, value in identity.items():
            if key not in old:
                fail(f"--resume: {out} was made by an older version of text2grad (its progress.json has no "
                     f"{key}); run without --resume, or use another --out")
            if old.get(key) != value:
                fail(f"--resume: {out} was started with {key} {old.get(key)!r}, not {value!r}; resume with "
                     f"the same flags, or use another --out")

    def __contains__(self, stage):
        return stage in self.done

    def __getitem__(self, stage):
        return self.done[stage]["value"]

    def time(self, stage):
        return self.done[stage]["time_s"]

    def finish(self, stage, value, start):
        self.done[stage] = {"value": value, "time_s": time.time() - start}
        atomic_save(json.dumps({"identity": self.identity, "done": self.done}), self.path)
        if parallel.any_rank(stop_requested()):
            raise Interrupted(f"stopped after the stage {stage}")

    def snapshots(self, name):
        """The snapshot of a training loop. Under torchrun there is none: each rank's random states
        differ, so an interrupted loop starts over on --resume (finished stages are still skipped)."""
        return Snapshots(os.path.join(self.out, f"{name}.partial.pt") if parallel.world_size() == 1 else None,
                         self.every_s)
