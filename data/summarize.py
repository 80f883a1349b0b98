"""Summarisation toy task, standing in for SLF5K: a short post -> a one-sentence summary.

A post tells of one problem: who caused it (a landlord, a boss, ...), what they did, by how much,
and what the poster is thinking of doing. It also carries distractors: the poster's age, how long
they have been somewhere, and a friend's name and advice. The reference summary keeps exactly the
four facts that matter:

    post:      "I am Maya (24). My landlord raised my rent by 300 dollars. My friend Omar says I
                should wait. I have lived here for 6 years. Now I am thinking about moving out."
    reference: "Maya's landlord raised the rent by 300 dollars, so Maya is thinking about moving out."

Metric: ROUGE-1/2/L F1 against the reference (data/metrics.py); PRIMARY is ROUGE-L.

Flaws in the demonstrations (FLAW_RATES): the kinds a hurried human summariser makes.
- redundant: side details of the post (the friend's advice, how long the poster has lived there,
  how they feel) are appended as extra clauses. It is systematic, as verbosity is for real
  summarisers: most demonstrations do it, so the SFT policy keeps doing it under greedy decoding.
- wrong_number: a distractor number (the age or the years) replaces the amount.
- wrong_name: the friend's name replaces the poster's.
- missing_action: the summary stops before saying what the poster plans to do.

The critic knows the post's facts and checks each one in the response: the right name and amount
are praised, a wrong name or number is blamed, clauses that are not part of the four facts and
repeated clauses are blamed as redundant, and a missing fact is mentioned in prose (there is no
span to quote for something absent). Limits: it matches the vocabulary the generator uses, so a
paraphrase with other words is judged only by the facts it can find.
"""
import random
import re
import zlib

from data import Example, quote
from data.metrics import rouge

NAME = "summarize"
PRIMARY = "rougeL"
WATCHED = ("no_plan", "answers without the plan")  # read beside the curves

# Chance that a demonstration carries each flaw kind, independently of the others: 2.8 flaws in an
# average demonstration (1.6 at 0.5), each named by the critic, so that a summed verdict hides
# which part was wrong. Each is a habit: the right form is in one demonstration in ten, so PPO must
# find it (at 0.5 every method was within 0.05 of the ceiling by the 4th update: experiments/LOG.md).
# A left-out plan stays rare: an omission has no span to blame, and at 0.5 PPO learned to leave the
# plan out (the first look's summaries cannot end before 12 tokens: text2grad.MIN_NEW_TOKENS).
FLAW_RATES = {
    "redundant": 0.9,        # two side details appended (the advice if any, the years, a feeling)
    "wrong_number": 0.9,     # the age or the years replace the amount
    "wrong_name": 0.9,       # the friend's name replaces the poster's (the post names the friend
                             # only when it quotes their advice)
    "missing_action": 0.1,   # the plan is left out
}
ADVICE_RATE = 0.5  # share of posts that quote a friend's advice

NAMES = ["Maya", "Omar", "Lena", "Ravi", "Sofia", "Jonas", "Aisha", "Mateo", "Nora", "Felix",
         "Priya", "Hugo", "Yuki", "Tariq", "Clara", "Diego", "Ines", "Kofi", "Mira", "Leon"]
# (who, what they did in the post, what they did in the summary, unit)
EVENTS = [
    ("landlord", "raised my rent by", "raised the rent by", "dollars"),
    ("boss", "cut my pay by", "cut the pay by", "dollars"),
    ("roommate", "owes me", "owes", "dollars"),
    ("neighbor", "asked me to pay", "asked for", "dollars"),
    ("coach", "added", "added", "laps"),
    ("teacher", "gave me", "gave", "extra tasks"),
]
ACTIONS = ["moving out", "finding a new job", "talking to a lawyer", "asking for help",
           "quitting the team", "writing a letter", "saving more money", "taking a break"]
ADVICE = ["I should wait", "I should be calm", "I should say nothing", "I should move on"]
FEELINGS = ["which is really stressful", "which feels unfair", "and it is hard to sleep"]


