"""Token-level PPO: Text2Grad's third component (the paper's span-level policy optimisation).

One PPO iteration on a batch of prompts:
  1. rollout   sample a response per prompt at temperature tau, then one full forward pass records
               the policy's log-probs (pi_old), the frozen reference's log-probs and the values;
  2. reward    r_t = score_t - beta * KL_t, where score_t is the reward model's delta_t on every
               token (Text2Grad) or one score on the last real token (standard RLHF PPO); the
               guards against a gamed reward (guards.py) bound what praise can earn;
  3. GAE       A_t = sum_l (gamma*lambda)^l (r_{t+l} + gamma V(t+l+1) - V(t+l)), returns = A + V;
  4. update    a few epochs of minibatches of the clipped surrogate plus the value loss.
GRPO (advantage "grpo") changes step 3 only: no value head; `group` responses per prompt, each reward
normalised within its group (no whitening after), A_t the sum of those from t on (group_advantages).
The "natural-language gradient" is nothing more than step 2: the critique decides *where* the
reward lands, and the policy gradient sum_t A_t grad log pi(y_t | x, y_<t) carries it from there.

The hot loss path is loss.py. The value function V is an MLP head reading the policy's trunk
*detached*, with its own learning rate and a warm-up on SFT samples (warm_up_value): with the
authors' setting (through the trunk, weight 0.1, clip 0.2) it barely moves here, and GAE with lambda
0.95 then smears a late clause's blame over the tokens before it (DETAILS.md, "The value head").

Simplifications, on purpose:
  - The KL penalty is the sampled-token estimate KL_t = log pi(y_t) - log pi_ref(y_t) with a fixed
    beta (the authors: the full-distribution KL and an adaptive beta).
  - Losses are token means over the minibatch: the natural unit when the reward is per token.
  - No reward whitening (it would erase the scale difference between a +1 span and a -1 span);
    advantages are whitened. Plain temperature sampling (no top-k/top-p): the log-probs are exact.
"""
import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
from tqdm import tqdm

from loss import (LOSS_STATS, compiled_logprobs_and_entropy, compiled_ppo_loss, compiled_token_logprobs,
                  logprobs_and_entropy, masked_mean, ppo_loss)
from model import generate, left_pad, token_logprobs


@dataclass
class PPOConfig:
    updates: int = 40             # PPO iterations (rollout + optimisation)
    batch_size: int = 64          # prompts per rollout
    minibatch_size: int = 32      # sequences per gradient step
    epochs: int = 4               # passes over each rollout batch (the authors use 4)
    lr: float = 1e-4              # Adam; the model is tiny, so larger than the usual 1e-6..1e-5
    temperature: float = 1.0      # sampling temperature, used in *every* log-prob computation
    max_new_tokens: int = 64      # longest response
    clip: float = 0.2             # policy ratio clip epsilon
    value_clip: float = None      # value clip around the rollout's values; None: none (the authors: 0.2)
    value_coef: float = 1.0       # c_v, weight of the value loss (the authors: 0.1); with a detached head
                                  # and its own Adam group it matters only through the gradient clip
    value_lr: float = 1e-3        # the value head's Adam learning rate (None: the policy's lr)
    detach_value: bool = True     # the value head reads the trunk without training it (the authors: False)
    value_warmup_steps: int = 100 # full-batch steps fitting V to one SFT batch's reward-to-go (0: none)
    entropy_coef: float = 0.0     # entropy bonus; 0 as in the paper (entropy is logged only)
    gamma: float = 1.0            # discount
    lam: float = 0.95             # GAE lambda
    beta: float = 0.05            # KL penalty coefficient, fixed
    missing_eos_penalty: float = 1.0  # subtracted from the last token's reward when no EOS was sampled
    max_ratio: float = 10.0       # skip a minibatch whose mean ratio passes this (the authors use 10)
    compile: bool = False         # torch.compile the hot loss path (--compile)
    advantage: str = "gae"        # "gae": PPO's, with the value head; "grpo": normalised in groups (group_advantages)
    group: int = 8                # grpo: responses sampled per prompt (batch_size / group prompts per rollout)
    per: str = "token"            # grpo: normalise each token's reward over the group ("token") or each
                                  # response's sum ("response": a last-token reward's only way; on span rewards, verl's)


