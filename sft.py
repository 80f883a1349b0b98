"""Pretraining and SFT: next-token training on answers, then greedy (or sampled) responses.

    SFT:          <|bos|> prompt <|response|> demonstration <|eos|>
    pretraining:  <|bos|> passage Question: q1 <|response|> a1 <|eos|> Question: q2 ...

The loss falls on the answer tokens only (and their EOS). Pretraining reads documents of the task's
correct text (data.document), as a base model reads text before it is fine-tuned: on qa one
sequence teaches a dozen look-ups instead of one. SFT then learns the flawed demonstrations, so
that RL has something to fix. evaluate() scores greedy responses with the task's metric (which no
model touches) and asks the task's critic about them.
"""
import math
import random

import torch
import torch.nn.functional as F
from tqdm import tqdm

from data import document
from model import GPT, GPTConfig, generate

MAX_NEW_TOKENS = 64  # longest response the policy may write; demonstrations fit well inside


# SFT: next-token cross-entropy on the demonstrations, response tokens only

def fit(model, batch_loss, steps, lr, warmup=0, desc="train", seed=0, evaluate=None, eval_every=0):
    """The optimisation loop SFT and the reward models share: Adam (no weight decay: the models
    are tiny and the data plentiful), linear warm-up over `warmup` steps, then cosine decay to 10%
    of lr, gradients clipped to norm 1. batch_loss(step, rng) -> (loss, {name: 0-d tensor to
    show}), rng the loop's random.Random(seed). evaluate(model) -> {name: float}, every eval_every
    steps (and after the last), in eval mode: the learning curve.
    Returns (the loss per step, the curve [(step, metrics)])."""
    def lr_factor(step):  # warm-up, then cosine from 1 to 0.1
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.45 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    rng = random.Random(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.95))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    losses, curve = [], []
    model.train()
    bar = tqdm(range(steps), desc=desc, leave=False)
    for step in bar:
        loss, parts = batch_loss(step, rng)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        # PLUMBING: the step's one wait for the device: the loss and the bar's numbers together
        measured = torch.stack([loss.detach(), *parts.values()]).tolist()
        loss_value, shown = measured[0], measured[1:]
        if not math.isfinite(loss_value):  # before the step reaches the weights
            raise FloatingPointError(f"{desc}: the loss is {loss_value} at step {step}")
        optimizer.step()
        schedule.step()
        losses.append(loss_value)
        bar.set_postfix({k: f"{v:.3f}" for k, v in zip(parts, shown)}, refresh=False)
        at_point = (step + 1) % eval_every == 0 or step + 1 == steps if eval_every else False
        if evaluate is not None and at_point:
            model.eval()
            curve.append((step + 1, evaluate(model)))
            model.train()
    model.eval()
    return losses, curve


def document_batch(tokenizer, documents, device, max_len=None):
    """Documents, each a list of turns (text, answer), as right-padded rows
    <|bos|> text_1 <|response|> answer_1 <|eos|> text_2 <|response|> answer_2 <|eos|> ..., each
    keeping the turns that fit in max_len tokens (at least the first). Returns inputs, targets and
    loss_mask (B, T): 1 where the target is an answer token or an EOS; the texts are context
    only."""
    rows = []
    for turns in documents:
        row, answer_at = [tokenizer.bos_id], []
        for text, answer in turns:
            context = [*tokenizer.encode(text), tokenizer.response_id]
            answer_ids = [*tokenizer.encode(answer), tokenizer.eos_id]
            longer = len(row) + len(context) + len(answer_ids)
            if answer_at and max_len is not None and longer > max_len:
                break
            row += context
            answer_at.append((len(row), len(row) + len(answer_ids)))
            row += answer_ids
        rows.append((row, answer_at))
    T = max(len(r) for r, _ in rows) - 1
    inputs = torch.full((len(rows), T), tokenizer.pad_id, dtype=torch.long)
    targets = torch.full((len(rows), T), tokenizer.pad_id, dtype=torch.long)
    loss_mask = torch.zeros(len(rows), T)
    for i, (row, answer_at) in enumerate(rows):
        inputs[i, :len(row) - 1] = torch.tensor(row[:-1])
        targets[i, :len(row) - 1] = torch.tensor(row[1:])
        for start, end in answer_at:
            loss_mask[i, start - 1:end - 1] = 1  # start-1 predicts the answer's first token
    return inputs.to(device), targets.to(device), loss_mask.to(device)


