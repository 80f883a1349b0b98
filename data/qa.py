"""Question answering over a short passage: the toy stand-in for the paper's UltraFeedback task.

A passage about two or three people (city, job, how many of one kind of thing each has) and a
question; the reference is one short sentence. Metrics: token F1 (PRIMARY), exact match, and
right_answer (the response opens with the reference: the look-up done right).

    Lena lives in Rome and works as a baker. Omar lives in Oslo and works as a pilot.
    Lena has 3 cats and Omar has 4 cats. Question: How many cats do Lena and Omar have together?
    -> Together they have 7 cats.

Question kinds, equally likely: where someone lives, someone's job, who lives in a city, how many
things someone has, how many two people have together.

Flaws in the demonstrations (FLAW_RATES), local so that a critique can point at each, and
independent, so that a response carries several (1.9 per demonstration) and a summed verdict hides
which part was wrong:
- wrong_entity: asked about someone named after the first person, the answer takes the first
  person's city, job or count (for "who", the first person's name): a look-up habit.
- unasked_fact: a true passage fact that was not asked is appended ("He works as a pilot.").
- invented_detail: a detail the passage never states is appended ("He has lived there for 6 years.").
- off_by_one: the sum in a "together" answer is one too high or too low.
The first three are systematic annotator habits, not noise: each is in most demonstrations that
offer its context (its right form in one in ten for the look-up, three in ten for each appended
sentence), so a policy trained on them keeps them under greedy decoding and PPO must find the
right forms. The arithmetic slip is rare and random; greedy
decoding averages it away, so the ones RL meets are the policy's own.

The critic plays GPT-4o. It splits the response into sentences and reads claims ("X lives in C",
"works as a J", "has N things", "they have N things") out of each, resolving he/she to the last
person named. The first claim that answers the question is the answer: its key phrase ("in Oslo",
"as a pilot", "4 cats", the name for "who") is a good span if right, a poor one if wrong. Every other
sentence is a poor span as a whole: a repeat, a second answer, an unasked fact, a false claim, or,
when nothing can be read from it, an unsupported remark. The feedback (two to four sentences, the
wording picked by a hash of the text) states the passage's fact first, then what the answer says and
only after that whether it is right (the reasoning before the judgement, as a chain-of-thought
critique should: a reward model writing it has the fact and the answer's value in front of it when it
writes the verdict and labels the answer), then the first extra sentence and what is wrong with it.
Spans are quoted so that their leftmost occurrence, which is where align.py will place them, is the
place meant.
Limits: only the task's own sentence shapes are understood. An unparsed sentence counts as unsupported,
right for invented details and garbage, unfair to a correct paraphrase ("Omar's home is Oslo."); extra
words inside the sentence that carries the answer go unnoticed; a who-answer whose subject is not a
capitalised ASCII name ("engineer lives in Cairo.", "He lives in Cairo.") is read as naming the right
person.
"""
import random
import re
import zlib

from data import Example, quote
from data.metrics import exact_match, token_f1, words

NAME = "qa"
PRIMARY = "f1"
WATCHED = ("criticised", "answers the critic blames")  # read beside the curves

# ---- Tunables: how often the demonstrators err, and where ----------------------------------------
FLAW_RATES = {
    "wrong_entity": 0.9,      # where/job/who/count questions on someone named after the first person: the
                              # first person's city, job or count (who: name) replaces the asked one's
    "unasked_fact": 0.7,      # any question: a true passage fact that was not asked is appended
    "invented_detail": 0.7,   # any question: a detail the passage never states is appended
    "off_by_one": 0.25,       # together questions, at random: the sum is one too high or too low
}
QUESTION_KINDS = ("where", "job", "who", "count", "together")

FEMALE = ("Lena", "Ada", "Mia", "Nora", "Eva", "Ines", "Sara", "Lucy", "Maya", "Zoe", "Rosa", "Alice")
MALE = ("Omar", "Tom", "Ivan", "Leo", "Hugo", "Sam", "Ben", "Max", "Paul", "Raj", "Amir", "Felix")
CITIES = ("Rome", "Oslo", "Paris", "Lima", "Cairo", "Tokyo", "Berlin", "Madrid", "Dublin", "Vienna",
          "Prague", "Lisbon", "Athens", "Delhi", "Seoul", "Sydney", "Quito", "Nairobi", "Dakar", "Hanoi",
          "Boston", "Denver", "Milan", "Kyoto")
