"""text2grad.py: Text2Grad against scalar PPO on one toy task, end to end, read top to bottom.

    python text2grad.py                      # summarize, one seed: a first look in a few minutes
    python text2grad.py --task code --seed 1

    data -> tokenizer -> pretraining -> SFT policy -> annotation by the task's critic
    -> reward models -> PPO with each method's reward (the 2 x 2 below) -> test -> one table

The one idea is reward_function: the same critique lands either on the tokens its spans name
(Text2Grad) or, summed, on the last token (scalar RLHF), judged by a learned reward model or by the
critic itself; everything else is shared. Left to the lab (`python -m experiments.protocol`): seeds
and intervals, choosing GAE lambda on validation (LAMBDAS below), the no-critique ablation, the
reward model refreshed on the policy's samples as PPO runs (experiments/refresh.py), resume.
"""
import argparse
import copy
import dataclasses
import os
import time

import torch

import guards
import ppo
from align import align
from data import document, experiment_splits, get_task
from data.annotations import annotate
from data.tokenizer import Tokenizer, training_texts
from model import GPT, GPTConfig
from reward import RewardModel, encode_records, evaluate_reward_model, train_reward_model
from sft import MAX_NEW_TOKENS, evaluate, respond, response_ids, train_sft


@dataclasses.dataclass
class Config:  # a first look's sizes, a few minutes on 2 CPU cores; the lab's experiment is larger
    task: str = "summarize"       # the toy task: summarize, code or qa (data/)
    seed: int = 0                 # every random draw: data, weights, batches, samples
    device: str = "auto"          # auto (cuda if there is one), cpu, cuda, cuda:1, ...
    # data: the tasks are generated, so the SFT pool is fresh text (each example drawn about once)
    train: int = 4000             # PPO's training prompts (the tokenizer reads their examples' text)
    annotated: int = 1000         # training prompts whose sampled responses the critic annotates
    demonstrations: int = 16000   # the pretraining and SFT pool
    validation: int = 100         # validation prompts (the PPO curves)
    test: int = 200               # test prompts (the table)
    vocab_size: int = 1024        # byte-level BPE vocabulary, special tokens included
    # the GPT (policy, reference and reward-model trunk alike)
    n_layer: int = 4              # transformer blocks
    n_head: int = 4               # attention heads per block
    n_embd: int = 128             # width of the residual stream
    block_size: int = 256         # longest sequence the positions cover
    # pretraining and SFT (sft.fit: Adam, warm-up, cosine decay)
    pretrain_steps: int = 300     # steps on documents of the task's correct text (data.document)
    sft_steps: int = 500          # steps on the flawed demonstrations
    batch_size: int = 32          # sequences per step (pretraining, SFT and the reward models)
    lr: float = 2e-3              # peak learning rate of pretraining and SFT
    # annotation and the reward models
    samples_per_prompt: int = 1   # responses sampled per annotated prompt (temperature 1)
    reward_steps: int = 150       # steps per reward model
    reward_lr: float = 2e-3       # their learning rate
    # PPO: the same for every method (ppo.PPOConfig holds the rest)
    updates: int = 12             # PPO iterations
    ppo_batch_size: int = 64      # prompts per rollout
    minibatch_size: int = 32      # sequences per gradient step
    ppo_lr: float = 5e-5          # the policy's Adam learning rate
    eval_every: int = 4           # updates between points of the validation curve
    advantage: str = "gae"        # "gae": PPO's, with a value head; "grpo": no value head, groups (ppo.group_advantages)
    group: int = 8                # grpo: responses per prompt (ppo_batch_size / group prompts per rollout)
    per: str = "token"            # grpo, span methods: "token", or "response" (the sum-collapse); last token: "response"
    compile: bool = False         # torch.compile the hot loss path (loss.py)
    figure: str = "first_look.svg"  # where the validation curves are drawn (SVG); "" for none


# GAE lambda per task and method, chosen from {0, 0.5, 0.95} on validation by the experiment at seed 100 (RESULTS.md)
LAMBDAS = {"summarize": {"ppo_scalar": 0.95, "text2grad_last": 0.95, "text2grad": 0.95, "oracle_scalar": 0.95,
                         "oracle": 0.95},
           "code": {"ppo_scalar": 0.95, "text2grad_last": 0.95, "text2grad": 0.5, "oracle_scalar": 0.95, "oracle": 0.5},
           "qa": {"ppo_scalar": 0.95, "text2grad_last": 0.95, "text2grad": 0.95, "oracle_scalar": 0.95, "oracle": 0.95}}

