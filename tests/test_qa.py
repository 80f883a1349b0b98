"""The question-answering task: determinism, references, flaw rates, and the critic on hand-made answers."""
import random
import re

import pytest

from data import Example, document, make_splits, qa
from data.tokenizer import Tokenizer, training_texts

PEOPLE = [{"name": "Lena", "city": "Rome", "job": "baker", "count": 3},
          {"name": "Omar", "city": "Oslo", "job": "pilot", "count": 4}]
PASSAGE = ("Lena lives in Rome and works as a baker. Omar lives in Oslo and works as a pilot. "
           "Lena has 3 cats and Omar has 4 cats.")


def hand_example(kind, asked, question):
    facts = {"kind": kind, "item": "cats", "people": PEOPLE, "asked": asked}
    reference = qa._reference(facts)
    return Example(f"{PASSAGE} Question: {question}", reference, reference, [], facts)


WHERE = hand_example("where", ["Omar"], "Where does Omar live?")
TOGETHER = hand_example("together", ["Lena", "Omar"], "How many cats do Lena and Omar have together?")
WHO = hand_example("who", ["Omar"], "Who lives in Oslo?")


def spans(example, response):
    a = qa.critique(example, response)
    assert set(a) == {"textual_feedback", "good_spans", "poor_spans"}
    assert all(s in response for s in a["good_spans"] + a["poor_spans"])
    return a["good_spans"], a["poor_spans"]


def parse_passage(prompt):
    """{name: (city, job, count)} read back from the prompt text, independently of the generator."""
    jobs = dict((n, (c, j)) for n, c, j in re.findall(r"(\w+) lives in (\w+) and works as an? (\w+)\.", prompt))
    counts = {n: int(k) for n, k in re.findall(r"(\w+) has (\d) \w+", prompt.split("Question:")[0])}
    assert set(jobs) == set(counts)
    return {n: (*jobs[n], counts[n]) for n in jobs}


def test_hand_examples_use_the_generator_format():
    assert qa._passage(PEOPLE, "cats") == PASSAGE
    assert (WHERE.reference, WHO.reference, TOGETHER.reference) == (
        "Omar lives in Oslo.", "Omar lives in Oslo.", "Together they have 7 cats.")
    shape = r"(\w+ lives in \w+ and works as an? \w+\. ){2,3}(\w+ has \d \w+(, | and )){1,2}\w+ has \d \w+\. Question: .*\?"
    assert all(re.fullmatch(shape, e.prompt) for e in qa.make_examples(200, 0))


def test_deterministic_and_seed_dependent():
    a, b, c = (qa.make_examples(60, s) for s in (7, 7, 8))
    assert a == b and a != c


def test_reference_is_correct_and_short():
    examples = qa.make_examples(1000, 0)
    assert {e.facts["kind"] for e in examples} == set(qa.QUESTION_KINDS)
    for e in examples:
        people, question = parse_passage(e.prompt), e.prompt.split("Question: ")[1]
        assert qa.metrics(e, e.reference) == {"f1": 1.0, "exact_match": 1.0, "right_answer": 1.0}
        assert len(e.prompt.split()) <= 60 and len(e.reference.split()) <= 12
        if m := re.fullmatch(r"How many (\w+) do (\w+) and (\w+) have together\?", question):
            assert e.reference == f"Together they have {people[m[2]][2] + people[m[3]][2]} {m[1]}."
        elif m := re.fullmatch(r"Where does (\w+) live\?", question):
            assert e.reference == f"{m[1]} lives in {people[m[1]][0]}."
        elif m := re.fullmatch(r"Who lives in (\w+)\?", question):
            (name,) = [n for n in people if people[n][0] == m[1]]
            assert e.reference == f"{name} lives in {m[1]}."
        elif m := re.fullmatch(r"What is (\w+)'s job\?", question):
            assert re.fullmatch(rf"{m[1]} works as an? {people[m[1]][1]}\.", e.reference)
        else:
            m = re.fullmatch(r"How many (\w+) does (\w+) have\?", question)
            assert re.fullmatch(rf"{m[2]} has {people[m[2]][2]} {m[1][:-1]}s?\.", e.reference)