JOBS = ("baker", "pilot", "nurse", "teacher", "farmer", "doctor", "painter", "driver", "singer",
        "writer", "chef", "dentist", "engineer", "artist", "actor", "lawyer", "plumber", "tailor",
        "florist", "builder")
ITEMS = ("cats", "dogs", "birds", "rabbits", "books", "bikes", "plants", "hats")
RELATION = {"where": "city", "who": "city", "job": "job", "count": "count", "together": "count"}
INVENTED = {  # details no passage states; {he} is He or She, {k} a number from 2 to 9
    "where": ("{he} has lived there for {k} years.", "{he} moved there {k} years ago.",
              "{he} likes the city a lot."),
    "job": ("{he} has done this job for {k} years.", "{he} started the job {k} years ago.",
            "{he} likes the job a lot."),
    "count": ("{he} got them {k} years ago.", "{he} keeps them at home.", "{he} wants {k} more."),
}
INVENTED["who"] = INVENTED["where"]
INVENTED["together"] = ("They got them {k} years ago.", "They keep them at home.", "They want {k} more.")

# ---- Passages, questions, answers ----------------------------------------------------------------


def _article(job):
    return ("an " if job[0] in "aeiou" else "a ") + job


def _things(count, item):
    return f"{count} {item[:-1] if count == 1 else item}"


def _sentence(relation, subject, person, item):
    """One fact about person, in the task's only phrasings; subject is the name or a pronoun."""
    if relation == "city":
        return f"{subject} lives in {person['city']}."
    if relation == "job":
        return f"{subject} works as {_article(person['job'])}."
    return f"{subject} has {_things(person['count'], item)}."


def _person(facts, name):
    return next((p for p in facts["people"] if p["name"] == name), None)


def _asked(facts):
    return [_person(facts, name) for name in facts["asked"]]


def _total(facts):
    return sum(p["count"] for p in _asked(facts))


def _passage(people, item):
    intro = " ".join(f"{p['name']} lives in {p['city']} and works as {_article(p['job'])}." for p in people)
    counts = [f"{p['name']} has {_things(p['count'], item)}" for p in people]
    return f"{intro} {', '.join(counts[:-1])} and {counts[-1]}."


def _question(facts):
    a, b, item = facts["asked"][0], facts["asked"][-1], facts["item"]
    return {"where": f"Where does {a} live?", "job": f"What is {a}'s job?",
            "who": f"Who lives in {_person(facts, a)['city']}?", "count": f"How many {item} does {a} have?",
            "together": f"How many {item} do {a} and {b} have together?"}[facts["kind"]]


def _reference(facts):
    if facts["kind"] == "together":
        return f"Together they have {_things(_total(facts), facts['item'])}."
    person = _asked(facts)[0]
    return _sentence(RELATION[facts["kind"]], person["name"], person, facts["item"])


def _demonstrate(facts, rng):
    """(demonstration, flaw kinds): the reference as an imperfect annotator would write it, with up to
    three independent flaws: a wrong value in the answer, an unasked fact and an invented detail."""
    kind, item, flaws = facts["kind"], facts["item"], []
    asked, first = _asked(facts), facts["people"][0]
    if kind == "together":
        total = _total(facts)
        if rng.random() < FLAW_RATES["off_by_one"]:
            total += rng.choice((-1, 1))
            flaws.append("off_by_one")
        text = f"Together they have {_things(total, item)}."
        named, subject, relations = rng.choice(asked), None, ("city", "job")  # an asked count is working
    else:
        person = asked[0]
        said, named = dict(person), person  # what the answer states; the real person it names
        if person is not first and rng.random() < FLAW_RATES["wrong_entity"]:
            key = "name" if kind == "who" else RELATION[kind]
            said[key] = first[key]
            named = first if kind == "who" else person
            flaws.append("wrong_entity")
        text = _sentence(RELATION[kind], said["name"], said, item)
        subject, relations = "She" if named["name"] in FEMALE else "He", ("city", "job", "count")
    extras = []
    if rng.random() < FLAW_RATES["unasked_fact"]:
        relation = rng.choice([r for r in relations if kind == "together" or r != RELATION[kind]])
        extras.append(("unasked_fact", _sentence(relation, subject or named["name"], named, item)))
    if rng.random() < FLAW_RATES["invented_detail"]:
        extras.append(("invented_detail", rng.choice(INVENTED[kind]).format(he=subject, k=rng.randint(2, 9))))
    rng.shuffle(extras)
    for flaw, sentence in extras:
        text += " " + sentence
        flaws.append(flaw)
    return text, flaws


