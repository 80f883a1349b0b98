"""text2grad.py: the first look. Text2Grad against scalar RLHF on one toy task, end to end.

    python text2grad.py                      # facts (8 independent flaws per answer), seed 0
    python text2grad.py --task summarize     # a task that mirrors the paper's, at its own SIZES
    python text2grad.py --help               # every flag, with its help line

    data -> tokenizer -> pretraining -> SFT policy -> annotation by the task's critic
    -> reward models -> PPO with each method's reward -> test -> what it prints and draws

The one idea is reward_function: the same critique lands either on the tokens its spans name
(Text2Grad) or, summed, on the last token (scalar RLHF), judged by a learned reward model or by
the critic itself; everything else is shared. landing.py reads how soon each method holds most of
the gap to all right, and where its first update moved log pi. Seeds, intervals and grids: the lab.
"""
import copy
import dataclasses
import os
import time

import torch

import flags
import guards
import landing
import ppo
from align import align
from data import TASKS, experiment_splits, get_task
from data.annotations import annotate
from data.tokenizer import Tokenizer, training_texts
from model import pick_device
from reward import RewardModel, encode_records, evaluate_reward_model, train_reward_model
from sft import MAX_NEW_TOKENS, evaluate, respond, response_ids, sft_policy


@dataclasses.dataclass
class Config:  # the first look's sizes on facts: minutes on 2 CPU cores (SIZES: the other tasks')
    task: str = "facts"           # the toy task (data/): facts, or one that mirrors the paper's
    seed: int = 0                 # every random draw: data, weights, batches, samples
    device: str = "auto"          # auto (CUDA, then Apple's MPS, then the CPU), cpu, cuda:1, ...
    # data: the tasks are generated, so the SFT pool is fresh text (each example drawn about once)
    train: int = 2000             # PPO's prompts (the tokenizer reads their examples' text)
    annotated: int = 2000         # training prompts whose sampled responses the critic annotates
    demonstrations: int = 8000    # the pretraining and SFT pool
    validation: int = 100         # validation prompts (where the lab chooses lambda)
    test: int = 100               # test prompts (the curves and the table)
    vocab_size: int = 512         # byte-level BPE vocabulary, special tokens included
    # the GPT (policy, reference and reward-model trunk alike)
    n_layer: int = 2              # transformer blocks
    n_head: int = 4               # attention heads per block
    n_embd: int = 96              # width of the residual stream
    block_size: int = 256         # longest sequence the positions cover
    # pretraining and SFT (sft.fit: Adam, warm-up, cosine decay)
    pretrain_steps: int = 500     # steps on documents of the task's correct text (data.document)
    sft_steps: int = 400          # steps on the flawed demonstrations
    batch_size: int = 32          # sequences per step (pretraining, SFT, the reward models)
    lr: float = 3e-3              # peak learning rate of pretraining and SFT
    # annotation and the reward models
    samples_per_prompt: int = 1   # responses sampled per annotated prompt (temperature 1)
    reward_steps: int = 400       # steps per reward model
    reward_lr: float = 2e-3       # the reward models' learning rate
    # PPO: the same for every method (ppo.PPOConfig holds the rest)
    methods: str = "text2grad,text2grad_last,oracle,oracle_scalar"  # the METHODS PPO runs,
                                                                    # comma-separated; or all
    updates: int = 16             # PPO iterations
    ppo_batch_size: int = 16      # prompts per rollout
    minibatch_size: int = 16      # sequences per gradient step
    ppo_lr: float = 1e-4          # the policy's Adam learning rate
    lam: float = None             # GAE lambda for every method; None: each method's (LAMBDAS)
    min_new_tokens: int = None    # no EOS sampled before this many tokens; None: the task's
                                  # (MIN_NEW_TOKENS); 0: answers may stop before a fact
    eval_every: int = 1           # updates between points of the curves (validation and test)
    advantage: str = "gae"        # gae: PPO's, with a value head; grpo: groups, no value head
    group: int = 8                # grpo: responses per prompt
    per: str = "token"            # grpo on the span methods: token, or response (the sum-collapse)
    compile: bool = False         # torch.compile the hot loss path (loss.py)
    figure: str = "first_look.svg"  # the curves and one answer token by token; "" for none
    sft_on: str = "demonstrations"  # SFT's targets: the flawed demonstrations, or references


