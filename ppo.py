"""Token-level PPO: Text2Grad's third component (the paper's span-level policy optimisation).

One PPO iteration on a batch of prompts:
  1. rollout   sample a response per prompt at temperature tau, then one full forward pass records
               the policy's log-probs (pi_old), the frozen reference's log-probs and the values;
  2. reward    r_t = score_t - beta * KL_t, where score_t is delta_t through the guards on every
               token (Text2Grad) or their sum on the last real token (standard RLHF PPO);
  3. GAE       A_t = sum_l (gamma*lambda)^l (r_{t+l} + gamma V(t+l+1) - V(t+l)), returns = A + V;
  4. update    a few epochs of minibatches of the clipped surrogate plus the value loss (loss.py).
The "natural-language gradient" is nothing more than step 2: the critique decides *where* the
reward lands, and the policy gradient sum_t A_t grad log pi(y_t | x, y_<t) carries it from there,
after GAE, V and the whitening have spread it (example.py prints how far; landing.py measures it).

V is an MLP head reading the policy's trunk *detached*, with its own learning rate and a warm-up
on SFT samples (warm_up_value): the authors' V (through the trunk, weight 0.1, clip 0.2) barely
moves here (DETAILS.md, "The value head"). GRPO, the one alternative to step 3, is grpo.py.
On purpose: the KL is the sampled-token estimate with a fixed beta (the authors: the full KL, an
adaptive beta); losses are token means; advantages are whitened, rewards are not (that would erase
the scale of a +1 span against a -1 span); plain temperature sampling, so log-probs are exact.
Lines marked PLUMBING (compile switch, device waits, logging) are not the method: skip them.
"""
import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
from tqdm import tqdm

import grpo
import loss
from loss import masked_mean
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
    min_new_tokens: int = 0       # no EOS is sampled before this many tokens (the authors: 45)
    clip: float = 0.2             # policy ratio clip epsilon
    value_clip: float = None      # clip V around the rollout's values; None: no clip (authors: 0.2)
    value_coef: float = 1.0       # c_v, the value loss's weight (the authors: 0.1); the head has
                                  # its own Adam group, so it acts only through the gradient clip
    value_lr: float = 1e-3        # the value head's Adam learning rate (None: the policy's lr)
    detach_value: bool = True     # the value head reads the trunk without training it (authors: no)
    value_warmup_steps: int = 100  # full-batch steps fitting V to an SFT batch's reward-to-go
    entropy_coef: float = 0.0     # entropy bonus; 0 as in the paper (entropy is logged only)
    gamma: float = 1.0            # discount
    lam: float = 0.95             # GAE lambda
    beta: float = 0.05            # KL penalty coefficient, fixed
    missing_eos_penalty: float = 1.0  # taken from the last token's reward when no EOS was sampled
    max_ratio: float = 10.0       # skip a minibatch whose mean ratio passes this (the authors: 10)
    compile: bool = False         # torch.compile the hot loss path (--compile)
    advantage: str = "gae"        # "gae": PPO's, with the value head; "grpo": grpo.py
    group: int = 8                # grpo: responses per prompt (batch_size / group prompts each)
    per: str = "token"            # grpo: "token" or "response" (grpo.group_advantages)


# METHOD: rewards and advantages. Masks are float (B, N) tensors, 1 for real response tokens.

def final_scores(values, mask):
    """Standard RLHF: values (B,) -> scores (B, N), each on its response's last real token (the
    EOS if one was sampled), 0 elsewhere."""
    scores = torch.zeros(mask.shape, device=mask.device)
    last = (mask.sum(1).long() - 1).clamp(min=0)  # (B,) index of the last real token
    values = torch.as_tensor(values, dtype=torch.float, device=mask.device)
    scores[torch.arange(len(last)), last] = values
    return scores * mask


def token_rewards(scores, logprobs, ref_logprobs, mask, ended, beta, missing_eos_penalty):
    """r_t = score_t - beta * KL_t, KL_t = log pi(y_t) - log pi_ref(y_t) (the sampled-token
    estimate: negative on some tokens, right on average). A response that reached max_new_tokens
    without an EOS (ended (B,) False) also loses missing_eos_penalty on its last token.
    All else (B, N)."""
    rewards = scores - beta * (logprobs - ref_logprobs)
    rewards = rewards - final_scores(missing_eos_penalty * (~ended).float(), mask)
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


def reward_to_go(rewards, mask, gamma=1.0):
    """R_t = sum_{l >= t} gamma^(l-t) r_l: GAE's returns with V = 0 and lambda = 1. (B, N)."""
    return compute_advantages(rewards, torch.zeros_like(rewards), mask, gamma, 1.0)[1]