# The reward models: name -> (kind, cot). "cot" is Text2Grad's (critique first, then a label per
# token); "no_cot" the paper's ablation without the critique; "scalar" one score per response.
REWARD_MODELS = {"cot": ("span", True), "no_cot": ("span", False), "scalar": ("scalar", False)}
# The 2 x 2, and a fifth method: method -> (who judges, where the reward lands).
#                        every token                last token
#   learned model        text2grad (cot)            text2grad_last (cot), ppo_scalar (scalar)
#   the critic itself    oracle                     oracle_scalar
# Across a row only the placement changes, down the every-token column only the judge (CONTRASTS).
METHODS = {"ppo_scalar": ("scalar", "last"), "text2grad_last": ("cot", "last"), "text2grad": ("cot", "every"),
           "oracle_scalar": ("critic", "last"), "oracle": ("critic", "every")}
CONTRASTS = {"the paper's": ("text2grad", "ppo_scalar"), "placement, learned": ("text2grad", "text2grad_last"),
             "placement, critic": ("oracle", "oracle_scalar"), "judge, every token": ("oracle", "text2grad"),
             "learned judge, last": ("text2grad_last", "ppo_scalar")}


def reward_function(method, task, tokenizer, examples, reward_models, shaping=None):
    """The reward for PPO, the one place the methods differ: f(indices, tokens, mask) -> scores (B, N)
    for sampled responses to examples[indices]. METHODS[method] = (judge, where):
      judge "cot"     Text2Grad's reward model writes a critique, then a delta per token
            "no_cot"  the same model without the critique
            "critic"  the task's own critic, its spans aligned to the sampled tokens
            "scalar"  the scalar reward model: one number per response, trained on what
                      oracle_scalar is paid (reward.scalar_targets)
      where "every"   score_t = delta_t on every response token, through the guards (guards.shaped_scores)
            "last"    the same scores summed, sum_t score_t, on the last real token, 0 elsewhere
                      (ppo.final_scores): the same information in one number. The scalar model's
                      number is its own; with cut_praise a cut response's score is capped at 0.
    shaping (guards.Guards) None: no guard at all, the judge's own numbers."""
    judge, where = METHODS[method]
    if judge == "scalar" and where != "last":
        raise ValueError(f"{method}: the scalar reward model has one score per response; it can only land on the last token")
    prompts = [tokenizer.encode(e.prompt) for e in examples]
    shaping = shaping or guards.Guards(praise="token", cut_praise=False, praise_fade_at=None)

    def scores(indices, tokens, mask):
        ids, ended, mask = response_ids(tokenizer, tokens, mask), ppo.ended_with_eos(tokens, mask, tokenizer.eos_id), mask.float()
        batch_prompts = [prompts[i] for i in indices]
        if judge == "scalar":
            values = torch.tensor(reward_models["scalar"].predict(tokenizer, batch_prompts, ids))
            if shaping.cut_praise:
                values = torch.where(ended.cpu(), values, values.clamp(max=0))
            return ppo.final_scores(values, mask)
        if judge == "critic":
            texts = [tokenizer.decode(r) for r in ids]
            deltas = [align(text, tokenizer.offsets(r), task.critique(examples[i], text))[0]
                      for i, text, r in zip(indices, texts, ids)]
        else:
            _, deltas = reward_models[judge].predict(tokenizer, batch_prompts, ids)
        dense = guards.shaped_scores(deltas, ids, mask, ended, shaping)
        return ppo.final_scores(dense.sum(1), mask) if where == "last" else dense
    return scores


