"""The PPO stage's glue in text2grad.py: each method's reward lands where the 2x2 says, on the
tokens the policy sampled; critique truncation."""
import math

import pytest
import torch

import guards
import reward
import text2grad
from data import experiment_splits, get_task, make_splits
from data.tokenizer import Tokenizer, training_texts


@pytest.fixture(scope="module")
def setup():
    task = get_task("summarize")
    splits = make_splits(task, {"train": 40, "validation": 5, "test": 5}, seed=0)
    tokenizer = Tokenizer.train(training_texts(task, splits["train"]), vocab_size=400)
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
    last = text2grad.reward_function("oracle_scalar", task, tokenizer, examples, {})(chosen, tokens, mask)
    guarded = text2grad.reward_function("oracle_scalar", task, tokenizer, examples, {},
                                         guards.Guards(praise_fade_at=4, praise="token", cut_praise=False))(chosen, tokens, mask)
    blamed_any = False
    for row, (i, response) in enumerate(zip(chosen, responses)):
        poor = [(response.find(p), response.find(p) + len(p)) for p in task.critique(examples[i], response)["poor_spans"]]
        ids = tokenizer.encode(response)
        for t, (start, end) in enumerate(tokenizer.offsets(ids)):
            inside = any(s <= c < e for s, e in poor for c in range(start, end) if not response[c].isspace())
            assert (scores[row, t].item() == -1) == inside
            blamed_any |= inside
        assert scores[row, len(ids):].abs().sum() == 0  # EOS and padding carry nothing
        # oracle_scalar: the same deltas, summed, all of it on the EOS (the last real token)
        good = [(response.find(p), response.find(p) + len(p)) for p in task.critique(examples[i], response)["good_spans"]]
        inside = lambda spans, start, end: any(s <= c < e for s, e in spans for c in range(start, end)
                                               if not response[c].isspace())
        total = sum(inside(good, start, end) - inside(poor, start, end) for start, end in tokenizer.offsets(ids))
        assert last[row, len(ids)].item() == total and last[row].abs().sum().item() == abs(total)
        # with the length guard, praise at position t counts sigmoid((4 - t) / 4), blame fully
        weighted = sum(inside(good, start, end) / (1 + math.exp(-(4 - t) / 4)) - inside(poor, start, end)
                       for t, (start, end) in enumerate(tokenizer.offsets(ids)))
        assert guarded[row, len(ids)].item() == pytest.approx(weighted, abs=1e-5)
    assert blamed_any


def test_scalar_reward_sits_on_the_eos(setup):
    task, examples, tokenizer = setup

    class CountingModel:  # a stand-in scalar reward model: score = prompt tokens + 1000 x response tokens
        def predict(self, tokenizer, prompts, responses):
            return [float(len(p) + 1000 * len(r)) for p, r in zip(prompts, responses)]

    indices = [5, 2]
    responses = [examples[5].demonstration, examples[2].demonstration[:10]]
    tokens, mask = sampled(tokenizer, responses)
    scores = text2grad.reward_function("ppo_scalar", task, tokenizer, examples, {"scalar": CountingModel()})(indices, tokens, mask)
    for row, (i, response) in enumerate(zip(indices, responses)):
        n = len(tokenizer.encode(response))
        expected = len(tokenizer.encode(examples[i].prompt)) + 1000 * n  # the right prompt, the response's own ids
        assert tokens[row, n] == tokenizer.eos_id
        assert scores[row, n].item() == expected and scores[row].abs().sum().item() == expected


class FixedSpans:
    """A stand-in span reward model: predict() returns the deltas it was given, per response."""
    def __init__(self, deltas):
        self.deltas = deltas

    def predict(self, tokenizer, prompts, responses):
        return ["a critique"] * len(responses), [self.deltas[len(r)] for r in responses]


