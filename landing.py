"""landing.py: where one PPO update moved log pi, token by token. Text2Grad's claim, measured.

The paper's mechanism is that the critique decides where the gradient lands: the blamed tokens
are pushed down and the rest are left alone, where a reward summed on the last token pushes a
whole answer. After GAE, the value function and the whitening of advantages (ppo.py) that is a
claim to check, not a given. The first look checks it on its own runs: every method's first
update trains on the same sampled answers (one SFT policy, one seed), so the change of
log pi(y_t) that each update made can be set beside what the critic blamed in them:

    change_t       = log pi_after(y_t) - log pi_before(y_t)     for each response token y_t
    landing share  = sum_{t blamed} (-change_t) / sum_t |change_t|  (the EOS left out)

the share of all the movement that is blamed tokens falling: 1 if the update moved nothing but the
blamed tokens, and down; about the blamed tokens' share of the tokens if it pushed every token of
an answer alike; below 0 if the blamed tokens rose. The lab reads the same numbers with intervals
(python -m experiments.credit_landing); the drawing at the end of this file is plumbing.
"""
import os
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


def per_answer(change, delta, text):
    """What the landing share needs of each answer (row), as lists: the net fall of its blamed
    tokens (sum of -change_t where delta_t < 0), its movement (sum of |change_t|), its blamed
    tokens and its tokens. change, delta, text (B, N), text 1 on the response tokens."""
    blamed = text * (delta < 0)
    return {"fall": (-change * blamed).sum(1).tolist(),
            "movement": (change.abs() * text).sum(1).tolist(),
            "blamed": blamed.sum(1).tolist(), "tokens": text.sum(1).tolist()}


def landing_share(parts, rows=None):
    """sum fall / sum movement over the answers `rows` (all by default) of per_answer's parts: the
    share of all the movement that is blamed tokens falling; 0 when nothing moved."""
    rows = range(len(parts["fall"])) if rows is None else rows
    movement = sum(parts["movement"][i] for i in rows)
    return sum(parts["fall"][i] for i in rows) / movement if movement else 0.0


def landed(first):
    """first_update's numbers: the landing share, the blamed tokens' share of the tokens (what the
    landing share would be if every token fell alike), and the mean change of log pi on the
    blamed tokens and on the others."""
    change, delta, text = first["change"], first["delta"], first["text"]
    parts = per_answer(change, delta, text)
    blamed = text * (delta < 0)
    others = text - blamed
    return {"landing_share": landing_share(parts),
            "blamed_tokens": sum(parts["blamed"]) / max(1, sum(parts["tokens"])),
            "blamed_change": ((change * blamed).sum() / blamed.sum().clamp(min=1)).item(),
            "others_change": ((change * others).sum() / others.sum().clamp(min=1)).item()}


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


def report(table, landed, task, config, methods, contrasts):
    """What the first look prints: each method's test curve and the updates it needs to hold
    HOLD of the gap; the finding (span rewards against the same scores summed on the last token);
    then where each method's first update landed. One seed: README gives the spread over ten."""
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
    print(f"\nPlacement: the updates to hold {HOLD:.0%}, span rewards against the same scores "
          f"summed on the last token (one seed; README: over ten seeds)")
    for name in ("placement, learned", "placement, critic"):
        span, summed = contrasts[name]
        if span in held and summed in held:
            ends = f"test at the end {table[span]['test'][0]:.3f} vs {table[summed]['test'][0]:.3f}"
            print(f"  {name:19s} {span} {held[span]:2d} updates, {summed} {held[summed]:2d}: "
                  f"ratio {held[summed] / max(held[span], 1):.1f}; {ends}")
    if not landed:
        return
    blamed = next(iter(landed.values()))["blamed_tokens"]
    print(f"\nWhere the first update landed: the share of the change of log pi that is blamed "
          f"tokens falling, on the same {config.ppo_batch_size} sampled answers for every method "
          f"({blamed:.0%} of their tokens blamed by the critic)")
    print(f"{'method':15s} {'landing share':>13s} {'change of log pi: blamed':>25s} {'others':>8s}")
    for method, row in landed.items():
        print(f"{method:15s} {row['landing_share']:13.2f} {row['blamed_change']:25.3f} "
              f"{row['others_change']:8.3f}")


# PLUMBING: the drawing, first_look.svg: the test curves, then one answer token by token

COLOURS = {"scalar": "#e08a1e", "cot": "#1f6fb4", "critic": "#2f9e44"}  # by who judges
FONT, CHAR = 13, 7.8  # monospace font size and the width of one character, in pixels


def writable(path):
    """Whether a file can be written at path (its folder exists and is writable)."""
    return os.access(os.path.dirname(os.path.abspath(path)), os.W_OK)


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
    the answer's mean change on its blamed and other tokens and the batch's landing share."""
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
                f'{means[1]:+.3f}; landing share {landed(first[method])["landing_share"]:.2f}'
                f'</text>']
    width = max(860, end + 360)
    height = 388 + 26 * len(shown)
    with open(path, "w") as f:
        f.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height}" '
                f'font-family="sans-serif" font-size="{FONT}"><rect width="100%" height="100%" '
                f'fill="#fff"/>\n' + "\n".join(svg) + "\n</svg>\n")