def run(config):
    """The method on one task, stage by stage; prints what each stage made and, last, the table."""
    task, device, start = get_task(config.task), config.device, time.time()
    say = lambda message: print(f"[{task.NAME} {time.time() - start:4.0f}s] {message}")
    torch.manual_seed(config.seed)

    # data and tokenizer: the tokenizer reads the training split only
    splits, demonstrations = experiment_splits(task, dataclasses.asdict(config), config.seed)
    tokenizer = Tokenizer.train(training_texts(task, splits["train"]), config.vocab_size)

    # pretraining on the task's correct text, then SFT on the flawed demonstrations
    policy = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=config.block_size, n_layer=config.n_layer,
                           n_head=config.n_head, n_embd=config.n_embd)).to(device)
    train_sft(policy, tokenizer, demonstrations, config.pretrain_steps, config.batch_size, config.lr, device,
              config.seed, document=lambda e, rng: document(task, e, rng), desc="pretraining")
    train_sft(policy, tokenizer, demonstrations, config.sft_steps, config.batch_size, config.lr, device, config.seed)
    sft_test, _, _ = evaluate(task, policy, tokenizer, splits["test"])
    say(f"SFT: test {task.PRIMARY} {sft_test[task.PRIMARY]:.3f}, the critic blames {sft_test['criticised']:.0%} "
        f"of its responses")

    # annotation: the SFT policy's own samples, read by the task's critic (the paper's GPT-4o)
    generator = torch.Generator(device).manual_seed(config.seed)
    records, items = {}, {}
    for split, k in (("train", config.samples_per_prompt), ("test", 1)):
        examples = [e for e in (demonstrations[:config.annotated] if split == "train" else splits[split])
                    for _ in range(k)]
        responses, _ = respond(policy, tokenizer, [e.prompt for e in examples], greedy=False, generator=generator,
                               desc=f"annotate {split}")
        records[split], items[split], _ = encode_records(tokenizer, annotate(task, examples, responses),
                                                         config.block_size)

    # the reward models, each from a copy of the SFT policy: Text2Grad's and the scalar one
    reward_models, shaping = {}, guards.Guards(praise=guards.PRAISE[task.NAME])  # the guards PPO is paid through
    for name in sorted({judge for judge, _ in METHODS.values() if judge in REWARD_MODELS}):
        kind, cot = REWARD_MODELS[name]
        model = RewardModel(copy.deepcopy(policy), kind, cot, shaping).to(device)
        train_reward_model(model, tokenizer, items["train"], config.reward_steps, config.batch_size,
                           config.reward_lr, device, config.seed, desc=f"reward model ({name})")
        metrics, _, _ = evaluate_reward_model(model, tokenizer, records["test"], items["test"])
        say(f"reward model {name}: " + (f"test span F1 praised {metrics['positive_f1']:.3f}, blamed "
                                        f"{metrics['negative_f1']:.3f}" if kind == "span" else
                                        f"test correlation with its target {metrics['score_correlation']:.3f}"))
        reward_models[name] = model

    # PPO from the SFT policy with each method's reward; the same prompts and seed for every method
    prompts = [tokenizer.prompt(e.prompt) for e in splits["train"]]
    validate = lambda gpt: evaluate(task, gpt, tokenizer, splits["validation"])[0][task.PRIMARY]  # the curve's points
    table = {"sft": (None, [sft_test[task.PRIMARY]], sft_test[task.PRIMARY])}
    for method in METHODS:
        lam = LAMBDAS[task.NAME].get(method, 0.95)  # the paper's 0.95 for a method not listed
        ppo_config = ppo.PPOConfig(updates=config.updates, batch_size=config.ppo_batch_size,
                                   minibatch_size=config.minibatch_size, lr=config.ppo_lr, lam=lam,
                                   max_new_tokens=MAX_NEW_TOKENS, compile=config.compile, advantage=config.advantage,
                                   group=config.group, per=config.per if METHODS[method][1] == "every" else "response")
        reward = reward_function(method, task, tokenizer, splits["train"], reward_models, shaping)
        trained = ppo.PolicyWithValue(copy.deepcopy(policy), ppo_config.detach_value)
        curve, _, _ = ppo.train(trained, policy, prompts, reward, tokenizer.eos_id, tokenizer.pad_id, ppo_config,
                                seed=config.seed, evaluate=validate, eval_every=config.eval_every, desc=f"ppo {method}")
        test, _, _ = evaluate(task, trained.gpt, tokenizer, splits["test"])
        table[method] = (lam if config.advantage == "gae" else "-", [score for _, score in curve], test[task.PRIMARY])
        say(f"PPO {method}: test {task.PRIMARY} {test[task.PRIMARY]:.3f}")

    print(f"\n{task.NAME}, seed {config.seed}, {config.advantage.upper()}: validation {task.PRIMARY} by update (every {config.eval_every}), then "
          f"test. One seed: how much a difference means is for the lab's intervals (experiments/protocol.py)")
    print(f"{'method':19s} {'judge':7s} {'lands on':11s} {'lambda':>6s}  {'validation curve':32s} {'test':>6s}")
    for method, (lam, curve, test) in table.items():
        judge, where = METHODS.get(method, ("-", "-"))
        print(f"{method:19s} {judge:7s} {where if where == '-' else where + ' token':11s} {'-' if lam is None else lam:>6}  "
              f"{' '.join(f'{s:.2f}' for s in curve):32s} {test:6.3f}")
    for name, (a, b) in CONTRASTS.items():  # what placement did, and what the judge did, on this run
        curve = " ".join(f"{x - y:+.2f}" for x, y in zip(table[a][1], table[b][1]))
        print(f"{name:19s} {a} - {b}".ljust(47) + f" {curve:32s} {table[a][2] - table[b][2]:+6.3f}")
    if config.figure:
        figure(table, config, task.PRIMARY)
    return table


