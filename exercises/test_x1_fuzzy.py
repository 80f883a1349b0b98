"""E1, extension: the fuzzy tier of find_span (align._fuzzy_span), after exact and loose."""
from test_align import (  # noqa: F401
    test_phrase_below_threshold_is_not_placed, test_punctuation_difference_handled_by_fuzzy_tier,
    test_unicode_offsets_are_str_indices)

HINT = ("E1 extension: when neither exact tier matches, return align._fuzzy_span(text, "
        "phrase.split()) (exercises/README.md, E1)")
