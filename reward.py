"""The reward model: first a critique in words, then a label for every response token.

Text2Grad's second component (the paper's natural-language reward model). It learns p(z | x, y) with z = [c ; A(y)]:
the critique c comes first and the span labels A(y) are conditioned on it. Our version is a GPT
trunk initialised from the SFT policy, with two heads:
  - the critique head: the trunk's own tied LM head, writing c token by token;
  - the span head: Linear(n_embd, 3) labelling each response token negative / neutral / positive
    (delta = -1 / 0 / +1).

How the span head gets to read the critique. Attention is causal, so a token sees only what comes
before it. We therefore lay the sequence out as

    cot:     <|bos|> x <|response|> y <|critique|> c <|span|> y
    no-cot:  <|bos|> x <|response|> y <|span|> y

and put the span head on the *second* copy of y: each of its tokens has read the prompt, the whole
response and (under cot) the whole critique. The cost is one more copy of y (about a quarter of the
sequence); the gain is one plain causal GPT, no extra attention module. The no-critique ablation
("w/o CoT" in the paper) keeps the same second copy and drops only the critique, so that the critique
is the one thing the two models differ in (a head on the first copy would also lose the right-hand
context of every token). The critique ends with <|span|>, so at inference the model writes c greedily
until it emits <|span|>, then the copy of y is appended.

Loss = critique NLL (mean over critique tokens and the closing <|span|>) + span cross-entropy (mean
over response tokens). Neutral tokens dominate, so the span classes are weighted by the square root
of their inverse frequency in the training labels: rare labels count more, without the noise that
full inverse-frequency weights bring when a class is very rare.

The scalar variant, for the PPO baseline, reads one score from the hidden state of the EOS after
<|bos|> x <|response|> y <|eos|>. It is trained by squared error on the sum of the same per-token
labels (sum_t delta_t): the same annotations, squeezed into one number, so both PPO variants get the
same information budget and differ only in where it lands.

Annotated data is JSONL, one record per (prompt, response):
    {"prompt": str, "response": str, "textual_feedback": str, "good_spans": [str], "poor_spans": [str]}
the paper's annotation shape plus the text it annotates; swap in your own (an LLM's, say) and the
labels are re-derived by align.py.
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import parallel
from align import align, parse_annotation
from checkpoint import atomic_save
from data import SPLITS
from data.metrics import rouge_l
from model import fit, generate, left_pad

IGNORE = -100          # target value the losses skip
MAX_CRITIQUE_TOKENS = 96
MAX_SKIPPED = 0.1      # the share of a split's records that may be skipped (a span not in the response)


# ---------------------------------------------------------------------------------------------
# Annotated data

def annotate(task, examples, responses):
    """Records in the annotation shape: the task's critic reads each (prompt, response)."""
    return [{"prompt": e.prompt, "response": r, **task.critique(e, r)} for e, r in zip(examples, responses)]


def read_jsonl(path, check=None):
    """Records of a JSONL file, each tagged with "_source": "path, line n" for error messages. A line
    that is not UTF-8, not JSON, not an object with string "prompt" and "response", or that
    check(record) rejects (it raises ValueError), raises ValueError naming the file and the line."""
    records = []
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            where = f"{path}, line {n}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(f"{where}: not UTF-8 text (byte 0x{raw[error.start]:02x} at column "
                                 f"{error.start + 1}); save the file as UTF-8") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{where}: not valid JSON ({error.msg} at column {error.colno})") from None
            if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in ("prompt", "response")):
                raise ValueError(f"{where}: a record needs string fields \"prompt\" and \"response\"")
            if check is not None:
                try:
                    check(record)
                except ValueError as error:
                    raise ValueError(f"{where}: {error}") from None
            records.append({**record, "_source": where})
    return records


def check_annotation(record):
    """What an annotated record needs beyond a prompt and a response (ValueError if it lacks it)."""
    if not record["response"].strip():
        raise ValueError("the response is empty; remove the record")
    parse_annotation({k: v for k, v in record.items() if k not in ("prompt", "response", "_source")})


