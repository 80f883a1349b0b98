"""The guards against a gamed reward: what keeps a policy from farming a learned reward model.

A learned reward is a proxy, and PPO optimises whatever it pays for: with +1 on every praised token
(the paper's), a policy made praised phrases long, said them twice and ran to the length limit while
the critic's score fell (RESULTS.md). The guards turn a delta per token into PPO's scores:
  praise "phrase" a praised span shares +1 over its tokens, a repeated one earns 0 (bound_praise);
                  "token", the paper's, +1 per praised token (each task's choice: PRAISE)
  cut_praise      a response cut at the length limit keeps its blame and no praise
  praise_fade_at  praise fades past that response position (dense_scores, length_weight)
A fourth defence, in the lab, is more training, not shaping: the reward model refreshed on the
policy's own samples as PPO runs (experiments/refresh.py). ppo.py takes the scores it is given.
"""
from dataclasses import dataclass

import torch


@dataclass
class Guards:
    praise: str = "phrase"        # "phrase": a praised span shares +1 over its tokens, and a
                                  # repeated one earns nothing (bound_praise); "token": +1 on
                                  # every praised token (the paper)
    cut_praise: bool = True       # a response cut at the length limit (no EOS) keeps no praise
    praise_fade_at: int = 40      # response position where praise has faded to half (length_weight)


# How PPO pays praise on each task, chosen on its validation prompts (RESULTS.md): summarize's
# critic states an omission only in prose, so per phrase made dropping a praised clause cheap.
PRAISE = {"summarize": "token", "code": "phrase", "qa": "phrase", "facts": "phrase"}


def length_weight(N, fade_at, device=None):
    """w_t = sigmoid((fade_at - t) / 4) for response positions t = 0..N-1: ~1 well before fade_at,
    1/2 at it, ~0 a dozen tokens after it."""
    t = torch.arange(N, dtype=torch.float, device=device)
    return torch.sigmoid((fade_at - t) / 4)


def dense_scores(deltas, mask, praise_fade_at=None):
    """One delta per response token (lists, EOS excluded) -> scores (B, N); the EOS and padding
    score 0. With praise_fade_at a positive delta at position t is scaled by length_weight, so
    that dense +1s cannot pay a policy to ramble on with praised phrases; blame never fades (the
    authors fade both, on summarisation only: DETAILS.md, "Where this project departs")."""
    scores = torch.zeros(mask.shape)  # filled on the host, then one copy to the device
    for i, delta in enumerate(deltas):
        n = min(len(delta), scores.shape[1])
        scores[i, :n] = torch.tensor(delta[:n], dtype=torch.float)
    scores = scores.to(mask.device)
    if praise_fade_at is not None:
        weight = length_weight(scores.shape[1], praise_fade_at, scores.device)
        scores = torch.where(scores > 0, scores * weight, scores)
    return scores * mask


def bound_praise(delta, tokens):
    """Praise that cannot grow with length (praise "phrase"). One response's deltas and token ids ->
    its scores (floats): each praised span, a maximal run of positive deltas, shares +1 over its
    tokens, and a span whose token ids repeat an earlier praised span of the response pays 0. Blame
    keeps -1 per token, so rambling never pays. (The paper pays +1 per praised token, so a longer
    praised phrase, or the same one said twice, pays more, and a policy finds that out.)"""
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


def shaped_scores(deltas, responses, mask, ended, shaping):
    """Text2Grad's scores (B, N) from a delta per response token, with the Guards switched on:
      praise "phrase" bound_praise: one unit per distinct praised phrase, not one per token;
      cut_praise      a response cut at the length limit (ended (B,) False) keeps its blame and
                      no praise;
      praise_fade_at  praise fades past that position (dense_scores).
    deltas, responses: B lists (deltas, token ids) of the responses, EOS excluded."""
    if shaping.praise == "phrase":
        deltas = [bound_praise(d, r) for d, r in zip(deltas, responses)]
    elif shaping.praise != "token":
        raise ValueError(f"unknown praise {shaping.praise!r}; use 'token' or 'phrase'")
    if shaping.cut_praise:
        deltas = [d if end else [min(x, 0) for x in d] for d, end in zip(deltas, ended.tolist())]
    return dense_scores(deltas, mask, shaping.praise_fade_at)
