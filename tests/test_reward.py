"""reward.py: what the losses see, where the labels sit, and that a tiny model memorises its data."""
import math
import re

import pytest
import torch
import torch.nn.functional as F

import guards
from experiments import checkpoint
from data.tokenizer import Tokenizer
from experiments.terminal import colour_tokens
from model import GPT, GPTConfig
from experiments.measures import span_details
from reward import IGNORE, RewardModel, collate, encode_record, layout, scalar_targets, span_metrics, train_reward_model
from sft import MAX_NEW_TOKENS

RECORDS = [
    {"prompt": "Where does Omar live?", "response": "Omar lives in Rome. He is tall.",
     "textual_feedback": "Wrong city: Oslo. The height is not in the passage.",
     "good_spans": ["Omar"], "poor_spans": ["in Rome", "He is tall."]},
    {"prompt": "Where does Lena live?", "response": "Lena lives in Oslo.",
     "textual_feedback": "Correct.", "good_spans": ["in Oslo"], "poor_spans": []},
    {"prompt": "What is Ada's job?", "response": "Ada works as a pilot, and she sings.",
     "textual_feedback": "The job is right; the singing was not asked.",
     "good_spans": ["as a pilot"], "poor_spans": ["and she sings"]},
    {"prompt": "How many cats?", "response": "Seven cats.", "textual_feedback": "Off by one: six.",
     "good_spans": [], "poor_spans": ["Seven"]},
]


@pytest.fixture(scope="module")
def tokenizer():
    text = [t for r in RECORDS for t in (r["prompt"], r["response"], r["textual_feedback"])]
    return Tokenizer.train(text * 10, vocab_size=300)


@pytest.fixture(scope="module")
def items(tokenizer):
    return [encode_record(tokenizer, r)[0] for r in RECORDS]


def test_labels_cover_exactly_the_quoted_characters(tokenizer, items):
    """The tokens labelled -1 (+1) hold exactly the characters of the poor (good) phrases, whitespace
    aside; the phrases located with str.index, independently of align.py."""
    for record, item in zip(RECORDS, items):
        text = record["response"]
        assert item["response"] == tokenizer.encode(text)
        offsets = tokenizer.offsets(item["response"])
        for sign, key in ((-1, "poor_spans"), (1, "good_spans")):
            quoted = {c for phrase in record[key] for c in range(text.index(phrase), text.index(phrase) + len(phrase))
                      if not text[c].isspace()}
            labelled = {c for (start, end), d in zip(offsets, item["delta"]) if d == sign
                        for c in range(start, end) if not text[c].isspace()}
            assert labelled == quoted, (text, key)


@pytest.mark.parametrize("cot", [True, False])
def test_span_labels_sit_on_the_response_tokens_they_label(tokenizer, items, cot):
    """Off-by-one guard: wherever a span label is set, the token at that position is the response
    token it labels, in order, and (cot) that copy comes after the whole critique."""
    for item in items:
        ids, critique_targets, span_labels, _ = layout(tokenizer, item, "span", cot)
        positions = [t for t, label in enumerate(span_labels) if label != IGNORE]
        assert [ids[t] for t in positions] == item["response"]
        assert [span_labels[t] - 1 for t in positions] == item["delta"]
        if cot:
            assert positions[0] == ids.index(tokenizer.span_id) + 1
            targets = [(t, y) for t, y in enumerate(critique_targets) if y != IGNORE]
            # position t predicts token t+1: the critique, then the <|span|> that closes it
            assert [y for _, y in targets] == item["critique"] + [tokenizer.span_id]
            assert all(ids[t + 1] == y for t, y in targets)
            assert targets[0][0] == ids.index(tokenizer.critique_id)
        else:  # the same second copy of the response, with nothing but <|span|> before it
            n = len(item["response"])
            assert ids == [tokenizer.bos_id, *item["prompt"], tokenizer.response_id, *item["response"],
                           tokenizer.span_id, *item["response"]]
            assert positions == list(range(len(ids) - n, len(ids)))
            assert all(y == IGNORE for y in critique_targets)


