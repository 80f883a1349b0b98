"""Credit landing: where one PPO update moves the log-probabilities, and how much of that movement
lands on the tokens the critic blamed.

    python -m experiments.credit_landing --out runs/summarize   # after python -m experiments.protocol

Text2Grad's claim is about *where* the gradient goes: the critique points at the blamed span, and
the update should push those tokens down and leave the rest. This measures it directly, for every
method at the GAE lambda the run chose, on a fixed batch of criticised responses, from the run's
own SFT policy and reward models. It writes credit_landing.json beside the run's results.json;
python -m experiments.report then shows it, token by token in report.html.
"""
import argparse
import copy
import json
import os
import random
import sys
import time
from dataclasses import replace

import torch

import guards
import landing
import ppo
from align import align
from experiments import stats
from experiments.run_folder import read_json, read_run
from model import generate
from experiments.runstate import atomic_save, fail, pick_device
from sft import MAX_NEW_TOKENS, response_ids
from experiments.ppo_runs import configs
from experiments.protocol import COMPARISONS
from text2grad import METHODS, reward_function

PROBE = 64  # criticised responses in the credit-landing batch
SHOWN = 3   # responses kept token by token for the report


def credit_landing(task, policy, tokenizer, splits, reward_for, lambdas, ppo_fields, seed, pairs=()):
    """Where one PPO update moves the log-probabilities. A fixed batch of criticised responses (SFT
    samples on validation prompts that the critic blames somewhere) is scored by each method's reward;
    from the SFT policy, with its value head warmed up as in training (on a batch of training
    prompts, the missing-EOS penalty off as below), one PPO iteration (config.epochs epochs of
    minibatch steps) at the method's GAE lambda (lambdas[method]) runs on exactly that batch. Then,
    over the response tokens (EOS excluded), with change_t the change of log pi(y_t):
        concentration = [sum_{poor} -change_t / sum_t |change_t|] / [n_poor / n]
    the landing share of the first look (landing.py: the net fall of the critic's poor-span tokens
    as a share of all the movement) over their share of the tokens: 1 when the poor tokens fall by the average |change| of a token, up to n / n_poor when
    the update moves nothing but the blamed tokens down, negative when they rise. Unlike a ratio to
    the mean change of neutral tokens it stays finite when those are near-certain and barely move.
    Its 95% interval is a bootstrap over the responses of this one update: it says how much the
    number depends on which responses were probed, not how much another update would differ. The
    missing-EOS penalty is off, so only the method's reward and the KL move the tokens.
    reward_for(method, examples) -> the method's reward function for those examples (the PPO
    stage's); lambdas: {method: its GAE lambda}; ppo_fields: the preset's PPOConfig fields;
    pairs: (a, b) method pairs whose concentrations are compared on the same responses
    (paired_concentration), in result["paired"]["a - b"]."""
    config = configs(ppo_fields, missing_eos_penalty=0.0, max_new_tokens=MAX_NEW_TOKENS)[0]
    examples = splits["validation"]
    generator = torch.Generator(next(policy.parameters()).device).manual_seed(seed)
    prompts = [tokenizer.prompt(e.prompt) for e in examples]
    tokens, _, mask = generate(policy, prompts, MAX_NEW_TOKENS, tokenizer.eos_id, tokenizer.pad_id,
                               temperature=config.temperature, generator=generator)
    ids = response_ids(tokenizer, tokens, mask)
    labels = []
    for e, r in zip(examples, ids):
        text = tokenizer.decode(r)
        labels.append(align(text, tokenizer.offsets(r), task.critique(e, text))[0])
    probe = [i for i, delta in enumerate(labels) if -1 in delta][:PROBE]
    if not probe:
        return {"responses": 0}
    index = torch.tensor(probe, dtype=torch.long, device=tokens.device)
    tokens, mask = tokens[index], mask[index]
    prompts, examples = [prompts[i] for i in probe], [examples[i] for i in probe]
    gold = guards.dense_scores([labels[i] for i in probe], mask.float())  # critic's delta, EOS 0
    text = mask.float() * (tokens != tokenizer.eos_id)                  # response tokens, EOS excluded
    groups = {"poor": text * (gold < 0), "good": text * (gold > 0), "neutral": text * (gold == 0)}
    result = {"responses": len(probe), "tokens": {g: int(m.sum().item()) for g, m in groups.items()},
              # a few responses token by token, for the report: change[method][t] = change of log pi(y_t)
              "examples": [{"prompt": e.prompt, "pieces": tokenizer.pieces(ids[i]), "critic": [int(d) for d in labels[i]],
                            "change": {}} for e, i in zip(examples[:SHOWN], probe)]}
    train = splits["train"]
    warmup_prompts = [tokenizer.prompt(e.prompt) for e in train]
    parts = {}
    for name, lam in lambdas.items():
        method_config = replace(config, lam=lam)
        model = ppo.PolicyWithValue(copy.deepcopy(policy), method_config.detach_value)
        optimizer = model.optimizer(method_config)
        indices = random.Random(seed).sample(range(len(train)), method_config.batch_size)  # as ppo.train draws it
        warm = ppo.rollout(model, policy, [warmup_prompts[i] for i in indices], tokenizer.eos_id, tokenizer.pad_id,
                           method_config, torch.Generator(tokens.device).manual_seed(seed))
        ppo.warm_up_value(model, optimizer, warm, reward_for(name, train)(indices, warm["tokens"], warm["mask"]),
                          method_config)
        batch = ppo.score_responses(model, policy, prompts, tokens, mask, tokenizer.eos_id, tokenizer.pad_id, method_config)
        scores = reward_for(name, examples)(range(len(probe)), tokens, mask)
        ppo.ppo_iteration(model, optimizer, batch, scores, method_config, torch.Generator().manual_seed(seed))
        after = ppo.score_responses(model, policy, prompts, tokens, mask, tokenizer.eos_id, tokenizer.pad_id, method_config)
        change = after["logprobs"] - batch["logprobs"]  # (B, N)
        for row, example in enumerate(result["examples"]):
            example["change"][name] = [round(c, 6) for c in change[row, :len(example["pieces"])].tolist()]
        result[name] = {"lambda": lam, **{g: ppo.masked_mean(change, m).item() for g, m in groups.items()},
                        **concentration(change, groups["poor"], text)}
        parts[name] = per_response(change, groups["poor"], text)
    result["paired"] = {f"{a} - {b}": paired_concentration(parts[a], parts[b]) for a, b in pairs}
    return result


