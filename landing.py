"""landing.py: where one PPO update moved log pi, token by token. Text2Grad's claim, measured.

The paper's mechanism is that the critique decides where the gradient lands: the blamed tokens
are pushed down, the praised ones up and the rest left alone, where a reward summed on the last
token pushes a whole answer one way. After GAE, the value function and the whitening of advantages
(ppo.py) that is a claim to check, not a given. The first look checks it on its own runs: every
method's first update trains on the same sampled answers (one SFT policy, one seed), so the change
of log pi(y_t) that each update made can be set beside what the critic said of the same tokens:

    change_t   = log pi_after(y_t) - log pi_before(y_t)     for each response token y_t
    agreement  = sum_t sign(delta_t) * change_t / sum_t |change_t|   (the EOS left out)

summed over the update's answers: the share of all the movement that went the way the critique
asks, praised tokens rising and blamed ones falling, minus the share that went against it. 1 if
the update moved nothing but criticised tokens, each the way asked; 0 if it moved only tokens the
critique is silent on; -1 if it moved only criticised tokens, each the other way. Its baseline,
`even`: an update that moves every token of an answer by one amount, up or down as the answer's
deltas net. The drawing at the end is plumbing.
"""
from html import escape

import torch

import guards
from align import align
from model import token_logprobs
from sft import response_ids


# METHOD: the measure

@torch.no_grad()
def first_update(task, tokenizer, examples, batch, model, temperature):
    """After an update on batch (ppo.score_responses's dict, the answers to examples): the change
    of log pi(y_t) it made and the critic's delta_t of the same tokens, as (B, N) CPU tensors,
    with text (B, N) 1 on the response tokens (the EOS excluded) and each answer's token pieces."""
    mask, N = batch["mask"], batch["mask"].shape[1]
    logits, _ = model(batch["ids"], batch["attention_mask"], batch["last_prompt"], N)
    change = (token_logprobs(logits, batch["tokens"], temperature) - batch["logprobs"]) * mask
    ids = response_ids(tokenizer, batch["tokens"], batch["mask"])
    deltas = []
    for example, answer in zip(examples, ids):
        text = tokenizer.decode(answer)
        deltas.append(align(text, tokenizer.offsets(answer), task.critique(example, text))[0])
    delta = guards.dense_scores(deltas, mask)  # (B, N), the EOS and padding 0
    text = mask * (batch["tokens"] != tokenizer.eos_id)
    return {"change": change.cpu(), "delta": delta.cpu(), "text": text.cpu(),
            "pieces": [tokenizer.pieces(answer) for answer in ids]}


def agreement(change, delta, text):
    """sum_t sign(delta_t) change_t / sum_t |change_t| over every answer's response tokens; 0
    when nothing moved. change, delta, text (B, N), text 1 on the response tokens."""
    movement = (change.abs() * text).sum()
    return ((torch.sign(delta) * change * text).sum() / movement).item() if movement else 0.0


def landed(first):
    """first_update's numbers: the agreement with the critique, the answers it was read on, its
    baseline `even` (each answer's tokens moved alike, by one amount, the way its deltas net:
    sum_i |sum_t sign(delta_it)| / sum_i tokens_i), and the mean change of log pi on the blamed,
    the praised and the other tokens."""
    change, delta, text = first["change"], first["delta"], first["text"]
    groups = {"blamed": text * (delta < 0), "praised": text * (delta > 0)}
    groups["others"] = text - groups["blamed"] - groups["praised"]
    means = {f"{name}_change": ((change * where).sum() / where.sum().clamp(min=1)).item()
             for name, where in groups.items()}
    net = (torch.sign(delta) * text).sum(1).abs().sum()  # each answer moved alike: even
    return {"agreement": agreement(change, delta, text), "answers": len(text),
            "even": (net / text.sum().clamp(min=1)).item(), **means}


# METHOD: how soon a method fixes what the critique names, and what the first look prints

HOLD = 0.9  # the share of the gap from SFT to all right that a run must reach and keep


def updates_to_hold(curve, start, hold=HOLD):
    """The updates a run needs to close `hold` of the gap from start (the SFT policy's score) to
    1 (all right) and keep it to the end: the update of the first point of curve [(update,
    score)] from which every later point is at or above start + hold * (1 - start). A run that
    ends below it counts as its last update plus one (its budget plus one)."""
    level = start + hold * (1 - start)
    held = len(curve)
    while held > 0 and curve[held - 1][1] >= level:
        held -= 1
    return curve[held][0] if held < len(curve) else curve[-1][0] + 1


