"""The PPO stage's glue in text2grad.py: rewards land on the tokens the policy sampled."""
import pytest
import torch

import text2grad
from data import get_task, make_splits
from data.tokenizer import Tokenizer, training_texts


@pytest.fixture(scope="module")
def setup():
    task = get_task("summarize")
    splits = make_splits(task, {"train": 40, "validation": 5, "test": 5}, seed=0)
    tokenizer = Tokenizer.train(training_texts(task, splits), vocab_size=400)
    return task, splits["train"], tokenizer


def sampled(tokenizer, responses, N=120):
    """Rows as generate() returns them: response tokens, EOS, then padding."""
    tokens = torch.full((len(responses), N), tokenizer.pad_id)
    mask = torch.zeros(len(responses), N, dtype=torch.long)
    for i, r in enumerate(responses):
        ids = tokenizer.encode(r) + [tokenizer.eos_id]
        tokens[i, :len(ids)], mask[i, :len(ids)] = torch.tensor(ids), 1
    return tokens, mask


def test_oracle_reward_blames_exactly_the_tokens_inside_poor_spans(setup):
    task, examples, tokenizer = setup
    chosen = [i for i, e in enumerate(examples) if e.flaws][:4]
    responses = [examples[i].demonstration for i in chosen]
    tokens, mask = sampled(tokenizer, responses)
    scores = text2grad.reward_function("oracle", task, tokenizer, examples, {})(chosen, tokens, mask)
    blamed_any = False
    for row, (i, response) in enumerate(zip(chosen, responses)):
        poor = [(response.find(p), response.find(p) + len(p)) for p in task.critique(examples[i], response)["poor_spans"]]
        ids = tokenizer.encode(response)
        for t, (start, end) in enumerate(tokenizer.offsets(ids)):
            inside = any(s <= c < e for s, e in poor for c in range(start, end) if not response[c].isspace())
            assert (scores[row, t].item() == -1) == inside
            blamed_any |= inside
        assert scores[row, len(ids):].abs().sum() == 0  # EOS and padding carry nothing
    assert blamed_any


def test_scalar_reward_sits_on_the_eos(setup):
    task, examples, tokenizer = setup

    class CountingModel:  # a stand-in scalar reward model: score = prompt tokens + 1000 x response tokens
        def predict(self, tokenizer, prompts, responses):
            return [float(len(p) + 1000 * len(r)) for p, r in zip(prompts, responses)]

    indices = [5, 2]
    responses = [examples[5].demonstration, examples[2].demonstration[:10]]
    tokens, mask = sampled(tokenizer, responses)
    scores = text2grad.reward_function("scalar", task, tokenizer, examples, {"scalar": CountingModel()})(indices, tokens, mask)
    for row, (i, response) in enumerate(zip(indices, responses)):
        n = len(tokenizer.encode(response))
        expected = len(tokenizer.encode(examples[i].prompt)) + 1000 * n  # the right prompt, the response's own ids
        assert tokens[row, n] == tokenizer.eos_id
        assert scores[row, n].item() == expected and scores[row].abs().sum().item() == expected


def test_updates_to_match():
    curve = [[0, 0.5], [3, 0.7], [6, 0.9], [9, 0.85]]
    assert text2grad.updates_to_match(curve, 0.9) == 6
    assert text2grad.updates_to_match(curve, 0.95) is None