# The three tasks that mirror the paper's take the sizes their first looks were measured with
# (RESULTS.md) wherever a flag does not say otherwise: first_look_config
SIZES = {task: dict(train=4000, annotated=1000, demonstrations=16000, vocab_size=1024, n_layer=4,
                    n_embd=128, pretrain_steps=50, sft_steps=300, lr=2e-3, reward_steps=60,
                    updates=8, ppo_batch_size=32, minibatch_size=16, ppo_lr=5e-5, eval_every=2)
         for task in ("summarize", "code", "qa")}


def first_look_config(task="facts", **fields):
    """The Config of task's first look: its SIZES, then the fields given."""
    return Config(task=task, **{**SIZES.get(task, {}), **fields})


CHOICES = {"task": TASKS, "advantage": ("gae", "grpo"), "per": ("token", "response"),
           "sft_on": ("demonstrations", "references")}

# GAE lambda per task and method, chosen on validation: on facts from {0.5, 0.95} over seeds 0-4
# (python -m experiments.first_looks --lams 0.5 0.95), on the others from {0, 0.5, 0.95} by the
# lab's experiment at seed 100 (RESULTS.md): the paper's 0.95, but 0.5 for the span methods on code
LAMBDAS = {task: {"ppo_scalar": 0.95, "text2grad_last": 0.95, "text2grad": 0.95,
                  "oracle_scalar": 0.95, "oracle": 0.95} for task in TASKS}
LAMBDAS["code"].update(text2grad=0.5, oracle=0.5)

# No EOS before this many response tokens. An answer that leaves a fact out has no span a critic
# can quote, so no reward here charges it: at 0 the policy learns to stop a summary after the
# amount, before the plan (README, Things to try). Summaries with every fact take 15-20 tokens and
# those stopped after the amount 7-10; the authors sample at least 45 new tokens on SLF5K.
MIN_NEW_TOKENS = {"summarize": 12}

# The reward models: name -> (kind, cot). "cot" is Text2Grad's (critique first, then a label per
# token); "no_cot" the paper's ablation without the critique; "scalar" one score per response.
REWARD_MODELS = {"cot": ("span", True), "no_cot": ("span", False), "scalar": ("scalar", False)}
# The 2 x 2, and a fifth method: method -> (who judges, where the reward lands).
#                        every token                last token
#   learned model        text2grad (cot)            text2grad_last (cot), ppo_scalar (scalar)
#   the critic itself    oracle                     oracle_scalar
# Across a row only the placement changes, down the every-token column only the judge.
METHODS = {"ppo_scalar": ("scalar", "last"), "text2grad_last": ("cot", "last"),
           "text2grad": ("cot", "every"), "oracle_scalar": ("critic", "last"),
           "oracle": ("critic", "every")}
CONTRASTS = {"the paper's": ("text2grad", "ppo_scalar"),
             "placement, learned": ("text2grad", "text2grad_last"),
             "placement, critic": ("oracle", "oracle_scalar"),
             "judge, every token": ("oracle", "text2grad"),
             "learned judge, last": ("text2grad_last", "ppo_scalar")}


# METHOD: the one place the methods differ

def reward_function(method, task, tokenizer, examples, reward_models, shaping=None):
    """The reward for PPO: f(indices, tokens, mask) -> scores (B, N) for sampled responses to
    examples[indices]. METHODS[method] = (judge, where):
      judge "cot"     Text2Grad's reward model writes a critique, then a delta per token
            "no_cot"  the same model without the critique
            "critic"  the task's own critic, its spans aligned to the sampled tokens
            "scalar"  the scalar reward model: one number per response, trained on what
                      oracle_scalar is paid (reward.scalar_targets)
      where "every"   score_t = delta_t on every response token, through the guards
                      (guards.shaped_scores)
            "last"    the same scores summed, sum_t score_t, on the last real token, 0 elsewhere
                      (ppo.final_scores): the verdicts, not which token earned each. The
                      scalar model's number is its own; cut_praise caps a cut response's at 0.
    shaping (guards.Guards) None: no guard at all, the judge's own numbers."""
    judge, where = METHODS[method]
    if judge == "scalar" and where != "last":
        raise ValueError(f"{method}: the scalar reward model's one score can only land last")
    prompts = [tokenizer.encode(e.prompt) for e in examples]
    shaping = shaping or guards.Guards(praise="token", cut_praise=False, praise_fade_at=None)

    def scores(indices, tokens, mask):
        ids = response_ids(tokenizer, tokens, mask)
        ended, mask = ppo.ended_with_eos(tokens, mask, tokenizer.eos_id), mask.float()
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


# METHOD: the stages, top to bottom

