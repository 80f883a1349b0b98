"""Tests for align.py. Offsets are written by hand so nothing here depends on a tokenizer."""

import difflib

import pytest

import align
from align import FUZZY_THRESHOLD
from data import replies

# ------------------------------------------------------------------------------------------------
# find_span


def test_exact_match():
    assert align.find_span("the cat sat", "cat") == (4, 7)


def test_repeated_phrase_resolves_to_leftmost():
    assert align.find_span("a cat and a cat", "cat") == (2, 5)
    assert align.find_span("A CAT and A CAT", "a cat") == (0, 5)  # tier 2, still leftmost


def test_a_match_on_word_boundaries_beats_an_earlier_one_inside_a_word():
    text = "The sum is 240, not 24."
    assert align.find_span(text, "24") == (20, 22)                   # the standalone 24, not the 24 of 240
    assert align.find_span("The sum is 240.", "24") == (11, 13)      # no standalone one: inside the word
    assert align.find_span("x>=4 or x >= 5", ">=") == (1, 3)         # no word-character ends: plain leftmost
    assert align.find_span("TOTAL 240, Total 24", "total 24") == (11, 19)  # tier 2 prefers boundaries too


def test_exact_tier_beats_an_earlier_loose_match():
    # "A Cat" at 0 only matches case-insensitively; the exact "a cat" at 10 is found first.
    assert align.find_span("A Cat and a cat", "a cat") == (10, 15)


def test_case_and_whitespace_insensitive_offsets_are_in_original_text():
    text = "Return   the\tSum of x"
    assert align.find_span(text, "return the sum") == (0, 16)
    assert text[0:16] == "Return   the\tSum"
    assert align.find_span(text, "  THE\n sum ") == (9, 16)


def test_punctuation_difference_handled_by_fuzzy_tier():
    text = "The loop stops early, before the end."
    # window "stops early, before the end." vs phrase: 26 matching chars, ratio 2*26/(26+28) = 0.963
    assert align.find_span(text, "stops early before the end") == (9, 37)
    assert text[9:37] == "stops early, before the end."


def test_phrase_below_threshold_is_not_placed():
    text = "The loop stops early, before the end."
    phrase = "stops late before an end"
    # the whole clause shares 19 characters with the phrase: ratio 2*19/(24+28) = 0.731; no other
    # window of 4-6 words does better, so nothing is placed
    ratio = difflib.SequenceMatcher(None, phrase, "stops early, before the end.", autojunk=False).ratio()
    assert ratio == pytest.approx(19 / 26)
    assert ratio < FUZZY_THRESHOLD
    assert align.find_span(text, phrase) is None


def test_absent_phrase():
    assert align.find_span("the cat sat", "dog") is None
    assert align.find_span("the cat sat", "the function never returns") is None


def test_unicode_offsets_are_str_indices():
    text = "Zoë paid 3 €"
    assert align.find_span(text, "3 €") == (9, 12)
    assert align.find_span(text, "zoë PAID") == (0, 8)       # tier 2
    assert align.find_span(text, "Zoe paid") == (0, 8)       # tier 3: ratio 2*7/16 = 0.875


def test_empty_inputs():
    assert align.find_span("", "cat") is None
    assert align.find_span("the cat", "") is None
    assert align.find_span("the cat", "  \n") is None


# ------------------------------------------------------------------------------------------------
# span_rewards

HELLO = "hello world"
HELLO_TOKENS = [(0, 5), (5, 11)]  # "hello", " world" (byte-level BPE keeps the space on the word)


def test_partial_overlap_labels_the_whole_token():
    assert align.span_rewards(HELLO_TOKENS, [(7, 9, -1.0)], HELLO) == [0.0, -1.0]  # span "rl"


def test_leading_space_token():
    assert align.span_rewards(HELLO_TOKENS, [(6, 11, 1.0)], HELLO) == [0.0, 1.0]   # span starts at "w"
    assert align.span_rewards(HELLO_TOKENS, [(0, 6, 1.0)], HELLO) == [1.0, 0.0]    # span ends on the space


def test_whitespace_only_and_empty_tokens_get_zero():
    text = "a\n\nb"
    offsets = [(0, 0), (0, 1), (1, 3), (3, 4)]  # special token, "a", "\n\n", "b"
    assert align.span_rewards(offsets, [(0, 4, -1.0)], text) == [0.0, -1.0, 0.0, -1.0]


def test_phrase_spanning_token_boundaries_keeps_punctuation_labelled():
    text = "x >= 10"
    offsets = [(0, 1), (1, 4), (4, 7)]  # "x", " >=", " 10"
    span = align.find_span(text, ">= 1")
    assert span == (2, 6)
    assert align.span_rewards(offsets, [(*span, -1.0)], text) == [0.0, -1.0, -1.0]


def test_overlapping_good_and_poor_spans_blame_wins():
    text = "return x + 1"
    offsets = [(0, 6), (6, 8), (8, 10), (10, 12)]  # "return", " x", " +", " 1"
    spans = [(0, 8, 1.0), (7, 12, -1.0)]           # "return x" good, "x + 1" poor
    assert align.span_rewards(offsets, spans, text) == [1.0, -1.0, -1.0, -1.0]
    assert align.span_rewards(offsets, spans[::-1], text) == [1.0, -1.0, -1.0, -1.0]


