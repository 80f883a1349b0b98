"""loss.py against independent computations: an fp64 log-softmax, a token-by-token fp64 loop, hand-worked
losses and statistics (padding holding large values too), and the eager path for the compiled one."""
import math

import pytest
import torch

import loss
from test_ppo import ragged_mask


def test_logprobs_and_entropy_match_fp64_log_softmax():
    torch.manual_seed(4)
    logits, targets = torch.randn(3, 5, 50) * 4, torch.randint(0, 50, (3, 5))
    logprobs, entropy = loss.logprobs_and_entropy(logits, targets, 0.7)
    full = torch.log_softmax(logits.double() / 0.7, -1)
    torch.testing.assert_close(logprobs.double(), full.gather(-1, targets[..., None]).squeeze(-1), atol=1e-5, rtol=0)
    torch.testing.assert_close(entropy.double(), -(full.exp() * full).sum(-1), atol=1e-5, rtol=0)


def naive_ppo_loss(logits, values, targets, mask, old_logprobs, old_values, advantages, returns, clip, value_clip, value_coef):
    """The objective written token by token in fp64."""
    terms, value_terms, n = 0.0, 0.0, 0
    for b in range(logits.shape[0]):
        for t in range(logits.shape[1]):
            if mask[b, t] == 0:
                continue
            logp = torch.log_softmax(logits[b, t].double(), -1)[targets[b, t]]
            ratio = torch.exp(logp - old_logprobs[b, t].double())
            A = advantages[b, t].double()
            terms = terms + max(-A * ratio, -A * min(max(ratio, 1 - clip), 1 + clip))
            v, v_old, R = values[b, t].double(), old_values[b, t].double(), returns[b, t].double()
            v_clipped = v_old + min(max(v - v_old, -value_clip), value_clip)
            value_terms = value_terms + max((v - R) ** 2, (v_clipped - R) ** 2)
            n += 1
    return terms / n + value_coef * 0.5 * value_terms / n


def loss_inputs(B, N, V, seed):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(B, N, V, generator=g) * 2).requires_grad_()
    values = torch.randn(B, N, generator=g).requires_grad_()
    targets = torch.randint(0, V, (B, N), generator=g)
    mask = ragged_mask(torch.randint(1, N + 1, (B,), generator=g).tolist(), N)
    # old log-probs near the current ones, so some ratios clip and some do not
    old = torch.log_softmax(logits.detach(), -1).gather(-1, targets[..., None]).squeeze(-1) + \
        0.3 * torch.randn(B, N, generator=g)
    old_values = values.detach() + 0.3 * torch.randn(B, N, generator=g)
    return logits, values, targets, mask, old, old_values, torch.randn(B, N, generator=g), torch.randn(B, N, generator=g)


def test_ppo_loss_matches_token_by_token_fp64():
    inputs = loss_inputs(3, 6, 20, seed=5)
    objective, stats = loss.ppo_loss(*inputs, *map(torch.tensor, (1.0, 0.2, 0.2, 0.1, 0.0)))
    expected = naive_ppo_loss(*inputs, 0.2, 0.2, 0.1)
    assert objective.item() == pytest.approx(expected.item(), abs=1e-5)
    assert 0 < stats["clip_fraction"] < 1  # the example exercises both branches


def test_entropy_bonus_is_the_mean_entropy_over_real_tokens():
    logits, *rest = loss_inputs(3, 6, 20, seed=6)
    without = loss.ppo_loss(logits, *rest, *map(torch.tensor, (1.0, 0.2, 0.2, 0.1, 0.0)))[0]
    bonus = loss.ppo_loss(logits, *rest, *map(torch.tensor, (1.0, 0.2, 0.2, 0.1, 0.25)))[0]
    mask = rest[2]
    p = torch.softmax(logits.double(), -1)
    entropy = -(p * torch.log(p)).sum(-1)  # fp64, from the full distribution
    expected = (entropy * mask).sum() / mask.sum()
    assert (without - bonus).item() == pytest.approx(0.25 * expected.item(), abs=1e-6)


