"""GRPO's advantages: span rewards without a value head (skip on a first read; PPO first).

GRPO (DeepSeekMath, 2024) samples `group` responses to each prompt and compares each reward with
its own group's, instead of with a learned V. It changes only step 3 of ppo.py: ppo_iteration asks
advantages() here when config.advantage is "grpo", and the rollout draws each prompt `group`
times (ppo.draw). The KL to the reference stays in the reward, outside the normalisation.
"""
import torch


def group_advantages(scores, mask, group, per="token"):
    """GRPO's advantages (after DeepSeekMath, section 4.1.3). The batch's rows come in groups of
    `group` responses to one prompt; each reward is compared with its own group's only:
      per "token"     process supervision with every response token a step: r~_t = (r_t - mean)
                      / std over the group's tokens, A_t = sum_{l >= t} r~_l. The mean taken off
                      every token adds (n - t) * (-mean / std) to A_t (t from 0, n tokens with
                      the EOS): a length term
      per "response"  outcome supervision: R_i = sum_t score_t normalised over the group, A_t =
                      R~_i on every token of response i. A last-token reward's only way; on span
                      rewards it is the collapse verl makes: where the critique put them is lost
    scores, mask (B, N) -> advantages (B, N), zero outside the mask. std is the population std
    (TRL and verl use the sample std: sqrt(G / (G - 1)) smaller advantages). A group whose
    rewards are equal, up to float rounding, has advantage 0, not NaN."""
    def normalised(x, weight):  # (x - mean) / std over weight == 1 along dim 1; 0 where std ~ 0
        count = weight.sum(1, keepdim=True).clamp(min=1)
        mean = (x * weight).sum(1, keepdim=True) / count
        std = (((x - mean) ** 2 * weight).sum(1, keepdim=True) / count).sqrt()
        spread = std > 1e-5 * (1 + mean.abs())
        return torch.where(spread, (x - mean) / std, torch.zeros_like(x)) * weight
    B, N = scores.shape
    if per == "response":
        R = (scores * mask).sum(1).view(-1, group)                                # (B/G, G)
        return normalised(R, torch.ones_like(R)).reshape(B, 1) * mask
    if per != "token":
        raise ValueError(f"unknown per {per!r}; use 'token' or 'response'")
    r = normalised(scores.reshape(-1, group * N), mask.reshape(-1, group * N))   # (B/G, G*N)
    return r.view(B, N).flip(1).cumsum(1).flip(1) * mask                          # sum from t on


def advantages(given, kl, mask, config):
    """GRPO's A_t for ppo_iteration: the rewards without their KL term (given, (B, N)) normalised
    within each group (group_advantages), minus beta times the KL's sum from t on, which is not
    normalised. kl (B, N): KL_t per token."""
    kl_to_go = (kl * mask).flip(1).cumsum(1).flip(1) * mask
    return group_advantages(given, mask, config.group, config.per) - config.beta * kl_to_go
