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


def main():
    """What a PPO log shows: the suspect beside the project's policy, on a tiny GPT (vocabulary
    12) taught by PPO to stop writing the token 7 (-1 on every sampled 7, nothing else)."""
    import copy

    import torch

    from model import GPT, GPTConfig, generate
    pad, eos = 0, 2
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=12, block_size=48, n_layer=2, n_head=2, n_embd=32)).eval()
    prompts = [[1, 3 + i % 8] for i in range(64)]
    config = ppo.PPOConfig(max_new_tokens=10, batch_size=16, minibatch_size=8, lr=3e-3, beta=0.0,
                           missing_eos_penalty=0.0, updates=8)

    def blame_sevens(indices, tokens, mask):
        return -((tokens == 7) & mask.bool()).float()

    def share_of_sevens(policy):
        tokens, _, mask = generate(policy, prompts, 10, eos, pad,
                                   generator=torch.Generator().manual_seed(1))
        return (((tokens == 7) & mask.bool()).sum() / mask.sum()).item()

    for cls in (ppo.PolicyWithValue, SuspectPolicy):
        curve, history, _ = ppo.train(cls(copy.deepcopy(gpt)), gpt, prompts, blame_sevens, eos,
                                      pad, config, seed=0, evaluate=share_of_sevens, eval_every=4)
        print(f"\n{cls.__name__}: share of 7s at updates 0, 4, 8: "
              + ", ".join(f"{share:.3f}" for _, share in curve))
        print("update  kl_ref  ratio  approx_kl  clip_fraction  skipped")
        for update, h in enumerate(history, 1):
            print(f"{update:6d} {h['kl_ref']:7.3f} {h['ratio']:6.3f} {h['approx_kl']:10.4f} "
                  f"{h['clip_fraction']:14.3f} {h['skipped']:8d}")


if __name__ == "__main__":
    main()
