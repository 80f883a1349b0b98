"""E8's suspect: a policy with a silent bug, wrong on purpose (exercises/README.md, E8).

PPO runs with it: no error, no NaN, the loss falls. One line of it differs from
ppo.PolicyWithValue. Do not diff the two files first: measure (logprob_gap in
exercises/student.py), then find the line your measurement points at, then say what PPO
trains on when it is there.
"""
import ppo


class SuspectPolicy(ppo.PolicyWithValue):
    """ppo.PolicyWithValue with one wrong line in forward."""

    def forward(self, ids, attention_mask, last_prompt, N):
        hidden = self.gpt.hidden_states(ids, attention_mask)
        hidden = hidden[:, last_prompt + 1:last_prompt + 1 + N]  # (B, N, C)
        return self.gpt.lm_head(hidden), self.value(hidden)
