"""The guards against a gamed reward: what keeps a policy from farming a learned reward model.

A learned reward is a proxy for the critic, and PPO optimises whatever it pays for. With the paper's
+1 on every praised token, a policy learned to make praised phrases long, say them twice, and run
to the length limit, while the critic's own score fell (RESULTS.md). The guards, the same for every
method, turn a delta per token into PPO's scores (shaped_scores):
  praise "span"   a praised span shares +1 over its tokens, a repeated one earns 0 (bound_praise);
                  "token", the paper's, +1 per praised token (each task's choice: text2grad.PRAISE)
  cut_praise      a response cut at the length limit keeps its blame and no praise
  praise_fade_at  praise fades past that response position (dense_scores, length_weight)
The fourth defence is not a shaping of scores but more training: the learned reward model refreshed
on the policy's own samples (reward.Refresh). ppo.py knows none of this: it takes the scores it is given.
"""
from dataclasses import dataclass

import torch


@dataclass
class Guards:
    praise: str = "span"          # "span": a praised span shares +1 over its tokens, and a repeated one earns
                                  # nothing (bound_praise); "token": +1 on every praised token (the paper)
    cut_praise: bool = True       # a response cut at the length limit (no EOS) keeps no praise
    praise_fade_at: int = 40      # response position where praise has faded to half (length_weight)


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


def shaped_scores(deltas, responses, mask, ended, guards):
    """Text2Grad's scores (B, N) from a delta per response token, with the Guards switched on:
      praise "span"   bound_praise: one unit per distinct praised phrase, not one per token;
      cut_praise      a response cut at the length limit (ended (B,) False) keeps its blame and no praise;
      praise_fade_at  praise fades past that position (dense_scores).
    deltas, responses: B lists (deltas, token ids) of the responses, EOS excluded."""
    if guards.praise == "span":
        deltas = [bound_praise(d, r) for d, r in zip(deltas, responses)]
    elif guards.praise != "token":
        raise ValueError(f"unknown praise {guards.praise!r}; use 'token' or 'span'")
    if guards.cut_praise:
        deltas = [d if end else [min(x, 0) for x in d] for d, end in zip(deltas, ended.tolist())]
    return dense_scores(deltas, mask, guards.praise_fade_at)
