"""E7, an extension: GRPO's group advantages, per token and per response (grpo.py)."""
from test_grpo import (  # noqa: F401
    test_a_group_without_differences_has_zero_advantages_not_nan, test_groups_are_normalised_apart,
    test_grpo_pushes_down_a_blamed_token, test_response_advantages_collapse_the_spans,
    test_the_collapse_is_the_last_token_reward, test_token_advantages_of_a_hand_worked_group,
    test_an_empty_response_counts_in_its_groups_response_statistics,
    test_no_spread_is_measured_against_the_groups_mean,
    test_an_unknown_per_is_a_value_error_that_names_it,
    test_a_group_equal_up_to_float_rounding_has_zero_advantages, test_the_inputs_are_left_as_they_were)

HINT = ("E7: view the rows as (B / group, group * N); normalise over the mask; sum from t on with "
        "flip-cumsum-flip; a spread below 1e-5 (1 + |mean|) gives 0 (exercises/README.md, E7)")