def masked_whiten(x, mask, eps=1e-8):
    """(x - mean) / std over mask == 1, zero outside the mask: what multiplies grad log pi."""
    count = mask.sum().clamp(min=1)
    mean = (x * mask).sum() / count
    var = ((x - mean) ** 2 * mask).sum() / count
    return (x - mean) * torch.rsqrt(var + eps) * mask


def ended_with_eos(tokens, mask, eos_id):
    """(B,) True where a sampled response has its EOS, False where max_new_tokens cut it."""
    return ((tokens == eos_id) & mask.bool()).any(1)


def explained_variance(values, returns, mask):
    """1 - Var(R - V) / Var(R) over the real tokens: 1 for a perfect value function, 0 for one
    that predicts the mean return."""
    residual = returns - values
    var_residual = masked_mean((residual - masked_mean(residual, mask)) ** 2, mask)
    var_returns = masked_mean((returns - masked_mean(returns, mask)) ** 2, mask)
    return (1 - var_residual / var_returns.clamp(min=1e-8)).item()


# METHOD: the policy with a value head

class PolicyWithValue(nn.Module):
    """The policy GPT plus a value head on its hidden states: an MLP, C -> C -> 1, last layer at
    zero (V = 0 before any fitting). detach: fitting V never moves the policy."""

    def __init__(self, gpt, detach=True):
        super().__init__()
        self.gpt, self.detach = gpt, detach
        C = gpt.config.n_embd
        self.value_head = nn.Sequential(nn.Linear(C, C), nn.GELU(), nn.Linear(C, 1))
        generator = torch.Generator().manual_seed(0)  # the same head in every run
        with torch.no_grad():
            for p in self.value_head[0].parameters():
                p.uniform_(-C ** -0.5, C ** -0.5, generator=generator)
        nn.init.zeros_(self.value_head[2].weight)
        nn.init.zeros_(self.value_head[2].bias)
        self.value_head.to(gpt.wte.weight.device)  # PLUMBING: made on the CPU, used where gpt is

    def forward(self, ids, attention_mask, last_prompt, N):
        """Logits (B, N, V) and values (B, N) at the N positions last_prompt .. last_prompt+N-1:
        position last_prompt (the prompt's last token) predicts the first response token, so
        logits[:, t] are for response token t. The LM head runs there only."""
        hidden = self.gpt.hidden_states(ids, attention_mask)
        hidden = hidden[:, last_prompt:last_prompt + N]  # (B, N, C)
        return self.gpt.lm_head(hidden), self.value(hidden)

    def value(self, hidden):
        """V (B, N) from hidden states (B, N, C)."""
        return self.value_head(hidden.detach() if self.detach else hidden).squeeze(-1)

    def optimizer(self, config):
        """Adam with the policy and the value head as two groups (value_lr None: one rate)."""
        groups = [{"params": self.gpt.parameters(), "lr": config.lr},
                  {"params": self.value_head.parameters(), "lr": config.value_lr or config.lr}]
        return torch.optim.Adam(groups, betas=(0.9, 0.95), eps=1e-5)


def warm_up_value(model, optimizer, batch, scores, config):
    """Before the first update, fit V (only V: the trunk's hidden states are computed once,
    without gradient) to the reward-to-go R_t = sum_{l >= t} gamma^(l-t) r_l of one scored SFT
    batch (KL_t = 0: the policy is the reference), by config.value_warmup_steps full-batch steps
    of 0.5 mean_t (V_t - R_t)^2. Returns the explained variance before and after."""
    mask = batch["mask"]
    rewards = token_rewards(scores, batch["logprobs"], batch["ref_logprobs"], mask, batch["ended"],
                            0.0, config.missing_eos_penalty)
    returns = reward_to_go(rewards, mask, config.gamma)
    with torch.no_grad():
        hidden = model.gpt.hidden_states(batch["ids"], batch["attention_mask"])
        hidden = hidden[:, batch["last_prompt"]:batch["last_prompt"] + mask.shape[1]]
    before = explained_variance(model.value(hidden).detach(), returns, mask)
    for _ in range(config.value_warmup_steps):
        value_loss = 0.5 * masked_mean((model.value(hidden) - returns) ** 2, mask)
        optimizer.zero_grad(set_to_none=True)
        value_loss.backward()
        torch.nn.utils.clip_grad_norm_(model.value_head.parameters(), 1.0)
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return before, explained_variance(model.value(hidden).detach(), returns, mask)


# METHOD: rollout, then the update

