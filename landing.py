"""landing.py: where one PPO update moved log pi, token by token. Text2Grad's claim, measured.

The paper's mechanism: the critique decides where the gradient lands, blamed tokens down, praised
ones up, the rest alone. After GAE, V and whitening (ppo.py) that is a claim to check. Every
method's first update trains on the same sampled answers (one SFT policy, one seed), so the change
of log pi(y_t) each update made can be set beside what the critic said of the same tokens:

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
from model import token_logprobs, uses_bf16
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
    """first_update's numbers: the agreement, the answers it was read on, `even` (sum_i |sum_t
    sign(delta_it)| / sum_i tokens_i) and the mean change of log pi on blamed, praised, others."""
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
    """The update of the first point of curve [(update, score)] from which every later point is
    at or above start + hold (1 - start): `hold` of the gap from SFT's score (start) to 1, kept to
    the end. A run that ends below it counts as its last update plus one."""
    level = start + hold * (1 - start)
    held = len(curve)
    while held > 0 and curve[held - 1][1] >= level:
        held -= 1
    return curve[held][0] if held < len(curve) else curve[-1][0] + 1


JUDGES = {"placement, learned": "the learned judge", "placement, critic": "the critic"}


def finding(held, contrasts):
    """The first look's finding in one sentence, from the holds {method: updates}: for each
    placement contrast run (text2grad.CONTRASTS[name] = (span method, summed method)), how many
    updates sooner (or later) the span method held HOLD of the gap than its summed twin."""
    said = []
    for name, judge in JUDGES.items():
        span, summed = contrasts[name]
        if span not in held or summed not in held:
            continue
        gap = held[summed] - held[span]
        how = f"{abs(gap)} update{'s' * (abs(gap) != 1)} {'sooner' if gap > 0 else 'later'}"
        said.append(f"{how if gap else 'at the same update'} with {judge} "
                    f"({held[span]} against {held[summed]})")
    return f"Span rewards held {HOLD:.0%} of the gap " + " and ".join(said) + "." if said else ""


def report(table, landed, task, config, methods, contrasts):
    """What the first look prints, after where it ran: each method's test curve and the updates
    it needs to hold HOLD of the gap; the finding in one sentence; where each first update moved."""
    start = table["sft"]["test"][0]
    dtype = "bf16 autocast" if uses_bf16(torch.device(config.device)) else "float32"
    print(f"\n{task.NAME}, seed {config.seed} ({config.device}, {dtype}, "
          f"{torch.get_num_threads()} CPU threads): test {task.PRIMARY} before PPO and after every "
          f"{config.eval_every} update(s); 'hold': the updates to reach {HOLD:.0%} of the way from "
          f"SFT's {start:.3f} to 1 and keep it ({config.updates + 1}: never)")
    print(f"{'method':15s} {'judge':6s} {'lands':5s} {'lambda':>6s} {'hold':>4s}  test curve")
    held = {}
    for method, row in table.items():
        judge, where = methods.get(method, ("-", "-"))
        lam = "-" if row["lambda"] is None else row["lambda"]
        curve = [(update, test) for update, _, test, _ in row["curve"]]
        held[method] = updates_to_hold(curve, start) if method != "sft" else None
        print(f"{method:15s} {judge:6s} {where:5s} {lam:>6} {held[method] or '-':>4}  "
              + " ".join(f"{test:.2f}".lstrip("0") for _, test in curve))
    said = finding(held, contrasts)
    if said:
        print(f"\n{said}\nOne seed, at PPO batch {config.ppo_batch_size} and lr {config.ppo_lr:g}: "
              f"a draw (README: the spread over seeds; RESULTS: other settings)")
    if not landed:
        return
    even = next(iter(landed.values()))["even"]
    print(f"\nWhere the first update moved log pi, on the same {config.ppo_batch_size} answers for "
          f"every method (agreement 1: only criticised tokens moved, as asked; even {even:.2f})")
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


def text(x, y, words, anchor="start"):
    """One SVG text element at (x, y), its text escaped."""
    return f'<text x="{x:.0f}" y="{y:.0f}" text-anchor="{anchor}">{escape(str(words))}</text>'


def draw(path, table, first, task, config, methods):
    """first_look.svg. Top: each method's test curve against the update (colour: who judges;
    dashed: the last token), the line at HOLD of the gap from SFT to all right, and a dot where each
    method holds it from. Below: one answer of the first update (the shortest the critic blamed
    and praised), its tokens coloured by the critic's delta_t and by how far each method's update
    moved log pi, each row beside its agreement and an even push's. One seed: a draw."""
    curves = {m: [(u, test) for u, _, test, _ in table[m]["curve"]] for m in methods if m in table}
    start = table["sft"]["test"][0]
    low = min([start] + [v for c in curves.values() for _, v in c])
    last = max(u for c in curves.values() for u, _ in c)
    x = lambda u: 70 + 400 * u / max(1, last)
    y = lambda v: 250 - 210 * (v - low) / max(1e-9, 1 - low)
    level = start + HOLD * (1 - start)
    svg = [text(10, 20, f"{task.NAME}, seed {config.seed} (one draw: README gives the spread over "
                f"seeds): test {task.PRIMARY} from {low:.2f} (bottom) to 1 (top) after each "
                f"update, batch {config.ppo_batch_size}, lr {config.ppo_lr:g}"),
           f'<path d="M70,40 V250 H{x(last):.0f}" fill="none" stroke="#444"/>',
           f'<line x1="70" x2="{x(last):.0f}" y1="{y(level):.0f}" y2="{y(level):.0f}" '
           f'stroke="#999" stroke-dasharray="2 3"/>',
           text(270, 280, "update"), text(64, y(level) + 4, f"{HOLD:.0%}", "end")]
    svg += [text(x(u), 266, u, "middle") for u in range(0, last + 1, 4)]
    for i, (method, curve) in enumerate(curves.items()):
        judge, where = methods[method]
        colour, held = COLOURS.get(judge, "#7b3294"), updates_to_hold(curve, start)
        style = (f'fill="none" stroke="{colour}" stroke-width="2"'
                 + (' stroke-dasharray="6 4"' if where == "last" else ""))
        points = " ".join(f"{x(u):.0f},{y(v):.0f}" for u, v in curve)
        svg += [f'<polyline {style} points="{points}"/>',
                f'<polyline {style} points="510,{45 + 20 * i} 540,{45 + 20 * i}"/>',
                text(548, 49 + 20 * i, f"{method}: holds from update {held}" if held <= last
                     else f"{method}: never holds")]
        if held <= last:  # the dot where it holds from
            svg.append(f'<circle cx="{x(held):.0f}" cy="{y(dict(curve)[held]):.0f}" r="4" '
                       f'fill="{colour}"/>')
    shown = [m for m in methods if m in first]
    measured = first[shown[0]]
    # the shortest answer the critic both blamed and praised (else the shortest blamed one)
    rows = range(len(measured["pieces"]))
    blamed = [i for i in rows if (measured["delta"][i] < 0).any()] or list(rows)
    row = min([i for i in blamed if (measured["delta"][i] > 0).any()] or blamed,
              key=lambda i: len(measured["pieces"][i]))
    pieces = measured["pieces"][row]
    scale = max(first[m]["change"][row][:len(pieces)].abs().max().item() for m in shown) or 1.0
    svg += [text(10, 310, "Each method's first update on one answer it trained on: the critic's "
                 "delta_t (red blamed, green praised), then each token's change of log pi (red "
                 f"down, blue up; full at {scale:.3f})."),
            text(10, 328, "A summed row is one number on the last token, spread back by GAE, V "
                 "and whitening: its colours show where that number's push landed.")]
    delta = measured["delta"][row].tolist()
    svg += [text(10, 376, "critic's delta"), *token_row(pieces, map(delta_colour, delta), 376)]
    end = 160 + CHAR * sum(map(len, pieces))
    for k, method in enumerate(shown):
        change = first[method]["change"][row][:len(pieces)]
        numbers = landed(first[method])
        svg += [text(10, 406 + 26 * k, method)]
        svg += token_row(pieces, [change_colour(c, scale) for c in change.tolist()], 406 + 26 * k)
        svg.append(text(end, 406 + 26 * k, f"agreement {numbers['agreement']:.2f} over the "
                        f"batch (an even push: {numbers['even']:.2f})"))
    width, height = max(1100, end + 360), 426 + 26 * len(shown)
    with open(path, "w") as f:
        f.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height}" '
                f'font-family="sans-serif" font-size="{FONT}"><rect width="100%" height="100%" '
                f'fill="#fff"/>\n' + "\n".join(svg) + "\n</svg>\n")
