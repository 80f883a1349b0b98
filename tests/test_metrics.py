"""ROUGE and token F1 against values worked out by hand."""
import pytest

from data.metrics import exact_match, rouge, rouge_l, token_f1


def test_rouge_hand_worked():
    # unigrams: overlap the x2, cat, on, mat = 5 of 6 each side -> F = 5/6
    # bigrams:  overlap "the cat", "on the", "the mat" = 3 of 5 -> F = 3/5
    # LCS:      "the cat on the mat" = 5 -> F = 5/6
    scores = rouge("The cat sat on the mat.", "the cat is on the mat")
    assert scores == pytest.approx({"rouge1": 5 / 6, "rouge2": 3 / 5, "rougeL": 5 / 6})


def test_rouge_l_word_order():
    # Lin (2004)'s example: LCS 3 of 4 words, then 2 of 4 once the order changes
    assert rouge_l("police kill the gunman", "police killed the gunman") == pytest.approx(0.75)
    assert rouge_l("the gunman kill police", "police killed the gunman") == pytest.approx(0.5)


def test_rouge_l_unequal_lengths():
    # candidate 6 words, reference 3, LCS 3: P = 1/2, R = 1, F = 2/3
    assert rouge_l("a b c d e f", "a c e") == pytest.approx(2 / 3)


def test_token_f1_and_exact_match():
    # overlap {omar, lives, in} = 3; P = 3/4, R = 3/4
    assert token_f1("Omar lives in Rome.", "Omar lives in Oslo.") == pytest.approx(0.75)
    assert exact_match("Omar lives in Oslo", "omar lives in oslo.") == 1.0
    assert exact_match("Omar lives in Rome", "Omar lives in Oslo") == 0.0


def test_empty_strings_score_zero():
    assert rouge("", "a b")["rougeL"] == 0.0 and token_f1("a", "") == 0.0
