"""GRPO that keeps where span rewards land, as a verl 0.9.1 advantage estimator.

verl's GRPO, like its RLOO, ReMax, OPO and GPG, first sums each response's token rewards
(token_level_rewards.sum(-1)) and normalises the sums: where the critique put its rewards is lost,
as `--advantage grpo --per response` shows in the core. This estimator computes instead what
grpo.group_advantages(per="token") computes: each token's reward normalised over its group's
tokens, A_t the sum from t on. Set algorithm.adv_estimator=text2grad_token_grpo (NAME).

Where it departs from the core's GRPO (grpo.py) and from verl's:
  groups  verl reorders rows (it balances batches over workers), so rows are grouped by the
          sample's uid, each group normalised over its own rows; a group may be short (a failed
          or filtered sample) where grpo.group_advantages needs equal groups side by side
  the KL  ppo.py keeps beta KL_t out of the normalisation; with algorithm.use_kl_in_reward=True
          verl has already put it in token_level_rewards, so it is normalised with the scores.
          The recipe puts the KL in the loss instead (actor.use_kl_loss)
  the std the population one, as grpo.py (verl's GRPO divides by the sample one);
          algorithm.norm_adv_by_std_in_grpo is not read
Registering: verl loads a module given by a file path afresh each time and refuses a second
function under a registered name, so the estimator is registered only where it is missing.
"""
from collections import defaultdict

import torch
from verl.trainer.ppo import core_algos

import grpo

NAME = "text2grad_token_grpo"


def token_grpo_advantage(token_level_rewards, response_mask, index, **unused):
    """verl's estimator interface: rewards, mask (B, N) and index (B,), each row's uid ->
    (advantages, returns), both (B, N), zero outside the mask. verl also passes config (and
    reward_baselines), which are not read here."""
    rewards, mask = token_level_rewards.float(), response_mask.float()
    rows = defaultdict(list)  # uid -> its rows, in batch order
    for i, uid in enumerate(index):
        rows[uid].append(i)
    advantages = torch.zeros_like(rewards)
    for group in rows.values():
        group = torch.tensor(group, device=rewards.device)
        advantages[group] = grpo.group_advantages(rewards[group], mask[group], len(group), "token")
    return advantages, advantages


if NAME not in core_algos.ADV_ESTIMATOR_REGISTRY:
    core_algos.register_adv_est(NAME)(token_grpo_advantage)
