"""example.py's walk-through against a loop written out here: r_t, and A_t at both lambdas."""
import dataclasses
import math

import pytest

import example
from data import get_task, make_splits
from data.tokenizer import Tokenizer, training_texts


@pytest.mark.parametrize("task_name,praise", [("summarize", "token"), ("summarize", "phrase"), ("code", "phrase")])
def test_walk_through_matches_a_loop(task_name, praise):
    task = get_task(task_name)
    examples = make_splits(task, {"train": 200, "validation": 1, "test": 1}, seed=0)["train"]
    flawed = next(e for e in examples if e.flaws)
    tokenizer = Tokenizer.train(training_texts(task, examples), 512)
    critique, rows = example.walk_through(task, flawed, tokenizer, praise=praise)
    assert critique["poor_spans"] and any(row["delta"] == -1 for row in rows)  # the flaw is blamed
    assert rows[-1]["token"] == "<|eos|>" and "".join(row["token"] for row in rows[:-1]) == flawed.demonstration
    # Text2Grad: a blamed token -1; a praised token +1 ("token"), or a praised span (a run of +1s) 1/n
    # on each of its n tokens, nothing if the same tokens were praised before ("phrase"); praise times
    # sigmoid((40 - t) / 4); the EOS earns 0
    weight = [1 / (1 + math.exp(-(40 - t) / 4)) for t in range(len(rows))]
    r, seen, t = [float(min(row["delta"], 0)) for row in rows], set(), 0
    if praise == "token":
        r = [row["delta"] * (weight[t] if row["delta"] > 0 else 1.0) for t, row in enumerate(rows)]
        t = len(rows)  # no span loop
    while t < len(rows):
        end = t
        while end < len(rows) and rows[end]["delta"] == 1:
            end += 1
        if end > t:
            span = tuple(row["token"] for row in rows[t:end])
            for j in range(t, end):
                r[j] = (0.0 if span in seen else 1 / (end - t)) * weight[j]
            seen.add(span)
        t = max(end, t + 1)
    # scalar PPO: the sum of those on the EOS, 0 elsewhere
    scalar = [0.0] * (len(rows) - 1) + [sum(r)]
    for name, rewards in (("text2grad", r), ("ppo_scalar", scalar)):
        for t, row in enumerate(rows):
            assert row[f"r_{name}"] == pytest.approx(rewards[t], abs=1e-5)
            assert row[f"A_{name}_0.0"] == pytest.approx(rewards[t], abs=1e-5)  # lambda 0, V = 0: A_t = r_t
            to_go = sum(0.95 ** (k - t) * rewards[k] for k in range(t, len(rows)))
            assert row[f"A_{name}_0.95"] == pytest.approx(to_go, abs=1e-4)
    # GRPO in a group of the demonstration and the reference: the reference's rewards are its own walk-through's
    _, ref_rows = example.walk_through(task, dataclasses.replace(flawed, demonstration=flawed.reference), tokenizer,
                                       praise=praise)
    r_ref = [row["r_text2grad"] for row in ref_rows]
    tokens = r + r_ref
    mean = sum(tokens) / len(tokens)
    std = math.sqrt(sum((x - mean) ** 2 for x in tokens) / len(tokens))
    sums = (sum(r), sum(r_ref))
    half = abs(sums[0] - sums[1]) / 2  # two sums: mean halfway, population std half the gap
    for t, row in enumerate(rows):
        assert row["G_text2grad"] == pytest.approx(sum((x - mean) / (std + 1e-6) for x in r[t:]), abs=1e-4)
        assert row["G_ppo_scalar"] == pytest.approx((sums[0] - sum(sums) / 2) / (half + 1e-6), abs=1e-4)


def test_walk_through_pays_praise_as_the_tasks_run_does():
    task = get_task("summarize")
    examples = make_splits(task, {"train": 200, "validation": 1, "test": 1}, seed=0)["train"]
    flawed = next(e for e in examples if e.flaws)
    tokenizer = Tokenizer.train(training_texts(task, examples), 512)
    default = example.walk_through(task, flawed, tokenizer)[1]
    assert default == example.walk_through(task, flawed, tokenizer, praise=example.guards.PRAISE["summarize"])[1]
    other = {"token": "phrase", "phrase": "token"}[example.guards.PRAISE["summarize"]]
    assert default != example.walk_through(task, flawed, tokenizer, praise=other)[1]


def test_command_shows_the_first_flawed_demonstration_and_its_critique(capsys):
    example.main(["--task", "summarize"])
    out = capsys.readouterr().out
    task = get_task("summarize")
    shown = next(e for e in make_splits(task, {"train": 400, "validation": 1, "test": 1}, seed=0)["train"] if e.flaws)
    assert f"response:  {shown.demonstration}\n" in out
    assert f"critique:  {task.critique(shown, shown.demonstration)['textual_feedback']}\n" in out
    assert out.count("'<|eos|>'") == 1
