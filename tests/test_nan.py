"""A NaN stops training with one line saying where, before it reaches the weights."""
import copy

import pytest
import torch

import ppo
from model import GPT, GPTConfig
from sft import fit

PAD, EOS = 0, 2


def tiny_gpt():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=12, block_size=32, n_layer=1, n_head=2, n_embd=16))


def test_nan_stops_fit_before_the_step_reaches_the_weights():
    model = tiny_gpt()

    def batch_loss(step, rng):
        rows = torch.tensor([[rng.randrange(3, 12) for _ in range(8)] for _ in range(4)])
        loss = torch.nn.functional.cross_entropy(model(rows[:, :-1])[1].flatten(0, 1), rows[:, 1:].flatten())
        if step == 3:
            weights.update({k: v.clone() for k, v in model.state_dict().items()})  # after steps 0, 1, 2
            loss = loss * float("nan")
        return loss, {}

    weights = {}
    with pytest.raises(FloatingPointError, match="sft: the loss is nan at step 3"):
        fit(model, batch_loss, steps=10, lr=1e-2, seed=3, desc="sft")
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())


def test_nan_reward_stops_ppo_naming_the_minibatch():
    config = ppo.PPOConfig(max_new_tokens=6, batch_size=8, minibatch_size=4, epochs=1, updates=3)
    policy = tiny_gpt().eval()
    model = ppo.PolicyWithValue(copy.deepcopy(policy))
    calls = []

    def nan_on_second_update(indices, tokens, mask):
        calls.append(1)
        return mask.float() * (float("nan") if len(calls) == 3 else 1.0)  # the value warm-up, update 1, update 2

    with pytest.raises(FloatingPointError, match=r"the PPO loss is nan \(epoch 0, minibatch 0\)"):
        ppo.train(model, policy, [[1, 3 + i % 8] for i in range(16)], nan_on_second_update, EOS, PAD, config)
    assert len(calls) == 3
