"""ppo.py and loss.py against independent computations: a per-sequence GAE loop, a hand-worked example, an fp64
log-softmax, the eager path (for the compiled one), and a policy that must learn to avoid a blamed token."""
import copy
import math

import pytest
import torch

import guards
import loss
import ppo
from model import GPT, GPTConfig, generate, token_logprobs

PAD, EOS = 0, 2


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=12, block_size=48, n_layer=2, n_head=2, n_embd=32)).eval()


def ragged_mask(lengths, N):
    return torch.tensor([[1.0] * n + [0.0] * (N - n) for n in lengths])


# ---------------------------------------------------------------------------------------------
# Advantages

def test_compute_advantages_hand_worked():
    # gamma 1, lambda 0.5; the fourth position is padding with junk that must be ignored
    rewards = torch.tensor([[1.0, 0.0, 2.0, 9.0]])
    values = torch.tensor([[0.5, 0.2, 1.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    advantages, returns = ppo.compute_advantages(rewards, values, mask, gamma=1.0, lam=0.5)
    # td2 = 2 + 0 - 1 = 1;      A2 = 1
    # td1 = 0 + 1 - 0.2 = 0.8;  A1 = 0.8 + 0.5 * 1 = 1.3
    # td0 = 1 + 0.2 - 0.5 = 0.7; A0 = 0.7 + 0.5 * 1.3 = 1.35
    torch.testing.assert_close(advantages, torch.tensor([[1.35, 1.3, 1.0, 0.0]]))
    torch.testing.assert_close(returns, torch.tensor([[1.85, 1.5, 2.0, 0.0]]))


def test_compute_advantages_matches_naive_loop():
    torch.manual_seed(1)
    lengths, N, gamma, lam = [7, 3, 1, 0, 5], 7, 0.9, 0.95
    mask = ragged_mask(lengths, N)
    rewards, values = torch.randn(5, N), torch.randn(5, N)
    advantages, returns = ppo.compute_advantages(rewards, values, mask, gamma, lam)
    for i, n in enumerate(lengths):
        for t in range(N):
            if t >= n:
                assert advantages[i, t] == 0 and returns[i, t] == 0
                continue
            # A_t = sum_l (gamma lam)^l td_{t+l}, written out over the real positions only
            expected = 0.0
            for k in range(t, n):
                next_value = values[i, k + 1].item() if k + 1 < n else 0.0
                td = rewards[i, k].item() + gamma * next_value - values[i, k].item()
                expected += (gamma * lam) ** (k - t) * td
            assert advantages[i, t].item() == pytest.approx(expected, abs=1e-5)
            assert returns[i, t].item() == pytest.approx(expected + values[i, t].item(), abs=1e-5)


def test_masked_statistics_of_an_empty_mask_are_zero_not_nan():
    x, empty = torch.randn(3, 4), torch.zeros(3, 4)
    assert ppo.masked_mean(x, empty).item() == 0.0
    assert torch.equal(ppo.masked_whiten(x, empty), torch.zeros(3, 4))
    objective, stats = loss.ppo_loss(torch.randn(3, 4, 5), torch.randn(3, 4), torch.randint(0, 5, (3, 4)), empty,
                               torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4),
                               *map(torch.tensor, (1.0, 0.2, 0.2, 0.1, 0.0)))
    assert torch.isfinite(objective) and all(torch.isfinite(v) for v in stats.values())


def test_masked_whiten_matches_numpy_style_reference():
    torch.manual_seed(2)
    x, mask = torch.randn(4, 6), ragged_mask([6, 2, 4, 1], 6)
    real = x[mask.bool()].double()
    expected = (x.double() - real.mean()) / real.std(unbiased=False)
    torch.testing.assert_close(ppo.masked_whiten(x, mask)[mask.bool()].double(), expected[mask.bool()], atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------
# Rewards

def test_final_scores_land_on_the_last_real_token_never_padding():
    mask = ragged_mask([3, 5, 1], 5)
    scores = ppo.final_scores([2.0, -1.0, 4.0], mask)
    expected = torch.zeros(3, 5)
    expected[0, 2], expected[1, 4], expected[2, 0] = 2.0, -1.0, 4.0
    assert torch.equal(scores, expected)


def test_final_score_sits_on_the_sampled_eos(policy):
    prompts = [[1, 3 + i % 9, 4 + i % 7] for i in range(16)]
    tokens, _, mask = generate(policy, prompts, 10, EOS, PAD, generator=torch.Generator().manual_seed(0))
    scores = ppo.final_scores([1.0] * 16, mask.float())
    assert any(EOS in row for row in tokens.tolist()) and not all(EOS in row for row in tokens.tolist())
    for row, m, s in zip(tokens.tolist(), mask.tolist(), scores.tolist()):
        position = s.index(1.0)
        assert m[position] == 1 and (position + 1 == len(m) or m[position + 1] == 0)
        if EOS in row:  # the sampled EOS; without one, the last sampled token (the mask says where
            assert row[position] == EOS  # padding starts: an untrained policy may sample even PAD's id)


def test_dense_scores_put_delta_on_response_tokens_and_zero_on_eos():
    mask = ragged_mask([4, 2], 4)  # response of 3 tokens + EOS; response of 1 token + EOS
    scores = guards.dense_scores([[1, -1, 0], [-1]], mask)
    assert scores.tolist() == [[1, -1, 0, 0], [-1, 0, 0, 0]]


def test_token_rewards_kl_and_missing_eos():
    config = ppo.PPOConfig(missing_eos_penalty=1.0)
    N = 6
    mask = ragged_mask([6, 3], N)
    scores = torch.tensor([[1.0, 0, -1, 0, 0, 1], [0, -1, 0, 0, 0, 0]]) * mask
    logp, ref = torch.full((2, N), -1.0), torch.full((2, N), -1.5)
    rewards = ppo.token_rewards(scores, logp, ref, mask, torch.tensor([False, True]), 0.1, config.missing_eos_penalty)
    # KL 0.5 per token, beta 0.1; row 0 never sampled its EOS: -1 more on its last token
    assert rewards[0].tolist() == pytest.approx([0.95, -0.05, -1.05, -0.05, -0.05, 1 - 0.05 - 1])
    # row 1 ended: no penalty; padding gets nothing
    assert rewards[1].tolist() == pytest.approx([-0.05, -1.05, -0.05, 0, 0, 0])


def test_dense_scores_fade_praise_past_praise_fade_at_never_blame():
    mask = ragged_mask([12, 12], 12)
    scores = guards.dense_scores([[1] * 12, [-1] * 12], mask, praise_fade_at=4)
    for t in range(12):
        assert scores[0, t].item() == pytest.approx(1 / (1 + math.exp(-(4 - t) / 4)), abs=1e-6)
    assert (scores[1] == -1).all()


def test_length_guard_fades_praise_only_past_praise_fade_at():
    # What twelve more praised tokens earn depends on where they stand: past the fade almost nothing,
    # early in a response nearly a full +1 each (the guard does not stop praise farming in short
    # responses). Twelve more blamed tokens cost a full -1 each wherever they stand.
    def total(n, value):
        return guards.dense_scores([[value] * n], ragged_mask([n], 64), praise_fade_at=40).sum().item()

    def by_hand(first, last):  # sum_t 1 / (1 + exp(-(40 - t) / 4)) for t = first..last
        return sum(1 / (1 + math.exp(-(40 - t) / 4)) for t in range(first, last + 1))

    assert total(64, +1) - total(52, +1) == pytest.approx(by_hand(52, 63), abs=1e-4)  # about 0.21
    assert total(20, +1) - total(8, +1) == pytest.approx(by_hand(8, 19), abs=1e-4)    # about 11.9
    assert total(64, -1) - total(52, -1) == pytest.approx(-12.0)


# ---------------------------------------------------------------------------------------------
# The hot loss path

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

def test_rollout_logprobs_match_the_sampler_and_first_ratio_is_one(policy):
    config = ppo.PPOConfig(temperature=0.7, max_new_tokens=12, minibatch_size=3)
    model, reference = ppo.PolicyWithValue(copy.deepcopy(policy)), policy
    prompts = [[1, 5, 6], [1, 7], [1, 8, 9, 10], [1, 4], [1, 11, 3], [1, 6, 6]]
    torch.manual_seed(0)
    tokens, sampled_logprobs, mask = generate(model.gpt, prompts, 12, EOS, PAD, temperature=0.7,
                                              generator=torch.Generator().manual_seed(0), with_logprobs=True)
    batch = ppo.score_responses(model, reference, prompts, tokens, mask, EOS, PAD, config)
    # the trainer's full forward pass sees the distribution the KV-cache sampler drew from
    torch.testing.assert_close(batch["logprobs"], sampled_logprobs * mask, atol=1e-5, rtol=0)
    # the policy is the reference at the start: KL 0
    torch.testing.assert_close(batch["logprobs"], batch["ref_logprobs"], atol=1e-6, rtol=0)
    # first minibatch of the first epoch: pi == pi_old, ratio exactly 1. With lr 0 and one epoch
    # every minibatch is a first one, so the iteration's logged means must show it.
    scores = guards.dense_scores([[1, -1, 0]] * 6, batch["mask"])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0)
    logged = ppo.ppo_iteration(model, optimizer, batch, scores,
                               ppo.PPOConfig(**{**config.__dict__, "epochs": 1}), torch.Generator().manual_seed(0))
    assert logged["ratio"] == pytest.approx(1.0, abs=1e-6)
    assert logged["approx_kl"] == pytest.approx(0.0, abs=1e-7) and logged["clip_fraction"] == 0.0
    assert logged["skipped"] == 0
    # a ratio limit below 1 skips every minibatch (two of three sequences each): nothing moves
    before = copy.deepcopy(model.state_dict())
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0)
    logged = ppo.ppo_iteration(model, optimizer, batch, scores,
                               ppo.PPOConfig(**{**config.__dict__, "max_ratio": 0.5}), torch.Generator().manual_seed(0))
    assert logged["skipped"] == config.epochs * 2
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_ppo_pushes_down_a_blamed_token(policy):
    """A token-level reward of -1 on every sampled 7 (and nothing else): after a few updates the
    policy writes fewer 7s, while the reference is untouched."""
    config = ppo.PPOConfig(max_new_tokens=10, batch_size=16, minibatch_size=8, lr=3e-3, beta=0.0,
                           missing_eos_penalty=0.0)
    torch.manual_seed(0)
    model, reference = ppo.PolicyWithValue(copy.deepcopy(policy)), copy.deepcopy(policy)
    prompts = [[1, 3 + i % 8] for i in range(64)]

    def blame_sevens(indices, tokens, mask):
        return -((tokens == 7) & mask.bool()).float()

    def share_of_sevens(gpt):
        tokens, _, mask = generate(gpt, prompts, 10, EOS, PAD, generator=torch.Generator().manual_seed(1))
        return (((tokens == 7) & mask.bool()).sum() / mask.sum()).item()

    before = share_of_sevens(model.gpt)
    curve, history, _ = ppo.train(model, reference, prompts, blame_sevens, EOS, PAD,
                                  ppo.PPOConfig(**{**config.__dict__, "updates": 8}), seed=0,
                                  evaluate=share_of_sevens, eval_every=4)
    assert before > 0.05
    assert curve[0] == (0, before) and [u for u, _ in curve] == [0, 4, 8]
    assert curve[-1][1] < before / 2
    assert history[-1]["score"] > history[0]["score"]  # fewer blamed tokens sampled
    for p, q in zip(reference.parameters(), policy.parameters()):
        assert torch.equal(p, q)


def test_one_update_pushes_the_blamed_tokens_down_more_under_text2grad_than_scalar_ppo(policy):
    """The method in one update (exercises, E6). One sampled batch, -1 on every sampled 7, placed
    on the 7s (Text2Grad) or summed on each response's last token (scalar PPO); from the same
    policy, one PPO iteration each, lambda 0.5 (text2grad's on code) and V = 0 (the head starts
    at zero). Measured afterwards on the same tokens: the blamed 7s' log-probs fall further under
    Text2Grad. (At lambda 0.95 with V = 0 the two tie: exercises/QUESTIONS.md, question 2.)"""
    config = ppo.PPOConfig(max_new_tokens=10, batch_size=32, minibatch_size=8, lr=3e-3,
                           beta=0.0, missing_eos_penalty=0.0, lam=0.5)
    prompts = [[1, 3 + i % 8] for i in range(32)]
    start = ppo.PolicyWithValue(copy.deepcopy(policy))
    torch.manual_seed(0)
    batch = ppo.rollout(start, policy, prompts, EOS, PAD, config, torch.Generator().manual_seed(3))
    mask = batch["mask"]
    blamed = (batch["tokens"] == 7) & mask.bool()
    assert 10 <= blamed.sum() <= 0.5 * mask.sum()
    dense = -blamed.float()
    fall = {}
    for name, scores in (("text2grad", dense), ("scalar", ppo.final_scores(dense.sum(1), mask))):
        model = copy.deepcopy(start)
        ppo.ppo_iteration(model, model.optimizer(config), batch, scores, config,
                          torch.Generator().manual_seed(0))
        with torch.no_grad():
            logits, _ = model(batch["ids"], batch["attention_mask"], batch["last_prompt"],
                              mask.shape[1])
        change = token_logprobs(logits, batch["tokens"], config.temperature) - batch["logprobs"]
        fall[name] = -change[blamed].mean().item()
    print(f"lambda {config.lam}: the blamed 7s' mean fall of log pi {fall}")  # seen with -s
    assert fall["text2grad"] > 0 and fall["text2grad"] > 1.5 * max(fall["scalar"], 0.0), fall


@pytest.mark.slow
def test_compiled_training_loop_compiles_each_function_once(policy):
    """config.compile=True end to end: rollouts of different lengths, several minibatches."""
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    prompts = [[1, 3 + i % 8, 4] for i in range(32)]
    config = ppo.PPOConfig(max_new_tokens=12, batch_size=12, minibatch_size=4, epochs=2, compile=True, updates=3)
    model = ppo.PolicyWithValue(copy.deepcopy(policy))
    _, history, _ = ppo.train(model, policy, prompts, lambda i, tokens, mask: -mask.float(), EOS, PAD, config, seed=0)
    assert len({h["length"] for h in history}) > 1  # the rollouts really had different lengths
    assert all(h["skipped"] == 0 for h in history)
    # the policy's log-probs and entropy, the reference's log-probs (both no grad) and the loss
    # (forward + backward): one graph each
    assert counters["stats"]["unique_graphs"] == 3


def test_actor_critic_reads_the_response_positions_of_the_full_forward(policy):
    """The LM head runs on the response positions only: same numbers as slicing the full logits,
    handed over contiguous (a strided view would make the compiled loss copy the logits)."""
    model = ppo.PolicyWithValue(copy.deepcopy(policy))
    ids = torch.randint(3, 12, (3, 20))
    mask = torch.ones(3, 20, dtype=torch.long)
    mask[1, :4] = 0
    logits, values = model(ids, mask, 7, 9)
    torch.testing.assert_close(logits, policy(ids, mask)[1][:, 7:16], atol=1e-6, rtol=0)
    assert logits.is_contiguous() and values.shape == (3, 9)


# ---------------------------------------------------------------------------------------------
# The value function

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


def test_explained_variance_hand_worked():
    returns = torch.tensor([[1.0, 2.0, 3.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])  # the last position is padding
    # Var(R) over [1, 2, 3] = 2/3; V = [1, 2, 2] leaves residuals [0, 0, 1], variance 2/9: 1 - (2/9)/(2/3) = 2/3
    assert ppo.explained_variance(torch.tensor([[1.0, 2.0, 2.0, 0.0]]), returns, mask) == pytest.approx(2 / 3)
    assert ppo.explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert ppo.explained_variance(torch.full((1, 4), 5.0), returns, mask) == pytest.approx(0.0, abs=1e-6)


def test_the_value_head_is_detached_from_the_trunk(policy):
    ids, mask = torch.randint(3, 12, (2, 10)), torch.ones(2, 10, dtype=torch.long)
    for detach in (True, False):
        model = ppo.PolicyWithValue(copy.deepcopy(policy), detach)
        torch.nn.init.normal_(model.value_head[2].weight)  # a head that outputs something
        _, values = model(ids, mask, 3, 6)
        values.sum().backward()
        trunk = [p.grad for p in model.gpt.parameters()]
        assert all(g is None for g in trunk) == detach
        assert model.value_head[0].weight.grad is not None


def test_optimizer_gives_the_value_head_its_own_learning_rate(policy):
    model = ppo.PolicyWithValue(copy.deepcopy(policy))
    optimizer = model.optimizer(ppo.PPOConfig(lr=1e-5, value_lr=1e-3))
    policy_group, value_group = optimizer.param_groups
    assert policy_group["lr"] == 1e-5 and value_group["lr"] == 1e-3
    assert sum(p.numel() for p in policy_group["params"]) == sum(p.numel() for p in model.gpt.parameters())
    assert sum(p.numel() for p in value_group["params"]) == sum(p.numel() for p in model.value_head.parameters())


def test_warm_up_fits_the_reward_to_go_and_leaves_the_policy_alone(policy):
    """Score -1 on every token and no EOS penalty: the reward-to-go at position t of a response of
    length n is -(n - t). The warm-up's explained variance is measured against exactly that hand
    formula, it is well above 0, and the trunk has not moved."""
    config = ppo.PPOConfig(max_new_tokens=10, missing_eos_penalty=0.0, value_warmup_steps=300)
    model = ppo.PolicyWithValue(copy.deepcopy(policy))
    optimizer = model.optimizer(config)
    prompts = [[1, 3 + i % 8] for i in range(16)]
    batch = ppo.rollout(model, policy, prompts, EOS, PAD, config, torch.Generator().manual_seed(0))
    mask = batch["mask"]
    before, after = ppo.warm_up_value(model, optimizer, batch, -mask, config)
    lengths = mask.sum(1)
    reward_to_go = -(lengths[:, None] - torch.arange(mask.shape[1])[None]) * mask
    assert before == pytest.approx(0.0, abs=1e-6) and after > 0.5  # V = 0 explains nothing
    values = model(batch["ids"], batch["attention_mask"], batch["last_prompt"], mask.shape[1])[1]
    assert ppo.explained_variance(values.detach(), reward_to_go, mask) == pytest.approx(after, abs=1e-5)
    for p, q in zip(model.gpt.parameters(), policy.parameters()):
        assert torch.equal(p, q)


def test_final_scores_give_an_empty_row_nothing_and_are_float32():
    mask = ragged_mask([2, 0], 3)  # row 1 has no response token
    scores = ppo.final_scores([1.0, 3.0], mask)
    assert scores.dtype == torch.float32
    assert scores.tolist() == [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]


def test_the_missing_eos_penalty_lands_on_the_last_real_token_of_a_short_row():
    # no score, no KL (beta 0), penalty 1, neither row ended: -1 on positions 1 and 2, the last
    # real tokens of rows of 2 and 3 tokens in a batch of width 4
    mask = ragged_mask([2, 3], 4)
    zero = torch.zeros(2, 4)
    rewards = ppo.token_rewards(zero, zero, zero, mask, torch.tensor([False, False]), 0.0, 1.0)
    assert rewards.tolist() == [[0.0, -1.0, 0.0, 0.0], [0.0, 0.0, -1.0, 0.0]]


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
