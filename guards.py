"""The guards against a gamed reward: what keeps a policy from farming a learned reward model.

A learned reward is a proxy for the critic, and PPO optimises whatever it pays for (RESULTS.md,
"Over-optimisation"). With the paper's +1 on every praised token, a policy learned to make praised
phrases long, say them twice, and run to the length limit, while the critic's own score fell. The
guards, each a PPOConfig field, the same for every method:
  praise "span"   a praised span shares +1 over its tokens, a repeated one earns 0 (bound_praise);
                  "token", the paper's, +1 per praised token (each task's choice: text2grad.PRAISE)
  cut_praise      a response cut at the length limit keeps its blame and no praise (shaped_scores)
  praise_fade_at  praise fades past that response position (dense_scores, length_weight)
  refresh_every   the learned reward model keeps training on the policy's own samples, annotated
                  by the critic (Refresh)
shaped_scores turns a delta per token into PPO's scores through the first three; Refresh wraps a
method's reward for the fourth. ppo.py knows none of this: it takes the scores it is given.
"""
import torch

from reward import continue_training, encode_sample
from sft import response_ids


def length_weight(N, fade_at, device=None):
    """w_t = sigmoid((fade_at - t) / 4) for response positions t = 0..N-1: ~1 well before fade_at,
    1/2 at it, ~0 a dozen tokens after it."""
    t = torch.arange(N, dtype=torch.float, device=device)
    return torch.sigmoid((fade_at - t) / 4)


def dense_scores(deltas, mask, praise_fade_at=None):
    """Text2Grad: one delta per response token (lists, EOS excluded) -> scores (B, N); the EOS and
    padding score 0.

    The guard against reward farming: dense +1 rewards would pay a policy to ramble on with praised
    phrases, so with praise_fade_at a positive delta at position t is scaled by length_weight
    (~1 well before praise_fade_at, 1/2 there, ~0 a dozen tokens after it; the authors fade praise
    and blame alike, on summarisation only: DETAILS.md, "Where this project departs"). Blame never fades. The scalar baseline needs no such guard: its one score already
    counts the blamed tokens of a long response."""
    scores = torch.zeros(mask.shape)  # filled on the host, then one copy to the device
    for i, delta in enumerate(deltas):
        n = min(len(delta), scores.shape[1])
        scores[i, :n] = torch.tensor(delta[:n], dtype=torch.float)
    scores = scores.to(mask.device)
    if praise_fade_at is not None:
        scores = torch.where(scores > 0, scores * length_weight(scores.shape[1], praise_fade_at, scores.device), scores)
    return scores * mask


def bound_praise(delta, tokens):
    """Praise that cannot grow with length (praise "span"). One response's deltas and token ids ->
    its scores (floats): each praised span, a maximal run of positive deltas, shares +1 over its
    tokens (a span of n tokens pays 1/n per token), and a span whose token ids repeat an earlier
    praised span of the response pays 0. Blame keeps -1 per token.
    Where this departs from the paper: there every praised token earns +1, so a longer praised
    phrase, or the same praised clause said twice, pays more, and a policy optimising a learned
    reward finds that out (RESULTS.md, "Over-optimisation"). Here praise counts phrases, once each;
    blame still grows with the blamed tokens, so rambling never pays."""
    scores, seen, t = [float(d) for d in delta], set(), 0
    while t < len(delta):
        if delta[t] <= 0:
            t += 1
            continue
        end = t
        while end < len(delta) and delta[end] > 0:
            end += 1
        span = tuple(tokens[t:end])
        scores[t:end] = [0.0 if span in seen else 1.0 / (end - t)] * (end - t)
        seen.add(span)
        t = end
    return scores


def shaped_scores(deltas, responses, mask, ended, config):
    """Text2Grad's scores (B, N) from a delta per response token, with the guards config switches on:
      praise "span"   bound_praise: one unit per distinct praised phrase, not one per token;
      cut_praise      a response cut at the length limit (ended (B,) False) keeps its blame and no praise;
      praise_fade_at  praise fades past that position (dense_scores).
    deltas, responses: B lists (deltas, token ids) of the responses, EOS excluded."""
    if config.praise == "span":
        deltas = [bound_praise(d, r) for d, r in zip(deltas, responses)]
    elif config.praise != "token":
        raise ValueError(f"unknown praise {config.praise!r}; use 'token' or 'span'")
    if config.cut_praise:
        deltas = [d if end else [min(x, 0) for x in d] for d, end in zip(deltas, ended.tolist())]
    return dense_scores(deltas, mask, config.praise_fade_at)


class Refresh:
    """A learned reward refreshed on the policy's own samples (iterated RLHF; PRIME updates its reward
    model online). Called like a reward f(indices, tokens, mask): it scores the rollout with
    the reward model as it is, and at every config.refresh_every-th rollout it scores (the value
    warm-up's counts) the critic annotates the first config.refresh_samples of its responses, and the
    model continues training on all the fresh annotations so far (reward.continue_training). The span
    and the scalar reward model alike: the same annotations feed whichever the method reads.
    Annotation budget per run: refresh_samples x ((updates + 1) // refresh_every).
    score: the method's f(indices, tokens, mask) reading `model` (text2grad.reward_function); model is
    changed in place: give each run its own copy (text2grad.method_reward does). items: the model's
    original training items, which every refresh keeps mixing in."""

    def __init__(self, score, model, task, tokenizer, examples, items, config, seed=0):
        self.model, self.score = model, score
        self.task, self.tokenizer, self.examples, self.items = task, tokenizer, examples, items
        self.config, self.seed, self.calls, self.fresh = config, seed, 0, []

    def __call__(self, indices, tokens, mask):
        scores = self.score(indices, tokens, mask)
        self.calls += 1
        if self.calls % self.config.refresh_every == 0:
            n = self.config.refresh_samples
            for i, ids in zip(indices[:n], response_ids(self.tokenizer, tokens[:n], mask[:n])):
                annotation = self.task.critique(self.examples[i], self.tokenizer.decode(ids))
                self.fresh.append(encode_sample(self.tokenizer, self.examples[i].prompt, ids, annotation,
                                                self.model.gpt.config.block_size))
            continue_training(self.model, self.tokenizer, self.fresh, self.items, self.config.refresh_steps, n,
                              self.config.refresh_lr, next(self.model.parameters()).device,
                              self.seed * 1000 + self.calls, desc=f"refresh {self.model.kind} reward model")
        return scores

    def state_dict(self):
        return {"model": self.model.state_dict(), "fresh": self.fresh, "calls": self.calls}

    def load_state_dict(self, state):
        self.model.load_state_dict(state["model"])
        self.fresh, self.calls = state["fresh"], state["calls"]