def train_sft(model, tokenizer, examples, steps, batch_size, lr, device, seed, evaluate=None,
              eval_every=0, document=None, desc="sft"):
    """Next-token cross-entropy on the demonstrations (fit, 5% warm-up), each batch drawn at random
    from the whole pool (with about steps * batch_size of them, each is seen about once). document(
    example, rng) -> turns: what is read of an example instead (pretraining's documents,
    data.document).
    Returns (the loss per step, the curve of evaluate(model) every eval_every steps): see fit."""
    document = document or (lambda e, rng: [(e.prompt, e.demonstration)])

    def batch_loss(step, rng):
        documents = [document(e, rng) for e in rng.sample(examples, batch_size)]
        inputs, targets, loss_mask = document_batch(tokenizer, documents, device,
                                                    model.config.block_size)
        _, logits = model(inputs)                                               # (B, T, V)
        nll = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(),
                              reduction="none")                                 # (B*T,)
        loss = (nll * loss_mask.flatten()).sum() / loss_mask.sum()  # mean over answer tokens
        return loss, {"loss": loss.detach()}

    return fit(model, batch_loss, steps, lr, warmup=max(1, steps // 20), desc=desc, seed=seed,
               evaluate=evaluate, eval_every=eval_every)


# Evaluation: greedy responses scored by the task metric and read by the critic

def sft_policy(config, task, tokenizer, demonstrations):
    """A new GPT of config's sizes (text2grad.Config), pretrained on the task's correct text, then
    SFT on the flawed demonstrations (sft_on "references": the references RL is denied)."""
    policy = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=config.block_size,
                           n_layer=config.n_layer, n_head=config.n_head,
                           n_embd=config.n_embd)).to(config.device)
    train_sft(policy, tokenizer, demonstrations, config.pretrain_steps, config.batch_size,
              config.lr, config.device, config.seed,
              document=lambda e, rng: document(task, e, rng), desc="pretraining")
    clean = (lambda e, rng: [(e.prompt, e.reference)]) if config.sft_on == "references" else None
    train_sft(policy, tokenizer, demonstrations, config.sft_steps, config.batch_size, config.lr,
              config.device, config.seed, document=clean)
    return policy


def response_ids(tokenizer, tokens, mask):
    """Rows of sampled tokens (B, N) -> token-id lists of the responses, EOS and padding dropped."""
    return [[t for t, keep in zip(row, m) if keep and t != tokenizer.eos_id]
            for row, m in zip(tokens.tolist(), mask.tolist())]


def respond(model, tokenizer, prompts, greedy=True, temperature=1.0, batch_size=100,
            generator=None, desc="generate"):
    """Responses to prompt strings: (texts, token ids), up to the EOS; desc None: no bar."""
    ids = []
    for i in tqdm(range(0, len(prompts), batch_size), desc=desc, leave=False, disable=desc is None):
        chunk = [tokenizer.prompt(p) for p in prompts[i:i + batch_size]]
        tokens, _, mask = generate(model, chunk, MAX_NEW_TOKENS, tokenizer.eos_id, tokenizer.pad_id,
                                   temperature=temperature, greedy=greedy, generator=generator)
        ids += response_ids(tokenizer, tokens, mask)
    return [tokenizer.decode(row) for row in ids], ids


def evaluate(task, model, tokenizer, examples):
    """Greedy responses to examples, the task's metrics of them (means) and what the critic says:
    "criticised" is the share of responses it blames somewhere. Returns (summary, samples, ids): one
    sample dict per example (prompt, response, reference and the critic's annotation), and the
    responses' token ids."""
    responses, ids = respond(model, tokenizer, [e.prompt for e in examples], desc="evaluate")
    scores = [task.metrics(e, r) for e, r in zip(examples, responses)]
    annotations = [task.critique(e, r) for e, r in zip(examples, responses)]
    summary = {k: sum(s[k] for s in scores) / len(scores) for k in scores[0]}
    summary["criticised"] = sum(bool(a["poor_spans"]) for a in annotations) / len(annotations)
    samples = [{"prompt": e.prompt, "response": r, "reference": e.reference, **a}
               for e, r, a in zip(examples, responses, annotations)]
    return summary, samples, ids