# Masked statistics: masks are float (B, N) tensors, 1 for real response tokens

def masked_whiten(x, mask, eps=1e-8):
    """(x - mean) / std over mask == 1, zero outside the mask."""
    count = mask.sum().clamp(min=1)
    mean = (x * mask).sum() / count
    var = ((x - mean) ** 2 * mask).sum() / count
    return (x - mean) * torch.rsqrt(var + eps) * mask


# Rewards and advantages

def final_scores(values, mask):
    """Standard RLHF: values (B,) -> scores (B, N), each on its response's last real token (the EOS if sampled)."""
    scores = torch.zeros(mask.shape, device=mask.device)
    last = (mask.sum(1).long() - 1).clamp(min=0)  # (B,) index of the last real token
    scores[torch.arange(len(last)), last] = torch.as_tensor(values, dtype=torch.float, device=mask.device)
    return scores * mask


def ended_with_eos(tokens, mask, eos_id):
    """(B,) True where a sampled response has its EOS, False where it was cut at max_new_tokens."""
    return ((tokens == eos_id) & mask.bool()).any(1)


def explained_variance(values, returns, mask):
    """1 - Var(R - V) / Var(R) over the real tokens: 1 for a perfect value function, 0 for the mean return."""
    residual = returns - values
    var_residual = masked_mean((residual - masked_mean(residual, mask)) ** 2, mask)
    var_returns = masked_mean((returns - masked_mean(returns, mask)) ** 2, mask)
    return (1 - var_residual / var_returns.clamp(min=1e-8)).item()


def token_rewards(scores, logprobs, ref_logprobs, mask, ended, beta, config):
    """r_t = score_t - beta * KL_t, KL_t = log pi(y_t) - log pi_ref(y_t) (the sampled-token estimate:
    negative on some tokens, right on average). A response that reaches max_new_tokens without an
    EOS (ended (B,) False) also loses config.missing_eos_penalty on its last token. All else (B, N)."""
    rewards = scores - beta * (logprobs - ref_logprobs)
    rewards = rewards - final_scores(config.missing_eos_penalty * (~ended).float(), mask)
    return rewards * mask


def compute_advantages(rewards, values, mask, gamma=1.0, lam=0.95):
    """GAE over response positions, backwards; the value past the end is 0.
        td_t = r_t + gamma * V_{t+1} - V_t
        A_t  = td_t + gamma * lam * A_{t+1}
    rewards, values, mask (B, N) -> (advantages, returns), returns = advantages + values, both
    before any whitening and zero outside the mask."""
    rewards, values = rewards * mask, values * mask  # past the end: reward 0, value 0
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    N = rewards.shape[1]
    for t in reversed(range(N)):
        next_value = values[:, t + 1] if t + 1 < N else torch.zeros_like(running)
        td = rewards[:, t] + gamma * next_value - values[:, t]
        running = td + gamma * lam * running
        advantages[:, t] = running
    advantages = advantages * mask
    return advantages, (advantages + values) * mask


def group_advantages(scores, mask, group, per="token"):
    """GRPO's advantages, no value head (after DeepSeekMath, section 4.1.3). The batch's rows come in
    groups of `group` responses to one prompt; each reward is compared with its own group's only:
      per "token"     process supervision with every response token a step (the paper's steps are
                      the reasoning steps that carry a reward): r~_t = (r_t - mean) / std over the
                      group's tokens, A_t = sum_{l >= t} r~_l. The mean taken off every token adds
                      (n - t) * (-mean / std) to A_t (t from 0, n tokens with the EOS): a length term
      per "response"  outcome supervision: R_i = sum_t score_t normalised over the group, A_t = R~_i on
                      every token of response i. A last-token reward's only way; on span rewards it
                      is the collapse verl makes: where the critique put them is lost
    scores, mask (B, N) -> advantages (B, N), zero outside the mask. std is the population std (TRL
    and verl use the sample std: sqrt(G / (G - 1)) smaller advantages). A group whose rewards are
    equal, up to float rounding, has advantage 0, not NaN and not rounding error divided by ~0."""
    def normalised(x, weight):  # (x - mean) / std over weight == 1 along dim 1; 0 where std is ~0
        count = weight.sum(1, keepdim=True).clamp(min=1)
        mean = (x * weight).sum(1, keepdim=True) / count
        std = (((x - mean) ** 2 * weight).sum(1, keepdim=True) / count).sqrt()
        return torch.where(std > 1e-5 * (1 + mean.abs()), (x - mean) / std, torch.zeros_like(x)) * weight
    B, N = scores.shape
    if per == "response":
        R = (scores * mask).sum(1).view(-1, group)                                # (B/G, G)
        return normalised(R, torch.ones_like(R)).reshape(B, 1) * mask
    if per != "token":
        raise ValueError(f"unknown per {per!r}; use 'token' or 'response'")
    r = normalised(scores.reshape(-1, group * N), mask.reshape(-1, group * N))   # (B/G, G*N)
    return r.view(B, N).flip(1).cumsum(1).flip(1) * mask                          # sum from t to the end


