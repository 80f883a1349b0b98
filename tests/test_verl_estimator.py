"""integrations/verl/estimator.py against verl 0.9.1 on the CPU: verl's GRPO sums each response's
token rewards first, so where they land is lost; the registered token-level estimator keeps it and
computes what grpo.group_advantages(per="token") computes, each checked against a naive fp64 loop.
Skipped where verl is not installed (the manager's tests: tests/test_verl.py)."""
import math
import random

import pytest

verl = pytest.importorskip("verl")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402

import grpo  # noqa: E402
from integrations.verl import estimator  # noqa: E402


def grouped_batch(sizes, seed=0):
    """Span-like rewards (in -1, 0, 1/2, 1) for groups of responses of varied lengths, the rows
    shuffled as verl's batch balancing leaves them: (rewards, mask (B, 16), uids (B,))."""
    rng = torch.Generator().manual_seed(seed)
    uids = [f"prompt{g}" for g, size in enumerate(sizes) for _ in range(size)]
    B = len(uids)
    lengths = torch.randint(4, 17, (B,), generator=rng)
    mask = (torch.arange(16) < lengths[:, None]).float()
    rewards = torch.tensor([-1.0, 0.0, 0.0, 0.5, 1.0])[torch.randint(0, 5, (B, 16), generator=rng)]
    order = torch.randperm(B, generator=rng)
    return (rewards * mask)[order], mask[order], np.array(uids, dtype=object)[order.numpy()]


def token_grpo_fp64(rewards, mask, uids):
    """grpo.group_advantages(per="token") by a naive loop in float64: each reward normalised by
    its group's mean and population std over the group's tokens, A_t its sum from t on."""
    advantages = torch.zeros_like(rewards, dtype=torch.float64)
    for uid in set(uids):
        rows = [i for i in range(len(uids)) if uids[i] == uid]
        values = [float(rewards[i, t]) for i in rows for t in range(int(mask[i].sum()))]
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        for i in rows:
            running = 0.0
            for t in reversed(range(int(mask[i].sum()))):
                running += (float(rewards[i, t]) - mean) / std
                advantages[i, t] = running
    return advantages


def shuffled_within_responses(rewards, mask, seed=1):
    rng, out = random.Random(seed), rewards.clone()
    for i in range(len(rewards)):
        n = int(mask[i].sum())
        out[i, :n] = rewards[i, torch.tensor(rng.sample(range(n), n))]
    return out


def test_verls_grpo_forgets_where_rewards_land_and_the_token_estimator_does_not():
    rewards, mask, uids = grouped_batch([4, 4, 4])
    moved = shuffled_within_responses(rewards, mask)
    summed = lambda r: core_algos.compute_grpo_outcome_advantage(r, mask, uids)[0]  # noqa: E731
    assert torch.allclose(summed(rewards), summed(moved), atol=1e-6, rtol=0)
    token = core_algos.get_adv_estimator_fn(estimator.NAME)
    advantages = token(token_level_rewards=rewards, response_mask=mask, index=uids, config=None)[0]
    moved_advantages = token(token_level_rewards=moved, response_mask=mask, index=uids)[0]
    assert (advantages - moved_advantages).abs().max() > 0.1
    assert torch.allclose(advantages.double(), token_grpo_fp64(rewards, mask, uids), atol=1e-5)


def test_the_token_estimator_on_shuffled_rows_is_grpo_group_advantages_on_equal_groups():
    rewards, mask, uids = grouped_batch([4, 4, 4], seed=2)
    advantages = estimator.token_grpo_advantage(rewards, mask, uids)[0]
    order = sorted(range(len(uids)), key=lambda i: uids[i])  # groups side by side, as grpo.py's
    core = grpo.group_advantages(rewards[order], mask[order], 4, per="token")
    assert torch.equal(advantages[order], core)


def test_unequal_groups_are_each_normalised_over_their_own_rows():
    rewards, mask, uids = grouped_batch([2, 5, 3], seed=4)
    advantages = estimator.token_grpo_advantage(rewards, mask, uids)[0]
    assert torch.allclose(advantages.double(), token_grpo_fp64(rewards, mask, uids), atol=1e-5)
