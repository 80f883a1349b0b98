"""The prompt-only baseline (experiments/revise.py): the revision layout by hand, the targets right by each
task's own metric, the critique cut to the block, and a revised answer scored as any other answer."""
import pytest
import torch

from data import get_task, make_splits
from data.annotations import annotate
from data.tokenizer import Tokenizer, training_texts
from experiments import revise
from model import GPT, GPTConfig
from sft import MAX_NEW_TOKENS, evaluate


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.train(["the cat sat on the mat", "fix the mat", "a dog"] * 20, vocab_size=300)


def test_revision_layout_by_hand(tokenizer):
    t = tokenizer
    prompt, answer, critique, revision = "the cat", t.encode("sat on"), "fix the mat", "the mat"
    context = revise.context(t, prompt, answer, critique, block_size=256)
    assert context == [t.bos_id, *t.encode(prompt), t.response_id, *answer, t.critique_id, *t.encode(critique),
                       t.response_id]
    inputs, targets, loss_mask = revise.revision_batch(t, [(prompt, answer, critique, revision),
                                                           ("a dog", [], "", "a")], 256, "cpu")
    row = context + t.encode(revision) + [t.eos_id]
    assert inputs[0, :len(row) - 1].tolist() == row[:-1] and targets[0, :len(row) - 1].tolist() == row[1:]
    # the loss falls on the revision and its EOS: the targets after the context, nowhere else
    where = [i for i, m in enumerate(loss_mask[0].tolist()) if m]
    assert [targets[0, i].item() for i in where] == t.encode(revision) + [t.eos_id]
    assert where[0] == len(context) - 1  # the second <|response|> predicts the revision's first token
    short = [t.bos_id, *t.encode("a dog"), t.response_id, t.critique_id, t.response_id]
    assert loss_mask[1].sum().item() == len(t.encode("a")) + 1 and loss_mask[1, :len(short) - 1].sum() == 0
    assert loss_mask[1, len(short) - 1 + len(t.encode("a")) + 1:].sum() == 0  # padding: no loss


def test_the_critique_is_cut_to_fit_the_block(tokenizer):
    t = tokenizer
    long = " ".join(["fix the mat"] * 40)
    head = len(t.prompt("the cat")) + 2 + 1  # answer "sat", <|critique|>, then <|response|>
    block = head + MAX_NEW_TOKENS + 5
    context = revise.context(t, "the cat", t.encode("sat"), long, block_size=block)
    assert len(context) + MAX_NEW_TOKENS == block and context[-1] == t.response_id
    assert context[head - 1:-1] == t.encode(long)[:5]  # its beginning kept
    with pytest.raises(ValueError, match="no room to revise"):
        revise.context(t, "the cat", t.encode("sat on the mat " * 30), "", block_size=MAX_NEW_TOKENS + 10)


@pytest.mark.parametrize("name", ["summarize", "code", "qa"])
def test_every_revision_target_is_right_by_the_tasks_metric(name):
    task = get_task(name)
    examples = make_splits(task, {"train": 60, "validation": 1, "test": 1}, seed=3)["train"]
    tokenizer = Tokenizer.train(training_texts(task, examples), 512)
    records = annotate(task, examples, [e.demonstration for e in examples])  # as the run annotates its samples
    turns = revise.revision_turns(task, tokenizer, records, examples)
    assert len(turns) == len(examples)
    by_prompt = {e.prompt: e for e in examples}
    for prompt, answer, critique, target in turns:
        example = by_prompt[prompt]
        assert tokenizer.decode(answer) == example.demonstration and critique == task.critique(
            example, example.demonstration)["textual_feedback"]
        assert task.metrics(example, target)[task.PRIMARY] == pytest.approx(1.0)
    assert any(task.metrics(by_prompt[p], tokenizer.decode(a))[task.PRIMARY] < 1 for p, a, _, _ in turns)


def test_a_revised_answer_is_scored_as_any_other(tokenizer):
    # revise.answer and revise.score on plain prompts give what sft.evaluate gives the same policy
    task = get_task("qa")
    examples = make_splits(task, {"train": 40, "validation": 1, "test": 12}, seed=0)["test"]
    tok = Tokenizer.train(training_texts(task, examples), 400)
    torch.manual_seed(0)
    policy = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=256, n_layer=1, n_head=2, n_embd=32)).eval()
    ids, generated = revise.answer(policy, tok, [tok.prompt(e.prompt) for e in examples])
    summary, _, expected_ids = evaluate(task, policy, tok, examples)
    assert ids == expected_ids
    # the tokens generated: the answer and its EOS, or MAX_NEW_TOKENS when it was cut without one
    assert generated == [len(i) + 1 if len(i) < MAX_NEW_TOKENS else MAX_NEW_TOKENS for i in ids]
    assert sum(revise.score(task, tok, examples, ids)) / len(examples) == pytest.approx(summary[task.PRIMARY])


def test_like_for_like_turns_take_a_better_own_answer_by_the_critic(tokenizer):
    t = tokenizer
    # p1: "the cat sat" blamed (one phrase), "the mat" passed: the blamed one is revised to the
    # passed one, the passed one kept as it is. p2: one blamed answer, nothing better: no turn.
    # p3: two blamed answers, one phrase each; "the cat" also praised (summed delta higher): the
    # other is revised to it, and it, blamed with nothing strictly better, makes no turn
    records = [{"prompt": "p1", "response": "the cat sat", "textual_feedback": "sat is wrong",
                "good_spans": [], "poor_spans": ["sat"]},
               {"prompt": "p1", "response": "the mat", "textual_feedback": "good",
                "good_spans": ["the mat"], "poor_spans": []},
               {"prompt": "p2", "response": "a dog", "textual_feedback": "dog is wrong",
                "good_spans": [], "poor_spans": ["dog"]},
               {"prompt": "p3", "response": "fix the mat", "textual_feedback": "fix is wrong",
                "good_spans": [], "poor_spans": ["fix"]},
               {"prompt": "p3", "response": "the cat", "textual_feedback": "cat is wrong, the is right",
                "good_spans": ["the"], "poor_spans": ["cat"]}]
    summed = lambda r: sum(revise.align(r["response"], t.offsets(t.encode(r["response"])), r)[0])
    assert summed(records[3]) < summed(records[4])  # what the tie of one blamed phrase each is broken by
    assert [revise.verdict(t, r)[0] for r in records] == [-1, 0, -1, -1, -1]
    turns = revise.best_of_own_turns(t, records)
    assert [(p, t.decode(a), c, target) for p, a, c, target in turns] == [
        ("p1", "the cat sat", "sat is wrong", "the mat"), ("p1", "the mat", "good", "the mat"),
        ("p3", "fix the mat", "fix is wrong", "the cat")]
    # fewer blamed phrases win over a higher summed delta
    praised = dict(records[0], good_spans=["the cat"], response="the cat sat")
    clean = dict(records[1], good_spans=[])
    assert revise.best_of_own_turns(t, [praised, clean])[0][3] == "the mat"