def reward_to_go(rewards, mask, gamma=1.0):
    """R_t = sum_{l >= t} gamma^(l-t) r_l: GAE's returns with V = 0 and lambda = 1. (B, N) -> (B, N)."""
    return compute_advantages(rewards, torch.zeros_like(rewards), mask, gamma, 1.0)[1]


# Policy with a value head

class PolicyWithValue(nn.Module):
    """The policy GPT plus a value head reading the same hidden states: an MLP, C -> C -> 1, whose
    last layer starts at zero (V = 0 before any fitting). detach: the head's gradient stops at the
    hidden states, so fitting V never moves the policy."""

    def __init__(self, gpt, detach=True):
        super().__init__()
        self.gpt, self.detach = gpt, detach
        C = gpt.config.n_embd
        self.value_head = nn.Sequential(nn.Linear(C, C), nn.GELU(), nn.Linear(C, 1))
        generator = torch.Generator().manual_seed(0)  # the same head in every run, whatever ran before
        with torch.no_grad():
            for p in self.value_head[0].parameters():
                p.uniform_(-C ** -0.5, C ** -0.5, generator=generator)
        nn.init.zeros_(self.value_head[2].weight)
        nn.init.zeros_(self.value_head[2].bias)

    def forward(self, ids, attention_mask, start, N):
        """Logits (B, N, V) and values (B, N) at the N positions that predict the response tokens
        ids[:, start+1 : start+1+N] (start: the last prompt position); the LM head runs there only."""
        hidden = self.gpt.hidden_states(ids, attention_mask)[:, start:start + N]  # (B, N, C)
        return self.gpt.lm_head(hidden), self.value(hidden)

    def value(self, hidden):
        """V (B, N) from hidden states (B, N, C)."""
        return self.value_head(hidden.detach() if self.detach else hidden).squeeze(-1)

    def optimizer(self, config):
        """Adam with the policy and the value head as two groups (value_lr None: one learning rate)."""
        return torch.optim.Adam([{"params": self.gpt.parameters(), "lr": config.lr},
                                 {"params": self.value_head.parameters(), "lr": config.value_lr or config.lr}],
                                betas=(0.9, 0.95), eps=1e-5)


def warm_up_value(model, optimizer, batch, scores, config):
    """Before the first update, fit V (only V: the trunk's hidden states are computed once, without
    gradient) to the reward-to-go R_t = sum_{l >= t} gamma^(l-t) r_l of one scored SFT batch (KL_t = 0:
    the policy is the reference), by config.value_warmup_steps full-batch steps of 0.5 mean_t (V_t - R_t)^2.
    Returns the explained variance before and after."""
    mask = batch["mask"]
    rewards = token_rewards(scores, batch["logprobs"], batch["ref_logprobs"], mask, batch["ended"], 0.0, config)
    returns = reward_to_go(rewards, mask, config.gamma)
    with torch.no_grad():
        hidden = model.gpt.hidden_states(batch["ids"], batch["attention_mask"])[:, batch["start"]:batch["start"] + mask.shape[1]]
    before = explained_variance(model.value(hidden).detach(), returns, mask)
    for step in range(config.value_warmup_steps):
        loss = 0.5 * masked_mean((model.value(hidden) - returns) ** 2, mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.value_head.parameters(), 1.0)
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return before, explained_variance(model.value(hidden).detach(), returns, mask)