def encode_record(tokenizer, record):
    """Token ids of prompt, response and critique, and delta (-1/0/+1) per response token.
    Returns (item, alignment stats)."""
    annotation = parse_annotation({k: v for k, v in record.items() if k not in ("prompt", "response", "_source")})
    response_ids = tokenizer.encode(record["response"])
    delta, stats = align(record["response"], tokenizer.offsets(response_ids), annotation)
    item = {"prompt": tokenizer.encode(record["prompt"]), "response": response_ids,
            "critique": tokenizer.encode(annotation["textual_feedback"]), "delta": [int(d) for d in delta]}
    return item, stats


def read_annotations(folder, check=check_annotation):
    """{split: records} from folder/annotations_{split}.jsonl. check: check_annotation for a user's
    files; None for a run's own (--resume), whose sampled responses may be empty. Unusable input
    raises ValueError, one line naming the file (and the line)."""
    records = {}
    for split in SPLITS:
        path = os.path.join(folder, f"annotations_{split}.jsonl")
        try:
            records[split] = read_jsonl(path, check=check)
        except OSError as error:
            raise ValueError(f"cannot read {path} ({error.strerror})") from None
        if not records[split]:
            raise ValueError(f"{path} holds no records")
    return records


def encode_records(tokenizer, records, block_size):
    """(records kept, their encoded items (reward.encode_record), statistics). A record whose
    critique quotes a span that is not in its response is skipped and counted (the run stops if
    they pass MAX_SKIPPED of a split, see check_skipped). A critique too long for the block (cot
    layout) is cut at the end: dropping the record instead would drop the long, rambling responses,
    which are the ones most worth criticising. A prompt and response that alone overflow the block
    raise ValueError naming the record."""
    kept, items, truncated = [], [], 0
    totals = {"spans": 0, "unaligned": 0, "labelled_tokens": 0, "tokens": 0}
    for i, record in enumerate(records):
        item, stats = encode_record(tokenizer, record)
        for k in totals:
            totals[k] += stats[k]
        if stats["unaligned"]:
            continue
        overflow = len(layout(tokenizer, item, "span", cot=True)[0]) - block_size
        if overflow > len(item["critique"]):
            raise ValueError(f"{record.get('_source', f'record {i + 1}')}: prompt and response take "
                             f"{overflow - len(item['critique']) + block_size} tokens with the reward model's "
                             f"markers, more than the block size {block_size}; shorten or remove the record")
        if overflow > 0:
            item["critique"] = item["critique"][:len(item["critique"]) - overflow]
            truncated += 1
        kept.append(record)
        items.append(item)
    return kept, items, {"spans": totals["spans"], "unaligned": totals["unaligned"],
                         "unaligned_rate": totals["unaligned"] / max(1, totals["spans"]),
                         "labelled_token_share": totals["labelled_tokens"] / max(1, totals["tokens"]),
                         "critiques_truncated": truncated, "records": len(records),
                         "skipped": len(records) - len(kept)}


def check_skipped(stats, where):
    """Report skipped records; ValueError when they pass MAX_SKIPPED of the split."""
    if stats["skipped"]:
        share = stats["skipped"] / max(1, stats["records"])
        message = (f"{where}: {stats['skipped']} of {stats['records']} records ({share:.1%}) quote a span that is "
                   f"not in their response")
        if share > MAX_SKIPPED:
            raise ValueError(f"{message}, more than the {MAX_SKIPPED:.0%} allowed; check that the spans are copied "
                             f"verbatim from the responses")
        print(f"{message}; skipped")


def encode_splits(tokenizer, records, block_size, folder, batch_size):
    """encode_records and check_skipped for every split of {split: records} read from folder; a
    split left with fewer usable records than a batch (train) or one (validation, test) raises
    ValueError. Returns ({split: records kept}, {split: items}, {split: alignment statistics})."""
    kept, items, alignment = {}, {}, {}
    for split in records:
        kept[split], items[split], alignment[split] = encode_records(tokenizer, records[split], block_size)
        where = os.path.join(folder, f"annotations_{split}.jsonl")
        check_skipped(alignment[split], where)
        needed = batch_size if split == "train" else 1
        if len(items[split]) < needed:
            raise ValueError(f"{where}: {len(items[split])} usable records, fewer than the {needed} this preset needs")
    return kept, items, alignment