def test_losses_see_only_their_positions(tokenizer, items):
    """The batched loss equals a naive loop over each sequence's own critique and span positions:
    prompt, critique (for the span loss) and padding positions contribute nothing."""
    torch.manual_seed(0)
    model = RewardModel(GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=128, n_layer=1, n_head=2,
                                      n_embd=16)), "span", cot=True)
    torch.nn.init.normal_(model.head.weight)
    model.class_weights.copy_(torch.tensor([2.0, 0.5, 1.5]))
    ids, critique_targets, span_labels, positions = collate(tokenizer, items, "span", True, "cpu")
    loss, parts = model.loss(ids, critique_targets, span_labels, positions)
    critique_nll, span_sum, span_weight = [], 0.0, 0.0
    for item in items:   # one unpadded sequence at a time
        seq, targets, labels, _ = layout(tokenizer, item, "span", True)
        hidden, logits = model.gpt(torch.tensor([seq]))
        for t in range(len(seq)):
            if targets[t] != IGNORE:
                critique_nll.append(-torch.log_softmax(logits[0, t], -1)[targets[t]])
            if labels[t] != IGNORE:
                w = model.class_weights[labels[t]]
                span_sum += -w * torch.log_softmax(model.head(hidden[0, t]), -1)[labels[t]]
                span_weight += w
    # the parts are 0-d tensors (no host wait while training): compare them as Python numbers
    critique, span = parts["critique"].item(), parts["span"].item()
    assert critique == pytest.approx(torch.stack(critique_nll).mean().item(), abs=1e-5)
    assert span == pytest.approx((span_sum / span_weight).item(), abs=1e-5)
    assert loss.item() == pytest.approx(critique + span, abs=1e-5)


def test_scalar_head_reads_the_eos(tokenizer, items):
    torch.manual_seed(0)
    model = RewardModel(GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=64, n_layer=1, n_head=2,
                                      n_embd=16)), "scalar")
    torch.nn.init.normal_(model.head.weight)
    ids, _, _, positions = collate(tokenizer, items, "scalar", False, "cpu")
    scores = torch.tensor([float(sum(item["delta"])) for item in items])
    _, parts = model.loss(ids, None, None, positions, scores)
    naive = []
    for item in items:
        seq = layout(tokenizer, item, "scalar", False)[0]
        assert seq[-1] == tokenizer.eos_id
        naive.append(model.head(model.gpt(torch.tensor([seq]))[0][0, -1]).squeeze())
    assert parts["score_mse"].item() == pytest.approx(F.mse_loss(torch.stack(naive), scores).item(), abs=1e-5)
    # the target is normalised by the training mean and std the model holds; predict() undoes it
    model.target_scale.copy_(torch.tensor([2.0, 4.0]))
    _, parts = model.loss(ids, None, None, positions, scores)
    assert parts["score_mse"].item() == pytest.approx(F.mse_loss(torch.stack(naive), (scores - 2) / 4).item(), abs=1e-5)
    predicted = model.predict(tokenizer, [r["prompt"] for r in RECORDS], [r["response"] for r in RECORDS])
    assert predicted == pytest.approx([4 * n.item() + 2 for n in naive], abs=1e-4)


def test_scalar_targets_are_what_the_critic_is_paid_on_the_last_token():
    sigmoid = lambda x: 1 / (1 + math.exp(-x))
    short = {"response": [5, 6, 7, 8, 5, 6], "delta": [1, 1, -1, 0, 1, 1]}  # a praised phrase said twice
    cut = {"response": list(range(MAX_NEW_TOKENS)), "delta": [1] * 3 + [-1] * 2 + [0] * (MAX_NEW_TOKENS - 5)}
    # per phrase: the first "5 6" shares +1, its repeat earns 0; blame -1 per token; the cut response keeps no praise
    phrase = scalar_targets([short, cut], guards.Guards(praise="phrase", cut_praise=True, praise_fade_at=None))
    assert phrase.tolist() == pytest.approx([1 - 1 + 0, -2])
    # per token, fading at position 2: praise at t counts sigmoid((2 - t) / 4); without cut_praise the cut one keeps it
    token = scalar_targets([short, cut], guards.Guards(praise="token", cut_praise=False, praise_fade_at=2))
    by_hand = [sum(sigmoid((2 - t) / 4) if d > 0 else d for t, d in enumerate(item["delta"])) for item in (short, cut)]
    assert token.tolist() == pytest.approx(by_hand, abs=1e-6)


def test_span_metrics_hand_worked():
    gold = [[1, 1, 0, -1, -1, 0], [0, -1, 0]]
    predicted = [[1, 0, 0, -1, -1, -1], [0, -1, 1]]
    m = {**span_metrics(predicted, gold), **span_details(predicted, gold)}
    # positive: 1 hit of 2 predicted and 2 gold -> P = R = 1/2
    assert (m["positive_precision"], m["positive_recall"], m["positive_f1"]) == pytest.approx((0.5, 0.5, 0.5))
    # negative: 3 hits, 4 predicted, 3 gold -> P 3/4, R 1, F 6/7
    assert (m["negative_precision"], m["negative_recall"], m["negative_f1"]) == pytest.approx((0.75, 1.0, 6 / 7))
    # gold runs: (0,2,+1), (3,5,-1), (1,2,-1); only the last is predicted with the same boundaries
    assert m["exact_span_match"] == pytest.approx(1 / 3)
    # by hand, rows gold -1/0/+1, columns predicted -1/0/+1, over the 9 token pairs
    assert m["confusion"] == [[3, 0, 0], [1, 2, 1], [0, 1, 1]]