def _example(people, item, rng):
    """A random question on the passage of people and item, with the demonstration's flaws drawn."""
    kind = rng.choice(QUESTION_KINDS)
    asked = rng.sample(people, 2 if kind == "together" else 1)
    facts = {"kind": kind, "item": item, "people": people, "asked": [p["name"] for p in asked]}
    prompt = f"{_passage(people, item)} Question: {_question(facts)}"
    demonstration, flaws = _demonstrate(facts, rng)
    return Example(prompt, _reference(facts), demonstration, flaws, facts)


def make_examples(n, seed):
    rng = random.Random(seed)
    examples = []
    for _ in range(n):
        size = rng.choice((2, 3))
        people = [{"name": name, "city": city, "job": job, "count": count} for name, city, job, count in zip(
            rng.sample(FEMALE + MALE, size), rng.sample(CITIES, size), rng.sample(JOBS, size),
            rng.sample(range(1, 10), size))]  # all distinct, so a wrong entity is always visibly wrong
        examples.append(_example(people, rng.choice(ITEMS), rng))
    return examples


def held_out_key(example):
    """The passage: a held-out question is new only if no training question is asked of its
    passage (data.make_splits)."""
    return example.prompt.split(" Question: ")[0]


def another_question(example, rng):
    """Another question (of any kind) on example's passage: an Example whose prompt is the same
    passage with a new question."""
    return _example(example.facts["people"], example.facts["item"], rng)


def follow_up(example, rng):
    """One more turn (text, answer) of a pretraining document (data.document): another question on
    the passage, as text the question alone (" Question: ..."), and its reference."""
    other = another_question(example, rng)
    return other.prompt[other.prompt.rindex(" Question: "):], other.reference


def metrics(example, response):
    """f1 and exact_match against the reference; right_answer = 1 if the response opens with the
    reference's words (the asked fact, looked up right), whatever follows: it separates the look-up
    from the appended sentences, which f1 mixes together."""
    reference = words(example.reference)
    return {"f1": token_f1(response, example.reference), "exact_match": exact_match(response, example.reference),
            "right_answer": float(words(response)[:len(reference)] == reference)}


# ---- The critic ------------------------------------------------------------------------------------

# A claim: optional subject, then one of the three relations; the *_phrase groups are what gets quoted.
_CLAIM = re.compile(
    r"(?:\b(?P<subject>[A-Z][a-z]+|he|she|they)\s+)?\b(?:"
    r"lives?\s+(?P<city_phrase>in\s+(?P<city>[A-Z][a-z]+))"
    r"|works?\s+(?P<job_phrase>as\s+an?\s+(?P<job>[a-z]+))"
    r"|ha(?:s|ve)\s+(?P<count_phrase>(?P<count>\d+)\s+(?P<item>[a-z]+)))")

# The feedback states the passage's fact first, then what the answer says, then the verdict: a reward
# model that writes it has both things compared in front of it when it writes the word that judges
# ("right" or "wrong"), and then when it labels the answer's tokens. RIGHT[i] and WRONG[i] differ only
# after {said}, so the verdict is never decided before the answer's value is written.
FACT = ("The passage says {truth}.", "According to the passage, {truth}.", "In the passage, {truth}.")
RIGHT = ("The answer says {said}, which is right.", "The answer says {said} as well.", "So {said} is right.")
WRONG = ("The answer says {said}, which is wrong.", "The answer says {said} instead.", "So {said} is wrong.")
MISSING = ("The response never says {question}.", "It does not answer {question}.",
           "It leaves {question} open.")