@torch.no_grad()
def score_responses(model, reference, prompts, tokens, mask, eos_id, pad_id, config):
    """The batch dict PPO trains on, from one full forward pass of the policy and of the reference over
    <prompt, response>. prompts: B token-id lists; tokens, mask (B, N) as generate() returns them."""
    device = tokens.device
    prompt_ids, prompt_mask = left_pad(prompts, pad_id, device)
    ids = torch.cat([prompt_ids, tokens], 1)
    attention_mask = torch.cat([prompt_mask, mask.long()], 1)
    start, N = prompt_ids.shape[1] - 1, tokens.shape[1]
    policy_path = compiled_logprobs_and_entropy if config.compile else logprobs_and_entropy
    reference_path = compiled_token_logprobs if config.compile else token_logprobs  # no entropy needed
    temperature = torch.tensor(config.temperature, device=device)  # a tensor: no recompile if it changes
    logits, values = model(ids, attention_mask, start, N)
    logprobs, entropy = policy_path(logits, tokens, temperature)
    ref_logits = reference.lm_head(reference.hidden_states(ids, attention_mask)[:, start:start + N])
    ref_logprobs = reference_path(ref_logits, tokens, temperature)
    ended = ended_with_eos(tokens, mask, eos_id)
    mask = mask.float()
    return {"ids": ids, "ended": ended, "attention_mask": attention_mask, "start": start, "tokens": tokens, "mask": mask,
            "logprobs": logprobs * mask, "ref_logprobs": ref_logprobs * mask, "values": values * mask,
            "entropy": entropy * mask}


def rollout(model, reference, prompts, eos_id, pad_id, config, generator=None):
    """Sample one response per prompt (token-id lists) at config.temperature and score it."""
    tokens, _, mask = generate(model.gpt, prompts, config.max_new_tokens, eos_id, pad_id,
                               temperature=config.temperature, generator=generator)
    return score_responses(model, reference, prompts, tokens, mask, eos_id, pad_id, config)


def ppo_iteration(model, optimizer, batch, scores, config, generator=None):
    """Rewards, advantages and config.epochs epochs of minibatch updates on one scored batch.
    scores (B, N) from guards.shaped_scores or final_scores. Returns the logged means: reward, score
    and kl_ref (sums per response: r_t, score_t, KL_t); LOSS_STATS over the minibatch steps (approx_kl
    measured before each step); explained_variance of the values against the GAE returns, and _mc
    against the reward-to-go (comparable across lambdas); skipped minibatches (ratio past
    max_ratio); length and eos_rate of the responses."""
    mask = batch["mask"]
    B = len(mask)
    kl_tokens = (batch["logprobs"] - batch["ref_logprobs"]) * mask
    rewards = token_rewards(scores, batch["logprobs"], batch["ref_logprobs"], mask, batch["ended"], config.beta, config)
    if config.advantage == "grpo":  # the one seam: no value head; the KL stays in the reward, not normalised
        given = token_rewards(scores, batch["logprobs"], batch["ref_logprobs"], mask, batch["ended"], 0.0, config)
        advantages = group_advantages(given, mask, config.group, config.per) - config.beta * reward_to_go(kl_tokens, mask)
        returns, explained, explained_mc = batch["values"], math.nan, math.nan  # V is not fitted (value_coef 0)
    else:
        advantages, returns = compute_advantages(rewards, batch["values"], mask, config.gamma, config.lam)
        explained = explained_variance(batch["values"], returns, mask)
        explained_mc = explained_variance(batch["values"], reward_to_go(rewards, mask, config.gamma), mask)
        advantages = masked_whiten(advantages, mask)

    device = mask.device
    value_clip = math.inf if config.value_clip is None else config.value_clip  # clamp to +-inf: no clip
    value_coef = 0.0 if config.advantage == "grpo" else config.value_coef
    coefficients = [torch.tensor(c, device=device) for c in
                    (config.temperature, config.clip, value_clip, value_coef, config.entropy_coef)]
    loss_fn = compiled_ppo_loss if config.compile else ppo_loss
    totals, steps, skipped = torch.zeros(len(LOSS_STATS), device=device), 0, 0
    model.train()
    for epoch in range(config.epochs):
        order = torch.randperm(B, generator=generator).to(device)
        for i in range(0, B, config.minibatch_size):
            mb = order[i:i + config.minibatch_size]
            logits, values = model(batch["ids"][mb], batch["attention_mask"][mb], batch["start"], mask.shape[1])
            loss, stats = loss_fn(logits, values, batch["tokens"][mb], mask[mb], batch["logprobs"][mb],
                                  batch["values"][mb], advantages[mb], returns[mb], *coefficients)
            # the minibatch's one wait for the device: skip it or not, and is its loss finite
            ratio, not_finite = torch.stack([stats[-1], (~torch.isfinite(loss)).float()]).tolist()
            if ratio > config.max_ratio:
                skipped += 1
                continue
            if not_finite:
                raise FloatingPointError(f"the PPO loss is {loss.item()} (epoch {epoch}, minibatch {i // config.minibatch_size})")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            # each group its own gradient clip: the value loss (returns of +-10) must not shrink the policy's step
            for group in optimizer.param_groups:
                torch.nn.utils.clip_grad_norm_(group["params"], 1.0)
            optimizer.step()
            totals, steps = totals + stats, steps + 1
    model.eval()
    means = torch.stack([*(totals / max(1, steps)), rewards.sum(1).mean(), scores.sum(1).mean(),
                         kl_tokens.sum(1).mean(), mask.sum(1).mean(), batch["ended"].float().mean()]).tolist()
    logged = dict(zip(LOSS_STATS + ("reward", "score", "kl_ref", "length", "eos_rate"), means))
    logged.update(explained_variance=explained, explained_variance_mc=explained_mc, skipped=skipped)
    return logged


