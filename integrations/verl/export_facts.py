"""The facts task (data/facts.py) as verl's RL dataset, for a real instruct model to learn.

    python -m integrations.verl.export_facts DIR [--train 2000] [--test 100] [--seed 0]

writes DIR/train.parquet and DIR/test.parquet, one order note a row, in the columns verl's
RLHFDataset reads:
  data_source   "text2grad/facts"
  prompt        the chat: a system message stating the answer format, then the note as the user's
  ability       "facts"
  reward_model  {"style": "rule", "ground_truth": the reference answer}
  extra_info    {"split", "index"}
The format is the one the critic parses ("key value" clauses in the note's order, "; " between
them, a full stop at the end). The note stands alone in the user message because facts_critic
(critics.py) reads the facts back from that message, and the format's example would be read too.
"""
import argparse
import os

import pandas

from data import facts, make_splits

DATA_SOURCE = "text2grad/facts"
MEANING = {"name": "who it is from", "city": "where it goes", "day": "the day it leaves",
           "colour": "the wrapping", "count": "the boxes", "unit": "the unit it is weighed in",
           "size": "the box's size", "speed": "how it is sent"}  # one per kind of facts.KINDS
EXAMPLE = [("name", "Maya"), ("day", "friday"), ("speed", "express")]
INSTRUCTION = (
    "Restate the delivery order in the user's note. Write one clause \"key value\" per fact the "
    "note states, in the note's order, separated by \"; \" and ending with \".\". The keys: "
    f"{', '.join(f'{kind} ({MEANING[kind]})' for kind in facts.KINDS)}. Write nothing else. For "
    "a note that gives the sender Maya, the day friday and the speed express, write: "
    f"{facts.restate(EXAMPLE)}")

def rows(examples, split):
    """verl's dataset rows for examples (data.Example of the facts task)."""
    return [{"data_source": DATA_SOURCE,
             "prompt": [{"role": "system", "content": INSTRUCTION},
                        {"role": "user", "content": e.prompt}],
             "ability": "facts",
             "reward_model": {"style": "rule", "ground_truth": e.reference},
             "extra_info": {"split": split, "index": i}} for i, e in enumerate(examples)]


def export(folder, train=2000, test=100, seed=0):
    """Write folder/train.parquet and folder/test.parquet (no note in both); their paths."""
    splits = make_splits(facts, {"train": train, "validation": 0, "test": test}, seed=seed)
    os.makedirs(folder, exist_ok=True)
    paths = []
    for split in ("train", "test"):
        paths.append(os.path.join(folder, f"{split}.parquet"))
        pandas.DataFrame(rows(splits[split], split)).to_parquet(paths[-1])
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m integrations.verl.export_facts",
                                     description="The facts task as verl's RL dataset (parquet).")
    parser.add_argument("folder", help="where train.parquet and test.parquet are written")
    parser.add_argument("--train", type=int, default=2000, help="training notes")
    parser.add_argument("--test", type=int, default=100, help="test notes (verl's validation)")
    parser.add_argument("--seed", type=int, default=0, help="the notes' seed (data.make_splits)")
    args = parser.parse_args(argv)
    for path in export(args.folder, args.train, args.test, args.seed):
        print(path)


if __name__ == "__main__":
    main()