def assert_compiled_matches_eager(eager_inputs, compiled_inputs, coefficients, **grad_tolerance):
    """The compiled loss path against the eager one on copies of the same inputs: the loss, its
    statistics, and the gradients w.r.t. logits and values. Returns the eager loss."""
    eager, eager_stats = loss.ppo_loss(*eager_inputs, *coefficients)
    compiled, compiled_stats = loss.compiled(loss.ppo_loss)(*compiled_inputs, *coefficients)
    eager.backward()
    compiled.backward()
    torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(compiled_stats, eager_stats, atol=1e-5, rtol=1e-5)
    for a, b in zip(compiled_inputs[:2], eager_inputs[:2]):
        torch.testing.assert_close(a.grad, b.grad, **grad_tolerance)
    return eager


@pytest.mark.slow
def test_compiled_loss_equals_eager_and_never_recompiles():
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()  # reset() leaves the counters of earlier compiles in this process
    # new response lengths, batch sizes and coefficients: one graph for all of them
    for k, (B, N, clip) in enumerate([(4, 9, 0.2), (3, 17, 0.1), (5, 6, 0.3), (4, 30, 0.2)]):
        coefficients = [torch.tensor(c) for c in (0.9, clip, 0.2, 0.1, 0.01)]
        eager_inputs, compiled_inputs = loss_inputs(B, N, 64, seed=k), loss_inputs(B, N, 64, seed=k)
        assert_compiled_matches_eager(eager_inputs, compiled_inputs, coefficients, atol=1e-6, rtol=1e-4)
        logits, targets = eager_inputs[0].detach(), eager_inputs[2]
        for got, want in zip(loss.compiled(loss.logprobs_and_entropy)(logits, targets, coefficients[0]),
                             loss.logprobs_and_entropy(logits, targets, coefficients[0])):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert counters["stats"]["unique_graphs"] == 2  # the loss and the rollout path, each compiled once


# ---------------------------------------------------------------------------------------------
# Rollouts and updates

def value_loss_only(values, old_values, returns, value_clip):
    """loss.clipped_losses with the policy terms switched off (advantages 0): its value_loss stat."""
    ones = torch.ones_like(values)
    _, stats = loss.clipped_losses(torch.zeros_like(values), torch.zeros_like(values), values, ones,
                                  torch.zeros_like(values), old_values, torch.zeros_like(values), returns,
                                  *map(torch.tensor, (0.2, value_clip, 1.0, 0.0)))
    return stats["value_loss"].item(), stats["value_clip_fraction"].item()


def test_value_loss_hand_worked_with_and_without_the_clip():
    # one token: V_old 0, V 1, R 10, value clip 0.2. Unclipped (V - R)^2 = 81; clipped V is
    # 0 + clip(1 - 0, -0.2, 0.2) = 0.2, (0.2 - 10)^2 = 96.04; the max is 96.04, loss 0.5 * 96.04
    values, old, returns = torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([[10.0]])
    loss, clipped = value_loss_only(values, old, returns, 0.2)
    assert loss == pytest.approx(48.02) and clipped == 1.0
    # no clip (+inf, what value_clip None becomes): 0.5 * 81
    loss, clipped = value_loss_only(values, old, returns, math.inf)
    assert loss == pytest.approx(40.5) and clipped == 0.0
    # V within the clip of V_old: the clip does not engage, (0.1 - 1)^2 = 0.81 either way
    loss, clipped = value_loss_only(torch.tensor([[0.1]]), old, torch.tensor([[1.0]]), 0.2)
    assert loss == pytest.approx(0.405) and clipped == 0.0
    # V overshoots R inside a tight clip: unclipped (3 - 2)^2 = 1, clipped V = 0.2, (0.2 - 2)^2 = 3.24 -> 1.62
    loss, _ = value_loss_only(torch.tensor([[3.0]]), old, torch.tensor([[2.0]]), 0.2)
    assert loss == pytest.approx(1.62)


LOSS_COEFFICIENTS = tuple(map(torch.tensor, (0.2, 0.2, 0.5, 0.1)))  # clip, value_clip, value_coef, entropy_coef