@torch.no_grad()
def score_responses(model, reference, prompts, tokens, mask, eos_id, pad_id, config):
    """The batch dict PPO trains on, from one full forward pass of the policy and of the
    reference over <prompt, response>. prompts: B token-id lists; tokens, mask (B, N) as
    generate() returns them."""
    device = tokens.device
    prompt_ids, prompt_mask = left_pad(prompts, pad_id, device)
    ids = torch.cat([prompt_ids, tokens], 1)
    attention_mask = torch.cat([prompt_mask, mask.long()], 1)
    last_prompt, N = prompt_ids.shape[1] - 1, tokens.shape[1]
    # PLUMBING: the compiled twins of the same functions (loss.py), and temperature as a tensor
    policy_path, reference_path = loss.logprobs_and_entropy, token_logprobs
    if config.compile:
        policy_path = loss.compiled(loss.logprobs_and_entropy)
        reference_path = loss.compiled(token_logprobs)
    temperature = torch.tensor(config.temperature, device=device)  # no recompile if it changes
    logits, values = model(ids, attention_mask, last_prompt, N)
    logprobs, entropy = policy_path(logits, tokens, temperature)
    ref_hidden = reference.hidden_states(ids, attention_mask)[:, last_prompt:last_prompt + N]
    ref_logprobs = reference_path(reference.lm_head(ref_hidden), tokens, temperature)
    mask = mask.float()
    return {"ids": ids, "attention_mask": attention_mask, "last_prompt": last_prompt,
            "tokens": tokens, "mask": mask, "ended": ended_with_eos(tokens, mask, eos_id),
            "logprobs": logprobs * mask, "ref_logprobs": ref_logprobs * mask,
            "values": values * mask, "entropy": entropy * mask}


def rollout(model, reference, prompts, eos_id, pad_id, config, generator=None):
    """Sample one response per prompt (token-id lists) at config.temperature and score it."""
    tokens, _, mask = generate(model.gpt, prompts, config.max_new_tokens, eos_id, pad_id,
                               temperature=config.temperature, generator=generator,
                               min_new_tokens=config.min_new_tokens)
    return score_responses(model, reference, prompts, tokens, mask, eos_id, pad_id, config)


def ppo_iteration(model, optimizer, batch, scores, config, generator=None):
    """Rewards, advantages and config.epochs epochs of minibatch updates on one scored batch.
    scores (B, N) from guards.shaped_scores or final_scores. Returns the logged means: reward,
    score and kl_ref (sums per response: r_t, score_t, KL_t); loss.ppo_loss's statistics over the
    minibatch steps (approx_kl measured before each step); explained_variance of the values
    against the GAE returns, and _mc against the reward-to-go (comparable across lambdas);
    skipped minibatches (ratio past max_ratio); length and eos_rate of the responses."""
    mask, B = batch["mask"], len(batch["mask"])
    kl = (batch["logprobs"] - batch["ref_logprobs"]) * mask
    rewards = token_rewards(scores, batch["logprobs"], batch["ref_logprobs"], mask, batch["ended"],
                            config.beta, config.missing_eos_penalty)
    if config.advantage == "grpo":  # no value head, and the KL outside the normalisation: grpo.py
        given = token_rewards(scores, batch["logprobs"], batch["ref_logprobs"], mask,
                              batch["ended"], 0.0, config.missing_eos_penalty)
        advantages = grpo.advantages(given, kl, mask, config)
        returns, explained, explained_mc = batch["values"], math.nan, math.nan
    else:
        advantages, returns = compute_advantages(rewards, batch["values"], mask, config.gamma,
                                                 config.lam)
        explained = explained_variance(batch["values"], returns, mask)
        to_go = reward_to_go(rewards, mask, config.gamma)
        explained_mc = explained_variance(batch["values"], to_go, mask)
        advantages = masked_whiten(advantages, mask)

    # PLUMBING: coefficients as 0-d tensors (a compiled graph would bake in Python floats)
    value_clip = math.inf if config.value_clip is None else config.value_clip  # inf: no clip
    value_coef = 0.0 if config.advantage == "grpo" else config.value_coef
    coefficients = [torch.tensor(c, device=mask.device) for c in
                    (config.temperature, config.clip, value_clip, value_coef, config.entropy_coef)]
    loss_fn = loss.compiled(loss.ppo_loss) if config.compile else loss.ppo_loss
    totals, steps, skipped = {}, 0, 0
    model.train()
    for epoch in range(config.epochs):
        order = torch.randperm(B, generator=generator).to(mask.device)
        for i in range(0, B, config.minibatch_size):
            mb = order[i:i + config.minibatch_size]
            logits, values = model(batch["ids"][mb], batch["attention_mask"][mb],
                                   batch["last_prompt"], mask.shape[1])
            objective, stats = loss_fn(logits, values, batch["tokens"][mb], mask[mb],
                                       batch["logprobs"][mb], batch["values"][mb],
                                       advantages[mb], returns[mb], *coefficients)
            # PLUMBING: the minibatch's one wait for the device: skip it or not, finite or not
            checks = torch.stack([stats["ratio"], torch.isfinite(objective).float()])
            ratio, finite = checks.tolist()
            if ratio > config.max_ratio:
                skipped += 1
                continue
            if not finite:
                raise FloatingPointError(f"the PPO loss is {objective.item()} (epoch {epoch}, "
                                         f"minibatch {i // config.minibatch_size})")
            optimizer.zero_grad(set_to_none=True)
            objective.backward()
            # each group its own gradient clip: the value loss must not shrink the policy's step
            for group in optimizer.param_groups:
                torch.nn.utils.clip_grad_norm_(group["params"], 1.0)
            optimizer.step()
            totals = {k: totals.get(k, 0.0) + v for k, v in stats.items()}
            steps += 1
    model.eval()
    # PLUMBING: every logged mean in one wait for the device
    logged = {k: totals.get(k, torch.zeros_like(v)) / max(1, steps) for k, v in stats.items()}
    logged.update(reward=rewards.sum(1).mean(), score=scores.sum(1).mean(), kl_ref=kl.sum(1).mean(),
                  length=mask.sum(1).mean(), eos_rate=batch["ended"].float().mean())
    return {**dict(zip(logged, torch.stack(list(logged.values())).tolist())), "skipped": skipped,
            "explained_variance": explained, "explained_variance_mc": explained_mc}


