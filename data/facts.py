"""Restating a delivery order: the toy task with a knob K, the number of independent flaws per response.
The first look's default task at K = 8 (python text2grad.py); the K sweep's at K in KS.

Why a task of its own. The other three tasks hold one systematic flaw per response, and one number at
the end of a response is enough to find one decision. Text2Grad should pay off when a response holds
*several independent* mistakes: a scalar reward is their sum, so the signal for each one is buried in
the noise of the others. Bolting K facts onto the summaries would change what ROUGE measures and mix
the new flaws with the old ones; a separate task keeps the knob clean, and one SFT policy and one set
of reward models serve every K (the training split mixes K in KS).

An order note names the gift and states K facts, one sentence each, in a fixed order; the
response restates the facts as "key value" clauses in the same order:

    prompt:    "The gift is a lamp. It is from Maya. It leaves on friday. Send it by express."
    reference: "name Maya; day friday; speed express."

Each fact is a *site*: a one-word choice, checked by a copy against the prompt (is the value the
one the note states?), nothing multi-hop. The demonstrator has the habit of a hurried clerk who
leaves an order form's pre-filled default in place: each of the eight kinds (KINDS) has its own
default word (Alex, London, sunday, ...), never the value a note states. Which kinds a note holds,
and every value, are drawn independently, so the sites are independent; unlearning one site's
default leaves the others in place. What replaces every default is the same skill, copying from the
prompt; the SFT policy already has it (it copies wherever its demonstrations did). The other design
tried first, two values per sentence and a habit of copying the wrong one, was dropped: the reward
model could not learn which of the two was meant (span F1 0.72-0.85 at K = 8).

Flaws in the demonstrations: each site carries its habit with probability HABIT_RATE, independently,
so the SFT policy's sampled responses get each site wrong about that often, and its greedy ones
keep the default at most sites.

The critic judges every site: the value is a good span where it is right, a poor span where it is
wrong. A clause for a fact the prompt does not hold (or a repeated one) is a poor span, and a
missing fact is said in prose (there is no span to quote for something absent).
Metrics: sites_right (PRIMARY), the share of the prompt's sites restated right (a missing site
counts as wrong), and all_right, 1 when every site is right.
"""
import random
import re

from data import Example, quote

NAME = "facts"
PRIMARY = "sites_right"
WATCHED = ("criticised", "answers the critic blames")  # read beside the curves
KS = (1, 2, 4, 8)   # the sweep's values of K; the training split draws K uniformly from them
K = 8               # the first look's K (python text2grad.py): every note states 8 facts
HABIT_RATE = 0.6    # chance that a demonstration repeats a site's habit, per site, independently

NAMES = ["Maya", "Omar", "Lena", "Ravi", "Sofia", "Jonas", "Aisha", "Mateo", "Nora", "Felix", "Priya", "Hugo"]
ITEMS = ["lamp", "vase", "book", "clock", "scarf", "mug", "kite", "plant", "chair", "radio", "quilt", "candle",
         "teapot", "drum", "globe", "mirror"]