def draw(rng, n_prompts, config):
    """A rollout's prompt indices: config.batch_size prompts (gae), or batch_size / group prompts, each
    `group` times side by side (grpo): the same number of sampled responses either way."""
    if config.advantage == "gae":
        return rng.sample(range(n_prompts), config.batch_size)
    if config.advantage != "grpo" or config.batch_size % config.group:
        raise ValueError(f"advantage {config.advantage!r}, group {config.group}: use 'gae', or 'grpo' with a group that divides batch_size {config.batch_size}")
    return [i for i in rng.sample(range(n_prompts), config.batch_size // config.group) for _ in range(config.group)]


def train(model, reference, prompts, reward_fn, eos_id, pad_id, config, seed=0, evaluate=None, eval_every=10,
          desc="ppo"):
    """config.updates PPO iterations on prompts drawn from `prompts` (token-id lists), after the value
    warm-up (its batch drawn like an update's). reward_fn(indices, tokens, mask) -> scores (B, N).
    evaluate(gpt) -> a validation metric (or a tuple: metric, then more to keep), before the first
    update, every eval_every updates and after the last: the curve's points (update, metric, ...).
    Returns (curve, history [each update's logged dict], warmup {explained variance before, after})."""
    rng = random.Random(seed)
    generator = torch.Generator(next(model.parameters()).device).manual_seed(seed)
    cpu_generator = torch.Generator().manual_seed(seed)
    optimizer = model.optimizer(config)
    point = lambda update, measured: (update, *measured) if isinstance(measured, tuple) else (update, measured)
    curve, history, warmup = ([point(0, evaluate(model.gpt))] if evaluate else []), [], {}
    if config.value_warmup_steps and config.advantage == "gae":
        indices = draw(rng, len(prompts), config)
        batch = rollout(model, reference, [prompts[i] for i in indices], eos_id, pad_id, config, generator)
        before, after = warm_up_value(model, optimizer, batch, reward_fn(indices, batch["tokens"], batch["mask"]), config)
        warmup = {"explained_variance_before": before, "explained_variance_after": after}
    bar = tqdm(range(1, config.updates + 1), desc=desc, leave=False)
    for update in bar:
        indices = draw(rng, len(prompts), config)
        batch = rollout(model, reference, [prompts[i] for i in indices], eos_id, pad_id, config, generator)
        scores = reward_fn(indices, batch["tokens"], batch["mask"])
        history.append(ppo_iteration(model, optimizer, batch, scores, config, cpu_generator))
        bar.set_postfix({k: f"{history[-1][k]:.3f}" for k in ("score", "kl_ref", "approx_kl")}, refresh=False)
        if evaluate and (update % eval_every == 0 or update == config.updates):
            curve.append(point(update, evaluate(model.gpt)))
    return curve, history, warmup