def draw(rng, n_prompts, config):
    """A rollout's prompt indices: config.batch_size prompts (gae), or batch_size / group prompts,
    each `group` times side by side (grpo): the same number of sampled responses either way."""
    if config.advantage == "gae":
        return rng.sample(range(n_prompts), config.batch_size)
    if config.advantage != "grpo" or config.batch_size % config.group:
        raise ValueError(f"advantage {config.advantage!r}, group {config.group}: use 'gae', or "
                         f"'grpo' with a group that divides batch_size {config.batch_size}")
    prompts = rng.sample(range(n_prompts), config.batch_size // config.group)
    return [i for i in prompts for _ in range(config.group)]


def train(model, reference, prompts, reward_fn, eos_id, pad_id, config, seed=0, evaluate=None,
          eval_every=10, desc="ppo", watch=None):
    """config.updates PPO iterations on prompts drawn from `prompts` (token-id lists), after the
    value warm-up (its batch drawn like an update's). reward_fn(indices, tokens, mask) -> scores
    (B, N). evaluate(gpt) -> a validation metric (or a tuple: metric, then more to keep), before
    the first update, every eval_every updates and after the last: the curve's points (update,
    metric, ...). watch(update, indices, batch, model), if given, sees each update's batch after
    the update (the first look measures where the first one landed).
    Returns (curve, history [each update's logged dict], warmup {explained variance before and
    after})."""
    rng = random.Random(seed)
    generator = torch.Generator(next(model.parameters()).device).manual_seed(seed)
    cpu_generator = torch.Generator().manual_seed(seed)
    optimizer = model.optimizer(config)

    def point(update):  # (update, metric, ...)
        measured = evaluate(model.gpt)
        return (update, *measured) if isinstance(measured, tuple) else (update, measured)

    curve, history, warmup = ([point(0)] if evaluate else []), [], {}
    if config.value_warmup_steps and config.advantage == "gae":
        indices = draw(rng, len(prompts), config)
        batch = rollout(model, reference, [prompts[i] for i in indices], eos_id, pad_id, config,
                        generator)
        scores = reward_fn(indices, batch["tokens"], batch["mask"])
        before, after = warm_up_value(model, optimizer, batch, scores, config)
        warmup = {"explained_variance_before": before, "explained_variance_after": after}
    bar = tqdm(range(1, config.updates + 1), desc=desc, leave=False)
    for update in bar:
        indices = draw(rng, len(prompts), config)
        batch = rollout(model, reference, [prompts[i] for i in indices], eos_id, pad_id, config,
                        generator)
        scores = reward_fn(indices, batch["tokens"], batch["mask"])
        history.append(ppo_iteration(model, optimizer, batch, scores, config, cpu_generator))
        if watch:
            watch(update, indices, batch, model)
        shown = {k: f"{history[-1][k]:.3f}" for k in ("score", "kl_ref", "approx_kl")}
        bar.set_postfix(shown, refresh=False)  # PLUMBING: the progress bar
        if evaluate and (update % eval_every == 0 or update == config.updates):
            curve.append(point(update))
    return curve, history, warmup
