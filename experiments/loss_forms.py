"""experiments/loss_forms.py: the hot loss path in three forms, and their errors against float64.

    naive    full log_softmax, then gather; entropy from the full probabilities (what most code
             does), and the PPO objective written out again from it, independently of ppo.py
    eager    ppo.py's math run eagerly (loss.py): logsumexp and one exp per logit
    compiled the same functions through torch.compile (what the PPO loop uses with --compile)

experiments/bench.py times them side by side; tests/test_bench.py holds them to float64.
"""
import torch

import loss
from model import token_logprobs


def naive_logprobs_and_entropy(logits, targets, temperature):
    """The usual way: the full (B, T, V) log-softmax in float32 (or float64 for float64 input, which
    makes it the reference), then gather; the entropy from the full probabilities."""
    logp_all = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature, dim=-1)
    return logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1), -(logp_all.exp() * logp_all).sum(-1)


def naive_logprobs(logits, targets, temperature):
    """The reference's log-probs the usual way: the full log-softmax, then gather; no entropy."""
    logp_all = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature, dim=-1)
    return logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def naive_ppo_loss(logits, values, targets, mask, old_logprobs, old_values, advantages, returns,
                   temperature, clip, value_clip, value_coef, entropy_coef):
    """The objective written out again from the full log-softmax, independently of ppo.py (the
    benchmark's reference and its slow form). Returns (loss, (policy loss, value loss, entropy))."""
    logprobs, entropy = naive_logprobs_and_entropy(logits, targets, temperature)
    count = mask.sum().clamp(min=1)
    ratio = torch.exp((logprobs - old_logprobs) * mask)
    surrogate = torch.min(ratio * advantages, torch.clamp(ratio, 1 - clip, 1 + clip) * advantages)
    policy_loss = -(surrogate * mask).sum() / count
    clipped = torch.clamp(values, old_values - value_clip, old_values + value_clip)
    value_loss = 0.5 * (torch.max((values - returns) ** 2, (clipped - returns) ** 2) * mask).sum() / count
    mean_entropy = (entropy * mask).sum() / count
    loss = policy_loss + value_coef * value_loss - entropy_coef * mean_entropy
    return loss, torch.stack([policy_loss, value_loss, mean_entropy]).detach()


# form -> (policy log-probs and entropy, reference log-probs, the loss)
FORMS = {
    "naive": (naive_logprobs_and_entropy, naive_logprobs, naive_ppo_loss),
    "eager": (loss.logprobs_and_entropy, token_logprobs, loss.ppo_loss),
    "compiled": (loss.compiled(loss.logprobs_and_entropy), loss.compiled(loss.token_logprobs),
                 loss.compiled(loss.ppo_loss)),
}


def make_inputs(N, V, dtype, device, T=256, seed=0):
    """A batch of N = B*T response positions with 10-50% padding per row. The logits are contiguous,
    as ppo.PolicyWithValue hands them over (its LM head runs on the response positions only)."""
    g = torch.Generator().manual_seed(seed)
    B = max(1, N // T)
    logits = (torch.randn(B, T, V, generator=g) * 2).to(device=device, dtype=dtype)
    ref_logits = (logits.float() + 0.1 * torch.randn(B, T, V, generator=g).to(device)).to(dtype)
    targets = torch.randint(0, V, (B, T), generator=g).to(device)
    lengths = torch.randint(int(0.5 * T), int(0.9 * T) + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float().to(device)
    small = [torch.randn(B, T, generator=g).to(device) for _ in range(5)]
    old_logprobs = -torch.rand(B, T, generator=g).to(device) * 5
    coefficients = [torch.tensor(c, device=device) for c in (1.0, 0.2, 0.2, 0.1, 0.0)]
    return {"logits": logits, "ref_logits": ref_logits, "targets": targets, "mask": mask, "values": small[0],
            "old_values": small[1], "advantages": small[2], "returns": small[3], "old_logprobs": old_logprobs,
            "coefficients": coefficients}


def rollout_call(form, x):
    logprobs_and_entropy, reference_logprobs, _ = FORMS[form]
    temperature = x["coefficients"][0]

    def run():
        with torch.no_grad():
            logprobs, entropy = logprobs_and_entropy(x["logits"], x["targets"], temperature)
            ref_logprobs = reference_logprobs(x["ref_logits"], x["targets"], temperature)
        return logprobs, entropy, ref_logprobs
    return run


def training_call(form, x):
    """(run, logits): run() computes the loss and its gradients; logits.grad holds the result."""
    loss_fn = FORMS[form][2]
    logits = x["logits"].detach().requires_grad_()
    values = x["values"].detach().requires_grad_()

    def run():
        logits.grad = values.grad = None  # so the gradient is counted in the peak, never in the baseline
        loss, _ = loss_fn(logits, values, x["targets"], x["mask"], x["old_logprobs"], x["old_values"],
                          x["advantages"], x["returns"], *x["coefficients"])
        loss.backward()
        return loss
    return run, logits


def fp64_errors(x, rows=512):
    """Largest |error| of each form against float64 on the first `rows` positions: rollout (log-probs,
    entropies, reference log-probs) and training (the loss, and its gradient w.r.t. the logits)."""
    B = max(1, rows // x["logits"].shape[1])
    sub = {k: v if k == "coefficients" else v[:B] for k, v in x.items()}
    exact = {k: [c.double() for c in v] if k == "coefficients" else (v.double() if v.is_floating_point() else v)
             for k, v in sub.items()}
    reference_rollout = rollout_call("naive", exact)()
    reference_run, reference_logits = training_call("naive", exact)
    reference_loss = reference_run()
    errors = {}
    for form in FORMS:
        rollout = rollout_call(form, sub)()
        run, logits = training_call(form, sub)
        loss = run()
        errors[form] = {"rollout": max((a.double() - b).abs().max().item() for a, b in zip(rollout, reference_rollout)),
                        "loss": abs(loss.double().item() - reference_loss.item()),
                        "grad": (logits.grad.double() - reference_logits.grad).abs().max().item()}
    return errors
