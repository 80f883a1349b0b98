"""loss.py: PPO's hot loss path (logits -> selected log-probs, entropy, ratio, clipped losses).

It never builds a full log-softmax: log pi(y) = z_y - logsumexp(z) and entropy = logsumexp(z) -
sum softmax(z) * z, one exp per logit. The same functions run eager (the default) or compiled
(--compile), with identical math: the compiled twins at the end of the file are plumbing, and a
first read can stop before them (DETAILS.md, "The hot loss path"; experiments/bench.py times them).
"""
import functools

import torch

from model import token_logprobs


def masked_mean(x, mask):
    """Mean of x over mask == 1; 0 (not NaN) when the mask is empty."""
    return (x * mask).sum() / mask.sum().clamp(min=1)


def logprobs_and_entropy(logits, targets, temperature):
    """Selected log-probs and entropies of softmax(logits / temperature), one exp per logit:
        log pi(y) = z_y - logsumexp(z),   H = logsumexp(z) - sum_v softmax(z)_v z_v
    logits (B, N, V), targets (B, N) -> (logprobs (B, N), entropy (B, N))."""
    z = logits.float() / temperature
    m = z.amax(-1, keepdim=True)                     # (B, N, 1) for a stable exp
    e = torch.exp(z - m)                             # (B, N, V) the only exp
    s = e.sum(-1)                                    # (B, N)
    logsumexp = m.squeeze(-1) + torch.log(s)
    logprobs = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logsumexp
    entropy = logsumexp - (e * z).sum(-1) / s
    return logprobs, entropy


def clipped_losses(logprobs, entropy, values, mask, old_logprobs, old_values, advantages, returns,
                   clip, value_clip, value_coef, entropy_coef):
    """PPO's objective from the selected log-probs and entropies, all (B, N):
        rho_t  = exp(log pi(y_t) - log pi_old(y_t))
        L_pi   = mean_t max(-A_t rho_t, -A_t clip(rho_t, 1 - eps, 1 + eps))
        V~_t   = V_old_t + clip(V_t - V_old_t, -eps_v, eps_v)
        L_V    = 0.5 mean_t max((V_t - R_t)^2, (V~_t - R_t)^2)
        loss   = L_pi + c_v L_V - c_H mean_t H_t
    Returns (loss, stats): stats a dict of detached 0-d tensors (what ppo.py logs)."""
    log_ratio = (logprobs - old_logprobs) * mask
    ratio = torch.exp(log_ratio)
    policy_loss = masked_mean(torch.maximum(-advantages * ratio,
                                            -advantages * torch.clamp(ratio, 1 - clip, 1 + clip)),
                              mask)
    clipped_values = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
    value_loss = 0.5 * masked_mean(torch.maximum((values - returns) ** 2,
                                                 (clipped_values - returns) ** 2), mask)
    mean_entropy = masked_mean(entropy, mask)
    loss = policy_loss + value_coef * value_loss - entropy_coef * mean_entropy
    stats = {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": mean_entropy,
             "approx_kl": masked_mean((ratio - 1) - log_ratio, mask),  # KL(pi_old || pi)
             "clip_fraction": masked_mean(((ratio - 1).abs() > clip).float(), mask),
             "value_clip_fraction": masked_mean(((values - old_values).abs() > value_clip).float(),
                                                mask),
             "ratio": masked_mean(ratio, mask)}
    return loss, {name: value.detach() for name, value in stats.items()}


def ppo_loss(logits, values, targets, mask, old_logprobs, old_values, advantages, returns,
             temperature, clip, value_clip, value_coef, entropy_coef):
    """The clipped PPO objective for one minibatch, from the logits. Coefficients are 0-d
    tensors (a Python float would be baked into a compiled graph: changing it would recompile).
    logits (B, N, V); values, targets, mask, old_*, advantages, returns (B, N).
    Returns (loss, stats) as clipped_losses does."""
    logprobs, entropy = logprobs_and_entropy(logits, targets, temperature)
    return clipped_losses(logprobs, entropy, values, mask, old_logprobs, old_values, advantages,
                          returns, clip, value_clip, value_coef, entropy_coef)


# PLUMBING: the same functions compiled, each wrapped on its first use (`compiled(ppo_loss)`):
# importing the compiler takes a second or more, and --compile is off by default (at vocabulary
# 1024 the loss path is a small share of a step; RESULTS.md, "Performance"). dynamic=True: one
# graph for every (B, N, V), so new batch sizes or response lengths never recompile
# (tests/test_loss.py counts the graphs); fullgraph=True: a graph break is an error, not a silent
# slowdown. Inductor's CPU backend needs a C++ compiler.
@functools.cache
def compiled(function):
    return torch.compile(function, fullgraph=True, dynamic=True)
