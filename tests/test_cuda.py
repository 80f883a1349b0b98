"""The GPU path, skipped on a machine without CUDA. On one with it: python -m pytest -q tests/test_cuda.py

- the forward pass runs under bf16 autocast on CUDA, and in float32 when model.bf16 is False;
- the compiled loss path against the eager one, and both against a float64 loop, in bf16 and fp32;
- the sampler's log-probs (KV cache, one token at a time) against the trainer's (one full pass);
- a decode step replayed as a CUDA graph against the same step launched kernel by kernel;
- the tiny preset end to end on the GPU (one seed a task), with and without --compile.
"""
import json
import math

import pytest
import torch

import model as model_module
import ppo
import text2grad
from experiments import protocol
from model import GPT, GPTConfig, generate
from test_loss import assert_compiled_matches_eager, loss_inputs, naive_ppo_loss

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
CUDA = "cuda"
EOS, PAD = 2, 0
TEMPERATURE, CLIP, VALUE_CLIP, VALUE_COEF, ENTROPY_COEF = 1.0, 0.2, 0.2, 0.1, 0.0


@pytest.fixture
def full_fp32(monkeypatch):
    """float32 matmuls in full float32 (TF32 off), as on the CPU; pick_device turns TF32 on."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)


def small_gpt():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=64, block_size=64, n_layer=2, n_head=2, n_embd=64)).to(CUDA).eval()


def test_forward_is_bf16_on_cuda_unless_turned_off():
    gpt = small_gpt()
    ids = torch.randint(3, 64, (2, 10), device=CUDA)
    hidden, logits = gpt(ids)
    assert logits.dtype == torch.bfloat16 and hidden.dtype == torch.float32  # LayerNorm runs in float32
    gpt.bf16 = False
    assert gpt(ids)[1].dtype == torch.float32


def to_cuda(inputs, dtype):
    """loss_inputs on the GPU, the logits in `dtype`; logits and values are fresh leaves."""
    logits, values, *rest = inputs
    return [logits.detach().to(CUDA, dtype).requires_grad_(), values.detach().to(CUDA).requires_grad_(),
            *(x.to(CUDA) for x in rest)]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_loss_and_gradients_match_eager_and_float64(dtype, full_fp32):
    coefficients = [torch.tensor(c, device=CUDA) for c in (TEMPERATURE, CLIP, VALUE_CLIP, VALUE_COEF, ENTROPY_COEF)]
    for seed, (B, N, V) in enumerate([(3, 6, 20), (8, 33, 1024)]):
        inputs = loss_inputs(B, N, V, seed=seed)
        eager, compiled = to_cuda(inputs, dtype), to_cuda(inputs, dtype)
        # gradients within the default tolerances of their dtype
        eager_loss = assert_compiled_matches_eager(eager, compiled, coefficients)
        # a float64 loop over tokens, from the same logits (rounded to bf16 when dtype is bf16)
        reference = [x.detach().cpu().double() if x.is_floating_point() else x.cpu() for x in eager]
        reference[0].requires_grad_()
        reference[1].requires_grad_()
        expected = naive_ppo_loss(*reference, CLIP, VALUE_CLIP, VALUE_COEF)
        expected.backward()
        assert eager_loss.item() == pytest.approx(expected.item(), abs=1e-4)
        # the gradient is computed in float32 and rounded to the logits' dtype
        rtol = 1e-4 if dtype == torch.float32 else 2 ** -7
        torch.testing.assert_close(eager[0].grad.cpu().double(), reference[0].grad, atol=1e-7, rtol=rtol)
        torch.testing.assert_close(eager[1].grad.cpu().double(), reference[1].grad, atol=1e-7, rtol=1e-4)


@pytest.mark.parametrize("bf16", [False, True])
def test_sampler_logprobs_match_the_trainers(bf16, full_fp32):
    gpt = small_gpt()
    gpt.bf16 = bf16
    with torch.no_grad():  # make EOS likely (about 1 in 4 per token), so responses end at different lengths
        gpt.ln_f.bias.fill_(0.5)
        gpt.wte.weight[EOS].fill_(0.1)
    prompts = [[3 + (7 * i + j) % 60 for j in range(4 + i % 5)] for i in range(16)]  # 4-8 tokens: left padding
    tokens, logprobs, mask = generate(gpt, prompts, 32, EOS, PAD, generator=torch.Generator(CUDA).manual_seed(0),
                                      with_logprobs=True)
    # generate asks "all done?" every 8 tokens on CUDA, then cuts the columns past the longest response
    assert mask[:, -1].any() and (mask[:, 1:] <= mask[:, :-1]).all()
    assert mask.sum(1).min() < mask.shape[1]  # some responses ended early: the padding after EOS is exercised
    batch = ppo.score_responses(ppo.PolicyWithValue(gpt), gpt, prompts, tokens, mask, EOS, PAD,
                                ppo.PPOConfig(max_new_tokens=32))
    difference = (batch["logprobs"] - logprobs)[mask.bool()].abs()
    if bf16:  # two bf16 computations in different orders: close, not equal
        assert difference.max() < 0.1 and difference.mean() < 0.02
    else:
        assert difference.max() < 1e-4


@pytest.mark.parametrize("bf16", [False, True])
def test_the_recorded_decode_step_samples_what_the_launched_one_does(bf16, monkeypatch, full_fp32):
    """generate replays a CUDA graph of one decode step; launching the same kernels one by one
    (CUDA_GRAPHS False) must give the same tokens from the same generator, and the same
    log-probs to float32 rounding, with prompts of different lengths and early EOS."""
    gpt = small_gpt()
    gpt.bf16 = bf16
    with torch.no_grad():
        gpt.ln_f.bias.fill_(0.5)
        gpt.wte.weight[EOS].fill_(0.1)
    prompts = [[3 + (5 * i + j) % 60 for j in range(3 + i % 6)] for i in range(16)]
    runs = {}
    for graphs in (True, False):
        monkeypatch.setattr(model_module, "CUDA_GRAPHS", graphs)
        for greedy in (True, False):
            runs[graphs, greedy] = generate(gpt, prompts, 40, EOS, PAD, greedy=greedy, min_new_tokens=2,
                                            generator=torch.Generator(CUDA).manual_seed(0), with_logprobs=True)
    for greedy in (True, False):
        (tokens, logprobs, mask), (eager_tokens, eager_logprobs, eager_mask) = runs[True, greedy], runs[False, greedy]
        assert torch.equal(tokens, eager_tokens) and torch.equal(mask, eager_mask)
        torch.testing.assert_close(logprobs, eager_logprobs, atol=1e-5, rtol=0)
    mask = runs[True, False][2]  # sampled: some answers end early (greedy ones all end at once)
    assert mask.sum(1).min() < mask.shape[1]


def finished_runs(out, tasks):
    for task in tasks:
        results = json.loads((out / task / "results.json").read_text())
        assert results["device"] == CUDA
        for name in text2grad.METHODS:
            scores = results["methods"][name]["scores"]
            assert scores and all(0 <= s <= 1 for s in scores), (task, name, scores)
        for name in ("cot", "no_cot"):
            model = results["reward_model"][name]
            assert 0 <= model["positive_f1"] <= 1 and 0 <= model["negative_f1"] <= 1
            assert math.isfinite(model["final_loss"])


@pytest.mark.slow
def test_tiny_run_on_the_gpu(tmp_path):
    protocol.main(["--preset", "tiny", "--device", CUDA, "--task", "all", "--seeds", "1", "--out", str(tmp_path)])
    finished_runs(tmp_path, ("summarize", "code", "qa"))


@pytest.mark.slow
def test_tiny_run_on_the_gpu_compiled(tmp_path):
    protocol.main(["--preset", "tiny", "--device", CUDA, "--compile", "--task", "summarize", "--seeds", "1",
                    "--out", str(tmp_path)])
    finished_runs(tmp_path, ("summarize",))
