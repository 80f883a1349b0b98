"""A finished run's folder read back, for the studies that summarise it or rerun part of it.

    read_run(folder, device) -> Run: what progress.json says the run was (task, preset, seed), its
    splits (rebuilt from the seed, as the run built them), the SFT policy, the tokenizer and the
    reward models, each from the files the run wrote. A folder that lacks them ends the command
    with one line.
    read_json(path) -> the JSON in a file the run wrote; ValueError (one line) when it is not JSON.
"""
import json
import os
from dataclasses import dataclass

from experiments.checkpoint import load_checkpoint
from data import get_task
from experiments.runstate import fail
from experiments.presets import PRESETS
from data import experiment_splits
from text2grad import REWARD_MODELS


@dataclass
class Run:
    folder: str
    task: object          # the data/ module of the run's task
    preset: dict          # experiments.presets.PRESETS[the run's preset], its "ppo" with the run's praise
    seed: int             # the run's --seed
    splits: dict          # {"train", "validation", "test"}: lists of examples
    policy: object        # the SFT policy (model.GPT)
    tokenizer: object
    reward_models: dict   # {name: reward.RewardModel} for each of text2grad.REWARD_MODELS


def read_run(folder, device):
    try:
        with open(os.path.join(folder, "progress.json"), encoding="utf-8") as f:
            identity = json.load(f)["identity"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        fail(f"{folder} holds no readable progress.json ({type(error).__name__}); run python -m experiments.protocol first")
    if not isinstance(identity, dict) or identity.get("preset") not in PRESETS or \
            identity.get("task") not in ("summarize", "code", "qa"):
        fail(f"{folder}/progress.json names no known task and preset; run python -m experiments.protocol first")
    needed = ["sft.pt"] + [f"reward_{name}.pt" for name in REWARD_MODELS]
    missing = [name for name in needed if not os.path.exists(os.path.join(folder, name))]
    if missing:
        fail(f"{folder} has not finished its reward models ({', '.join(missing)} missing); run or --resume "
             f"python -m experiments.protocol first")
    task, preset = get_task(identity["task"]), PRESETS[identity["preset"]]
    preset = {**preset, "ppo": {**preset["ppo"], "praise": identity["praise"]}}  # what the run's PPO paid (--praise)
    splits, _ = experiment_splits(task, preset, identity["seed"])
    policy, tokenizer, _ = load_checkpoint(os.path.join(folder, "sft.pt"), device)
    reward_models = {name: load_checkpoint(os.path.join(folder, f"reward_{name}.pt"), device, tokenizer)[0]
                     for name in REWARD_MODELS}
    return Run(folder, task, preset, identity["seed"], splits, policy, tokenizer, reward_models)


def read_json(path):
    """The JSON in path; ValueError (one line) when it is not JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON ({error}); run the experiment again") from None
