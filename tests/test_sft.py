"""SFT: the loss sees exactly the response tokens, checkpoints round-trip, and a tiny run memorises."""
import pytest
import torch

import sft
from experiments import checkpoint, protocol
from data import Example
from data.tokenizer import Tokenizer
from model import GPT, GPTConfig

EXAMPLES = [Example(f"question {i}", "", f"answer {i % 3} {'yes' if i % 2 else 'no'}") for i in range(8)]


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.train([t for e in EXAMPLES for t in (e.prompt, e.demonstration)] * 5, vocab_size=300)


def test_sft_batch_masks_prompt_and_padding(tokenizer):
    # an SFT batch: one turn per example, <|bos|> prompt <|response|> demonstration <|eos|>
    examples = [Example("a b c", "", "x"), Example("a", "", "x y z")]
    inputs, targets, loss_mask = sft.document_batch(tokenizer, [[(e.prompt, e.demonstration)] for e in examples], "cpu")
    for i, e in enumerate(examples):
        prompt = [tokenizer.bos_id, *tokenizer.encode(e.prompt), tokenizer.response_id]
        response = [*tokenizer.encode(e.demonstration), tokenizer.eos_id]
        # the supervised targets are exactly the response and its EOS, in order
        assert targets[i][loss_mask[i].bool()].tolist() == response
        # the inputs are the sequence shifted by one; padding is never a target
        assert inputs[i, :len(prompt) + len(response) - 1].tolist() == (prompt + response)[:-1]
        assert loss_mask[i, len(prompt) + len(response) - 1:].sum() == 0


def test_document_batch_supervises_every_answer_and_drops_turns_that_do_not_fit(tokenizer):
    turns = [("question 1", "answer 1 yes"), ("question 2", "answer 2 no"), ("question 3", "answer 0 yes")]
    enc = tokenizer.encode
    # the sequence, written out by hand: <bos> text <response> answer <eos>, turn after turn
    row = [tokenizer.bos_id]
    answers = []
    for text, answer in turns:
        row += enc(text) + [tokenizer.response_id]
        answers.append(enc(answer) + [tokenizer.eos_id])
        row += answers[-1]
    inputs, targets, loss_mask = sft.document_batch(tokenizer, [turns, turns[:1]], "cpu")
    assert inputs[0].tolist() == row[:-1] and targets[0].tolist() == row[1:]
    assert targets[0][loss_mask[0].bool()].tolist() == sum(answers, [])  # every answer and its EOS, nothing else
    assert targets[1][loss_mask[1].bool()].tolist() == answers[0]
    # a row keeps the whole turns that fit: two turns end at 2 * len(row) / 3 tokens here
    two = 1 + sum(len(enc(t)) + 1 + len(a) for (t, _), a in zip(turns[:2], answers[:2]))
    inputs, targets, loss_mask = sft.document_batch(tokenizer, [turns], "cpu", max_len=two)
    assert inputs.shape[1] == two - 1 and targets[0][loss_mask[0].bool()].tolist() == answers[0] + answers[1]
    # the first turn is kept whatever its length (the model raises if it exceeds block_size)
    assert sft.document_batch(tokenizer, [turns], "cpu", max_len=3)[2].sum() == len(answers[0])


def test_checkpoint_round_trip(tmp_path, tokenizer):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=32, n_layer=1, n_head=2, n_embd=16))
    path = tmp_path / "m.pt"
    checkpoint.save_checkpoint(path, model, tokenizer, step=7)
    loaded, loaded_tokenizer, step = checkpoint.load_checkpoint(path)
    idx = torch.randint(0, tokenizer.vocab_size, (2, 10))
    assert step == 7 and loaded_tokenizer.encode("answer 2") == tokenizer.encode("answer 2")
    assert torch.equal(loaded(idx)[1], model(idx)[1])
    assert not (tmp_path / "m.pt.tmp").exists()


def test_tiny_sft_memorises_demonstrations(tokenizer):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=96, n_layer=2, n_head=2, n_embd=32))
    losses, _ = sft.train_sft(model, tokenizer, EXAMPLES, steps=150, batch_size=8, lr=1e-2, device="cpu", seed=0)
    assert losses[-1] < 0.05 < losses[0]
    responses, _ = sft.respond(model, tokenizer, [e.prompt for e in EXAMPLES])
    assert responses == [e.demonstration for e in EXAMPLES]


@pytest.mark.parametrize("device", ["cuda:99", "tpu7"])
def test_unavailable_device_is_a_clear_error(capsys, device):
    # cuda:99 is missing on a CPU machine and on any machine with fewer than 100 GPUs
    with pytest.raises(SystemExit) as exit_info:
        protocol.main(["--device", device, "--out", "unused"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"text2grad: error: --device {device} ") and "\n" not in err