def finding(held, contrasts):
    """The first look's finding in one sentence, from the holds {method: updates}: for each
    placement contrast {judge: (span method, summed method)}, how many updates sooner (or later)
    the span method held HOLD of the gap than the same scores summed on the last token."""
    said = []
    for judge, (span, summed) in contrasts.items():
        gap = held[summed] - held[span]
        how = f"{abs(gap)} update{'s' * (abs(gap) != 1)} {'sooner' if gap > 0 else 'later'}"
        said.append(f"{how if gap else 'at the same update'} with {judge} "
                    f"({held[span]} against {held[summed]})")
    return f"Span rewards held {HOLD:.0%} of the gap " + " and ".join(said) + "."


def report(table, landed, task, config, methods, contrasts):
    """What the first look prints: each method's test curve and the updates it needs to hold
    HOLD of the gap; the finding in one sentence (span rewards against the same scores summed on
    the last token); then where each method's first update moved log pi."""
    start = table["sft"]["test"][0]
    print(f"\n{task.NAME}, seed {config.seed}: test {task.PRIMARY} before PPO and after every "
          f"{config.eval_every} update(s); 'hold': the updates to reach {HOLD:.0%} of the way "
          f"from SFT's {start:.3f} to 1 and keep it ({config.updates + 1}: never)")
    print(f"{'method':15s} {'judge':6s} {'lands':5s} {'lambda':>6s} {'hold':>4s}  test curve")
    held = {}
    for method, row in table.items():
        judge, where = methods.get(method, ("-", "-"))
        lam = "-" if row["lambda"] is None else row["lambda"]
        curve = [(update, test) for update, _, test, _ in row["curve"]]
        held[method] = updates_to_hold(curve, start) if method != "sft" else None
        print(f"{method:15s} {judge:6s} {where:5s} {lam:>6} {held[method] or '-':>4}  "
              + " ".join(f"{test:.2f}".lstrip("0") for _, test in curve))
    judges = {"the learned judge": contrasts["placement, learned"],
              "the critic": contrasts["placement, critic"]}
    judges = {judge: pair for judge, pair in judges.items() if set(pair) <= set(held)}
    if judges:
        print(f"\n{finding(held, judges)}\nOne seed, at PPO batch {config.ppo_batch_size} and lr "
              f"{config.ppo_lr:g}: a draw (README: the spread over seeds; RESULTS: other settings)")
    if not landed:
        return
    even = next(iter(landed.values()))["even"]
    print(f"\nWhere the first update moved log pi, on the same {config.ppo_batch_size} sampled "
          f"answers for every method: its agreement with the critic's deltas, 1 if it moved only "
          f"criticised tokens and each the way asked ({even:.2f} if it moved each answer evenly)")
    print(f"{'method':15s} {'agreement':>9s}  {'change of log pi: blamed':>24s} {'praised':>8s} "
          f"{'others':>8s}")
    for method, row in landed.items():
        print(f"{method:15s} {row['agreement']:9.2f}  {row['blamed_change']:24.3f} "
              f"{row['praised_change']:8.3f} {row['others_change']:8.3f}")


# PLUMBING: the drawing, first_look.svg: the test curves, then one answer token by token

COLOURS = {"scalar": "#e08a1e", "cot": "#1f6fb4", "critic": "#2f9e44"}  # by who judges
FONT, CHAR = 13, 7.8  # monospace font size and the width of one character, in pixels


def delta_colour(delta):
    """A token's colour by its delta_t: red blamed, green praised, none neutral."""
    return "#f4a6a6" if delta < 0 else "#a9dfa9" if delta > 0 else "none"


def change_colour(change, scale):
    """A log-prob change's colour: red for a fall, blue for a rise, white for none; full strength
    at |change| = scale."""
    strength = min(1.0, abs(change) / scale) if scale > 0 else 0.0
    red, green, blue = (214, 39, 40) if change < 0 else (31, 111, 180)
    return f"rgba({red},{green},{blue},{0.8 * strength:.3f})"


