"""loss.py: PPO's hot loss path (logits -> selected log-probs, entropy, ratio, clipped losses), eager
or through torch.compile with identical math. It never builds a full log-softmax:
log pi(y) = z_y - logsumexp(z), entropy = logsumexp(z) - sum softmax(z) * z, one exp per logit. The
compiled version has dynamic shapes and takes every coefficient as a 0-d tensor, so new batch sizes,
response lengths or clip values never recompile (tests/test_ppo.py counts the graphs). Off by
default (--compile): at vocabulary 1024 the loss path is a small share of a step on a CPU, and
inductor's CPU backend needs a C++ compiler (experiments/bench.py measures what it buys).
"""
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


def ppo_loss(logits, values, targets, mask, old_logprobs, old_values, advantages, returns,
             temperature, clip, value_clip, value_coef, entropy_coef):
    """The clipped PPO objective for one minibatch, from the logits. Coefficients are 0-d tensors (a
    Python float would be baked into a compiled graph and changing it would recompile).
    logits (B, N, V); values, targets, mask, old_*, advantages, returns (B, N).
    Returns (loss, stats): stats is a (7,) tensor, detached, in the order of LOSS_STATS."""
    logprobs, entropy = logprobs_and_entropy(logits, targets, temperature)
    return clipped_losses(logprobs, entropy, values, mask, old_logprobs, old_values, advantages, returns,
                          clip, value_clip, value_coef, entropy_coef)


def clipped_losses(logprobs, entropy, values, mask, old_logprobs, old_values, advantages, returns,
                   clip, value_clip, value_coef, entropy_coef):
    """The objective from the selected log-probs and entropies, all (B, N): rho_t = exp(log pi - log pi_old)
        L_pi   = mean_t max(-A_t rho_t, -A_t clip(rho_t, 1 - eps, 1 + eps))
        L_V    = 0.5 mean_t max((V_t - R_t)^2, (V_old_t + clip(V_t - V_old_t, -eps_v, eps_v) - R_t)^2)
        loss   = L_pi + c_v L_V - c_H mean_t H_t"""
    log_ratio = (logprobs - old_logprobs) * mask
    ratio = torch.exp(log_ratio)
    policy_loss = masked_mean(torch.maximum(-advantages * ratio,
                                            -advantages * torch.clamp(ratio, 1 - clip, 1 + clip)), mask)
    clipped_values = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
    value_loss = 0.5 * masked_mean(torch.maximum((values - returns) ** 2, (clipped_values - returns) ** 2), mask)
    mean_entropy = masked_mean(entropy, mask)
    loss = policy_loss + value_coef * value_loss - entropy_coef * mean_entropy
    stats = torch.stack([
        policy_loss, value_loss, mean_entropy,
        masked_mean((ratio - 1) - log_ratio, mask),                             # approx KL(pi_old || pi)
        masked_mean(((ratio - 1).abs() > clip).float(), mask),                   # clip fraction
        masked_mean(((values - old_values).abs() > value_clip).float(), mask),  # value clip fraction
        masked_mean(ratio, mask),
    ]).detach()
    return loss, stats


LOSS_STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "value_clip_fraction", "ratio")

# The same functions compiled. dynamic=True: one graph for every (B, N, V); fullgraph=True: a graph
# break is an error, not a silent slowdown. Nothing is compiled until the first call.
compiled_ppo_loss = torch.compile(ppo_loss, fullgraph=True, dynamic=True)
compiled_logprobs_and_entropy = torch.compile(logprobs_and_entropy, fullgraph=True, dynamic=True)
compiled_token_logprobs = torch.compile(token_logprobs, fullgraph=True, dynamic=True)  # the reference's
