"""The reward model: first a critique in words, then a label for every response token.

Text2Grad's second component (the paper's natural-language reward model). It learns p(z | x, y)
with z = [c ; A(y)]: the critique c comes first and the span labels A(y) are conditioned on it.
Our version is a GPT trunk initialised from the SFT policy, with two heads:
  - the critique head: the trunk's own tied LM head, writing c token by token;
  - the span head: Linear(n_embd, 3) labelling each response token negative / neutral / positive
    (delta = -1 / 0 / +1).

How the span head gets to read the critique. Attention is causal, so a token sees only what comes
before it. We therefore lay the sequence out as

    cot:     <|bos|> x <|response|> y <|critique|> c <|span|> y
    no-cot:  <|bos|> x <|response|> y <|span|> y

and put the span head on the *second* copy of y: each of its tokens has read the prompt, the whole
response and (under cot) the whole critique, at the cost of one more copy of y, with one plain
causal GPT. The no-critique ablation ("w/o CoT" in the paper) drops only the critique. At inference
the model writes c greedily until it emits <|span|>, then the copy of y is appended.

Loss = critique NLL (mean over critique tokens and the closing <|span|>) + span cross-entropy
(mean over response tokens), the span classes weighted by the square root of their inverse
frequency (neutral tokens dominate).

The scalar variant, for the PPO baseline, reads one score from the hidden state of the EOS after
<|bos|> x <|response|> y <|eos|>. It is trained by squared error on the number the critic's own
last-token method is paid for the response, sum_t score_t of the same labels through the guards
(scalar_targets), normalised: the same annotations squeezed into one number, so the PPO variants
get the same verdicts and differ in where they land (a sum no longer says which token earned each).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import guards
from align import align
from data.annotations import annotation_fields
from data.metrics import rouge_l
from model import generate, left_pad
from sft import MAX_NEW_TOKENS, fit

IGNORE = -100               # target value the losses skip
MAX_CRITIQUE_TOKENS = 128   # code's critiques of three flaws run to about 110


# Annotated records -> the reward model's items

def encode_record(tokenizer, record):
    """Token ids of prompt, response and critique, and delta (-1/0/+1) per response token.
    Returns (item, alignment stats)."""
    annotation = annotation_fields(record)
    response_ids = tokenizer.encode(record["response"])
    delta, stats = align(record["response"], tokenizer.offsets(response_ids), annotation)
    item = {"prompt": tokenizer.encode(record["prompt"]), "response": response_ids,
            "critique": tokenizer.encode(annotation["textual_feedback"]),
            "delta": [int(d) for d in delta]}
    return item, stats


def fit_to_block(tokenizer, item, block_size, where):
    """The one rule fitting an item to the reward model's block, for every path that builds one:
    when the cot layout (the longest) overflows, the critique is cut at the end by the overflow;
    a prompt and response that alone overflow raise ValueError naming `where`. In place; True if
    cut."""
    overflow = len(layout(tokenizer, item, "span", cot=True)[0]) - block_size
    if overflow > len(item["critique"]):
        needed = overflow - len(item["critique"]) + block_size
        raise ValueError(f"{where}: prompt and response take {needed} tokens with the reward "
                         f"model's markers, more than the block size {block_size}; shorten or "
                         f"remove the record")
    if overflow > 0:
        item["critique"] = item["critique"][:len(item["critique"]) - overflow]
    return overflow > 0


def encode_records(tokenizer, records, block_size):
    """(records kept, their items (encode_record), statistics). A record quoting a span that is
    not in its response is skipped and counted. A critique too long for the block is cut
    (fit_to_block): dropping the record would drop the rambling responses, the ones most worth
    criticising."""
    kept, items, truncated = [], [], 0
    totals = {"spans": 0, "unaligned": 0, "labelled_tokens": 0, "tokens": 0}
    for i, record in enumerate(records):
        item, stats = encode_record(tokenizer, record)
        for k in totals:
            totals[k] += stats[k]
        if stats["unaligned"]:
            continue
        where = record.get("_source", f"record {i + 1}")
        truncated += fit_to_block(tokenizer, item, block_size, where)
        kept.append(record)
        items.append(item)
    return kept, items, {
        "spans": totals["spans"], "unaligned": totals["unaligned"], "records": len(records),
        "unaligned_rate": totals["unaligned"] / max(1, totals["spans"]),
        "critiques_truncated": truncated,
        "labelled_token_share": totals["labelled_tokens"] / max(1, totals["tokens"]),
        "skipped": len(records) - len(kept)}


# Sequence layout

def layout(tokenizer, item, kind, cot):
    """One training sequence. Returns (ids, critique_targets, span_labels, score_position), where
    the target lists are aligned with ids (position t holds the target for the token at t, IGNORE
    elsewhere):
      critique_targets[t] = the next token, for t = <|critique|> .. last critique token
      span_labels[t]      = delta + 1 of the response token at t (its second copy)
      score_position      = index of the <|eos|> whose hidden state the scalar head reads
    """
    t = tokenizer
    head = [*t.prompt(item["prompt"]), *item["response"]]
    n = len(item["response"])
    if kind == "scalar":
        ids = head + [t.eos_id]
        return ids, [IGNORE] * len(ids), [IGNORE] * len(ids), len(ids) - 1
    critique = [t.critique_id, *item["critique"], t.span_id] if cot else [t.span_id]
    ids = head + critique + item["response"]
    if cot:
        critique_targets = [IGNORE] * len(head) + critique[1:] + [IGNORE] * (n + 1)
    else:
        critique_targets = [IGNORE] * len(ids)
    span_labels = [IGNORE] * (len(ids) - n) + [d + 1 for d in item["delta"]]
    return ids, critique_targets, span_labels, None


def collate(tokenizer, items, kind, cot, device):
    """Right-padded batch (no attention mask needed: causal attention keeps pads out of real
    positions): ids, critique_targets, span_labels (B, T), score_position (B,)."""
    rows = [layout(tokenizer, item, kind, cot) for item in items]
    T = max(len(r[0]) for r in rows)
    fills = (tokenizer.pad_id, IGNORE, IGNORE)
    batch = [torch.full((len(rows), T), fill, dtype=torch.long) for fill in fills]
    for i, row in enumerate(rows):
        for tensor, values in zip(batch, row[:3]):  # ids, critique_targets, span_labels
            tensor[i, :len(values)] = torch.tensor(values)
    score_position = torch.tensor([r[3] if r[3] is not None else 0 for r in rows])
    return *(tensor.to(device) for tensor in batch), score_position.to(device)


# The model

def scalar_targets(items, shaping):
    """The scalar model's target per item (B,): sum_t score_t, the deltas through the guards
    (guards.shaped_scores), the number the critic's last-token method (oracle_scalar) is paid for
    the response. A response of MAX_NEW_TOKENS tokens or more counts as cut at the length limit:
    exact for the refresh's items (the sampled ids), an approximation for annotated records
    (their text re-encoded)."""
    lengths = torch.tensor([len(item["response"]) for item in items])
    mask = (torch.arange(max(1, int(lengths.max()))) < lengths[:, None]).float()  # (B, N)
    deltas, responses = [i["delta"] for i in items], [i["response"] for i in items]
    ended = lengths < MAX_NEW_TOKENS
    return guards.shaped_scores(deltas, responses, mask, ended, shaping).sum(1)


class RewardModel(nn.Module):
    """kind "span" (with cot True or False) or "scalar"; gpt is the trunk (a copy of the SFT
    policy); shaping (guards.Guards): the guards through which the scalar model's target is
    summed."""

    def __init__(self, gpt, kind="span", cot=True, shaping=None):
        super().__init__()
        self.gpt, self.kind, self.cot = gpt, kind, cot and kind == "span"
        self.shaping = shaping or guards.Guards()
        C = gpt.config.n_embd
        self.head = nn.Linear(C, 3) if kind == "span" else nn.Linear(C, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.register_buffer("class_weights", torch.ones(3))
        # the scalar target's training mean and std
        self.register_buffer("target_scale", torch.tensor([0.0, 1.0]))
        self.to(gpt.wte.weight.device)  # PLUMBING: the head and buffers where the trunk is

    def loss(self, ids, critique_targets, span_labels, score_position, scores=None):
        """Training loss and its parts. scores (B,) are the scalar targets (kind "scalar")."""
        hidden, logits = self.gpt(ids)  # (B, T, C), (B, T, V)
        if self.kind == "scalar":
            at_eos = hidden[torch.arange(len(ids)), score_position]  # (B, C)
            predicted = self.head(at_eos).squeeze(-1)                # (B,)
            target = (scores - self.target_scale[0]) / self.target_scale[1]
            loss = F.mse_loss(predicted, target)
            return loss, {"score_mse": loss.detach()}
        span = F.cross_entropy(self.head(hidden).flatten(0, 1), span_labels.flatten(),
                               weight=self.class_weights, ignore_index=IGNORE)
        if not self.cot:
            return span, {"span": span.detach()}
        critique = F.cross_entropy(logits.float().flatten(0, 1), critique_targets.flatten(),
                                   ignore_index=IGNORE)
        return span + critique, {"span": span.detach(), "critique": critique.detach()}

    @torch.no_grad()
    def predict(self, tokenizer, prompts, responses, batch_size=64):
        """(prompt, response) pairs -> (critiques, deltas): the critique the model writes (greedy;
        "" without cot) and one delta in {-1, 0, +1} per response token. A prompt or response is
        a string (encoded here) or a token-id list (the tokens a policy sampled, which need not be
        the tokenizer's own encoding of their text). For kind "scalar": -> scores, one float per
        response."""
        def as_ids(texts):
            return [t if isinstance(t, list) else tokenizer.encode(t) for t in texts]
        device = next(self.parameters()).device
        out_critiques, out = [], []
        for i in range(0, len(prompts), batch_size):
            heads = [tokenizer.prompt(p) for p in as_ids(prompts[i:i + batch_size])]
            bodies = as_ids(responses[i:i + batch_size])
            if self.kind == "scalar":
                rows = [h + b + [tokenizer.eos_id] for h, b in zip(heads, bodies)]
                ids, mask = left_pad(rows, tokenizer.pad_id, device)
                hidden, _ = self.gpt(ids, mask)
                score = self.head(hidden[:, -1]).squeeze(-1)
                out += (score * self.target_scale[1] + self.target_scale[0]).tolist()
                continue
            sequences = [h + b for h, b in zip(heads, bodies)]
            if self.cot:
                # room for the critique once the prompt, <|critique|>, <|span|> and the copy are in
                longest = max(len(s) for s in sequences) + max(len(b) for b in bodies)
                room = self.gpt.config.block_size - longest - 2
                if room < 1 and len(bodies) > 1:
                    # the longest prompt and the longest response are two rows: one row at a
                    # time, each with its own room
                    c, d = self.predict(tokenizer, prompts[i:i + batch_size],
                                        responses[i:i + batch_size], 1)
                    out_critiques, out = out_critiques + c, out + d
                    continue
                if room < 1:
                    raise ValueError(f"prompt and response are too long for block_size "
                                     f"{self.gpt.config.block_size}")
                room = min(MAX_CRITIQUE_TOKENS, room)
                critiques = self.write_critiques(tokenizer, sequences, room)
                out_critiques += [tokenizer.decode(c) for c in critiques]
                sequences = [s + [tokenizer.critique_id, *c, tokenizer.span_id] + b
                             for s, c, b in zip(sequences, critiques, bodies)]
            else:
                sequences = [s + [tokenizer.span_id] + b for s, b in zip(sequences, bodies)]
            ids, mask = left_pad(sequences, tokenizer.pad_id, device)
            hidden, _ = self.gpt(ids, mask)
            labels = self.head(hidden).argmax(-1) - 1  # (B, T), delta at every position
            # left padding puts every response copy at the end of its row
            out += [labels[j, ids.shape[1] - len(b):].tolist() if b else []
                    for j, b in enumerate(bodies)]
        if self.kind == "scalar":
            return out
        return (out_critiques if self.cot else [""] * len(out)), out

    def write_critiques(self, tokenizer, sequences, max_tokens):
        """The critique of each <|bos|> x <|response|> y, written greedily until <|span|>: token
        ids, <|span|> left out."""
        starts = [s + [tokenizer.critique_id] for s in sequences]
        critiques, _, keep = generate(self.gpt, starts, max_tokens, tokenizer.span_id,
                                      tokenizer.pad_id, greedy=True)
        return [[t for t, k in zip(row, m) if k and t != tokenizer.span_id]
                for row, m in zip(critiques.tolist(), keep.tolist())]


def train_reward_model(model, tokenizer, items, steps, batch_size, lr, device, seed,
                       desc="reward model", fresh=None):
    """sft.fit (no warm-up: the trunk starts from the SFT weights) on encoded records
    (encode_record); the span classes weighted from the training labels first. With fresh (the
    refresh: the policy's own samples, annotated by the critic), more training of a trained model:
    batches half fresh, half `items`, so it learns what it never saw without forgetting what it
    knew, and the class weights stay. Returns the loss per step."""
    if model.kind == "span" and fresh is None:
        labels = torch.tensor([d + 1 for item in items for d in item["delta"]])
        counts = torch.bincount(labels, minlength=3).float()
        model.class_weights.copy_((counts.sum() / (3 * counts.clamp(min=1))).sqrt())
    if model.kind == "scalar" and fresh is None:  # the target normalised by its mean and std
        targets = scalar_targets(items, model.shaping)
        model.target_scale.copy_(torch.stack([targets.mean(), targets.std().clamp(min=1e-6)]))

    def batch_loss(step, rng):
        if fresh is None:
            batch = rng.sample(items, batch_size)
        else:
            half = batch_size // 2
            batch = [rng.choice(fresh) for _ in range(half)] + rng.sample(items, batch_size - half)
        ids, critique_targets, span_labels, score_position = collate(tokenizer, batch, model.kind,
                                                                     model.cot, device)
        scores = None
        if model.kind == "scalar":
            scores = scalar_targets(batch, model.shaping).to(device)
        return model.loss(ids, critique_targets, span_labels, score_position, scores)

    return fit(model, batch_loss, steps, lr, desc=desc, seed=seed)[0]


# Evaluation

def span_metrics(predicted, gold):
    """Token-level precision, recall and F1 of the positive and the negative label."""
    result = {}
    for name, label in (("positive", 1), ("negative", -1)):
        pairs = [(p, g) for ps, gs in zip(predicted, gold) for p, g in zip(ps, gs)]
        tp = sum(p == label and g == label for p, g in pairs)
        n_pred = sum(p == label for ps in predicted for p in ps)
        n_gold = sum(g == label for gs in gold for g in gs)
        precision, recall = tp / max(1, n_pred), tp / max(1, n_gold)
        result[f"{name}_precision"], result[f"{name}_recall"] = precision, recall
        result[f"{name}_f1"] = 2 * precision * recall / max(1e-12, precision + recall)
    return result


def evaluate_reward_model(model, tokenizer, records, items):
    """On held-out annotated records: span metrics and critique ROUGE-L against the critic's (span
    kinds), or the error and correlation of the score against its target, scalar_targets
    (scalar). Returns (metrics, critiques, deltas or scores)."""
    prompts, responses = [r["prompt"] for r in records], [r["response"] for r in records]
    if model.kind == "scalar":
        scores = model.predict(tokenizer, prompts, responses)
        pair = torch.stack([torch.tensor(scores), scalar_targets(items, model.shaping)])
        metrics = {"score_mse": F.mse_loss(*pair).item(),
                   "score_correlation": torch.corrcoef(pair)[0, 1].item()}
        return metrics, None, scores
    critiques, deltas = model.predict(tokenizer, prompts, responses)
    result = span_metrics(deltas, [item["delta"] for item in items])
    if model.cot:
        rouges = [rouge_l(c, r["textual_feedback"]) for c, r in zip(critiques, records)]
        result["critique_rougeL"] = sum(rouges) / len(records)
    return result, critiques, deltas