def token_row(pieces, colours, y, x=150):
    """One line of tokens, each on its own background rectangle, at height y (SVG elements)."""
    parts, at = [], x
    for piece, colour in zip(pieces, colours):
        width = CHAR * len(piece)
        if colour != "none":
            parts.append(f'<rect x="{at:.1f}" y="{y - FONT}" width="{width:.1f}" '
                         f'height="{FONT + 5}" fill="{colour}"/>')
        parts.append(f'<text x="{at:.1f}" y="{y}" xml:space="preserve" '
                     f'font-family="monospace">{escape(piece)}</text>')
        at += width
    return parts


def draw(path, table, first, task, config, methods):
    """first_look.svg: each method's test curve (colour: who judges; dashed: the last token),
    then one answer of the first update (the shortest the critic blamed and praised), its tokens
    coloured by the critic's delta_t and by how far each method's update moved log pi, beside
    the answer's mean change on its blamed and other tokens and the batch's agreement."""
    curves = {m: [point[2] for point in table[m]["curve"]] for m in methods if m in table}
    low = min(map(min, curves.values()))
    high = max(map(max, curves.values())) + 1e-9
    n = max(map(len, curves.values()))
    x = lambda j: 60 + 420 * j / max(1, n - 1)
    y = lambda v: 250 - 210 * (v - low) / (high - low)
    svg = [f'<text x="10" y="20">{escape(task.NAME)}, seed {config.seed}: test '
           f'{task.PRIMARY} from {low:.2f} (bottom) to {high:.2f} (top), one point every '
           f'{config.eval_every} updates</text>']
    for i, (method, curve) in enumerate(curves.items()):
        judge, where = methods[method]
        style = (f'fill="none" stroke="{COLOURS.get(judge, "#7b3294")}" stroke-width="2"'
                 + (' stroke-dasharray="6 4"' if where == "last" else ""))
        points = " ".join(f"{x(j):.0f},{y(v):.0f}" for j, v in enumerate(curve))
        svg += [f'<polyline {style} points="{points}"/>',
                f'<polyline {style} points="510,{45 + 20 * i} 540,{45 + 20 * i}"/>',
                f'<text x="548" y="{49 + 20 * i}">{escape(method)}</text>']
    shown = [m for m in methods if m in first]
    measured = first[shown[0]]
    # the shortest answer the critic both blamed and praised (else the shortest blamed one)
    rows = range(len(measured["pieces"]))
    blamed = [i for i in rows if (measured["delta"][i] < 0).any()] or list(rows)
    row = min([i for i in blamed if (measured["delta"][i] > 0).any()] or blamed,
              key=lambda i: len(measured["pieces"][i]))
    pieces = measured["pieces"][row]
    scale = max(first[m]["change"][row][:len(pieces)].abs().max().item() for m in shown) or 1.0
    svg += [f'<text x="10" y="290">The first update of each method, on one of the answers it '
            f'trained on. First row: the critic\'s delta_t (red blamed, green praised).</text>',
            f'<text x="10" y="308">Then each method: how far its update moved log pi of each '
            f'token (red down, blue up; full colour at {scale:.3f}, the largest change).</text>']
    delta = measured["delta"][row].tolist()
    svg += ['<text x="10" y="338">critic\'s delta</text>']
    svg += token_row(pieces, [delta_colour(d) for d in delta], 338)
    end = 160 + CHAR * sum(map(len, pieces))
    for k, method in enumerate(shown):
        change = first[method]["change"][row][:len(pieces)]
        svg += [f'<text x="10" y="{368 + 26 * k}">{escape(method)}</text>']
        svg += token_row(pieces, [change_colour(c, scale) for c in change.tolist()], 368 + 26 * k)
        hit = torch.tensor(delta[:len(pieces)]) < 0
        means = [change[where].mean().item() if where.any() else 0.0 for where in (hit, ~hit)]
        svg += [f'<text x="{end:.0f}" y="{368 + 26 * k}">blamed {means[0]:+.3f}, others '
                f'{means[1]:+.3f}; agreement {landed(first[method])["agreement"]:.2f}'
                f'</text>']
    width = max(860, end + 360)
    height = 388 + 26 * len(shown)
    with open(path, "w") as f:
        f.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height}" '
                f'font-family="sans-serif" font-size="{FONT}"><rect width="100%" height="100%" '
                f'fill="#fff"/>\n' + "\n".join(svg) + "\n</svg>\n")
