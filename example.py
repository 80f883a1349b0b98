"""example.py: one response through the whole method, token by token.

    python example.py                      # a summarize demonstration that carries a flaw
    python example.py --task code --index 2

The critic's spans become delta_t (align.py), the guards turn delta_t into score_t with praise paid
as on this task (guards.PRAISE), and PPO's reward is r_t = score_t - beta KL_t on every token
(Text2Grad) or the scores summed onto the last token (scalar PPO). GAE turns rewards into the
advantages A_t = sum_l (gamma lambda)^l (r_{t+l} + gamma V_{t+l+1} - V_{t+l}) that multiply
grad log pi(y_t): where each method's gradient lands. At the first update KL_t = 0, and V is taken as
0 here, so with lambda 0 A_t is r_t and with 0.95 every later reward counts. GRPO, beside them, reads
a group of answers instead of V (here the reference). The functions are ppo.py's.
"""
import argparse

import torch

import guards
import ppo
from align import align
from data import get_task, make_splits
from data.tokenizer import Tokenizer, training_texts

LAMBDAS = (0.0, 0.95)  # the ends of the experiment's grid; 0.95 is the paper's


def walk_through(task, example, tokenizer, lambdas=LAMBDAS, praise=None):
    """(critique, rows): the critic's annotation of example.demonstration, and per response token
    (the EOS last, with delta 0) its text, delta_t, then for each method ("text2grad", "ppo_scalar")
    r_t and A_t at each GAE lambda: row["r_text2grad"], row["A_text2grad_0.95"], ..., and GRPO's A_t
    in a group of the demonstration and the reference: row["G_text2grad"] (per token), row["G_ppo_scalar"].
    praise "token" or "phrase" (guards.Guards.praise); None: the task's, guards.PRAISE[task.NAME]."""
    response = example.demonstration
    ids = tokenizer.encode(response)
    critique = task.critique(example, response)
    delta, _ = align(response, tokenizer.offsets(ids), critique)
    config, shaping = ppo.PPOConfig(), guards.Guards(praise=praise or guards.PRAISE[task.NAME])
    mask = torch.ones(1, len(ids) + 1)  # the response tokens and the EOS that ends them
    ended = torch.tensor([True])
    zeros = torch.zeros(1, len(ids) + 1)  # log pi = log pi_ref at the first update: KL_t = 0
    dense = guards.shaped_scores([delta], [ids], mask, ended, shaping)
    placed = {"text2grad": dense, "ppo_scalar": ppo.final_scores(dense.sum(1), mask)}
    # GRPO: a group of two answers to the prompt, the demonstration (row 0) and the reference (row 1)
    ref = tokenizer.encode(example.reference)
    ref_delta, _ = align(example.reference, tokenizer.offsets(ref), task.critique(example, example.reference))
    pair = torch.tensor([[1.0] * n + [0.0] * (max(len(ids), len(ref)) + 1 - n) for n in (len(ids) + 1, len(ref) + 1)])
    group = guards.shaped_scores([delta, ref_delta], [ids, ref], pair, torch.tensor([True, True]), shaping)
    columns = {"G_text2grad": ppo.group_advantages(group, pair, 2, "token")[0].tolist(),
               "G_ppo_scalar": ppo.group_advantages(group, pair, 2, "response")[0].tolist()}
    for name, scores in placed.items():
        rewards = ppo.token_rewards(scores, zeros, zeros, mask, ended, config.beta, config)
        columns[f"r_{name}"] = rewards[0].tolist()
        for lam in lambdas:
            columns[f"A_{name}_{lam}"] = ppo.compute_advantages(rewards, zeros, mask, config.gamma, lam)[0][0].tolist()
    pieces = tokenizer.pieces(ids) + ["<|eos|>"]
    return critique, [{"token": piece, "delta": int(d), **{key: column[t] for key, column in columns.items()}}
                      for t, (piece, d) in enumerate(zip(pieces, list(delta) + [0]))]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="example.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="summarize", choices=["summarize", "code", "qa"])
    parser.add_argument("--index", type=int, default=0, help="which flawed demonstration to show (0, 1, ...)")
    args = parser.parse_args(argv)
    task = get_task(args.task)
    examples = make_splits(task, {"train": 400, "validation": 1, "test": 1}, seed=0)["train"]
    flawed = [e for e in examples if e.flaws]
    if not 0 <= args.index < len(flawed):
        parser.error(f"--index must be from 0 to {len(flawed) - 1}")
    example = flawed[args.index]
    tokenizer = Tokenizer.train(training_texts(task, examples), 1024)
    critique, rows = walk_through(task, example, tokenizer)
    print(f"prompt:    {example.prompt}\nresponse:  {example.demonstration}\nreference: {example.reference}\n"
          f"critique:  {critique['textual_feedback']}\ngood spans {critique['good_spans']}, "
          f"poor spans {critique['poor_spans']}\n")
    paid = {"token": "a praised token scores +1", "phrase": "a praised span of n tokens scores 1/n on each"}
    print(f"r_t = score_t - beta KL_t (KL_t = 0 at the first update; {paid[guards.PRAISE[task.NAME]]}, weighted by\n"
          "sigmoid((40 - t) / 4), which fades from ~1 to 0 around token 40); A_t by GAE with gamma 1 and V = 0")
    print(f"{'':>16} {'':>5} | {'Text2Grad':^26} | {'scalar PPO':^26} | {'GRPO A_t':^15}")
    print(f"{'token':>16} {'delta':>5} | {'r_t':>6} {'A_t, l=0':>9} {'l=0.95':>9} | {'r_t':>6} {'A_t, l=0':>9} "
          f"{'l=0.95':>9} | {'span':>6} {'scalar':>8}")
    for row in rows:
        print(f"{row['token']!r:>16} {row['delta']:>5} | " + " | ".join(
            f"{row['r_' + name]:>6.2f} {row[f'A_{name}_0.0']:>9.2f} {row[f'A_{name}_0.95']:>9.2f}"
            for name in ("text2grad", "ppo_scalar")) + f" | {row['G_text2grad']:>6.2f} {row['G_ppo_scalar']:>8.2f}")
    print("\nWith lambda 0 each Text2Grad token is pushed as the critique says, and scalar PPO pushes the last\n"
          "token only; with lambda 0.95 scalar PPO spreads its one number over every token, praised ones included.\n"
          "GRPO (no value head) compares this response with the reference, both scored by the critic: span rewards\n"
          "normalised over the pair's tokens and summed from t on, or the sums normalised: one number everywhere,\n"
          "+1 or -1 in a group of two (whichever of the two scored higher), 0 if they tie.")


if __name__ == "__main__":
    main()
