"""E5, the clipped policy loss and the value loss (loss.clipped_losses)."""
from test_loss import (  # noqa: F401
    test_entropy_bonus_is_the_mean_entropy_over_real_tokens,
    test_ppo_loss_matches_token_by_token_fp64,
    test_value_loss_hand_worked_with_and_without_the_clip,
    test_clipped_losses_ignore_large_values_in_the_padding,
    test_clipped_losses_statistics_hand_worked)

HINT = ("E5: every mean is over the real tokens (sum(x * mask) / sum(mask)); the max of the two "
        "negated surrogates, the max of the two squared errors (exercises/README.md, E5)")