def prepare(config, say=print):
    """The stages every method shares, top to bottom: data and tokenizer, the SFT policy, the
    critic's annotations, the reward models. Returns them by name for train_method."""
    task, device = get_task(config.task), config.device
    torch.manual_seed(config.seed)
    watched, watched_name = task.WATCHED  # what the curves are read beside (data/__init__.py)
    chosen = METHODS if config.methods == "all" else config.methods.split(",")
    methods = {method: placed for method, placed in METHODS.items() if method in chosen}

    def scored(gpt, examples):  # greedy answers: (the task's metric, the watched share)
        summary = evaluate(task, gpt, tokenizer, examples)[0]
        return summary[task.PRIMARY], summary[watched]

    def point(gpt):  # a point of the curves: (validation metric, test metric, test watched share)
        return (scored(gpt, splits["validation"])[0], *scored(gpt, splits["test"]))

    # data and tokenizer: the tokenizer reads the training split only
    splits, demonstrations = experiment_splits(task, dataclasses.asdict(config), config.seed)
    tokenizer = Tokenizer.train(training_texts(task, splits["train"]), config.vocab_size)
    longest = max(len(tokenizer.prompt(e.prompt)) for split in splits.values() for e in split)
    if longest + MAX_NEW_TOKENS > config.block_size:  # PLUMBING: refused before any training
        raise ValueError(f"block_size {config.block_size} is shorter than the longest prompt "
                         f"({longest} tokens) and {MAX_NEW_TOKENS} new tokens")

    policy = sft_policy(config, task, tokenizer, demonstrations)
    sft_point = point(policy)
    say(f"SFT: test {task.PRIMARY} {sft_point[1]:.3f}; {watched_name}: {sft_point[2]:.0%}")

    # annotation: the SFT policy's own samples, read by the task's critic (the paper's GPT-4o)
    generator = torch.Generator(device).manual_seed(config.seed)
    records, items = {}, {}
    for split, k in (("train", config.samples_per_prompt), ("test", 1)):
        pool = demonstrations[:config.annotated] if split == "train" else splits[split]
        examples = [e for e in pool for _ in range(k)]
        responses, _ = respond(policy, tokenizer, [e.prompt for e in examples], greedy=False,
                               generator=generator, desc=f"annotate {split}")
        annotated = annotate(task, examples, responses)
        records[split], items[split], _ = encode_records(tokenizer, annotated, config.block_size)
        if split == "train" and hasattr(task, "right_per_kind"):  # what exploration can find
            right = task.right_per_kind(examples, responses)
            say("SFT's sampled answers, share right per kind of fact: "
                + ", ".join(f"{kind} {share:.0%}" for kind, share in right.items()))

    # the reward models, each from a copy of the SFT policy: Text2Grad's and the scalar one
    shaping = guards.Guards(praise=guards.PRAISE[task.NAME])  # the guards PPO is paid through
    reward_models = {}
    for name in sorted({judge for judge, _ in methods.values() if judge in REWARD_MODELS}):
        kind, cot = REWARD_MODELS[name]
        model = RewardModel(copy.deepcopy(policy), kind, cot, shaping).to(device)
        train_reward_model(model, tokenizer, items["train"], config.reward_steps,
                           config.batch_size, config.reward_lr, device, config.seed,
                           desc=f"reward model ({name})")
        metrics = evaluate_reward_model(model, tokenizer, records["test"], items["test"])[0]
        fit = (f"span F1 praised {metrics['positive_f1']:.3f}, blamed {metrics['negative_f1']:.3f}"
               if kind == "span" else
               f"correlation with its target {metrics['score_correlation']:.3f}")
        say(f"reward model {name}: test {fit}")
        reward_models[name] = model
    prompts = [tokenizer.prompt(e.prompt) for e in splits["train"]]  # PPO's, as token ids
    return {"task": task, "methods": methods, "splits": splits, "tokenizer": tokenizer,
            "prompts": prompts, "policy": policy, "sft_point": sft_point, "point": point,
            "shaping": shaping, "reward_models": reward_models}


