"""exercises E8's answer (read it after E8): the measurement that finds the silent bug of
exercises/silent_bug.py, and the check that it does."""
import copy

import pytest
import torch

import ppo
from model import generate
from test_ppo import EOS, PAD, policy  # noqa: F401  (the tiny GPT fixture)


def sampler_gap(model, prompts, eos_id, pad_id):
    """Largest |log-prob the sampler drew with - log-prob the trainer computes| over the real
    response tokens: exercises E8's measurement, written as the exercise asks."""
    tokens, sampled, mask = generate(model.gpt, prompts, 12, eos_id, pad_id, temperature=1.0,
                                     generator=torch.Generator().manual_seed(0), with_logprobs=True)
    batch = ppo.score_responses(model, model.gpt, prompts, tokens, mask, eos_id, pad_id,
                                ppo.PPOConfig(temperature=1.0))
    return ((batch["logprobs"] - sampled) * batch["mask"]).abs().max().item()


@pytest.fixture
def logprob_gap():
    return sampler_gap


def test_the_trainer_reads_the_log_probs_the_sampler_drew_and_the_suspect_does_not(policy,
                                                                                  logprob_gap):
    """exercises E8: the measurement that finds the silent bug of exercises/silent_bug.py."""
    from exercises.silent_bug import SuspectPolicy
    prompts = [[1, 5, 6], [1, 7], [1, 8, 9, 10], [1, 4], [1, 11, 3], [1, 6, 6]]
    assert logprob_gap(ppo.PolicyWithValue(copy.deepcopy(policy)), prompts, EOS, PAD) < 1e-4
    assert logprob_gap(SuspectPolicy(copy.deepcopy(policy)), prompts, EOS, PAD) > 0.5


def test_the_gap_is_a_float(policy, logprob_gap):
    gap = logprob_gap(ppo.PolicyWithValue(copy.deepcopy(policy)), [[1, 5, 6], [1, 7]], EOS, PAD)
    assert type(gap) is float
