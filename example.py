"""example.py: one response through the whole method, token by token, in seconds.

    python example.py                      # a facts demonstration that carries flaws
    python example.py --task summarize --index 2

The critic's spans become delta_t (align.py); the guards turn delta_t into score_t (guards.py);
PPO's reward is r_t = score_t - beta KL_t on every token (Text2Grad) or the scores summed onto the
last token (where scalar PPO puts its reward), with KL_t = 0 at the first update. GAE turns rewards
into advantages
    A_t = sum_l (gamma lambda)^l (r_{t+l} + gamma V_{t+l+1} - V_{t+l}),   gamma = 1,
and the update multiplies grad log pi(y_t) by A_t whitened over the batch (ppo.masked_whiten).
Printed for each method: A_t at lambda 0 with V = 0 (r_t itself), at the lambda the method runs at
(text2grad.LAMBDAS) with V = 0 and with a fitted V, and that last one whitened. The fitted V is the
cheapest one there is: V_t = the mean reward-to-go at response position t over a batch of scored
demonstrations of the task (ppo.py fits an MLP head to the same target). The functions are the
project's own.
"""
import argparse

import torch

import guards
import ppo
from align import align
from data import TASKS, get_task, make_splits
from data.tokenizer import Tokenizer, training_texts
from text2grad import LAMBDAS

BATCH = 64  # demonstrations scored for the fitted V and the whitening: one rollout's worth


def rewards_of(task, tokenizer, examples, praise):
    """Each example's demonstration scored by the critic through the guards, then placed: the
    rewards r_t (B, N) of "text2grad" (every token) and "ppo_scalar" (the sum on the last token),
    with KL_t = 0; the mask (B, N) covers each response and its EOS. Also the first one's
    critique and delta_t."""
    ids = [tokenizer.encode(e.demonstration) for e in examples]
    critiques = [task.critique(e, e.demonstration) for e in examples]
    deltas = [align(e.demonstration, tokenizer.offsets(i), c)[0]
              for e, i, c in zip(examples, ids, critiques)]
    N = max(map(len, ids)) + 1
    mask = torch.tensor([[1.0] * (len(i) + 1) + [0.0] * (N - len(i) - 1) for i in ids])
    ended, zeros = torch.ones(len(ids), dtype=torch.bool), torch.zeros(mask.shape)
    config = ppo.PPOConfig()
    dense = guards.shaped_scores(deltas, ids, mask, ended, guards.Guards(praise=praise))
    placed = {"text2grad": dense, "ppo_scalar": ppo.final_scores(dense.sum(1), mask)}
    rewards = {name: ppo.token_rewards(scores, zeros, zeros, mask, ended, config.beta,
                                       config.missing_eos_penalty)
               for name, scores in placed.items()}
    return rewards, mask, critiques[0], deltas[0], ids[0]


def fitted_value(rewards, mask):
    """V_t (B, N): the mean reward-to-go at position t over the rows still running at t."""
    to_go = ppo.reward_to_go(rewards, mask)
    mean = to_go.sum(0) / mask.sum(0).clamp(min=1)  # (N,)
    return mean.expand_as(rewards) * mask


def walk_through(task, examples, tokenizer, praise=None):
    """(critique, rows) for examples[0].demonstration, scored with the batch `examples`: per
    response token (the EOS last, with delta 0) its text, delta_t and, for each method m of
    "text2grad" and "ppo_scalar": row["r_m"], row["A_m_0"] (lambda 0, V = 0), row["A_m_V0"]
    (the method's lambda, V = 0), row["A_m_V"] (the same with the fitted V), row["A_m_white"]
    (that whitened over the batch). praise: guards.Guards.praise; None: the task's."""
    praise = praise or guards.PRAISE[task.NAME]
    rewards, mask, critique, delta, ids = rewards_of(task, tokenizer, examples, praise)
    columns = {}
    for name, r in rewards.items():
        lam = LAMBDAS[task.NAME][name]
        value = fitted_value(r, mask)
        with_value = ppo.compute_advantages(r, value, mask, 1.0, lam)[0]
        columns.update({f"r_{name}": r, f"A_{name}_0": ppo.compute_advantages(r, 0 * r, mask,
                                                                            1.0, 0.0)[0],
                        f"A_{name}_V0": ppo.compute_advantages(r, 0 * r, mask, 1.0, lam)[0],
                        f"A_{name}_V": with_value,
                        f"A_{name}_white": ppo.masked_whiten(with_value, mask)})
    pieces = tokenizer.pieces(ids) + ["<|eos|>"]
    rows = [{"token": piece, "delta": int(d), **{k: c[0, t].item() for k, c in columns.items()}}
            for t, (piece, d) in enumerate(zip(pieces, list(delta) + [0]))]
    return critique, rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="example.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="facts", choices=TASKS,
                        help="the toy task whose demonstration is shown (default: facts)")
    parser.add_argument("--index", type=int, default=0,
                        help="which flawed demonstration to show: 0, 1, ... (default: 0)")
    args = parser.parse_args(argv)
    task = get_task(args.task)
    examples = make_splits(task, {"train": 400, "validation": 1, "test": 1}, seed=0)["train"]
    flawed = [e for e in examples if e.flaws]
    if not 0 <= args.index < len(flawed):
        parser.error(f"--index must be from 0 to {len(flawed) - 1}")
    batch = [flawed[args.index]] + [e for e in examples if e is not flawed[args.index]][:BATCH - 1]
    tokenizer = Tokenizer.train(training_texts(task, examples), 1024)
    critique, rows = walk_through(task, batch, tokenizer)
    shown = batch[0]
    print(f"prompt:    {shown.prompt}\nresponse:  {shown.demonstration}\n"
          f"reference: {shown.reference}\ncritique:  {critique['textual_feedback']}\n"
          f"good spans {critique['good_spans']}, poor spans {critique['poor_spans']}\n")
    lams = {name: LAMBDAS[task.NAME][name] for name in ("text2grad", "ppo_scalar")}
    print(f"r_t = score_t (KL_t = 0 at the first update); A_t at lambda 0 with V = 0, then at the "
          f"method's lambda\nwith V = 0 and with V fitted to {BATCH} demonstrations, then that "
          f"whitened: what multiplies grad log pi")
    print(f"{'':>14} {'':>5} | {'Text2Grad, lambda ' + str(lams['text2grad']):^32} | "
          f"{'last token (summed), lambda ' + str(lams['ppo_scalar']):^32}")
    head = f"{'r_t':>5} {'l=0':>6} {'V=0':>6} {'V fit':>6} {'white':>6}"
    print(f"{'token':>14} {'delta':>5} | {head} | {head}")
    for row in rows:
        cells = [" ".join(f"{row[key.format(name)]:{width}.2f}" for key, width in
                          (("r_{}", 5), ("A_{}_0", 6), ("A_{}_V0", 6), ("A_{}_V", 6),
                           ("A_{}_white", 6)))
                 for name in ("text2grad", "ppo_scalar")]
        print(f"{row['token']!r:>14} {row['delta']:>5} | {cells[0]} | {cells[1]}")
    print("\nHow to read it, row by row: README, One response through the method.")


if __name__ == "__main__":
    main()
