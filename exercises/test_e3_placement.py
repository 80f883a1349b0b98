"""E3, reward placement: final_scores and token_rewards (ppo.py)."""
from test_ppo import (  # noqa: F401
    policy, test_final_score_sits_on_the_sampled_eos,
    test_final_scores_land_on_the_last_real_token_never_padding,
    test_token_rewards_kl_and_missing_eos,
    test_final_scores_give_an_empty_row_nothing_and_are_float32,
    test_the_missing_eos_penalty_lands_on_the_last_real_token_of_a_short_row)

HINT = ("E3: the last real token of row i is mask[i].sum() - 1; r_t = score_t - beta * (logp_t - "
        "ref_logp_t), minus the penalty on the last token where no EOS was sampled, times the mask "
        "(exercises/README.md, E3)")
