"""GRPO's advantages (ppo.group_advantages, ppo.draw) against hand-worked groups, and a GRPO run that
must learn to avoid a blamed token."""
import copy
import math

import pytest
import torch

import grpo
import ppo
from model import GPT, GPTConfig, generate

PAD, EOS = 0, 2

# One group of three responses to one prompt, span rewards; a 9 marks padding (must be ignored)
SCORES = [[0.0, 1.0, 0.0, -1.0],
          [-1.0, 0.0, -1.0, 9.0],
          [0.0, 0.5, 9.0, 9.0]]
MASK = [[1.0, 1.0, 1.0, 1.0],
        [1.0, 1.0, 1.0, 0.0],
        [1.0, 1.0, 0.0, 0.0]]


def test_token_advantages_of_a_hand_worked_group():
    # every real token is a step: nine rewards 0, 1, 0, -1 | -1, 0, -1 | 0, 0.5, summing to -1.5
    # mean -1/6; deviations 1/6 (four zeros), 7/6, -5/6 (three -1s), 2/3; squares sum to
    # (4 + 49 + 75 + 16) / 36 = 4, variance 4 / 9, std 2/3. Normalised: 0 -> 0.25, 1 -> 1.75,
    # -1 -> -1.25, 0.5 -> 1. A_t sums them from t to the end of its response:
    expected = [[1.0, 0.75, -1.0, -1.25],   # 0.25 + 1.75 + 0.25 - 1.25, 1.75 + 0.25 - 1.25, ...
                [-2.25, -1.0, -1.25, 0.0],  # -1.25 + 0.25 - 1.25, ...; padding 0
                [1.25, 1.0, 0.0, 0.0]]
    advantages = grpo.group_advantages(torch.tensor(SCORES), torch.tensor(MASK), group=3, per="token")
    torch.testing.assert_close(advantages, torch.tensor(expected))


def test_a_group_equal_up_to_float_rounding_has_zero_advantages():
    # eight responses, each the same six rewards in another order: their sums are equal, but float32
    # adds them in another order, so they differ by rounding (about 1e-7). That is no spread: the
    # threshold 1e-5 (1 + |mean|) must call it 0. Measured against |mean| alone (about 1e-7 here)
    # the rounding would pass for a spread and become advantages of about +-1.
    generator = torch.Generator().manual_seed(0)
    differ = 0
    for _ in range(50):
        values = torch.randn(6, generator=generator)
        values = values - values.mean()  # the group's sums net to about 0
        scores = torch.stack([values[torch.randperm(6, generator=generator)] for _ in range(8)])
        sums = scores.sum(1)
        differ += int(sums.max() > sums.min())
        advantages = grpo.group_advantages(scores, torch.ones(8, 6), group=8, per="response")
        assert advantages.abs().max() == 0
    assert differ > 25  # most of the groups do differ by rounding: the check is not vacuous


def test_the_inputs_are_left_as_they_were():
    scores, mask = torch.tensor(SCORES), torch.tensor(MASK)
    for per in ("token", "response"):
        grpo.group_advantages(scores, mask, group=3, per=per)
        assert scores.tolist() == SCORES and mask.tolist() == MASK, per


def test_groups_are_normalised_apart():
    # a second group whose every reward is 10 higher: normalised within itself, its advantages are the first's
    shifted = [[s + 10 * m for s, m in zip(row, mask)] for row, mask in zip(SCORES, MASK)]
    scores, mask = torch.tensor(SCORES + shifted), torch.tensor(MASK + MASK)
    advantages = grpo.group_advantages(scores, mask, group=3, per="token")
    torch.testing.assert_close(advantages[3:], advantages[:3])
    assert advantages[:3].abs().max() > 0.5


def test_response_advantages_collapse_the_spans():
    # the sums 0, -2, 0.5; mean -0.5; deviations 0.5, -1.5, 1; variance 3.5 / 3
    std = math.sqrt(3.5 / 3)
    advantages = grpo.group_advantages(torch.tensor(SCORES), torch.tensor(MASK), group=3, per="response")
    for row, mask, deviation in zip(advantages.tolist(), MASK, (0.5, -1.5, 1.0)):
        assert row == pytest.approx([deviation / std * m for m in mask])  # one number on every real token


def test_a_group_without_differences_has_zero_advantages_not_nan():
    # every token -1 (per token: equal rewards, though the sums differ with length), no reward at
    # all, and one equal score per response
    # ties that float32 does not hold exactly: ten tokens of 0.1 sum to 1.0000001, beside 1.0 and three
    # thirds; -0.3 on every token of two responses of 7 and 5 tokens (the mean is off by a rounding step)
    tenths, ones = torch.zeros(3, 10), torch.ones(3, 10)
    tenths[0], tenths[1, 9], tenths[2, :3] = 0.1, 1.0, 1 / 3
    assert torch.equal(grpo.group_advantages(tenths, ones, 3, "response"), torch.zeros(3, 10))
    ragged = torch.tensor([[1.0] * 7, [1.0] * 5 + [0.0] * 2])
    assert torch.equal(grpo.group_advantages(-0.3 * ragged, ragged, 2, "token"), torch.zeros(2, 7))
    mask = torch.tensor(MASK)
    for scores, per in ((-mask, "token"), (torch.zeros(3, 4), "token"), (torch.zeros(3, 4), "response"),
                        (ppo.final_scores(torch.tensor([2.0, 2.0, 2.0]), mask), "response")):
        advantages = grpo.group_advantages(scores, mask, group=3, per=per)
        assert torch.equal(advantages, torch.zeros(3, 4)), (scores, per)


