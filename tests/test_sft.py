"""SFT: the loss sees exactly the response tokens, checkpoints round-trip, and a tiny run memorises."""
import pytest
import torch

import checkpoint
import sft
import text2grad
from data import Example
from data.tokenizer import Tokenizer
from model import GPT, GPTConfig

EXAMPLES = [Example(f"question {i}", "", f"answer {i % 3} {'yes' if i % 2 else 'no'}") for i in range(8)]


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.train([t for e in EXAMPLES for t in (e.prompt, e.demonstration)] * 5, vocab_size=300)


def test_sft_batch_masks_prompt_and_padding(tokenizer):
    examples = [Example("a b c", "", "x"), Example("a", "", "x y z")]
    inputs, targets, loss_mask = sft.sft_batch(tokenizer, examples, "cpu")
    for i, e in enumerate(examples):
        prompt = [tokenizer.bos_id, *tokenizer.encode(e.prompt), tokenizer.response_id]
        response = [*tokenizer.encode(e.demonstration), tokenizer.eos_id]
        # the supervised targets are exactly the response and its EOS, in order
        assert targets[i][loss_mask[i].bool()].tolist() == response
        # the inputs are the sequence shifted by one; padding is never a target
        assert inputs[i, :len(prompt) + len(response) - 1].tolist() == (prompt + response)[:-1]
        assert loss_mask[i, len(prompt) + len(response) - 1:].sum() == 0


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
        text2grad.main(["--device", device, "--out", "unused"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"text2grad: error: --device {device} ") and "\n" not in err