def test_multibyte_pieces_sharing_a_range_share_the_label():
    text = "Zoë paid"
    offsets = [(0, 2), (2, 3), (2, 3), (3, 8)]  # "Zo", two byte pieces of "ë", " paid"
    assert align.span_rewards(offsets, [(2, 3, -1.0)], text) == [0.0, -1.0, -1.0, 0.0]
    assert align.span_rewards(offsets, [(0, 3, 1.0)], text) == [1.0, 1.0, 1.0, 0.0]


def test_no_tokens_or_no_spans():
    assert align.span_rewards([], [(0, 1, 1.0)], "a") == []
    assert align.span_rewards(HELLO_TOKENS, [], HELLO) == [0.0, 0.0]


# ------------------------------------------------------------------------------------------------
# align

CAT = "The cat sat on the mat."
CAT_TOKENS = [(0, 3), (3, 7), (7, 11), (11, 14), (14, 18), (18, 22), (22, 23)]
#              "The"   " cat"  " sat"   " on"    " the"   " mat"    "."


def test_align_hand_example():
    annotation = {"textual_feedback": "Wrong place.", "good_spans": ["cat sat"],
                  "poor_spans": ["the mat.", "a dog"]}
    delta, stats = align.align(CAT, CAT_TOKENS, annotation)
    # "cat sat" -> (4, 11); "the mat." -> (15, 23), the lowercase "the", not "The" at 0; "a dog" absent
    assert delta == [0.0, 1.0, 1.0, 0.0, -1.0, -1.0, -1.0]
    assert stats == {"spans": 3, "unaligned": 1, "labelled_tokens": 5, "tokens": 7}


def test_align_from_raw_annotator_text():
    raw = '```json\n{"textual_feedback": "ok", "good_spans": ["THE CAT",], // loose quote\n}\n```'
    delta, stats = align.align(CAT, CAT_TOKENS, replies.parse_reply(raw))
    assert delta == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert stats == {"spans": 1, "unaligned": 0, "labelled_tokens": 2, "tokens": 7}


def test_align_empty_response():
    delta, stats = align.align("", [], {"textual_feedback": "empty", "good_spans": ["x"], "poor_spans": []})
    assert delta == []
    assert stats == {"spans": 1, "unaligned": 1, "labelled_tokens": 0, "tokens": 0}


def test_critic_spans_land_on_their_tokens_through_real_offsets():
    """End to end on real data: critic -> find_span -> tokenizer offsets -> delta. The characters of
    the tokens marked -1 (+1) are exactly the characters of the poor (good) phrases, whitespace aside:
    the guard against an off-by-one between phrases and tokens."""
    from data import summarize
    from data.tokenizer import Tokenizer
    examples = summarize.make_examples(200, 0)
    tokenizer = Tokenizer.train([e.demonstration for e in examples], vocab_size=400)

    def characters(text, ranges):
        return {c for start, end in ranges for c in range(start, end) if not text[c].isspace()}

    for e in examples[:50]:
        text, annotation = e.demonstration, summarize.critique(e, e.demonstration)
        offsets = tokenizer.offsets(tokenizer.encode(text))
        delta, stats = align.align(text, offsets, annotation)
        assert stats["unaligned"] == 0
        for sign, key in ((-1, "poor_spans"), (1, "good_spans")):
            tokens = [o for o, d in zip(offsets, delta) if d == sign]
            # the critic quotes verbatim and means the first occurrence (a name is praised where it first
            # appears): str.find, the leftmost exact match, is the independent locator
            phrases = [(text.find(phrase), text.find(phrase) + len(phrase)) for phrase in annotation[key]]
            assert characters(text, tokens) == characters(text, phrases)


def test_a_boundary_is_checked_only_at_an_end_that_is_a_word_character():
    # ">=" has no word-character end: plain leftmost, even where a \b would hold later (x>=4)
    #   "a >= b, x>=4": ">=" at 2..4 (spaces around it) and at 9..11 (between x and 4)
    assert align.find_span("a >= b, x>=4", ">=") == (2, 4)
    # "24." starts with a word character and ends with a non-word one: the boundary is checked at
    # the start only. "It is 124. Not 24.": "24." at 7..10 (inside 124) and at 15..18 (standalone)
    assert align.find_span("It is 124. Not 24.", "24.") == (15, 18)


def test_the_loose_tier_is_tried_only_when_the_exact_phrase_is_absent():
    # "TOTAL 24 and total 240": exact "total 24" only at 13..21, inside "240"; the loose tier's
    # "TOTAL 24" at 0..8 is on word boundaries, but tier 1 found a match, so tier 2 is never tried
    assert align.find_span("TOTAL 24 and total 240", "total 24") == (13, 21)


def test_the_loose_tier_needs_whitespace_between_the_words():
    # "a b" is two words: tier 2 needs at least one whitespace character between them, so the
    # "ab" inside "cabd" is no match; the fuzzy tier's only window, "cabd", has ratio
    # 2 * 2 / (3 + 4) = 0.57 < 0.8: nothing is placed
    assert align.find_span("cabd", "a b") is None


def test_span_rewards_are_floats():
    # "Returns a list of floats": values given as ints, tokens outside every span
    delta = align.span_rewards([(0, 5), (5, 11)], [(7, 9, -1)], "hello world")
    assert delta == [0.0, -1.0] and all(type(d) is float for d in delta)