ISSUE = {
    "invented": ('"{s}" is not supported by the passage.', 'Nothing in the passage backs up "{s}".',
                 'The passage never says "{s}".'),
    "unasked": ('"{s}" is true, but the question did not ask for it.',
                'The extra sentence "{s}" is accurate but beside the question.',
                '"{s}" adds a fact nobody asked about.'),
    "false": ('"{s}" contradicts the passage, and the question did not ask about it.',
              'The passage does not say "{s}"; it was not asked either.'),
    "repeat": ('"{s}" repeats an earlier sentence and adds nothing.', 'The response says "{s}" more than once.',
               'Saying "{s}" again is redundant.'),
    "again": ('"{s}" answers the question a second time.', 'Restating the answer in "{s}" is redundant.'),
}
MORE = ("{n} more problem{s} should be fixed as well.", "It has {n} further problem{s} besides.")
CLEAN = ("Nothing else needs to change.", "It stays short and on the question.", "There is nothing extra to cut.")


def _sentences(response):
    """(start, end) of each sentence with letters or digits in it, surrounding spaces excluded."""
    for m in re.finditer(r"[^.!?]+[.!?]*", response):
        text = m.group()
        if re.search(r"[A-Za-z0-9]", text):
            yield m.start() + len(text) - len(text.lstrip()), m.end() - len(text) + len(text.rstrip())


def _claims(response, start, end, last):
    """Claims in response[start:end]; last is the person a leading he/she/none refers to."""
    claims = []
    for m in _CLAIM.finditer(response, start, end):
        relation = "city" if m["city"] else "job" if m["job"] else "count"
        subject = m["subject"]
        if subject and subject.lower() == "they":
            who = "they"
        elif subject is None or subject.lower() in ("he", "she"):
            who = last
        else:
            who = last = subject
        value = int(m["count"]) if relation == "count" else m[relation]
        claims.append({"relation": relation, "who": who, "value": value, "item": m["item"], "span": m.span(),
                       "phrase": m.span(relation + "_phrase"),
                       "subject": m.span("subject") if subject else None})
    return claims, last


def _true(claim, facts):
    """Does the passage state this claim? (Items compare singular to plural.)"""
    if claim["relation"] == "count" and claim["item"].rstrip("s") != facts["item"].rstrip("s"):
        return False
    if claim["who"] == "they":
        return facts["kind"] == "together" and claim["value"] == _total(facts)
    person = _person(facts, claim["who"])
    return person is not None and claim["value"] == person[claim["relation"]]


def _answers(claim, facts):
    kind, asked = facts["kind"], _asked(facts)
    if kind == "together":
        return claim["relation"] == "count" and claim["who"] == "they"
    if kind == "who":
        return claim["relation"] == "city" and claim["value"] == asked[0]["city"]
    return claim["relation"] == RELATION[kind] and claim["who"] == asked[0]["name"]


def _supports(claim, facts):
    """A true count of an asked person in a together question is working, neither praised nor blamed."""
    return (facts["kind"] == "together" and claim["relation"] == "count" and claim["who"] in facts["asked"]
            and _true(claim, facts))


def _reason(claim, facts):
    if _answers(claim, facts):
        return "again"
    if claim["who"] == "they" or _person(facts, claim["who"]) is None:
        return "invented"
    return "unasked" if _true(claim, facts) else "false"


def _merge_runs(response, poor):
    """Join a whole-sentence poor span to the one before it when it cannot be quoted on its own.

    In a loop ("A. A. A.") every copy after the second is text that occurs earlier; as one run, the
    copies after the first can still be told apart by the space in front of them.
    """
    merged = []
    for start, end, whole in sorted(poor):
        alone = quote(response, start, end)
        if (merged and whole and merged[-1][2] and not response[merged[-1][1]:start].strip()
                and alone.strip() != response[start:end]):
            merged[-1] = (merged[-1][0], end, True)
        else:
            merged.append((start, end, whole))
    return merged