def per_response(change, poor, text):
    """landing.per_answer's parts of each response, from a poor-token mask instead of the critic's
    deltas: its poor tokens' net fall, its movement, its poor-token and token counts."""
    return landing.per_answer(change, -poor, text)


def concentration_of(parts, rows):
    """The landing share over the blamed tokens' share of the tokens (landing.landing_share), on
    the responses `rows`; 0 when undefined."""
    counted, poor = sum(parts["tokens"][i] for i in rows), sum(parts["blamed"][i] for i in rows)
    if counted == 0 or poor == 0:
        return 0.0
    return landing.landing_share(parts, rows) / (poor / counted)


def concentration(change, poor, text):
    """The credit-landing statistic (see credit_landing) and its 95% bootstrap interval over the
    responses (rows). change (B, N); poor, text (B, N) 0/1 masks, poor within text.
    Returns {"concentration", "concentration_ci95": [low, high]}."""
    parts = per_response(change, poor, text)
    B = len(parts["fall"])
    return {"concentration": concentration_of(parts, range(B)),
            "concentration_ci95": list(stats.bootstrap_ci95(B, lambda rows: concentration_of(parts, rows)))}


def paired_concentration(a, b):
    """Concentration of method a minus method b on the same probed responses (per_response parts of
    each), with a paired bootstrap: every resample draws the same responses for both methods.
    Returns {"difference", "ci95": [low, high]}."""
    B = len(a["fall"])
    difference = lambda rows: concentration_of(a, rows) - concentration_of(b, rows)
    return {"difference": difference(range(B)), "ci95": list(stats.bootstrap_ci95(B, difference))}


def main(argv=None):
    """python -m experiments.credit_landing --out DIR: credit landing on a finished run in DIR (its
    SFT policy, reward models and the GAE lambda each method chose) -> DIR/credit_landing.json."""
    parser = argparse.ArgumentParser(prog="python -m experiments.credit_landing", description=main.__doc__)
    parser.add_argument("--out", default="runs/summarize", help="a finished run's folder (default: runs/summarize)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, ...")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    path = os.path.join(args.out, "results.json")
    if not os.path.exists(path):
        fail(f"{path} is missing: the run has not finished; run or --resume python -m experiments.protocol first")
    try:
        lambdas = {name: read_json(path)["methods"][name]["lambda"] for name in METHODS}
    except ValueError as error:
        fail(str(error))
    except (KeyError, TypeError) as error:
        fail(f"{path} has no GAE lambda for a method ({error}); it may come from an older version: run it again")
    start, run = time.time(), read_run(args.out, pick_device(args.device))

    def reward_for(name, examples):
        return reward_function(name, run.task, run.tokenizer, examples, run.reward_models, configs(run.preset["ppo"])[1])
    result = credit_landing(run.task, run.policy, run.tokenizer, run.splits, reward_for, lambdas, run.preset["ppo"],
                            run.seed, COMPARISONS)
    atomic_save(json.dumps(result, indent=2), os.path.join(args.out, "credit_landing.json"))
    print(f"credit landing on {result['responses']} criticised responses, {time.time() - start:.0f}s -> "
          f"{os.path.join(args.out, 'credit_landing.json')}; python -m experiments.report --out {args.out} shows it")


if __name__ == "__main__":
    main()