def _post(facts, rng):
    sentences = [f"My {facts['who']} {facts['did']} {facts['amount']} {facts['unit']}."]
    if facts["advice"]:
        sentences.append(f"My friend {facts['friend']} says {facts['advice']}.")
    sentences.append(f"I have lived here for {facts['years']} years.")
    rng.shuffle(sentences)
    intro = f"I am {facts['name']} ({facts['age']})."
    return " ".join([intro, *sentences, f"Now I am thinking about {facts['action']}."])


def _summary(facts, name, amount, action=True, extra=None):
    text = f"{name}'s {facts['who']} {facts['did_summary']} {amount} {facts['unit']}"
    if action:
        text += f", so {name} is thinking about {facts['action']}"
    if extra:
        text += f", {extra}"
    return text + "."


def make_examples(n, seed):
    rng = random.Random(seed)
    examples = []
    for _ in range(n):
        name, friend = rng.sample(NAMES, 2)
        who, did, did_summary, unit = rng.choice(EVENTS)
        age = rng.randint(18, 59)
        years, amount = rng.sample(range(2, age), 2)
        if unit == "dollars":
            amount *= 10
        facts = {"name": name, "friend": friend, "who": who, "did": did,
                 "did_summary": did_summary, "unit": unit, "amount": amount, "age": age,
                 "years": years, "action": rng.choice(ACTIONS),
                 "advice": rng.choice(ADVICE) if rng.random() < ADVICE_RATE else ""}
        prompt = _post(facts, rng)
        reference = _summary(facts, name, amount)

        flaws, shown_name, shown_amount, action, extra = [], name, amount, True, None
        if rng.random() < FLAW_RATES["redundant"]:
            flaws.append("redundant")
            side = [f"and {friend} says {facts['advice']}" if facts["advice"] else rng.choice(FEELINGS),
                    f"and {name} has lived there for {years} years"]
            extra = ", ".join(rng.sample(side, 2))
        wrong_numbers = [n for n in (age, years) if n != amount]
        if rng.random() < FLAW_RATES["wrong_number"] and wrong_numbers:
            flaws.append("wrong_number")
            shown_amount = rng.choice(wrong_numbers)
        if rng.random() < FLAW_RATES["wrong_name"]:
            flaws.append("wrong_name")
            shown_name = friend
        if rng.random() < FLAW_RATES["missing_action"]:
            flaws.append("missing_action")
            action = False
        demonstration = _summary(facts, shown_name, shown_amount, action, extra)
        examples.append(Example(prompt, reference, demonstration, flaws, facts))
    return examples


def _questions(facts):
    """(question, answer) about a post's facts: what its pretraining documents teach to read off a
    post (data.document), never the summary's sentence, so PPO starts from a policy that learned
    to summarise from the flawed demonstrations alone."""
    pairs = [("Who wrote the post?", facts["name"]), ("How old is the author?", str(facts["age"])),
             (f"How long has {facts['name']} lived there?", f"{facts['years']} years"),
             (f"What did the {facts['who']} do?", f"{facts['did']} {facts['amount']} {facts['unit']}"),
             (f"What is {facts['name']} thinking about?", facts["action"])]
    return pairs + ([(f"What does {facts['friend']} say?", facts["advice"])] if facts["advice"] else [])


def first_turn(example, rng):
    question, answer = rng.choice(_questions(example.facts))
    return f"{example.prompt} Question: {question}", answer


def follow_up(example, rng):
    return rng.choice(_questions(example.facts))


def metrics(example, response):
    """ROUGE against the reference, and no_plan: 1 if the summary never says what the poster plans
    to do (an omission the critic can only state in prose: no span of the answer carries it)."""
    return {**rouge(response, example.reference), "no_plan": float(example.facts["action"] not in response)}


# ---------------------------------------------------------------------------------------------
# The critic