def test_colouring_keeps_the_text(tokenizer):
    response = RECORDS[0]["response"]
    delta = encode_record(tokenizer, RECORDS[0])[0]["delta"]
    coloured = colour_tokens(tokenizer.pieces(tokenizer.encode(response)), delta)
    assert re.sub(r"\033\[[0-9;]*m", "", coloured) == response and "\033[41;97m" in coloured


@pytest.mark.parametrize("kind, cot", [("span", True), ("span", False), ("scalar", False)])
def test_tiny_reward_model_memorises_its_training_set(tokenizer, items, kind, cot):
    torch.manual_seed(0)
    raw = guards.Guards(praise="token", cut_praise=False, praise_fade_at=None)  # the scalar target: sum_t delta_t
    model = RewardModel(GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=128, n_layer=2, n_head=2,
                                      n_embd=48)), kind, cot, raw)
    losses = train_reward_model(model, tokenizer, items, steps=150, batch_size=4, lr=3e-3, device="cpu", seed=0)
    assert losses[-1] < 0.1 * losses[0]
    prompts, responses = [r["prompt"] for r in RECORDS], [r["response"] for r in RECORDS]
    if kind == "scalar":
        scores = model.predict(tokenizer, prompts, responses)
        assert scores == pytest.approx([sum(item["delta"]) for item in items], abs=0.3)
        return
    critiques, deltas = model.predict(tokenizer, prompts, responses)
    assert deltas == [item["delta"] for item in items]
    if cot:
        assert critiques == [r["textual_feedback"] for r in RECORDS]


def test_reward_checkpoint_round_trip(tmp_path, tokenizer, items):
    torch.manual_seed(0)
    model = RewardModel(GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=128, n_layer=1, n_head=2,
                                      n_embd=16)), "span", cot=False)
    torch.nn.init.normal_(model.head.weight)
    checkpoint.save_checkpoint(tmp_path / "rm.pt", model, tokenizer, 3, kind="span", cot=False)
    loaded, _, step = checkpoint.load_checkpoint(tmp_path / "rm.pt")
    prompts, responses = [r["prompt"] for r in RECORDS], [r["response"] for r in RECORDS]
    assert step == 3 and (loaded.kind, loaded.cot) == ("span", False)
    assert loaded.predict(tokenizer, prompts, responses) == model.eval().predict(tokenizer, prompts, responses)
    # a scalar model keeps its guards and its target's scale; a reward model saved without its guards
    # (before the scalar target summed through them) ends the run with one line
    shaping = guards.Guards(praise="token", cut_praise=False, praise_fade_at=7)
    scalar = RewardModel(GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=128, n_layer=1, n_head=2,
                                       n_embd=16)), "scalar", False, shaping)
    torch.nn.init.normal_(scalar.head.weight)
    scalar.target_scale.copy_(torch.tensor([-3.0, 2.5]))
    checkpoint.save_checkpoint(tmp_path / "scalar.pt", scalar, tokenizer, 5)
    loaded = checkpoint.load_checkpoint(tmp_path / "scalar.pt")[0]
    assert loaded.shaping == shaping and loaded.target_scale.tolist() == [-3.0, 2.5]
    assert loaded.predict(tokenizer, prompts, responses) == scalar.eval().predict(tokenizer, prompts, responses)
    old = torch.load(tmp_path / "scalar.pt", weights_only=True)
    del old["shaping"]
    torch.save(old, tmp_path / "old.pt")
    with pytest.raises(SystemExit):
        checkpoint.load_checkpoint(tmp_path / "old.pt")


def test_predict_splits_a_batch_whose_longest_prompt_and_response_do_not_fit_together(tokenizer):
    torch.manual_seed(0)
    model = RewardModel(GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=96, n_layer=1, n_head=2,
                                      n_embd=16)), "span", cot=True).eval()
    # alone: 96 - 66 - 2 - 4 = 24 and 96 - 46 - 2 - 40 = 8 tokens of room for the critique;
    # together: 96 - 66 - 2 - 40 < 0, which used to end in a ValueError
    prompts, responses = [[5] * 60, [5] * 4], [[6] * 4, [6] * 40]
    together = model.predict(tokenizer, prompts, responses)
    alone = [model.predict(tokenizer, [p], [r]) for p, r in zip(prompts, responses)]
    assert together == ([c for a in alone for c in a[0]], [d for a in alone for d in a[1]])
    assert [len(d) for d in together[1]] == [4, 40]