def _describe(facts):
    """(the question in words, the passage's answer in words)."""
    kind, item, asked = facts["kind"], facts["item"], _asked(facts)
    a = asked[0]
    if kind == "together":
        b = asked[1]
        return (f"how many {item} {a['name']} and {b['name']} have together", f"{a['name']} has "
                f"{a['count']} and {b['name']} has {b['count']}, which makes {_things(_total(facts), item)}")
    question = {"where": f"where {a['name']} lives", "job": f"what {a['name']}'s job is",
                "who": f"who lives in {a['city']}", "count": f"how many {item} {a['name']} has"}[kind]
    return question, _sentence(RELATION[kind], a["name"], a, item)[:-1]


def _short(text):
    """A sentence as the feedback quotes it: end punctuation dropped, long ones cut."""
    text = text.rstrip(".!? ")
    return text if len(text.split()) <= 10 else " ".join(text.split()[:8]) + " ..."


def critique(example, response):
    """The programmatic annotator: {"textual_feedback": str, "good_spans": [str], "poor_spans": [str]}."""
    facts = example.facts
    rng = random.Random(zlib.crc32(f"{example.prompt}\n{response}".encode("utf-8", "replace")))
    answer, answer_span, poor, issues = None, None, [], []   # poor: (start, end, whole sentence?)
    seen, last = set(), facts["asked"][0]
    for start, end in _sentences(response):
        text = response[start:end]
        if tuple(words(text)) in seen:
            poor.append((start, end, True))
            issues.append(("repeat", text))
            continue
        seen.add(tuple(words(text)))
        claims, last = _claims(response, start, end, last)
        judged = [c for c in claims if not _supports(c, facts)]
        if answer is None and any(_answers(c, facts) for c in judged):
            answer = next(c for c in judged if _answers(c, facts))
            answer_span = answer["subject"] if facts["kind"] == "who" and answer["subject"] else answer["phrase"]
            if not _true(answer, facts):
                poor.append((*answer_span, False))
            for c in judged:   # other claims inside the answer's sentence are blamed one by one
                if c is not answer:
                    poor.append((*c["span"], False))
                    issues.append((_reason(c, facts), response[c["span"][0]:c["span"][1]]))
        elif judged or not claims:   # a sentence holding only a sum's working is left alone
            poor.append((start, end, True))
            issues.append((_reason(judged[0], facts) if judged else "invented", text))

    right = answer is not None and _true(answer, facts)
    said = answer and re.sub(r"^(in|as)\s+", "", response[answer_span[0]:answer_span[1]])   # "Oslo", "a pilot"
    good_spans = [quote(response, *answer_span)] if right else []
    if right:   # where the praised phrase will be found
        answer_span = (response.find(good_spans[0]), answer_span[1])
    poor_spans = []
    for start, end, _ in _merge_runs(response, poor):
        phrase = quote(response, start, end)
        # A repeat that can only be quoted by reaching back into the praised answer is left to the
        # feedback: blaming the answer's own tokens would do more harm than an unblamed repeat.
        if not (right and response.find(phrase) < answer_span[1] and start > answer_span[0]):
            poor_spans.append(phrase)

    question, truth = _describe(facts)
    parts = [rng.choice(FACT).format(truth=truth)]
    if answer is None:
        parts.append(rng.choice(MISSING).format(question=question))
    else:
        parts.append(rng.choice(RIGHT if right else WRONG).format(said=said))
    if issues:
        parts.append(rng.choice(ISSUE[issues[0][0]]).format(s=_short(issues[0][1])))
    if len(issues) > 1:
        n = len(issues) - 1
        parts.append(rng.choice(MORE).format(n=n, s="" if n == 1 else "s"))
    elif right and not issues:
        parts.append(rng.choice(CLEAN))
    return {"textual_feedback": " ".join(p[:1].upper() + p[1:] for p in parts),
            "good_spans": good_spans, "poor_spans": poor_spans}
