"""E4, GAE and the returns (ppo.compute_advantages)."""
from test_ppo import (  # noqa: F401
    policy, test_compute_advantages_hand_worked, test_compute_advantages_matches_naive_loop,
    test_warm_up_fits_the_reward_to_go_and_leaves_the_policy_alone)

HINT = ("E4: zero rewards and values outside the mask first, then run t = N-1 .. 0 with V_N = 0; "
        "returns = advantages + values, masked (exercises/README.md, E4)")