def figure(table, config, primary):
    """The validation curves as an SVG chart: colour for who judges, dashed where it lands on the last token."""
    colours, curves = {"scalar": "#e08a1e", "cot": "#1f6fb4", "critic": "#2f9e44"}, {m: table[m][1] for m in METHODS}
    low, high = min(map(min, curves.values())), max(map(max, curves.values())) + 1e-9
    x, y = lambda j: 50 + 380 * j / (len(curves["oracle"]) - 1), lambda v: 270 - 240 * (v - low) / (high - low)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="640" height="300" font-family="sans-serif" font-size="12">'
           f'<rect width="640" height="300" fill="#fff"/><text x="10" y="18">{config.task}, seed {config.seed}: validation '
           f'{primary}, {low:.2f} (bottom) to {high:.2f} (top), updates 0 to {config.updates} (every {config.eval_every})</text>']
    for i, (method, curve) in enumerate(curves.items()):
        style = f'fill="none" stroke="{colours[METHODS[method][0]]}" stroke-width="2"' + (
            ' stroke-dasharray="6 4"' if METHODS[method][1] == "last" else "")
        svg += [f'<polyline {style} points="{" ".join(f"{x(j):.0f},{y(v):.0f}" for j, v in enumerate(curve))}"/>',
                f'<polyline {style} points="450,{40 + 20 * i} 480,{40 + 20 * i}"/><text x="486" y="{44 + 20 * i}">{method}</text>']
    with open(config.figure, "w") as f:
        f.write("\n".join(svg + ["</svg>\n"]))
    print(f"the validation curves, drawn: {config.figure}")


def main(argv=None):
    """Every Config field is a flag: --task code, --updates 24, --compile, ..."""
    parser = argparse.ArgumentParser(prog="text2grad.py", description=__doc__.split("\n\n")[0],
                                     epilog="Each flag is a field of Config, explained beside it at the top of text2grad.py.")
    for field in dataclasses.fields(Config):
        kind = {"action": argparse.BooleanOptionalAction} if field.type is bool else {"type": field.type}
        parser.add_argument(f"--{field.name.replace('_', '-')}", default=field.default, **kind)
    config = Config(**vars(parser.parse_args(argv)))
    if config.task not in guards.PRAISE:
        parser.error(f"--task must be one of {', '.join(guards.PRAISE)}")
    if config.advantage not in ("gae", "grpo") or config.per not in ("token", "response") or (
            config.advantage == "grpo" and (config.group < 2 or config.ppo_batch_size % config.group)):
        parser.error("--advantage gae or grpo, --per token or response; with grpo, --group at least 2 and dividing --ppo-batch-size")
    if config.figure and not os.access(os.path.dirname(os.path.abspath(config.figure)), os.W_OK):
        parser.error(f"--figure {config.figure}: not in a folder this run can write to; name another, or '' for none")
    config.device = ("cuda" if torch.cuda.is_available() else "cpu") if config.device == "auto" else config.device
    try:
        torch.zeros(1, device=config.device)
    except (RuntimeError, ValueError, AssertionError):
        parser.error(f"--device {config.device} is not a device torch can use here; try --device cpu")
    return run(config)


if __name__ == "__main__":
    main()