def test_flaw_rates_match_documented_rates_in_their_context():
    examples = qa.make_examples(2000, 1)
    single = [e for e in examples if e.facts["kind"] != "together"]
    together = [e for e in examples if e.facts["kind"] == "together"]
    later = [e for e in single if e.facts["asked"][0] != e.facts["people"][0]["name"]]  # not the first named
    for kind, group in [("unasked_fact", examples), ("invented_detail", examples), ("wrong_entity", later),
                        ("off_by_one", together)]:
        rate, measured = qa.FLAW_RATES[kind], sum(kind in e.flaws for e in group) / len(group)
        assert measured == pytest.approx(rate, abs=4 * (rate * (1 - rate) / len(group)) ** 0.5), kind
    assert not any("off_by_one" in e.flaws for e in single)
    assert not any("wrong_entity" in e.flaws for e in together + [e for e in single if e not in later])
    for e in examples:
        assert (e.demonstration == e.reference) == (not e.flaws)
        assert len(re.findall(r"[.]", e.demonstration)) == 1 + ("unasked_fact" in e.flaws) + ("invented_detail" in e.flaws)
    # several independent flaws: most demonstrations carry two or more
    assert sum(len(e.flaws) >= 2 for e in examples) / len(examples) > 0.6


def test_demonstrations_score_below_references():
    examples = qa.make_examples(1000, 2)
    f1 = sum(qa.metrics(e, e.demonstration)["f1"] for e in examples) / len(examples)
    assert 0.4 < f1 < 0.6


def test_critic_flags_exactly_the_injected_flaws():
    for e in qa.make_examples(600, 3):
        good, poor = spans(e, e.demonstration)
        answer, _, extra = e.demonstration.partition(". ")
        wrong = "wrong_entity" in e.flaws or "off_by_one" in e.flaws
        appended = [sentence + "." for sentence in extra.rstrip(".").split(". ")] if extra else []
        assert len(poor) == wrong + len(appended) == len(e.flaws)   # one span for each flaw
        if wrong:   # the wrong key phrase, taken from the answer sentence
            assert good == [] and poor[0] in answer and poor[0] not in e.reference
        else:
            assert len(good) == 1 and good[0] in answer and good[0] in e.reference
        assert poor[len(poor) - len(appended):] == appended  # each appended sentence whole, nothing more


def test_wrong_city():
    assert spans(WHERE, "Omar lives in Rome.") == ([], ["in Rome"])
    feedback = qa.critique(WHERE, "Omar lives in Rome.")["textual_feedback"]
    assert "Rome" in feedback and "Omar lives in Oslo" in feedback
    # the reasoning before the verdict: the passage's fact opens the critique, the wrong city follows
    assert feedback.index("Omar lives in Oslo") < feedback.index("Rome") and "Rome" not in feedback.split(".")[0]


SECOND = re.compile(r"^(The answer says|So) (.+?)(, which is right\.| as well\.| is right\.|"
                    r", which is wrong\.| instead\.| is wrong\.)$")
RIGHT_ENDS = {", which is right.", " as well.", " is right."}


@pytest.mark.parametrize("example, response, said, right", [
    (WHERE, "Omar lives in Oslo.", "Oslo", True), (WHERE, "Omar lives in Rome.", "Rome", False),
    (WHERE, "Lena lives in Oslo. Omar lives in Oslo.", "Oslo", True),   # the praised quote reaches back
    (WHO, "Omar lives in Oslo.", "Omar", True), (WHO, "Lena lives in Oslo.", "Lena", False),
    (TOGETHER, "Together they have 7 cats.", "7 cats", True), (TOGETHER, "Together they have 8 cats.", "8 cats", False),
    (hand_example("job", ["Lena"], "What is Lena's job?"), "Lena works as a baker.", "a baker", True),
    (hand_example("job", ["Lena"], "What is Lena's job?"), "Lena works as an engineer.", "an engineer", False)])
def test_the_verdict_comes_after_what_the_answer_says(example, response, said, right):
    """The second sentence names the answer's value, then judges it (hand-worked on each question kind)."""
    second = re.split(r"(?<=\.) ", qa.critique(example, response)["textual_feedback"])[1]
    opening, value, ending = SECOND.match(second).groups()
    assert value == said and (ending in RIGHT_ENDS) == right


