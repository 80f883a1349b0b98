"""example.py: one response through the whole method, token by token.

    python example.py                      # a summarize demonstration that carries a flaw
    python example.py --task code --index 2

The task's critic reads the response and writes a critique with good and poor spans; align.py turns
the spans into delta_t, one per token. PPO's reward is r_t = score_t - beta KL_t on every token
(Text2Grad), or the same scores summed onto the last token (scalar PPO), where score_t is delta_t
through the guards against a gamed reward (guards.shaped_scores): a blamed token scores -1; praise is
paid as the experiment pays it on this task (text2grad.PRAISE): +1 on each praised token (the
paper's way; summarize), or +1 per praised phrase, shared over its tokens (code and qa; where the
learned reward is gamed, a policy learns to make praised phrases long and repeat them, RESULTS.md,
"Over-optimisation"). GAE turns rewards into
advantages, A_t = sum_l (gamma lambda)^l (r_{t+l} + gamma V_{t+l+1} - V_{t+l}), and A_t is what
multiplies grad log pi(y_t) in the policy gradient: the table shows where each method's gradient
lands. At the first update the policy is the reference, so KL_t = 0; V is taken as 0 here (before
the value head has learned anything), so A_t is the reward-to-go discounted by lambda: with lambda
0 it is r_t itself, with lambda 0.95 every later reward counts too. Training also whitens A over the
batch, which changes its scale and offset, not which tokens it singles out.
The functions are the ones PPO runs (guards.shaped_scores, ppo.final_scores, token_rewards,
compute_advantages); the tokenizer is trained here on a few hundred examples, in seconds.
"""
import argparse

import torch

import guards
import ppo
from align import align
from data import get_task, make_splits
from data.tokenizer import Tokenizer, training_texts
from text2grad import PRAISE

LAMBDAS = (0.0, 0.95)  # the ends of the experiment's grid; 0.95 is the paper's


def walk_through(task, example, tokenizer, lambdas=LAMBDAS, praise=None):
    """(critique, rows): the critic's annotation of example.demonstration, and per response token
    (the EOS last, with delta 0) its text, delta_t, then for each method ("text2grad", "ppo_scalar")
    r_t and A_t at each GAE lambda: row["r_text2grad"], row["A_text2grad_0.95"], ...
    praise "token" or "span" (guards.Guards.praise); None: the task's, PRAISE[task.NAME]."""
    response = example.demonstration
    ids = tokenizer.encode(response)
    critique = task.critique(example, response)
    delta, _ = align(response, tokenizer.offsets(ids), critique)
    config, shaping = ppo.PPOConfig(), guards.Guards(praise=praise or PRAISE[task.NAME])
    mask = torch.ones(1, len(ids) + 1)  # the response tokens and the EOS that ends them
    ended = torch.tensor([True])
    zeros = torch.zeros(1, len(ids) + 1)  # log pi = log pi_ref at the first update: KL_t = 0
    dense = guards.shaped_scores([delta], [ids], mask, ended, shaping)
    placed = {"text2grad": dense, "ppo_scalar": ppo.final_scores(dense.sum(1), mask)}
    columns = {}
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
    if args.index < 0:
        parser.error("--index must be 0 or more")
    task = get_task(args.task)
    examples = make_splits(task, {"train": 400, "validation": 1, "test": 1}, seed=0)["train"]
    flawed = [e for e in examples if e.flaws]
    if args.index >= len(flawed):
        parser.error(f"--index must be below {len(flawed)}")
    example = flawed[args.index]
    tokenizer = Tokenizer.train(training_texts(task, examples), 1024)
    critique, rows = walk_through(task, example, tokenizer)
    print(f"prompt:    {example.prompt}\nresponse:  {example.demonstration}\nreference: {example.reference}\n"
          f"critique:  {critique['textual_feedback']}\ngood spans {critique['good_spans']}, "
          f"poor spans {critique['poor_spans']}\n")
    paid = {"token": "a praised token scores +1", "span": "a praised span of n tokens scores 1/n on each"}
    print(f"r_t = score_t - beta KL_t (KL_t = 0 at the first update; {paid[PRAISE[task.NAME]]},\n"
          "weighted by sigmoid((40 - t) / 4), which fades from ~1 to 0 around token 40); A_t by GAE with gamma 1\n"
          "and V = 0")
    print(f"{'':>16} {'':>5} | {'Text2Grad':^26} | {'scalar PPO':^26}")
    print(f"{'token':>16} {'delta':>5} | {'r_t':>6} {'A_t, l=0':>9} {'l=0.95':>9} | {'r_t':>6} {'A_t, l=0':>9} {'l=0.95':>9}")
    for row in rows:
        print(f"{row['token']!r:>16} {row['delta']:>5} | " + " | ".join(
            f"{row['r_' + name]:>6.2f} {row[f'A_{name}_0.0']:>9.2f} {row[f'A_{name}_0.95']:>9.2f}"
            for name in ("text2grad", "ppo_scalar")))
    print("""
With lambda 0, Text2Grad's A_t is r_t: each token is pushed exactly as the critique says, and scalar
PPO pushes the last token only. With lambda 0.95, scalar PPO spreads its one number over every
token, discounted from the end, the praised ones included, and Text2Grad's blame also reaches back
to the tokens before each poor span. A learned V takes much of that back (RESULTS.md, the value head);
each method picks its lambda on validation.""")


if __name__ == "__main__":
    main()
