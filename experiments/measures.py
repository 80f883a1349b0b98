"""experiments/measures.py: what the lab measures beside the method's own numbers.

    overoptimisation   gold (the critic) and proxy (the method's own judge) against the KL to the
                       SFT policy, at every point of a PPO curve (Gao et al. 2023)
    evaluate_policy    sft.evaluate and the extras a run records: blamed share, lengths, alignment
    reward_metrics     reward.evaluate_reward_model with span_details: the confusion matrix and exact spans
    primary_score      a policy's greedy validation score, the PPO curves' points
    flaw_rates         the demonstrations' measured flaw rates

The method never calls these; experiments/protocol.py and the studies do.
"""
import torch

from align import align
from model import generate, left_pad, token_logprobs
from reward import evaluate_reward_model
from sft import evaluate, respond
from text2grad import METHODS, reward_function


def flaw_rates(examples):
    """Measured share of demonstrations carrying each flaw kind, and of any flaw."""
    kinds = sorted({f for e in examples for f in e.flaws})
    rates = {k: sum(k in e.flaws for e in examples) / len(examples) for k in kinds}
    rates["any"] = sum(bool(e.flaws) for e in examples) / len(examples)
    return rates


def mean_metrics(task, model, tokenizer, examples, desc="validate"):
    """The task's metrics of greedy responses, each averaged over examples (sft.evaluate without the
    critic): the points of the SFT learning curve."""
    responses, _ = respond(model, tokenizer, [e.prompt for e in examples], desc=desc)
    scores = [task.metrics(e, r) for e, r in zip(examples, responses)]
    return {k: sum(s[k] for s in scores) / len(scores) for k in scores[0]}


def primary_score(task, model, tokenizer, examples, desc="validate"):
    """The task's primary metric of greedy responses, averaged over examples: the PPO validation
    curve's points."""
    return mean_metrics(task, model, tokenizer, examples, desc)[task.PRIMARY]


def evaluate_policy(task, model, tokenizer, examples):
    """sft.evaluate and what the lab records beside it: "blamed_share", the share of response tokens
    inside a poor span; "length" and "reference_length", tokens per response (EOS not counted), the
    policy's and the references'; how well the critic's spans align to the tokens the policy wrote
    ("unaligned_rate", "labelled_token_share"). Returns (summary, samples)."""
    summary, samples, ids = evaluate(task, model, tokenizer, examples)
    aligned = [align(s["response"], tokenizer.offsets(i), s) for s, i in zip(samples, ids)]
    summary["blamed_share"] = sum(sum(d < 0 for d in delta) for delta, _ in aligned) / max(1, sum(map(len, ids)))
    summary["length"] = sum(map(len, ids)) / len(ids)
    summary["reference_length"] = sum(len(tokenizer.encode(e.reference)) for e in examples) / len(examples)
    total = {k: sum(stats[k] for _, stats in aligned) for k in aligned[0][1]}
    summary["unaligned_rate"] = total["unaligned"] / max(1, total["spans"])
    summary["labelled_token_share"] = total["labelled_tokens"] / max(1, total["tokens"])
    return summary, samples


def _runs(delta):
    """Maximal runs of equal non-zero labels: {(start, end, label)}."""
    runs, start = set(), None
    for t, d in enumerate(list(delta) + [0]):
        if start is not None and d != delta[start]:
            runs.add((start, t, delta[start]))
            start = None
        if start is None and d != 0 and t < len(delta):
            start = t
    return runs


def span_details(predicted, gold):
    """Beside reward.span_metrics' F1: the 3 x 3 confusion matrix of token labels and the share of
    gold spans (maximal runs of one label) predicted with exactly the same boundaries."""
    # confusion[g + 1][p + 1]: tokens with gold label g predicted as p (rows negative, neutral, positive)
    confusion = [[sum(g == row and p == col for ps, gs in zip(predicted, gold) for p, g in zip(ps, gs))
                  for col in (-1, 0, 1)] for row in (-1, 0, 1)]
    gold_runs = [_runs(g) for g in gold]
    hits = sum(len(_runs(p) & g) for p, g in zip(predicted, gold_runs))
    return {"confusion": confusion, "exact_span_match": hits / max(1, sum(len(g) for g in gold_runs))}


def reward_metrics(model, tokenizer, records, items):
    """reward.evaluate_reward_model's metrics, with span_details for a span model."""
    metrics, critiques, deltas = evaluate_reward_model(model, tokenizer, records, items)
    if model.kind == "span":
        metrics.update(span_details(deltas, [item["delta"] for item in items]))
    return metrics


@torch.no_grad()
def response_logprobs(gpt, prompts, tokens, mask, pad_id, temperature=1.0):
    """log pi(y_t | x, y_<t) (B, N) of given responses under gpt, one full forward pass; prompts: B
    token-id lists, tokens and mask (B, N) as generate() returns them; 0 outside the mask."""
    prompt_ids, prompt_mask = left_pad(prompts, pad_id, tokens.device)
    ids, attention_mask = torch.cat([prompt_ids, tokens], 1), torch.cat([prompt_mask, mask.long()], 1)
    start, N = prompt_ids.shape[1] - 1, tokens.shape[1]
    logits = gpt.lm_head(gpt.hidden_states(ids, attention_mask)[:, start:start + N])
    return token_logprobs(logits, tokens, temperature) * mask


def overoptimisation(method, task, tokenizer, examples, reward_models, reference, config, seed=0):
    """Over-optimisation measured as Gao et al. (2023) measure it: f(gpt) -> a dict of means over one
    sampled response per example (temperature config.temperature, the same random numbers at every
    call, so successive points differ by the policy only):
      proxy       what the method's own judge says, unguarded: sum_t delta_t of the span reward model,
                  the scalar reward model's number (its target sums through the guards:
                  reward.scalar_targets), the critic's sum for the oracle methods
      gold        the critic's sum_t delta_t (praised minus blamed tokens): the proxy's units, except for
                  ppo_scalar, whose proxy is in its target's guarded units (a fixed offset on code and qa)
      kl          KL(pi || pi_sft) per response, its k1 estimate sum_t log pi(y_t) - log pi_sft(y_t)
      length      response tokens, EOS included
      criticised  the share of response tokens the critic blames
    Plotted against sqrt(kl): a proxy that keeps rising while the gold turns is a reward being gamed."""
    judge = METHODS[method][0]
    proxy_fn = reward_function(method, task, tokenizer, examples, reward_models)
    critic_fn = reward_function("oracle", task, tokenizer, examples, reward_models)  # dense, unguarded
    prompts = [tokenizer.prompt(e.prompt) for e in examples]
    indices = list(range(len(examples)))

    def measure(gpt):
        device = next(gpt.parameters()).device
        generator = torch.Generator(device).manual_seed(seed)
        tokens, _, mask = generate(gpt, prompts, config.max_new_tokens, tokenizer.eos_id, tokenizer.pad_id,
                                   temperature=config.temperature, generator=generator)
        kl = (response_logprobs(gpt, prompts, tokens, mask, tokenizer.pad_id, config.temperature)
              - response_logprobs(reference, prompts, tokens, mask, tokenizer.pad_id, config.temperature)).sum(1)
        critic = critic_fn(indices, tokens, mask)  # (B, N)
        gold = critic.sum(1)
        proxy = gold if judge == "critic" else proxy_fn(indices, tokens, mask).sum(1)
        length = mask.float().sum(1)
        return {"proxy": proxy.mean().item(), "gold": gold.mean().item(), "kl": kl.mean().item(),
                "length": length.mean().item(), "criticised": ((critic < 0).float().sum() / length.sum()).item()}
    return measure
