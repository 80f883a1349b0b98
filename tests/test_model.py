"""model.py against independent computations: full recompute, unpadded runs, an fp64 log-softmax."""
import pytest
import torch

import model as model_module
from model import GPT, Canon, GPTConfig, KVCache, generate, left_pad, token_logprobs

PAD, EOS = 0, 2


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=40, block_size=64, n_layer=2, n_head=2, n_embd=32)).eval()


def test_kv_cache_logits_equal_full_recompute(model):
    idx = torch.randint(3, 40, (2, 20))
    _, full = model(idx)
    cache = KVCache(model.config, 2, 20, "cpu")
    chunks = [model(idx[:, :7], cache=cache)[1]]            # prefill 7 tokens at once
    for t in range(7, 20):                                   # then one token at a time
        chunks.append(model(idx[:, t:t + 1], cache=cache)[1])
    torch.testing.assert_close(torch.cat(chunks, 1), full, atol=1e-5, rtol=0)


def test_canon_layer_is_a_causal_mix_of_the_last_k_positions_per_channel():
    # out[b, t, c] = h[b, t, c] + sum_{o < k} w[c, o] h[b, t - o, c], h before the first token = 0,
    # with w[c, o] stored at weight[c, 0, k - 1 - o]: a naive loop in float64
    torch.manual_seed(1)
    canon = Canon(n_embd=3, k=4)
    h = torch.randn(2, 6, 3)
    out = canon(h).double()
    w, hd = canon.weight.detach().double(), h.double()
    expected = hd.clone()
    for b in range(2):
        for t in range(6):
            for c in range(3):
                expected[b, t, c] += sum(w[c, 0, 3 - o] * hd[b, t - o, c] for o in range(4) if t - o >= 0)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    # a padded position (token_mask 0) feeds nothing: its input is taken as 0
    mask = torch.ones(2, 6, 1)
    mask[0, 2] = 0
    h0 = h.clone()
    h0[0, 2] = 0
    torch.testing.assert_close(canon(h, token_mask=mask)[0, 3:], canon(h0)[0, 3:])


def test_padded_batch_matches_unpadded_runs(model):
    sequences = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16]]
    idx, mask = left_pad(sequences, PAD)
    _, logits = model(idx, mask)
    for i, s in enumerate(sequences):
        _, alone = model(torch.tensor([s]))
        torch.testing.assert_close(logits[i, -len(s):], alone[0], atol=1e-5, rtol=0)
    # right padding without a mask: causal attention already keeps pads out of earlier positions
    right = torch.tensor([s + [PAD] * (6 - len(s)) for s in sequences])
    _, logits = model(right)
    for i, s in enumerate(sequences):
        torch.testing.assert_close(logits[i, :len(s)], model(torch.tensor([s]))[1][0], atol=1e-5, rtol=0)


def test_token_logprobs_match_fp64_log_softmax():
    logits = torch.randn(3, 5, 50) * 4
    targets = torch.randint(0, 50, (3, 5))
    for temperature in (1.0, 0.7):
        expected = torch.log_softmax(logits.double() / temperature, -1).gather(-1, targets[..., None])[..., 0]
        torch.testing.assert_close(token_logprobs(logits, targets, temperature).double(), expected,
                                   atol=1e-5, rtol=0)


@pytest.mark.parametrize("min_new_tokens", [0, 4])
def test_sampler_logprobs_equal_training_path(model, min_new_tokens):
    """The policy's own log-probs, also where min_new_tokens kept the sampler from drawing the EOS."""
    prompts = [[1, 5, 6, 7, 3], [1, 8, 3], [1, 9, 9, 9, 9, 9, 9, 3]]
    generator = torch.Generator().manual_seed(1)
    tokens, logprobs, mask = generate(model, prompts, 12, EOS, PAD, temperature=0.7, generator=generator,
                                      with_logprobs=True, min_new_tokens=min_new_tokens)
    # training path: one forward over prompt + response, left-padded prompts, no cache
    idx, prompt_mask = left_pad(prompts, PAD)
    _, logits = model(torch.cat([idx, tokens], 1), torch.cat([prompt_mask, mask], 1))
    P = idx.shape[1]
    recomputed = token_logprobs(logits[:, P - 1:-1], tokens, 0.7) * mask
    torch.testing.assert_close(logprobs, recomputed, atol=1e-5, rtol=0)


def test_sampling_stops_at_eos_per_sequence():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=6, block_size=64, n_layer=1, n_head=1, n_embd=8)).eval()
    tokens, _, mask = generate(model, [[1, 3]] * 16, 30, EOS, PAD, generator=torch.Generator().manual_seed(0))
    finished_early = 0
    for row, m in zip(tokens.tolist(), mask.tolist()):
        n = row.index(EOS) + 1 if EOS in row else len(row)
        assert m == [1] * n + [0] * (len(row) - n)      # real tokens up to and including the EOS
        assert row[n:] == [PAD] * (len(row) - n)        # padding after it
        finished_early += n < len(row)
    assert finished_early > 0


