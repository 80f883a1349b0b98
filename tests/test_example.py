"""example.py's walk-through against loops written out here: r_t, A_t at lambda 0 and at the
method's lambda with V = 0 and with the fitted V, and the whitened advantages."""
import math

import pytest

import example
from align import align
from data import get_task, make_splits
from data.tokenizer import Tokenizer, training_texts
from text2grad import LAMBDAS


def scores_by_hand(delta, tokens, praise):
    """The guards written out: blame -1; praise +1 per token ("token") or a run of n praised
    tokens 1/n each, 0 if the same tokens were praised before ("phrase"); praise times
    sigmoid((40 - t) / 4); the EOS (appended) earns 0."""
    weight = [1 / (1 + math.exp(-(40 - t) / 4)) for t in range(len(delta) + 1)]
    r = [float(min(d, 0)) for d in delta]
    if praise == "token":
        r = [d * (weight[t] if d > 0 else 1.0) for t, d in enumerate(delta)]
    else:
        seen, t = set(), 0
        while t < len(delta):
            end = t
            while end < len(delta) and delta[end] > 0:
                end += 1
            if end > t:
                span = tuple(tokens[t:end])
                for j in range(t, end):
                    r[j] = (0.0 if span in seen else 1 / (end - t)) * weight[j]
                seen.add(span)
            t = max(end, t + 1)
    return r + [0.0]


def gae_by_hand(r, V, lam):
    """A_t = sum_l lam^l (r_{t+l} + V_{t+l+1} - V_{t+l}), the value past the end 0."""
    n = len(r)
    V = V + [0.0]
    return [sum(lam ** (k - t) * (r[k] + V[k + 1] - V[k]) for k in range(t, n)) for t in range(n)]


@pytest.mark.parametrize("task_name,praise", [("summarize", "token"), ("summarize", "phrase"),
                                              ("code", "phrase")])
def test_walk_through_matches_loops(task_name, praise):
    task = get_task(task_name)
    examples = make_splits(task, {"train": 200, "validation": 1, "test": 1}, seed=0)["train"]
    batch = [e for e in examples if e.flaws][:8]
    tokenizer = Tokenizer.train(training_texts(task, examples), 512)
    critique, rows = example.walk_through(task, batch, tokenizer, praise=praise)
    assert critique["poor_spans"] and any(row["delta"] == -1 for row in rows)  # the flaw is blamed
    assert rows[-1]["token"] == "<|eos|>"
    assert "".join(row["token"] for row in rows[:-1]) == batch[0].demonstration
    # every demonstration of the batch by hand: the critic's deltas, the guarded scores, and the
    # two placements (every token; their sum on the EOS)
    rewards = {"text2grad": [], "ppo_scalar": []}
    for e in batch:
        ids = tokenizer.encode(e.demonstration)
        delta = align(e.demonstration, tokenizer.offsets(ids), task.critique(e, e.demonstration))[0]
        dense = scores_by_hand(delta, ids, praise)
        rewards["text2grad"].append(dense)
        rewards["ppo_scalar"].append([0.0] * (len(dense) - 1) + [sum(dense)])
    for name, rs in rewards.items():
        lam = LAMBDAS[task_name][name]
        to_go = [[sum(r[k:]) for k in range(len(r))] for r in rs]
        longest = max(map(len, rs))
        V = [sum(g[t] for g in to_go if t < len(g)) / sum(t < len(g) for g in to_go)
             for t in range(longest)]  # the mean reward-to-go of the rows still running at t
        fitted = [gae_by_hand(r, V[:len(r)], lam) for r in rs]
        everything = [a for row in fitted for a in row]
        mean = sum(everything) / len(everything)
        std = math.sqrt(sum((a - mean) ** 2 for a in everything) / len(everything))
        for t, row in enumerate(rows):
            assert row[f"r_{name}"] == pytest.approx(rs[0][t], abs=1e-5)
            assert row[f"A_{name}_0"] == pytest.approx(rs[0][t], abs=1e-5)  # lambda 0, V = 0
            assert row[f"A_{name}_V0"] == pytest.approx(gae_by_hand(rs[0], [0.0] * len(rs[0]), lam)[t],
                                                       abs=1e-4)
            assert row[f"A_{name}_V"] == pytest.approx(fitted[0][t], abs=1e-4)
            assert row[f"A_{name}_white"] == pytest.approx((fitted[0][t] - mean) / std, abs=1e-4)


def test_walk_through_pays_praise_as_the_tasks_run_does():
    task = get_task("summarize")
    examples = make_splits(task, {"train": 200, "validation": 1, "test": 1}, seed=0)["train"]
    batch = [e for e in examples if e.flaws][:4]
    tokenizer = Tokenizer.train(training_texts(task, examples), 512)
    default = example.walk_through(task, batch, tokenizer)[1]
    praise = example.guards.PRAISE["summarize"]
    assert default == example.walk_through(task, batch, tokenizer, praise=praise)[1]
    other = {"token": "phrase", "phrase": "token"}[praise]
    assert default != example.walk_through(task, batch, tokenizer, praise=other)[1]


@pytest.mark.parametrize("argv,task_name", [([], "facts"), (["--task", "summarize"], "summarize")])
def test_command_shows_the_first_flawed_demonstration_and_its_critique(capsys, argv, task_name):
    example.main(argv)
    out = capsys.readouterr().out
    task = get_task(task_name)
    examples = make_splits(task, {"train": 400, "validation": 1, "test": 1}, seed=0)["train"]
    shown = next(e for e in examples if e.flaws)
    assert f"response:  {shown.demonstration}\n" in out
    assert f"critique:  {task.critique(shown, shown.demonstration)['textual_feedback']}\n" in out
    assert out.count("'<|eos|>'") == 1