PRAISE = ["It gets {what} right.", "It correctly gives {what}.", "Good: {what} matches the post."]
BLAME = {
    "name": ["The summary names {bad}, but the post is by {good}.",
             "{bad} is the wrong person; the post is written by {good}."],
    "friend": ["{bad} is the friend giving advice; the post is written by {good}."],
    "number": ["The amount is wrong: the post says {good}, not {bad}.",
               "{bad} is not in the post; the amount is {good}."],
    "distractor": ["{bad} is {what}, not the amount; the amount is {good}.",
                   "The summary takes {bad} ({what}) for the amount, which is {good}."],
    "redundant": ["The clause \"{bad}\" adds nothing a summary needs.",
                  "\"{bad}\" is a side detail; a one-sentence summary should drop it."],
    "repeated": ["The summary repeats itself (\"{bad}\")."],
    "missing_name": ["It never says who wrote the post ({good})."],
    "missing_amount": ["It leaves out the amount ({good})."],
    "missing_action": ["It leaves out what {good} plans to do ({action}).",
                       "It never says that {good} is thinking about {action}."],
    "missing_event": ["It does not say what the {who} did."],
}
NAME_PATTERN = re.compile(r"\b(" + "|".join(NAMES) + r")\b")


def _clauses(response):
    """(start, end) of each clause, surrounding spaces excluded: the text split at commas and
    sentence ends."""
    spans = []
    for m in re.finditer(r"[^,.!?]+", response):
        text = m.group()
        if text.strip():
            spans.append((m.start() + len(text) - len(text.lstrip()), m.end() - len(text) + len(text.rstrip())))
    return spans


def critique(example, response):
    facts = example.facts
    rng = random.Random(zlib.crc32(response.encode("utf-8", "replace")))
    good, poor, notes = [], [], []  # quoted phrases, and the sentences of the critique

    def note(kind, **fields):
        notes.append(rng.choice(BLAME[kind]).format(**fields))

    def blame(start, end):
        poor.append(quote(response, start, end))  # quote() tells a repeat apart from its original

    amount = f"{facts['amount']} {facts['unit']}"
    distractors = {str(facts["age"]): "the author's age", str(facts["years"]): "how long the author has lived there"}
    # Each clause must carry one of the facts; anything else is redundant, and a repeat is blamed.
    # Names and numbers are checked only inside the clauses that carry facts: a wrong name inside
    # a redundant clause is blamed once, as part of that clause.
    core, seen, named, numbered = (facts["who"], facts["action"], facts["did_summary"]), set(), set(), False
    for start, end in _clauses(response):
        clause = response[start:end]
        if clause in seen:
            blame(start, end)
            note("repeated", bad=clause)
            continue
        seen.add(clause)
        if not any(c in clause for c in core):
            blame(start, end)
            note("redundant", bad=clause)
            continue
        for m in NAME_PATTERN.finditer(clause):
            name = m.group()
            if name == facts["name"]:
                good.append(name)  # the first occurrence is praised; the phrase is found leftmost
            else:
                blame(start + m.start(), start + m.end())  # every occurrence of a wrong name
                if name not in named:
                    note("friend" if name == facts["friend"] and facts["advice"] else "name", bad=name, good=facts["name"])
            named.add(name)
        for m in re.finditer(r"\b\d+\b", clause):
            number, numbered = m.group(), True
            end_at = m.end() + len(facts["unit"]) + 1 if clause[m.end():].startswith(" " + facts["unit"]) else m.end()
            if number == str(facts["amount"]):
                good.append(quote(response, start + m.start(), start + end_at))
            else:
                blame(start + m.start(), start + end_at)
                if number in distractors:
                    note("distractor", bad=number, what=distractors[number], good=amount)
                else:
                    note("number", bad=number, good=amount)

    if facts["name"] not in named:
        note("missing_name", good=facts["name"])
    if not numbered:
        note("missing_amount", good=amount)
    if facts["who"] not in response:
        note("missing_event", who=facts["who"])
    if facts["action"] in response:
        good.append(facts["action"])
    else:
        note("missing_action", good=facts["name"], action=facts["action"])

    good = [g for g in dict.fromkeys(good) if g not in poor]
    if notes:
        feedback = " ".join(notes + [rng.choice(PRAISE).format(what=f'"{g}"') for g in good[:1]])
    else:  # every fact was found and nothing else was said
        feedback = "A faithful one-sentence summary. " + " ".join(
            rng.choice(PRAISE).format(what=w) for w in (f"the name {facts['name']}", f"the amount {amount}"))
    return {"textual_feedback": feedback, "good_spans": good, "poor_spans": list(dict.fromkeys(poor))}
