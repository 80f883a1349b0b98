"""The summarisation task: determinism, flaw rates, and the critic on hand-made responses."""
import pytest

from align import find_span
from data import Example, make_splits, summarize

FACTS = {"name": "Maya", "friend": "Omar", "who": "landlord", "did": "raised my rent by",
         "did_summary": "raised the rent by", "unit": "dollars", "amount": 300, "age": 24, "years": 6,
         "action": "moving out", "advice": "I should wait"}
REFERENCE = "Maya's landlord raised the rent by 300 dollars, so Maya is thinking about moving out."
EXAMPLE = Example("(post)", REFERENCE, REFERENCE, [], FACTS)


def test_deterministic_and_seed_dependent():
    a, b, c = (summarize.make_examples(50, s) for s in (3, 3, 4))
    assert a == b and a != c


def test_reference_holds_exactly_the_post_facts():
    for e in summarize.make_examples(300, 0):
        f = e.facts
        assert f"I am {f['name']} ({f['age']})" in e.prompt and f"{f['amount']} {f['unit']}" in e.prompt
        assert e.reference == summarize._summary(f, f["name"], f["amount"])
        assert summarize.metrics(e, e.reference)["rougeL"] == 1.0
        assert summarize.critique(e, e.reference)["poor_spans"] == []


def test_demonstration_flaw_rates_match_documented_rates():
    examples = summarize.make_examples(3000, 1)
    for kind, rate in summarize.FLAW_RATES.items():
        measured = sum(kind in e.flaws for e in examples) / len(examples)
        assert measured == pytest.approx(rate, abs=0.03), kind   # ~4 binomial standard errors


def test_critic_flags_every_injected_flaw():
    for e in summarize.make_examples(500, 2):
        a = summarize.critique(e, e.demonstration)
        assert all(span in e.demonstration for span in a["good_spans"] + a["poor_spans"])
        if "wrong_number" in e.flaws or "wrong_name" in e.flaws or "redundant" in e.flaws:
            assert a["poor_spans"]
        if "missing_action" in e.flaws:
            assert e.facts["name"] in a["textual_feedback"] and e.facts["action"] in a["textual_feedback"]


def test_critic_hand_examples():
    wrong = "Omar's landlord raised the rent by 24 dollars, so Omar is thinking about moving out, and Omar says I should wait."
    a = summarize.critique(EXAMPLE, wrong)
    # every "Omar" is blamed; the second is quoted with its leading space, so that align.py's
    # leftmost match lands on it and not on the first
    assert a["poor_spans"] == ["Omar", "24 dollars", " Omar", "and Omar says I should wait"]
    assert a["good_spans"] == ["moving out"]
    assert "24" in a["textual_feedback"] and "300" in a["textual_feedback"]

    a = summarize.critique(EXAMPLE, REFERENCE)
    assert (a["good_spans"], a["poor_spans"]) == (["Maya", "300 dollars", "moving out"], [])

    repeated = "Maya's landlord raised the rent by 300 dollars, Maya's landlord raised the rent by 300 dollars."
    a = summarize.critique(EXAMPLE, repeated)
    assert a["poor_spans"] == [" Maya's landlord raised the rent by 300 dollars"]
    start, end = find_span(repeated, a["poor_spans"][0])
    assert (start, end) == (47, len(repeated) - 1)   # the copy, not the original
    assert a["good_spans"] == ["Maya", "300 dollars"]

    missing = "Maya's landlord raised the rent, so Maya is thinking about moving out."
    a = summarize.critique(EXAMPLE, missing)
    assert "300 dollars" in a["textual_feedback"] and "faithful" not in a["textual_feedback"]

    distractor = "Maya's landlord raised the rent by 24 dollars, so Maya is thinking about moving out."
    assert "age" in summarize.critique(EXAMPLE, distractor)["textual_feedback"]


def test_critic_names_each_of_several_flaws():
    # four independent flaws in one response (the demonstrations now carry 1.6 on average): the
    # friend's name, the age for the amount, a side remark, no plan. Each is quoted or named on its own.
    four = "Omar's landlord raised the rent by 24 dollars, which feels unfair."
    a = summarize.critique(EXAMPLE, four)
    assert a["poor_spans"] == ["Omar", "24 dollars", "which feels unfair"] and a["good_spans"] == []
    sentences = a["textual_feedback"].split(". ")
    assert any("Omar" in s and "Maya" in s for s in sentences)                 # who wrote it
    assert any("24" in s and "age" in s and "300 dollars" in s for s in sentences)  # the amount
    assert any("which feels unfair" in s for s in sentences)                    # the side remark
    assert any("moving out" in s for s in sentences)                            # the plan
    examples = summarize.make_examples(3000, 5)
    assert sum(len(e.flaws) for e in examples) / len(examples) == pytest.approx(sum(summarize.FLAW_RATES.values()), abs=0.06)


@pytest.mark.parametrize("response", ["", "???", "Maya Maya Maya", "日本 <script>alert(1)</script>"])
def test_critic_survives_arbitrary_text(response):
    a = summarize.critique(EXAMPLE, response)
    assert set(a) == {"textual_feedback", "good_spans", "poor_spans"} and a["textual_feedback"]
    assert all(s in response for s in a["good_spans"] + a["poor_spans"])


def test_splits_share_no_prompt():
    splits = make_splits(summarize, {"train": 500, "validation": 100, "test": 100}, seed=0)
    prompts = {s: {e.prompt for e in splits[s]} for s in splits}
    assert not prompts["train"] & prompts["test"] and not prompts["train"] & prompts["validation"]
    assert not prompts["validation"] & prompts["test"]
    assert len(splits["test"]) == 100