# ---------------------------------------------------------------------------------------------
# Sequence layout

def layout(tokenizer, item, kind, cot):
    """One training sequence. Returns (ids, critique_targets, span_labels, score_position), where the
    target lists are aligned with ids (position t holds the target for the token at t, IGNORE elsewhere):
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
    critique_targets = ([IGNORE] * len(head) + critique[1:] + [IGNORE] * (n + 1)) if cot else [IGNORE] * len(ids)
    span_labels = [IGNORE] * (len(ids) - n) + [d + 1 for d in item["delta"]]
    return ids, critique_targets, span_labels, None


def collate(tokenizer, items, kind, cot, device):
    """Right-padded batch: ids (B, T), critique_targets (B, T), span_labels (B, T), score_position (B,).
    Right padding needs no attention mask: causal attention keeps pads out of every real position."""
    rows = [layout(tokenizer, item, kind, cot) for item in items]
    T = max(len(r[0]) for r in rows)
    ids = torch.full((len(rows), T), tokenizer.pad_id, dtype=torch.long)
    critique_targets = torch.full((len(rows), T), IGNORE, dtype=torch.long)
    span_labels = torch.full((len(rows), T), IGNORE, dtype=torch.long)
    for i, (seq, targets, labels, _) in enumerate(rows):
        ids[i, :len(seq)] = torch.tensor(seq)
        critique_targets[i, :len(seq)] = torch.tensor(targets)
        span_labels[i, :len(seq)] = torch.tensor(labels)
    score_position = torch.tensor([r[3] if r[3] is not None else 0 for r in rows])
    return ids.to(device), critique_targets.to(device), span_labels.to(device), score_position.to(device)


# ---------------------------------------------------------------------------------------------
# The model

class RewardModel(nn.Module):
    """kind "span" (with cot True or False) or "scalar"; gpt is the trunk (a copy of the SFT policy)."""

    def __init__(self, gpt, kind="span", cot=True):
        super().__init__()
        self.gpt, self.kind, self.cot = gpt, kind, cot and kind == "span"
        C = gpt.config.n_embd
        self.head = nn.Linear(C, 3) if kind == "span" else nn.Linear(C, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.register_buffer("class_weights", torch.ones(3))

    def loss(self, ids, critique_targets, span_labels, score_position, scores=None):
        """Training loss and its parts. scores (B,) are the scalar targets (kind "scalar")."""
        hidden, logits = self.gpt(ids)  # (B, T, C), (B, T, V)
        if self.kind == "scalar":
            predicted = self.head(hidden[torch.arange(len(ids)), score_position]).squeeze(-1)  # (B,)
            loss = F.mse_loss(predicted, scores)
            return loss, {"score_mse": loss.detach()}
        span = F.cross_entropy(self.head(hidden).flatten(0, 1), span_labels.flatten(),
                               weight=self.class_weights, ignore_index=IGNORE)
        parts = {"span": span.detach()}
        loss = span
        if self.cot:
            critique = F.cross_entropy(logits.float().flatten(0, 1), critique_targets.flatten(), ignore_index=IGNORE)
            parts["critique"] = critique.detach()
            loss = loss + critique
        return loss, parts

    def forward(self, ids, critique_targets, span_labels, score_position, scores=None):
        """The training loss, as forward: DistributedDataParallel (parallel.wrap) hooks forward."""
        return self.loss(ids, critique_targets, span_labels, score_position, scores)

    @torch.no_grad()
    def predict(self, tokenizer, prompts, responses, batch_size=64):
        """(prompt, response) pairs -> (critiques, deltas): the critique the model writes (greedy;
        "" without cot) and one delta in {-1, 0, +1} per response token. A prompt or response is a
        string (encoded here) or a token-id list (the tokens a policy sampled, which need not be the
        tokenizer's own encoding of their text). For kind "scalar": -> scores, one float per response."""
        def as_ids(texts):
            return [t if isinstance(t, list) else tokenizer.encode(t) for t in texts]
        device = next(self.parameters()).device
        out_critiques, out = [], []
        for i in range(0, len(prompts), batch_size):
            heads = [tokenizer.prompt(p) for p in as_ids(prompts[i:i + batch_size])]
            bodies = as_ids(responses[i:i + batch_size])
            if self.kind == "scalar":
                ids, mask = left_pad([h + b + [tokenizer.eos_id] for h, b in zip(heads, bodies)], tokenizer.pad_id, device)
                hidden, _ = self.gpt(ids, mask)
                out += self.head(hidden[:, -1]).squeeze(-1).tolist()
                continue
            sequences = [h + b for h, b in zip(heads, bodies)]
            if self.cot:
                # room left for the critique once the prompt, <|critique|>, <|span|> and the copy are in
                room = self.gpt.config.block_size - max(len(s) for s in sequences) - 2 - max(len(b) for b in bodies)
                if room < 1 and len(bodies) > 1:  # the longest prompt and the longest response are two rows:
                    c, d = self.predict(tokenizer, prompts[i:i + batch_size], responses[i:i + batch_size], 1)
                    out_critiques, out = out_critiques + c, out + d  # one row at a time, each with its own room
                    continue
                if room < 1:
                    raise ValueError(f"prompt and response are too long for block_size {self.gpt.config.block_size}")
                critiques, _, keep = generate(self.gpt, [s + [tokenizer.critique_id] for s in sequences],
                                              min(MAX_CRITIQUE_TOKENS, room), tokenizer.span_id, tokenizer.pad_id,
                                              greedy=True)
                critiques = [[t for t, k in zip(row, m) if k and t != tokenizer.span_id]
                             for row, m in zip(critiques.tolist(), keep.tolist())]
                out_critiques += [tokenizer.decode(c) for c in critiques]
                sequences = [s + [tokenizer.critique_id, *c, tokenizer.span_id] + b
                             for s, c, b in zip(sequences, critiques, bodies)]
            else:
                sequences = [s + [tokenizer.span_id] + b for s, b in zip(sequences, bodies)]
            ids, mask = left_pad(sequences, tokenizer.pad_id, device)
            hidden, _ = self.gpt(ids, mask)
            labels = self.head(hidden).argmax(-1) - 1  # (B, T), delta at every position
            # left padding puts every response copy at the end of its row
            out += [labels[j, ids.shape[1] - len(b):].tolist() if b else [] for j, b in enumerate(bodies)]
        if self.kind == "scalar":
            return out
        return (out_critiques if self.cot else [""] * len(out)), out


def train_reward_model(model, tokenizer, items, steps, batch_size, lr, device, seed, desc="reward model",
                       snapshots=None):
    """model.fit (no warm-up: the trunk starts from the SFT weights) on encoded records
    (encode_record). The span classes are weighted from the training labels first. Returns the loss
    per step. snapshots: see model.fit."""
    if model.kind == "span":
        counts = torch.bincount(torch.tensor([d + 1 for item in items for d in item["delta"]]), minlength=3).float()
        model.class_weights.copy_((counts.sum() / (3 * counts.clamp(min=1))).sqrt())

    net = parallel.wrap(model)

    def batch_loss(step, rng):
        batch = rng.sample(items, batch_size)
        ids, critique_targets, span_labels, score_position = collate(tokenizer, batch, model.kind, model.cot, device)
        scores = torch.tensor([float(sum(item["delta"])) for item in batch], device=device)
        return net(ids, critique_targets, span_labels, score_position, scores)

    return fit(model, batch_loss, steps, lr, desc=desc, seed=seed, snapshots=snapshots)[0]


# ---------------------------------------------------------------------------------------------
# Evaluation

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


def span_metrics(predicted, gold):
    """Token-level precision / recall / F1 of the positive and the negative label, the 3 x 3
    confusion matrix of token labels, and the share of gold spans (maximal runs of one label)
    predicted with exactly the same boundaries."""
    result = {}
    for name, label in (("positive", 1), ("negative", -1)):
        tp = sum(p == label and g == label for ps, gs in zip(predicted, gold) for p, g in zip(ps, gs))
        n_pred = sum(p == label for ps in predicted for p in ps)
        n_gold = sum(g == label for gs in gold for g in gs)
        precision, recall = tp / max(1, n_pred), tp / max(1, n_gold)
        result[f"{name}_precision"], result[f"{name}_recall"] = precision, recall
        result[f"{name}_f1"] = 2 * precision * recall / max(1e-12, precision + recall)
    # confusion[g + 1][p + 1]: tokens with gold label g predicted as p (rows negative, neutral, positive)
    result["confusion"] = [[sum(g == row and p == col for ps, gs in zip(predicted, gold) for p, g in zip(ps, gs))
                            for col in (-1, 0, 1)] for row in (-1, 0, 1)]
    gold_runs = [_runs(g) for g in gold]
    hits = sum(len(_runs(p) & g) for p, g in zip(predicted, gold_runs))
    result["exact_span_match"] = hits / max(1, sum(len(g) for g in gold_runs))
    return result


def evaluate_reward_model(model, tokenizer, records, items):
    """On held-out annotated records: span metrics and critique ROUGE-L against the critic's (span
    kinds), or the error and correlation of the score against sum_t delta_t (scalar).
    Returns (metrics, critiques, deltas or scores)."""
    prompts, responses = [r["prompt"] for r in records], [r["response"] for r in records]
    if model.kind == "scalar":
        scores = model.predict(tokenizer, prompts, responses)
        target = torch.tensor([float(sum(item["delta"])) for item in items])
        predicted = torch.tensor(scores)
        correlation = torch.corrcoef(torch.stack([predicted, target]))[0, 1].item()
        return {"score_mse": F.mse_loss(predicted, target).item(), "score_correlation": correlation}, None, scores
    critiques, deltas = model.predict(tokenizer, prompts, responses)
    result = span_metrics(deltas, [item["delta"] for item in items])
    if model.cot:
        result["critique_rougeL"] = sum(rouge_l(c, r["textual_feedback"]) for c, r in zip(critiques, records)) / len(records)
    return result, critiques, deltas


def colour_tokens(pieces, delta):
    """Tokens' text (tokenizer.pieces) coloured by delta for a terminal (ANSI): red -1, green +1."""
    colours = {-1: "\033[41;97m", 1: "\033[42;30m"}
    return "".join(colours[d] + piece + "\033[0m" if d in colours and piece else piece for piece, d in zip(pieces, delta))


# ---------------------------------------------------------------------------------------------
# The authors' stored shape -> ours:  python reward.py convert THEIRS.json annotations_train.jsonl

PROMPT_KEYS = ("prompt", "post", "Post")           # the text annotated: UltraFeedback, SLF5K
RESPONSE_KEYS = ("response", "generated_summary")


def from_authors_record(record):
    """One record as the authors' annotation scripts store it -> our record. Two shapes:
      SLF5K          {"post", "generated_summary", "critique": the annotator's whole reply, prose
                      and a (usually fenced) JSON object with textual_feedback and the spans}
      UltraFeedback  {"prompt", "response", "critique": the textual feedback alone,
                      "annotations": {"good_spans", "poor_spans"}}; a response given as chat
                      messages [{"role", "content"}] becomes its last assistant message.
    Raises ValueError (align.AnnotationError) saying what is missing or unreadable."""
    if not isinstance(record, dict):
        raise ValueError(f"a record must be a JSON object, got {type(record).__name__}")
    prompt = next((record[k] for k in PROMPT_KEYS if isinstance(record.get(k), str)), None)
    response = next((record[k] for k in RESPONSE_KEYS if k in record), None)
    if isinstance(response, list):  # chat messages
        replies = [m.get("content") for m in response if isinstance(m, dict) and m.get("role") == "assistant"]
        response = replies[-1] if replies else None
    if prompt is None or not isinstance(response, str):
        raise ValueError(f"needs a prompt ({', '.join(PROMPT_KEYS)}) and a response ({', '.join(RESPONSE_KEYS)})")
    critique = record.get("critique")
    if not isinstance(critique, str):
        raise ValueError("needs \"critique\", the annotator's reply as a string")
    if isinstance(record.get("annotations"), dict):  # UltraFeedback: the reply already taken apart
        annotation = parse_annotation({"textual_feedback": critique, **record["annotations"]})
    else:
        annotation = parse_annotation(critique)
    return {"prompt": prompt, "response": response, **annotation}


def convert_authors_file(source, target, skip_bad=False):
    """Read source (a JSON list, a JSON object of records keyed by id, or JSON lines), write target
    as our JSONL. A record that cannot be converted raises ValueError naming the file and the
    record, unless skip_bad, which drops it and counts it. target must not exist yet; it appears
    complete or not at all. Returns (records written, records skipped)."""
    if os.path.isdir(target):
        raise ValueError(f"{target} is a folder; give the file to write, e.g. {os.path.join(target, 'annotations_train.jsonl')}")
    if os.path.exists(target):
        raise ValueError(f"{target} already exists; choose another name or remove it")
    try:
        with open(source, encoding="utf-8") as f:
            text = f.read()
    except OSError as error:
        raise ValueError(f"cannot read {source} ({error.strerror})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{source} is not UTF-8 text; save it as UTF-8") from None
    try:
        data = json.loads(text)
        if isinstance(data, dict) and not all(isinstance(v, dict) for v in data.values()):
            data = [data]  # one record (a JSON-lines file of one line)
        if not isinstance(data, (list, dict)):
            raise ValueError(f"{source}: expected a list of records or an object of them, got {type(data).__name__}")
        entries = list(data.items()) if isinstance(data, dict) else list(enumerate(data, 1))
        where = "record {}" if isinstance(data, list) else "record {!r}"
    except json.JSONDecodeError:  # JSON lines
        entries, where = [], "line {}"
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    entries.append((n, json.loads(line)))
                except json.JSONDecodeError as error:
                    raise ValueError(f"{source}: neither one JSON document nor JSON lines (line {n}: {error.msg})") from None
    converted, skipped = [], 0
    for key, record in entries:
        try:
            converted.append(from_authors_record(record))
        except ValueError as error:
            if not skip_bad:
                raise ValueError(f"{source}, {where.format(key)}: {error}") from None
            skipped += 1
    if not converted:
        raise ValueError(f"{source}: no record could be converted")
    try:
        atomic_save("".join(json.dumps(r) + "\n" for r in converted), target)
    except OSError as error:
        raise ValueError(f"cannot write {target} ({error.strerror})") from None
    return len(converted), skipped


def main(argv=None):
    import argparse
    import sys
    parser = argparse.ArgumentParser(prog="reward.py", description="Annotated data for the reward models.")
    commands = parser.add_subparsers(dest="command", required=True)
    convert = commands.add_parser("convert", help="the authors' stored annotations -> our JSONL (one split)")
    convert.add_argument("source", help="the authors' annotated file (JSON list, JSON object by id, or JSON lines)")
    convert.add_argument("target", help="the JSONL to write, e.g. DIR/annotations_train.jsonl (must not exist)")
    convert.add_argument("--skip-bad", action="store_true",
                         help="drop records that cannot be converted (an annotator's failed reply) and count them")
    args = parser.parse_args(argv)
    try:
        written, skipped = convert_authors_file(args.source, args.target, args.skip_bad)
    except ValueError as error:
        print(f"reward.py: error: {error}", file=sys.stderr)
        sys.exit(2)
    print(f"{args.target}: {written} converted, {skipped} skipped")


if __name__ == "__main__":
    main()