# kind -> (its sentence, the values a note may state, the demonstrator's default)
KINDS = {
    "name": ("It is from {value}.", NAMES, "Alex"),
    "city": ("It goes to {value}.", ["Oslo", "Rome", "Paris", "Lima", "Cairo", "Delhi", "Tokyo", "Quito"], "London"),
    "day": ("It leaves on {value}.", ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday"], "sunday"),
    "colour": ("Wrap it in {value}.", ["blue", "red", "green", "white", "pink", "grey", "brown", "gold"], "black"),
    "count": ("Pack {value} boxes.", [str(n) for n in range(2, 10)], "1"),
    "unit": ("Weigh it in {value}.", ["grams", "pounds", "ounces", "litres"], "kilos"),
    "size": ("Use a {value} box.", ["small", "large", "tiny", "huge"], "medium"),
    "speed": ("Send it by {value}.", ["express", "overnight", "economy", "priority"], "standard"),
}
FLAW_RATES = {kind: HABIT_RATE for kind in KINDS}


def restate(sites):
    """The response that states each (kind, value) pair: "key value; key value."."""
    return "; ".join(f"{kind} {value}" for kind, value in sites) + "."


def make_examples(n, seed, k=K):
    """n order notes with k sites each (k None: drawn from KS per example, the sweep's training)."""
    if k is not None and not 1 <= k <= len(KINDS):
        raise ValueError(f"k must be between 1 and {len(KINDS)}, the number of kinds of fact; got {k}")
    rng = random.Random(seed)
    examples = []
    for _ in range(n):
        chosen = rng.sample(list(KINDS), k or rng.choice(KS))
        kinds = [kind for kind in KINDS if kind in chosen]  # in the order of KINDS
        sentences, sites, shown, flaws = [f"The gift is a {rng.choice(ITEMS)}."], [], [], []
        for kind in kinds:
            template, values, default = KINDS[kind]
            right = rng.choice(values)
            sentences.append(template.format(value=right))
            sites.append([kind, right, default])
            if rng.random() < HABIT_RATE:
                flaws.append(kind)
            shown.append((kind, default if kind in flaws else right))
        examples.append(Example(" ".join(sentences), restate((kind, right) for kind, right, _ in sites),
                                restate(shown), flaws, {"sites": sites}))
    return examples


def _clauses(response):
    """(key, value, clause_start, value_start, end) per clause "key value" of a response split at
    ';' and '.', surrounding spaces excluded; value_start is clause_start when there is no value."""
    out = []
    for m in re.finditer(r"[^;.]+", response):
        text = m.group()
        if not text.strip():
            continue
        start = m.start() + len(text) - len(text.lstrip())
        end = m.end() - len(text) + len(text.rstrip())
        key, _, value = response[start:end].partition(" ")
        value_start = end - len(value.strip()) if value.strip() else start
        out.append((key, value.strip(), start, value_start, end))
    return out


def judge(example, response):
    """{kind: True (right) / False (wrong) / None (missing)} for each site of the prompt; the first
    clause with a site's key is the one judged."""
    said = {}
    for key, value, *_ in _clauses(response):
        said.setdefault(key, value)
    return {kind: (said[kind] == right if kind in said else None) for kind, right, _ in example.facts["sites"]}


def metrics(example, response):
    verdicts = list(judge(example, response).values())
    right = sum(v is True for v in verdicts)
    return {"sites_right": right / len(verdicts), "all_right": float(right == len(verdicts))}


# ---------------------------------------------------------------------------------------------
# The critic

def critique(example, response):
    rights = {kind: right for kind, right, _ in example.facts["sites"]}
    good, poor, notes, seen = [], [], [], set()
    for key, value, clause_start, start, end in _clauses(response):
        if key not in rights or key in seen:  # the whole clause is blamed
            poor.append(quote(response, clause_start, end))
            notes.append(f"The {key} is given twice." if key in seen else
                         f"\"{response[clause_start:end]}\" is not asked for.")
            continue
        seen.add(key)
        if value == rights[key]:
            good.append(quote(response, start, end))
            notes.append(f"{value} is right.")
        else:  # a wrong value, or a key with none (then the key is blamed)
            poor.append(quote(response, start, end))
            notes.append(f"{value or key} should be {rights[key]}.")
    notes += [f"It leaves out the {kind}." for kind in rights if kind not in seen]
    return {"textual_feedback": " ".join(notes), "good_spans": list(dict.fromkeys(good)),
            "poor_spans": list(dict.fromkeys(poor))}


def site_statistics(examples, responses):
    """How the sites of responses (one per example) go wrong: {"wrong": {kind: share of that kind's
    sites not right}, "correlation": the mean phi and the largest |phi| between two kinds'
    wrong-indicators over the responses that hold both (0: independent; pairs seen fewer than 20
    times, or where a kind is always or never wrong, are left out)}."""
    verdicts = [judge(e, r) for e, r in zip(examples, responses)]
    wrong = {kind: [v[kind] is not True for v in verdicts if kind in v] for kind in KINDS}
    phis = []
    for i, a in enumerate(KINDS):
        for b in list(KINDS)[i + 1:]:
            pairs = [(v[a] is not True, v[b] is not True) for v in verdicts if a in v and b in v]
            if len(pairs) < 20:
                continue
            n = len(pairs)
            pa, pb = sum(x for x, _ in pairs) / n, sum(y for _, y in pairs) / n
            pab = sum(x and y for x, y in pairs) / n
            if 0 < pa < 1 and 0 < pb < 1:
                phis.append((pab - pa * pb) / (pa * (1 - pa) * pb * (1 - pb)) ** 0.5)
    return {"wrong": {kind: sum(w) / len(w) for kind, w in wrong.items() if w},
            "correlation": {"mean": sum(phis) / len(phis) if phis else None,
                            "max_abs": max(map(abs, phis)) if phis else None, "pairs": len(phis)}}


def right_per_kind(examples, responses):
    """{kind: share of that kind's sites restated right} over responses (one per example)."""
    return {kind: 1 - wrong for kind, wrong in site_statistics(examples, responses)["wrong"].items()}


def count_sites(prompt):
    """K of a prompt: each fact is one sentence, after the one naming the gift."""
    return prompt.count(".") - 1
