"""E1, span alignment: find_span and span_rewards (align.py), then align() on top of them."""
from test_align import (  # noqa: F401  (the project's own checks, collected here)
    test_a_match_on_word_boundaries_beats_an_earlier_one_inside_a_word, test_absent_phrase,
    test_align_empty_response, test_align_hand_example,
    test_case_and_whitespace_insensitive_offsets_are_in_original_text,
    test_critic_spans_land_on_their_tokens_through_real_offsets, test_empty_inputs,
    test_exact_match,
    test_exact_tier_beats_an_earlier_loose_match, test_leading_space_token,
    test_multibyte_pieces_sharing_a_range_share_the_label, test_no_tokens_or_no_spans,
    test_overlapping_good_and_poor_spans_blame_wins, test_partial_overlap_labels_the_whole_token,
    test_phrase_spanning_token_boundaries_keeps_punctuation_labelled,
    test_repeated_phrase_resolves_to_leftmost, test_whitespace_only_and_empty_tokens_get_zero,
    test_a_boundary_is_checked_only_at_an_end_that_is_a_word_character,
    test_the_loose_tier_is_tried_only_when_the_exact_phrase_is_absent,
    test_the_loose_tier_needs_whitespace_between_the_words, test_span_rewards_are_floats)

HINT = ("E1: find_span tries the exact phrase, then case and whitespace loosely, on word "
        "boundaries first in each tier; span_rewards reads each token's non-whitespace "
        "characters and lets blame win an overlap (exercises/README.md, E1)")
