"""E2, a guard: praise bounded per phrase (guards.bound_praise)."""
from test_guards import (  # noqa: F401
    setup, test_a_repeated_praised_clause_does_not_raise_text2grads_return,
    test_bound_praise_hand_worked,
    test_a_repeat_is_the_same_ids_in_order_of_an_earlier_praised_span)

HINT = ("E2: walk the runs of positive deltas; each run pays 1/len per token, or 0 if the same "
        "token ids were praised earlier in the response; blame stays -1 (exercises/README.md, E2)")