def test_right_and_wrong_verdicts_read_the_same_up_to_the_value():
    """Over generated answers, right and wrong: the words before the value are drawn from the same
    openings with both verdicts, so nothing before the value gives the verdict away."""
    openings = {True: [], False: []}
    for e in qa.make_examples(400, 11):
        for response in (e.reference, e.demonstration):
            a = qa.critique(e, response)
            opening, value, ending = SECOND.match(re.split(r"(?<=\.) ", a["textual_feedback"])[1]).groups()
            assert value in response and (ending in RIGHT_ENDS) == bool(a["good_spans"])
            openings[bool(a["good_spans"])].append(opening)
    assert len(openings[False]) >= 40   # the demonstrations' wrong entities and sums
    for verdict, seen in openings.items():
        assert set(seen) == {"The answer says", "So"}
        assert 0.55 < seen.count("The answer says") / len(seen) < 0.8   # two forms of three open with it


def test_wrong_person_for_who():
    assert spans(WHO, "Lena lives in Oslo. She works as a baker.") == ([], ["Lena", "She works as a baker."])


def test_off_by_one_sum_and_sum_working():
    assert spans(TOGETHER, "Together they have 8 cats.") == ([], ["8 cats"])
    assert "3" in qa.critique(TOGETHER, "Together they have 8 cats.")["textual_feedback"]
    working = "Lena has 3 cats and Omar has 4 cats. Together they have 7 cats."
    assert spans(TOGETHER, working) == (["7 cats"], [])


def test_several_flaws_each_blamed_on_its_own():
    # the habits together, worked by hand: Omar (named second) given Lena's city, an unasked true
    # fact and an invented detail; a together answer one too high with an unasked fact about an asked
    # person (a fact, not the sum's working) and an invented one
    assert spans(WHERE, "Omar lives in Rome. He works as a pilot. He moved there 3 years ago.") == (
        [], ["in Rome", "He works as a pilot.", "He moved there 3 years ago."])
    assert spans(TOGETHER, "Together they have 8 cats. They keep them at home. Lena lives in Rome.") == (
        [], ["8 cats", "They keep them at home.", "Lena lives in Rome."])
    feedback = qa.critique(WHERE, "Omar lives in Rome. He works as a pilot. He moved there 3 years ago.")
    assert "Rome" in feedback["textual_feedback"] and re.search(r"\b1 (more|further) problem\b", feedback["textual_feedback"])


def test_appended_clauses():
    assert spans(WHERE, "Omar lives in Oslo. He has lived there for 6 years.") == (
        ["in Oslo"], ["He has lived there for 6 years."])
    assert spans(WHERE, "Omar lives in Oslo. He works as a pilot. He has 5 cats.") == (
        ["in Oslo"], ["He works as a pilot.", "He has 5 cats."])
    assert spans(WHERE, "Omar lives in Oslo and works as a pilot.") == (["in Oslo"], ["works as a pilot"])
    feedback = qa.critique(WHERE, "Omar lives in Oslo. He has lived there for 6 years.")["textual_feedback"]
    assert "He has lived there for 6 years" in feedback


def test_repeated_sentences_are_poor_and_placed_on_the_copy():
    assert spans(WHERE, "Omar lives in Oslo. Omar lives in Oslo.") == (["in Oslo"], [" Omar lives in Oslo."])
    loop = "Omar lives in Oslo. He works as a pilot. Omar lives in Oslo. He works as a pilot."
    good, poor = spans(WHERE, loop)
    assert (good, poor) == (["in Oslo"], ["He works as a pilot.", " Omar lives in Oslo. He works as a pilot."])
    assert loop.find(poor[1]) == loop.index("pilot.") + len("pilot.")   # leftmost match is the copy
    good, poor = spans(WHERE, "Omar lives in Oslo. " * 5)
    assert poor == [" Omar lives in Oslo." * 4] and ("Omar lives in Oslo. " * 5).find(poor[0]) == 19


def test_repeat_that_cannot_be_told_apart_from_the_answer_is_not_quoted():
    good, poor = spans(WHERE, "Well. Omar lives in Oslo. Omar lives in Oslo.")
    assert good == ["in Oslo"] and poor == ["Well."]


def test_correct_answers_have_no_poor_spans():
    assert spans(WHERE, "Omar lives in Oslo.") == (["in Oslo"], [])
    assert spans(WHO, "Omar lives in Oslo.") == (["Omar"], [])
    assert spans(TOGETHER, "Together they have 7 cats.") == (["7 cats"], [])
    count = hand_example("count", ["Lena"], "How many cats does Lena have?")
    assert spans(count, "Lena has 3 cats.") == (["3 cats"], [])
    job = hand_example("job", ["Lena"], "What is Lena's job?")
    assert spans(job, "Lena works as a baker.") == (["as a baker"], [])