def test_the_collapse_is_the_last_token_reward():
    # span rewards summed per response before normalising: the advantages of the same sums on the last token
    mask = torch.tensor(MASK)
    scores = torch.tensor(SCORES) * mask
    torch.testing.assert_close(grpo.group_advantages(scores, mask, 3, "response"),
                               grpo.group_advantages(ppo.final_scores(scores.sum(1), mask), mask, 3, "response"))


def test_draw_gives_each_prompt_a_group_side_by_side():
    import random
    config = ppo.PPOConfig(batch_size=12, advantage="grpo", group=4)
    indices = ppo.draw(random.Random(0), 100, config)
    assert len(indices) == 12 and len(set(indices)) == 3
    assert all(indices[i] == indices[i - i % 4] for i in range(12))
    gae = ppo.PPOConfig(batch_size=12)
    assert ppo.draw(random.Random(0), 100, gae) == random.Random(0).sample(range(100), 12)  # PPO's draw unchanged
    for bad in (dict(advantage="grpo", group=5), dict(advantage="reinforce")):
        with pytest.raises(ValueError, match="divides batch_size"):
            ppo.draw(random.Random(0), 100, ppo.PPOConfig(batch_size=12, **bad))


def test_grpo_pushes_down_a_blamed_token():
    """As PPO's test: -1 on every sampled 7, nothing else; GRPO with groups of 4 learns to write fewer."""
    torch.manual_seed(0)
    policy = GPT(GPTConfig(vocab_size=12, block_size=48, n_layer=2, n_head=2, n_embd=32)).eval()
    config = ppo.PPOConfig(max_new_tokens=10, batch_size=16, minibatch_size=8, lr=3e-3, beta=0.0,
                           missing_eos_penalty=0.0, advantage="grpo", group=4, updates=8)
    model, reference = ppo.PolicyWithValue(copy.deepcopy(policy)), copy.deepcopy(policy)
    prompts = [[1, 3 + i % 8] for i in range(64)]

    def share_of_sevens(gpt):
        tokens, _, mask = generate(gpt, prompts, 10, EOS, PAD, generator=torch.Generator().manual_seed(1))
        return (((tokens == 7) & mask.bool()).sum() / mask.sum()).item()

    blame_sevens = lambda indices, tokens, mask: -((tokens == 7) & mask.bool()).float()
    curve, history, warmup = ppo.train(model, reference, prompts, blame_sevens, EOS, PAD, config, seed=0,
                                       evaluate=share_of_sevens, eval_every=8)
    assert curve[0][1] > 0.05 and curve[-1][1] < curve[0][1] / 2
    assert warmup == {} and math.isnan(history[0]["explained_variance"])  # no value head to warm up or read


def test_an_empty_response_counts_in_its_groups_response_statistics():
    # R = 1, 0 and 0 (the third response is empty; its 9s are padding). mean 1/3, deviations 2/3,
    # -1/3, -1/3, variance (4 + 1 + 1) / 27 = 2/9, std sqrt(2) / 3: R~ = sqrt(2), -1/sqrt(2), -1/sqrt(2)
    scores = torch.tensor([[1.0, 0.0], [0.0, 9.0], [9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    advantages = grpo.group_advantages(scores, mask, 3, "response")
    expected = torch.tensor([[math.sqrt(2), math.sqrt(2)], [-1 / math.sqrt(2), 0.0], [0.0, 0.0]])
    torch.testing.assert_close(advantages, expected)


def test_no_spread_is_measured_against_the_groups_mean():
    # two responses of one token, 1000 and the next float32 above it (1000 + 2^-14 = 1000.000061):
    # std 2^-15 = 3.1e-5, above 1e-5 but at most 1e-5 * (1 + 1000): no spread, advantage 0
    mask = torch.ones(2, 1)
    scores = torch.tensor([[1000.0], [1000.0 + 2 ** -14]])
    assert scores[1, 0] > scores[0, 0]  # they differ in float32
    for per in ("response", "token"):
        assert torch.equal(grpo.group_advantages(scores, mask, 2, per), torch.zeros(2, 1)), per
    # a real spread at the same scale: 1000 and 1000.5, std 0.25 > 0.01: -1 and +1
    spread = torch.tensor([[1000.0], [1000.5]])
    torch.testing.assert_close(grpo.group_advantages(spread, mask, 2, "response"),
                               torch.tensor([[-1.0], [1.0]]))


def test_an_unknown_per_is_a_value_error_that_names_it():
    with pytest.raises(ValueError, match="sequence"):
        grpo.group_advantages(torch.zeros(2, 3), torch.ones(2, 3), 2, per="sequence")