def test_asking_all_done_less_often_changes_nothing(monkeypatch):
    # on a GPU generate asks "all done?" every 8 tokens, then cuts the columns past the longest response
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=6, block_size=64, n_layer=1, n_head=1, n_embd=8)).eval()
    every_token = generate(model, [[1, 3]] * 5, 30, EOS, PAD, generator=torch.Generator().manual_seed(3),
                           with_logprobs=True)
    longest = int(every_token[2].sum(1).max())
    assert longest % 8 and longest < 30  # the longest response ends between two checks
    for check_every in (3, 8, 64):
        monkeypatch.setitem(model_module.ALL_DONE_EVERY, "cpu", check_every)
        cut = generate(model, [[1, 3]] * 5, 30, EOS, PAD, generator=torch.Generator().manual_seed(3),
                       with_logprobs=True)
        for got, want in zip(cut, every_token):
            assert got.shape == (5, longest) and torch.equal(got, want)


def test_forward_is_float32_on_cpu():
    # bf16 autocast is for CUDA only: on CPU every run stays float32 and bit-exact
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=6, block_size=16, n_layer=1, n_head=1, n_embd=8))
    assert model.bf16 and model(torch.tensor([[1, 3, 4]]))[1].dtype == torch.float32


def test_greedy_equals_argmax_of_full_recompute(model):
    prompt = [1, 7, 8, 3]
    tokens, _, _ = generate(model, [prompt, [1, 4, 3]], 10, EOS, PAD, greedy=True)
    sequence = list(prompt)
    for _ in range(10):                                  # naive decoding: recompute everything
        sequence.append(int(model(torch.tensor([sequence]))[1][0, -1].argmax()))
        if sequence[-1] == EOS:
            break
    assert tokens[0, :len(sequence) - len(prompt)].tolist() == sequence[len(prompt):]


def test_sampling_draws_what_multinomial_draws_from_a_full_recompute(model):
    """generate samples without torch.multinomial (its argument check waits for the device every
    token); the draws must still be multinomial's, one for one, from the same generator state."""
    prompts, temperature = [[1, 7, 8, 3], [1, 4, 3, 9]], 0.7
    tokens, _, _ = generate(model, prompts, 12, eos_id=-1, pad_id=PAD, temperature=temperature,
                            generator=torch.Generator().manual_seed(5))
    generator, sequences = torch.Generator().manual_seed(5), torch.tensor(prompts)
    for _ in range(12):                                  # naive sampling: recompute everything
        probs = torch.softmax(model(sequences)[1][:, -1] / temperature, dim=-1)
        sequences = torch.cat([sequences, torch.multinomial(probs, 1, generator=generator)], 1)
    assert tokens.tolist() == sequences[:, 4:].tolist()


def test_too_long_sequence_is_a_clear_error(model):
    with pytest.raises(ValueError, match="block_size"):
        generate(model, [[1] * 60], 10, EOS, PAD)


def test_no_eos_before_min_new_tokens():
    # a model that ends at once: 100 added to its EOS logit everywhere, so every sampled and greedy
    # response ends at the first position where min_new_tokens allows it
    class EndsAtOnce(GPT):
        def forward(self, *args, **kwargs):
            hidden, logits = super().forward(*args, **kwargs)
            return hidden, logits + 100 * (torch.arange(logits.shape[-1]) == EOS)

    torch.manual_seed(0)
    model = EndsAtOnce(GPTConfig(vocab_size=6, block_size=64, n_layer=1, n_head=1, n_embd=8)).eval()
    for greedy in (True, False):
        ends = generate(model, [[1, 3]] * 8, 20, EOS, PAD, greedy=greedy,
                        generator=torch.Generator().manual_seed(0))[2].sum(1)
        assert ends.tolist() == [1] * 8  # unconstrained: the EOS first
        tokens, _, mask = generate(model, [[1, 3]] * 8, 20, EOS, PAD, greedy=greedy, min_new_tokens=5,
                                   generator=torch.Generator().manual_seed(0))
        assert mask.sum(1).tolist() == [6] * 8  # five tokens, then the EOS
        assert (tokens[:, :5] != EOS).all() and (tokens[:, 5] == EOS).all()


def test_auto_picks_cuda_then_mps_then_cpu(monkeypatch):
    # the device checks mocked: pick_device's choice, without the devices
    touched = []
    monkeypatch.setattr(torch, "zeros", lambda *args, device=None, **kw: touched.append(device))
    for cuda, mps, expected in ((True, True, "cuda"), (False, True, "mps"), (False, False, "cpu")):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
        assert model_module.pick_device("auto") == expected and touched[-1] == expected
    monkeypatch.undo()
    with pytest.raises(ValueError, match="--device tpu7 is not a device torch can use here"):
        model_module.pick_device("tpu7")


def test_bf16_autocast_only_where_the_device_supports_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kw: True)
    assert model_module.uses_bf16(torch.device("cuda"))
    assert not model_module.uses_bf16(torch.device("cpu"))
    assert not model_module.uses_bf16(torch.device("mps"))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kw: False)  # an older GPU
    assert not model_module.uses_bf16(torch.device("cuda"))