def test_clipped_losses_ignore_large_values_in_the_padding():
    # one real token: rho = exp(0 - 0) = 1, A = 2: L_pi = -2; V = V_old = 1, R = 3: L_V = 0.5 * 4 = 2;
    # H = 0.5. loss = -2 + 0.5 * 2 - 0.1 * 0.5 = -1.05. The padding token holds +-1e4 in every input:
    # its log-ratio 1e4 overflows exp unless the mask is applied to the log-ratio first
    mask = torch.tensor([[1.0, 0.0]])
    logprobs = torch.tensor([[0.0, 1e4]], requires_grad=True)
    entropy = torch.tensor([[0.5, 1e4]])
    values = torch.tensor([[1.0, 1e4]], requires_grad=True)
    old_logprobs, old_values = torch.tensor([[0.0, -1e4]]), torch.tensor([[1.0, -1e4]])
    advantages, returns = torch.tensor([[2.0, -1e4]]), torch.tensor([[3.0, -1e4]])
    objective, stats = loss.clipped_losses(logprobs, entropy, values, mask, old_logprobs, old_values,
                                           advantages, returns, *LOSS_COEFFICIENTS)
    assert objective.item() == pytest.approx(-1.05, abs=1e-6)
    expected = {"policy_loss": -2.0, "value_loss": 2.0, "entropy": 0.5, "approx_kl": 0.0,
                "clip_fraction": 0.0, "value_clip_fraction": 0.0, "ratio": 1.0}
    assert {k: v.item() for k, v in stats.items()} == pytest.approx(expected, abs=1e-6)
    objective.backward()  # and no NaN or inf comes back from the padding through the gradient
    assert torch.isfinite(logprobs.grad).all() and logprobs.grad[0, 1] == 0
    assert torch.isfinite(values.grad).all() and values.grad[0, 1] == 0


def test_clipped_losses_statistics_hand_worked():
    # three real tokens and a padding one (junk there, moderate: 3.0 or 7.0)
    #   log rho = 0, ln 1.5, ln 0.9 (rho 1, 1.5, 0.9), A = 1, 1, -1, clip 0.2:
    #     max(-1, -1) = -1;  max(-1.5, -1.2) = -1.2;  max(0.9, 0.9) = 0.9   -> L_pi = -1.3 / 3
    #     |rho - 1| > 0.2 on the second token only                          -> clip_fraction 1/3
    #     (rho - 1) - log rho = 0, 0.5 - ln 1.5, -0.1 - ln 0.9                -> approx_kl their mean
    #   V = 1, 0.5, 0; V_old = 1, 0, 0; R = 2, 0, 1; value_clip 0.2:
    #     max(1, 1) = 1;  V~ = 0.2: max(0.25, 0.04) = 0.25;  max(1, 1) = 1    -> L_V = 0.5 * 2.25 / 3
    #     |V - V_old| > 0.2 on the second token only                        -> value_clip_fraction 1/3
    #   H = 0.3, 0.6, 0.9 -> 0.6;  loss = L_pi + 0.5 L_V - 0.1 * 0.6
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    logprobs = torch.tensor([[0.0, math.log(1.5), math.log(0.9), 3.0]], requires_grad=True)
    entropy = torch.tensor([[0.3, 0.6, 0.9, 7.0]], requires_grad=True)
    values = torch.tensor([[1.0, 0.5, 0.0, 7.0]], requires_grad=True)
    old_logprobs, old_values = torch.zeros(1, 4), torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    advantages, returns = torch.tensor([[1.0, 1.0, -1.0, 3.0]]), torch.tensor([[2.0, 0.0, 1.0, 3.0]])
    objective, stats = loss.clipped_losses(logprobs, entropy, values, mask, old_logprobs, old_values,
                                           advantages, returns, *LOSS_COEFFICIENTS)
    policy_loss, value_loss = -1.3 / 3, 0.5 * 2.25 / 3
    expected = {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": 0.6,
                "approx_kl": (0.5 - math.log(1.5) - 0.1 - math.log(0.9)) / 3,
                "clip_fraction": 1 / 3, "value_clip_fraction": 1 / 3, "ratio": (1 + 1.5 + 0.9) / 3}
    assert set(stats) == set(expected)
    assert all(v.dim() == 0 and not v.requires_grad for v in stats.values())  # detached 0-d tensors
    assert {k: v.item() for k, v in stats.items()} == pytest.approx(expected, abs=1e-6)
    assert objective.item() == pytest.approx(policy_loss + 0.5 * value_loss - 0.1 * 0.6, abs=1e-6)