def train_method(config, shared, method):
    """PPO from the SFT policy with method's reward, the same prompts and seed for every method
    (so their first updates sample the same answers). Returns (row, first): row {"lambda", "curve":
    [(update, validation, test, watched share)], "test"}; first: landing.first_update's numbers."""
    task, tokenizer, splits = shared["task"], shared["tokenizer"], shared["splits"]
    where = METHODS[method][1]
    min_new_tokens = (MIN_NEW_TOKENS.get(task.NAME, 0) if config.min_new_tokens is None
                      else config.min_new_tokens)
    ppo_config = ppo.PPOConfig(
        updates=config.updates, batch_size=config.ppo_batch_size,
        minibatch_size=config.minibatch_size, lr=config.ppo_lr,
        lam=LAMBDAS[task.NAME][method] if config.lam is None else config.lam,
        max_new_tokens=MAX_NEW_TOKENS,
        min_new_tokens=min_new_tokens, compile=config.compile, advantage=config.advantage,
        group=config.group, per=config.per if where == "every" else "response")
    reward = reward_function(method, task, tokenizer, splits["train"], shared["reward_models"],
                             shared["shaping"])
    first = {}

    def watch(update, indices, batch, model):  # landing.py reads the first update
        if update == 1:
            examples = [splits["train"][i] for i in indices]
            first.update(landing.first_update(task, tokenizer, examples, batch, model,
                                              ppo_config.temperature))

    policy, point = shared["policy"], shared["point"]
    trained = ppo.PolicyWithValue(copy.deepcopy(policy), ppo_config.detach_value)
    curve, _, _ = ppo.train(trained, policy, shared["prompts"], reward, tokenizer.eos_id,
                            tokenizer.pad_id, ppo_config, seed=config.seed, evaluate=point,
                            eval_every=config.eval_every, desc=f"ppo {method}", watch=watch)
    lam = ppo_config.lam if config.advantage == "gae" else None
    return {"lambda": lam, "curve": curve, "test": curve[-1][2:]}, first


def run(config):
    """The method on one task, stage by stage, printing what each made, then landing.report.
    Returns (table, landed): table[method], train_method's row ("sft": the SFT policy's);
    landed[method], landing.landed's numbers."""
    start = time.time()
    say = lambda message: print(f"[{config.task} {time.time() - start:4.0f}s] {message}")
    shared = prepare(config, say)
    task, sft_point = shared["task"], shared["sft_point"]
    table = {"sft": {"lambda": None, "curve": [(0, *sft_point)], "test": sft_point[1:]}}
    first = {}  # method -> where its first update moved log pi (landing.first_update)
    for method in shared["methods"]:
        table[method], first[method] = train_method(config, shared, method)
        test = table[method]["test"]
        say(f"PPO {method}: test {task.PRIMARY} {test[0]:.3f}; {task.WATCHED[1]}: {test[1]:.0%}")

    landed = {method: landing.landed(measured) for method, measured in first.items()}
    landing.report(table, landed, task, config, METHODS, CONTRASTS)
    if config.figure:
        landing.draw(config.figure, table, first, task, config, shared["methods"])
        print(f"drawn: {config.figure} (open it in a browser)")
    return table, landed


# PLUMBING: the command line (flags.py), every flag a Config field, checked before any work

def refused(config):
    """Why a run cannot use config, in one line (None if it can): fields that do not fit
    together (flags.out_of_range checks each field alone)."""
    unknown = set(config.methods.split(",")) - set(METHODS) - {"all"}
    if unknown:
        return (f"--methods {config.methods}: {', '.join(sorted(unknown))} is not a method; "
                f"choose from {', '.join(METHODS)}, or all")
    if config.n_embd % config.n_head:
        return f"--n-embd {config.n_embd} must divide by --n-head {config.n_head} (the heads)"
    if config.minibatch_size > config.ppo_batch_size:
        return f"--minibatch-size {config.minibatch_size} is more than --ppo-batch-size"
    if config.advantage == "grpo" and (config.group < 2 or config.ppo_batch_size % config.group):
        return "--advantage grpo needs --group of at least 2 dividing --ppo-batch-size"
    if config.ppo_batch_size > config.train:
        return f"--ppo-batch-size {config.ppo_batch_size} is more than --train {config.train}"
    folder = os.path.dirname(os.path.abspath(config.figure))
    if config.figure and not os.access(folder, os.W_OK):
        return f"--figure {config.figure}: not in a folder this run can write to; '' for none"
    return None


def main(argv=None):
    """Every Config field is a flag: --task code, --updates 24, --compile, ..."""
    parser = flags.parser(Config, "text2grad.py", __doc__.split("\n\n")[0], CHOICES,
                          SIZES["summarize"], "summarize, code, qa")
    config = first_look_config(**vars(parser.parse_args(argv)))  # the flags given, then SIZES
    why = flags.out_of_range(config) or refused(config)
    if why:
        parser.error(why)
    try:
        config.device = pick_device(config.device)
    except ValueError as error:
        parser.error(str(error))
    try:
        return run(config)
    except ValueError as error:  # a setting only the data can refuse (a prompt past the block)
        parser.exit(2, f"{parser.prog}: error: {error}\n")


if __name__ == "__main__":
    main()