def test_learned_span_rewards_land_on_every_token_with_the_length_guard(setup):
    task, examples, tokenizer = setup
    responses = [examples[0].demonstration, examples[1].demonstration]
    tokens, mask = sampled(tokenizer, responses)
    lengths = [len(tokenizer.encode(r)) for r in responses]
    deltas = {n: [(-1, 0, 1)[t % 3] for t in range(n)] for n in lengths}  # keyed by response length
    scores = text2grad.reward_function("text2grad", task, tokenizer, examples, {"cot": FixedSpans(deltas)},
                                       guards.Guards(praise_fade_at=4, praise="token", cut_praise=False))([0, 1], tokens, mask)
    for row, n in enumerate(lengths):
        for t in range(tokens.shape[1]):
            d = deltas[n][t] if t < n else 0  # the EOS and the padding carry nothing
            # praise fades past the limit: sigmoid((4 - t) / 4); blame never does
            expected = d / (1 + math.exp(-(4 - t) / 4)) if d > 0 else d
            assert scores[row, t].item() == pytest.approx(expected, abs=1e-6)


def test_text2grad_last_is_the_same_guarded_deltas_summed_onto_the_eos(setup):
    # ("cot", "last"): Text2Grad's own reward model, its guarded per-token scores summed by hand, all
    # of it on the EOS, nothing anywhere else: placement is the only change from text2grad
    task, examples, tokenizer = setup
    responses = [examples[3].demonstration, examples[4].demonstration[:12]]
    tokens, mask = sampled(tokenizer, responses)
    lengths = [len(tokenizer.encode(r)) for r in responses]
    deltas = {n: [(1, -1, 0, 1)[t % 4] for t in range(n)] for n in lengths}
    shaping = guards.Guards(praise_fade_at=4, praise="token", cut_praise=True)
    last = text2grad.reward_function("text2grad_last", task, tokenizer, examples, {"cot": FixedSpans(deltas)},
                                     shaping)([3, 4], tokens, mask)
    assert text2grad.METHODS["text2grad_last"] == ("cot", "last")
    for row, n in enumerate(lengths):
        total = sum(d / (1 + math.exp(-(4 - t) / 4)) if d > 0 else d for t, d in enumerate(deltas[n]))
        assert tokens[row, n] == tokenizer.eos_id
        assert last[row, n].item() == pytest.approx(total, abs=1e-5)
        assert last[row, :n].abs().sum() == 0 and last[row, n + 1:].abs().sum() == 0




def test_a_critique_too_long_for_the_block_is_cut_at_the_end(setup):
    task, examples, tokenizer = setup
    e = examples[0]
    record = {"prompt": e.prompt, "response": e.demonstration, **task.critique(e, e.demonstration)}
    P, R = len(tokenizer.encode(e.prompt)), len(tokenizer.encode(e.demonstration))
    C = len(tokenizer.encode(record["textual_feedback"]))
    full = 1 + P + 1 + R + 1 + C + 1 + R  # <|bos|> x <|response|> y <|critique|> c <|span|> y
    kept, items, counts = reward.encode_records(tokenizer, [record], block_size=full - 3)
    assert counts["critiques_truncated"] == 1 and len(kept) == 1
    assert items[0]["critique"] == tokenizer.encode(record["textual_feedback"])[:C - 3]
    kept, items, counts = reward.encode_records(tokenizer, [record], block_size=full)
    assert counts["critiques_truncated"] == 0 and items[0]["critique"] == tokenizer.encode(record["textual_feedback"])
    with pytest.raises(ValueError, match="more than the block size"):  # not even the prompt and response fit
        reward.encode_records(tokenizer, [record], block_size=full - C - 1)


def test_the_tokenizer_learns_from_the_training_split_only(setup):
    task = get_task("summarize")
    splits = make_splits(task, {"train": 40, "validation": 5, "test": 5}, seed=0)
    texts = set(training_texts(task, splits["train"]))
    held_out = {t for split in ("validation", "test") for e in splits[split] for t in (e.prompt, e.reference)}
    assert texts and not texts & held_out


def test_experiment_splits_share_one_pool():
    task = get_task("qa")
    preset = dict(train=30, annotated=50, demonstrations=120, validation=10, test=10)
    splits, pool = experiment_splits(task, preset, seed=3)
    held_out = {e.prompt for split in ("validation", "test") for e in splits[split]}
    assert len(pool) == 120 and not held_out & {e.prompt for e in pool}  # qa: no prompt in both, none dropped
    assert splits["train"] == pool[:30]  # PPO's prompts are the pool's first; the annotated are pool[:50]
    # the pool is one draw: its first 30 are what a 30-prompt draw gives (the same seed's generator)
    assert [e.prompt for e in pool[:30]] == [e.prompt for e in make_splits(task, {**preset, "train": 30}, 3)["train"]]