def test_feedback_is_deterministic_and_varied():
    responses = [f"Omar lives in Oslo. He has lived there for {k} years." for k in range(2, 10)]
    first = [qa.critique(WHERE, r)["textual_feedback"] for r in responses]
    assert first == [qa.critique(WHERE, r)["textual_feedback"] for r in responses]
    assert len({f.split(". ")[0] for f in first}) > 1
    assert all(1 <= len(re.findall(r"[.!?](?:\s|$)", f)) <= 3 for f in first)


@pytest.mark.parametrize("response", ["", "   ", "???", "Omar Omar Omar", "lives in in Oslo Oslo",
                                      "日本 <script>alert(1)</script>", "x" * 500, "Together they have 99 dogs."])
def test_critic_survives_arbitrary_text(response):
    a = qa.critique(WHERE, response)
    assert a["textual_feedback"] and "where Omar lives" in a["textual_feedback"] and a["good_spans"] == []
    assert all(s and s in response for s in a["poor_spans"])
    assert bool(a["poor_spans"]) == bool(response.strip(" ?"))


def test_splits_share_no_prompt():
    splits = make_splits(qa, {"train": 400, "validation": 100, "test": 100}, seed=0)
    train = {e.prompt for e in splits["train"]}
    assert not train & {e.prompt for e in splits["test"] + splits["validation"]}


@pytest.mark.parametrize("example, response, right", [
    (WHERE, "Omar lives in Oslo.", 1.0),
    (WHERE, "Omar lives in Oslo. He works as a pilot.", 1.0),   # an appended sentence does not matter
    (WHERE, "omar lives in oslo", 1.0),                         # words, as f1 counts them
    (WHERE, "Omar lives in Rome. Omar lives in Oslo.", 0.0),    # the opening sentence is wrong
    (WHERE, "He lives in Oslo.", 0.0),
    (WHERE, "Omar lives in", 0.0),
    (WHERE, "", 0.0),
    (TOGETHER, "Together they have 7 cats.", 1.0),
    (TOGETHER, "Together they have 8 cats.", 0.0),
    (WHO, "Omar lives in Oslo.", 1.0),
    (WHO, "Lena lives in Oslo.", 0.0),
])
def test_right_answer_is_the_reference_opening_the_response(example, response, right):
    assert qa.metrics(example, response)["right_answer"] == right


def test_pretraining_documents_answer_every_question_right():
    # data.document: the example's own question and reference, then follow-ups on the same passage;
    # every answer in them judged right by the task's own metric and critic
    kinds = set()
    for k, example in enumerate(qa.make_examples(200, seed=3)):
        turns = document(qa, example, random.Random(k))
        replay = random.Random(k)  # the same draws, as whole Examples with their facts
        asked = [example] + [qa.another_question(example, replay) for _ in range(11)]
        passage = example.prompt[:example.prompt.index(" Question: ")]
        assert turns[0] == (example.prompt, example.reference) and len(turns) == 12
        for (text, answer), e in zip(turns, asked):
            assert e.facts["people"] == example.facts["people"] and e.facts["item"] == example.facts["item"]
            assert e.prompt == (text if e is example else passage + text) and answer == e.reference
            assert qa.metrics(e, answer)["right_answer"] == 1.0 and qa.critique(e, answer)["poor_spans"] == []
            kinds.add(e.facts["kind"])
    assert kinds == set(qa.QUESTION_KINDS)


def test_a_follow_up_turn_is_tokenised_as_in_a_whole_prompt():
    # the property the pretraining documents rely on: the passage and " Question: ..." encoded apart
    # give the same ids as the whole prompt encoded at once (byte-level BPE, no prefix space, pieces
    # split at the space before a word), so a follow-up question looks as it will in the SFT prompt
    examples = qa.make_examples(300, seed=5)
    tokenizer = Tokenizer.train(training_texts(qa, examples), vocab_size=1024)
    for e in examples:
        passage, question = e.prompt.split(" Question: ")
        assert tokenizer.encode(e.prompt) == tokenizer.encode(passage) + tokenizer.encode(" Question: " + question)
