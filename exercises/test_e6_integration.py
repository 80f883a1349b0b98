"""E6, integration: your E3-E5 inside ppo.ppo_iteration, on a tiny policy."""
from test_ppo import (  # noqa: F401
    policy, test_one_update_pushes_the_blamed_tokens_down_more_under_text2grad_than_scalar_ppo,
    test_ppo_pushes_down_a_blamed_token,
    test_rollout_logprobs_match_the_sampler_and_first_ratio_is_one)

HINT = ("E6: these pass once E3, E4 and E5 do; if those pass and these fail, compare your "
        "functions' masks and signs with their docstrings (exercises/README.md, E6)")
