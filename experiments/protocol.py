"""experiments/protocol.py: the full experiment, the lab's version of text2grad.py.

    python -m experiments.protocol [--task all] [--seeds 5] [--reward-seeds 3] [--resume]

text2grad.py is the method on one task with one seed at each method's chosen GAE lambda. This adds
what a claim needs: every method runs at each lambda of a grid on the first seed and keeps the one
whose validation score is highest; more PPO seeds at that lambda (every method draws the same
prompts in the same order for a given seed, so seeds pair the methods: COMPARISONS, read by
experiments/summary.py); the span reward models trained with several seeds, and the no-critique
ablation beside them; the over-optimisation measurement at every curve point; each stage saved as
it finishes (progress.json), so that --resume skips what is done; and results.json, which
`python -m experiments.report` turns into tables with intervals and report.html.
"""
import argparse
import copy
import json
import os
import sys
import time

import torch

from data import document, experiment_splits, get_task
from data.annotations import annotate, read_annotations, read_jsonl
from data.tokenizer import Tokenizer, training_texts
from experiments.checkpoint import load_checkpoint, save_checkpoint
from experiments.measures import evaluate_policy, flaw_rates, mean_metrics, reward_metrics
from experiments.fanout import Units, add_flags, check_flags
from experiments.ppo_runs import Pipeline, chosen_tag, configs, ppo_stage, reward_settings
from experiments.runstate import (Progress, add_run_flags, atomic_save, check_run_flags, checked, fail, machine,
                                  pick_device, run_to_the_end)
from experiments.presets import PRESETS  # noqa: F401  (protocol.PRESETS, as the lab reads it)
from experiments.showcase import showcase
from guards import PRAISE
from model import GPT, GPTConfig
from reward import RewardModel, encode_records, train_reward_model
from sft import respond, train_sft
from text2grad import CONTRASTS, MIN_NEW_TOKENS, REWARD_MODELS

# Each reward model's (learning rate, steps) per preset and task, chosen on validation by
# experiments.reward_grid, each model by its own measure: the CoT model by its span F1, the scalar
# one by its correlation with its target (RESULTS.md, "The reward models' effort"); no_cot takes
# cot's. A task or model not listed trains at the preset's reward_lr and reward_steps.
REWARD_CHOICES = {"default": {
    # python -m experiments.reward_grid --out runs/code --lrs 1e-3 2e-3 5e-3 --steps 400 800 (seed 100):
    # both at the grid's longest training, which was not extended
    "code": {"cot": (2e-3, 800), "scalar": (1e-3, 800)},
    # the same on qa (seed 100), then --lrs 5e-4 1e-3 2e-3 --steps 800 1600, since the CoT model's best
    # sat at the first grid's corner: both at the longest training again, not extended further
    "qa": {"cot": (1e-3, 1600), "scalar": (2e-3, 1600)},
    # summarize (seed 100), --lrs 5e-4 1e-3 2e-3 --steps 800 1600: every setting within 0.002 of the best
    "summarize": {"cot": (2e-3, 800), "scalar": (1e-3, 800)},
}}


# The paired differences the verdicts read, fixed before any run: (a, b) -> a - b per seed. The
# first look's CONTRASTS (the paper's, placement with either judge, the judge, which learned judge),
# then down the last-token column (the critic's sum against either learned model's) and the diagonal.
# experiments/summary.py computes them.
COMPARISONS = list(CONTRASTS.values()) + [("oracle_scalar", "ppo_scalar"), ("oracle_scalar", "text2grad_last"),
                                          ("text2grad", "oracle_scalar")]
SEEDED_METRICS = ("positive_f1", "negative_f1", "exact_span_match", "critique_rougeL", "score_correlation")  # kept per reward-model seed


# ---------------------------------------------------------------------------------------------
# Data, tokenizer and the SFT policy

FORMAT = 2  # of progress.json's stages: a folder of another format is refused by --resume, in one line
MAX_SKIPPED = 0.1  # the share of a split's records that may be skipped (a span not in the response)


def check_skipped(stats, where):
    """Report skipped records; ValueError when they pass MAX_SKIPPED of the split."""
    if stats["skipped"]:
        share = stats["skipped"] / max(1, stats["records"])
        message = (f"{where}: {stats['skipped']} of {stats['records']} records ({share:.1%}) quote a span that is "
                   f"not in their response")
        if share > MAX_SKIPPED:
            raise ValueError(f"{message}, more than the {MAX_SKIPPED:.0%} allowed; check that the spans are copied "
                             f"verbatim from the responses")
        print(f"{message}; skipped")


def encode_splits(tokenizer, records, block_size, folder, batch_size):
    """encode_records and check_skipped for every split of {split: records} read from folder; a
    split left with fewer usable records than a batch (train) or one (validation, test) raises
    ValueError. Returns ({split: records kept}, {split: items}, {split: alignment statistics})."""
    kept, items, alignment = {}, {}, {}
    for split in records:
        kept[split], items[split], alignment[split] = encode_records(tokenizer, records[split], block_size)
        where = os.path.join(folder, f"annotations_{split}.jsonl")
        check_skipped(alignment[split], where)
        needed = batch_size if split == "train" else 1
        if len(items[split]) < needed:
            raise ValueError(f"{where}: {len(items[split])} usable records, fewer than the {needed} this preset needs")
    return kept, items, alignment


def tokenizer_stage(task, train, vocab_size, out, progress):
    """The data stage: a tokenizer trained on the training split's text only, saved as
    out/tokenizer.json, and what the demonstrations hold (flaw rates, their own metric); once
    finished (--resume), the tokenizer is read back."""
    start, path = time.time(), os.path.join(out, "tokenizer.json")
    if "data" not in progress:
        tokenizer = Tokenizer.train(training_texts(task, train), vocab_size)
        atomic_save(tokenizer.to_json(), path)
        progress.finish("data", {"demonstration_flaw_rates": flaw_rates(train), "demonstration_score": sum(
            task.metrics(e, e.demonstration)[task.PRIMARY] for e in train) / len(train)}, start)
        return tokenizer
    try:
        with open(path, encoding="utf-8") as f:
            return Tokenizer.from_json(f.read())
    except Exception as error:  # missing, or not a tokenizer file
        fail(f"--resume: cannot read {path} ({type(error).__name__}); run without --resume")


def gpt_stage(task, demonstrations, validation, tokenizer, preset, device, seed, out, progress, name="sft",
              start_from=None, steps=None, document=None):
    """A GPT of preset["model"] trained by sft.train_sft, saved as out/{name}.pt (or, once finished,
    loaded from it): SFT on the demonstrations (name "sft", the default), pretraining on documents of
    correct text (name "base", through pretrain_stage) or the reference trunk. It starts from
    start_from (a .pt file: the pretrained base) or, when None, from random weights; steps defaults
    to preset["sft_steps"]; document: see sft.train_sft (the pretraining stage's). With preset["sft_eval_every"], the task's metrics of
    greedy validation responses every that many steps make the learning curve ("curve": [(step,
    metrics)]). Returns the policy."""
    start, path = time.time(), os.path.join(out, f"{name}.pt")
    config = GPTConfig(vocab_size=tokenizer.vocab_size, **preset["model"])
    steps = steps or preset["sft_steps"]
    if name not in progress:
        torch.manual_seed(seed)
        model = GPT(config).to(device) if start_from is None else load_checkpoint(start_from, device, tokenizer,
                                                                                    config)[0]
        flawed = sum(bool(e.flaws) for e in demonstrations) / len(demonstrations)
        data = "their references" if document else f"{flawed:.0%} flawed"
        print(f"[{task.NAME}] {name}: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, {len(demonstrations)} examples "
              f"({data}), from {start_from or 'random weights'}, device {device}")
        losses, curve = train_sft(model, tokenizer, demonstrations, steps, preset["batch_size"],
                                  preset["lr"], device, seed,
                                  evaluate=lambda m: mean_metrics(task, m, tokenizer, validation, desc=None),
                                  eval_every=preset.get("sft_eval_every", 0), document=document, desc=name)
        save_checkpoint(path, model, tokenizer, steps)
        progress.finish(name, {"final_loss": sum(losses[-50:]) / len(losses[-50:]), "curve": curve}, start)
    return load_checkpoint(path, device, tokenizer, config)[0]


def pretrain_stage(task, examples, validation, tokenizer, preset, device, seed, out, progress):
    """The pretraining stage, what every real Text2Grad trunk has before SFT: the same GPT trained
    for preset["pretrain_steps"] on documents of the task's correct text (data.document: on qa a
    passage with a dozen questions and their answers, loss on every answer), saved as out/base.pt,
    from which the SFT policy (and so the reward models) start. Without it this GPT never learns
    qa's look-up (RESULTS.md, the look-up study). Returns base.pt's path, or None when the preset
    has no pretraining."""
    if not preset.get("pretrain_steps"):
        return None
    gpt_stage(task, examples, validation, tokenizer, preset, device, seed, out, progress, name="base",
              steps=preset["pretrain_steps"], document=lambda e, rng: document(task, e, rng))
    return os.path.join(out, "base.pt")


def evaluate_stage(task, model, tokenizer, splits, out, progress):
    """The SFT policy's greedy answers to the validation and test prompts, each read by the task's
    metrics and critic (measures.evaluate_policy), the test answers saved as out/samples.jsonl; a
    stage of progress.json ("evaluate"). Returns {"validation", "test"}: their metrics."""
    start = time.time()
    if "evaluate" not in progress:
        validation, _ = evaluate_policy(task, model, tokenizer, splits["validation"])
        test, samples = evaluate_policy(task, model, tokenizer, splits["test"])
        atomic_save("".join(json.dumps(s) + "\n" for s in samples), os.path.join(out, "samples.jsonl"))
        progress.finish("evaluate", {"validation": validation, "test": test}, start)
    return progress["evaluate"]


# ---------------------------------------------------------------------------------------------
# Annotation and reward models

def annotate_stage(task, policy, tokenizer, splits, samples_per_prompt, seed, out, only=None, name="annotations"):
    """Sample responses from the SFT policy at temperature 1 (the reward model must know the policy's
    own mistakes, not only the demonstrations'), let the task's critic annotate them, save JSONL
    (out/{name}_{split}.jsonl). only: the splits to draw (default all three, in the order train,
    validation, test, from one generator seeded by seed). Returns {split: records}."""
    generator = torch.Generator(next(policy.parameters()).device).manual_seed(seed)
    records = {}
    for split, k in (("train", samples_per_prompt), ("validation", 1), ("test", 1)):
        if only is not None and split not in only:
            continue
        examples = [e for e in splits[split] for _ in range(k)]
        responses, _ = respond(policy, tokenizer, [e.prompt for e in examples], greedy=False,
                               generator=generator, desc=f"annotate {split}")
        records[split] = annotate(task, examples, responses)
        path = os.path.join(out, f"{name}_{split}.jsonl")
        atomic_save("".join(json.dumps(r) + "\n" for r in records[split]), path)
    return records


def draw(task, policy, tokenizer, annotated, samples_per_prompt, seed, out, progress):
    """One reward seed's draw of its own (draw_stage), a stage of progress.json: annotate/{seed}."""
    start = time.time()
    annotate_stage(task, policy, tokenizer, {"train": annotated}, samples_per_prompt, seed, out, only=("train",),
                   name=f"draw{seed}")
    progress.finish(f"annotate/{seed}", {}, start)


def draw_stage(task, policy, tokenizer, annotated, preset, seeds, out, progress, units):
    """With --own-annotations, every reward-model seed after the first gets a draw of its own (a
    unit): the SFT policy's answers to the annotated prompts sampled afresh (generator seed = the
    reward seed) and annotated by the critic, out/draw{seed}_train.jsonl. The first seed's draw is
    the annotate stage's; validation and test records stay the first draw's. Returns {seed:
    encoded training items} for seeds[1:]."""
    units.wait([units.submit(units.label(out, f"annotate/{seed}"), draw, task, policy, tokenizer, annotated,
                             preset["samples_per_prompt"], seed, out, progress)
                for seed in seeds[1:] if f"annotate/{seed}" not in progress])
    items = {}
    for seed in seeds[1:]:
        path = os.path.join(out, f"draw{seed}_train.jsonl")
        records = checked(read_jsonl, path, check=None)
        _, items[seed], alignment = encode_records(tokenizer, records, policy.config.block_size)
        check_skipped(alignment, path)
        if len(items[seed]) < preset["batch_size"]:
            raise ValueError(f"{path}: {len(items[seed])} usable records, fewer than a batch")
    return items


def reward_stage_names(preset, name, seeds):
    """{seed: stage name} of reward model `name`: reward/cot, reward/cot/101, ...; a model trained at
    a chosen setting says so (reward/cot/lr0.001_steps800: ppo_runs.chosen_tag)."""
    return {seed: f"reward/{name}{chosen_tag(preset, name)}" + ("" if seed == seeds[0] else f"/{seed}") for seed in seeds}


def train_reward(trunk, tokenizer, name, train, records, encoded, preset, seed, path, stage, progress):
    """One reward model, a stage: `name` of REWARD_MODELS from a copy of `trunk` with a zero head,
    trained on `train` with `seed`, saved at path, evaluated on test (reported) and validation."""
    start, device = time.time(), next(trunk.parameters()).device
    (kind, cot), (lr, steps) = REWARD_MODELS[name], reward_settings(preset, name)
    shaping = configs(preset["ppo"])[1]  # the guards PPO is paid through: the scalar model's target sums through them
    model = RewardModel(copy.deepcopy(trunk), kind, cot, shaping).to(device)
    losses = train_reward_model(model, tokenizer, train, steps, preset["batch_size"], lr, device, seed,
                                desc=f"reward model ({name}, seed {seed})")
    save_checkpoint(path, model, tokenizer, steps, kind=kind, cot=cot)
    metrics = reward_metrics(model, tokenizer, records["test"], encoded["test"])
    validation = reward_metrics(model, tokenizer, records["validation"], encoded["validation"])
    metrics.update(final_loss=sum(losses[-20:]) / len(losses[-20:]), validation=validation)
    progress.finish(stage, metrics, start)


def reward_stage(trunk, tokenizer, records, encoded, preset, device, seeds, out, progress, units,
                 names=tuple(REWARD_MODELS), draws=None):
    """Train (or, when resuming, load) and evaluate the reward models `names` (of REWARD_MODELS) on
    the annotated records ({split: records}) and their encodings ({split: items}), each a unit of
    `units` (train_reward), once per seed of `seeds` (--seed, --seed+1, ...: the seed sets the
    minibatch order, the same for every kind, so a seed is a pair; draws {seed: training items}
    (draw_stage) gives a seed its own annotations in place of encoded["train"]). Seed s's models are
    saved as reward_{name}.pt (the first seed) or reward_{name}_seed{s}.pt; ppo_stage's runs read
    them in turn.
    Returns ({name: the first seed's metrics, with "seeds": {metric: [per seed]}}, {seed: {name: model}})."""
    path = lambda name, seed: os.path.join(out, f"reward_{name}.pt" if seed == seeds[0] else f"reward_{name}_seed{seed}.pt")
    stages = {name: reward_stage_names(preset, name, seeds) for name in names}
    units.wait([units.submit(units.label(out, stage), train_reward, trunk, tokenizer, name,
                             (draws or {}).get(seed, encoded["train"]), records, encoded, preset, seed, path(name, seed),
                             stage, progress)
                for name in names for seed, stage in stages[name].items() if stage not in progress])
    results, models = {}, {seed: {} for seed in seeds}
    for name in names:
        for seed in seeds:
            models[seed][name] = load_checkpoint(path(name, seed), device, tokenizer, trunk.config)[0]
        runs = [progress[stage] for stage in stages[name].values()]
        results[name] = {**runs[0], "time_s": sum(progress.time(stage) for stage in stages[name].values()),
                         "seeds": {k: [run[k] for run in runs] for k in SEEDED_METRICS if k in runs[0]}}
    return results, models


# ---------------------------------------------------------------------------------------------

def settings(preset_name, task_name, praise):
    """The run's whole configuration: the preset, with the first look's settings per task (how praise
    is paid, and no EOS before MIN_NEW_TOKENS) and the reward models' chosen learning rate and steps."""
    ppo_fields = {**PRESETS[preset_name]["ppo"], "praise": praise, "min_new_tokens": MIN_NEW_TOKENS.get(task_name, 0)}
    return {**PRESETS[preset_name], "ppo": ppo_fields, "reward": REWARD_CHOICES.get(preset_name, {}).get(task_name, {})}


def run(args, units):
    """The experiment on one task. Each stage is recorded in progress.json when it finishes; with
    --resume, finished stages are loaded from their files instead of run again (a stage that was
    stopped runs again from its start, to the same numbers up to float32 rounding). The stages up
    to the annotations are a chain, run here; the draws, the reward models, the PPO runs and their
    tests are units of `units` (experiments/fanout.py), each as soon as what it reads is done."""
    task = get_task(args.task)
    praise = args.praise or PRAISE[task.NAME]
    preset = settings(args.preset, task.NAME, praise)
    device = pick_device(args.device)
    given_annotations = checked(read_annotations, args.annotations) if args.annotations else None  # before any work
    os.makedirs(args.out, exist_ok=True)
    progress = Progress(args.out, {"task": task.NAME, "preset": args.preset, "seed": args.seed,
                                   "annotations": args.annotations, "praise": praise,
                                   "own_annotations": args.own_annotations, "format": FORMAT},
                        args.resume)
    results = {"task": task.NAME, "preset": args.preset, "seed": args.seed, "device": device,
               "praise": praise, "config": preset}
    path = lambda name: os.path.join(args.out, name)

    splits, demonstrations = experiment_splits(task, preset, args.seed)
    tokenizer = tokenizer_stage(task, splits["train"], preset["vocab_size"], args.out, progress)
    results.update(progress["data"])
    base = pretrain_stage(task, demonstrations, splits["validation"], tokenizer, preset, device, args.seed, args.out,
                          progress)
    if base:
        results["pretraining"] = progress["base"]
    model = gpt_stage(task, demonstrations, splits["validation"], tokenizer, preset, device, args.seed, args.out,
                      progress, start_from=base)
    results["sft_training"] = progress["sft"]

    results["sft"] = evaluate_stage(task, model, tokenizer, splits, args.out, progress)
    test = results["sft"]["test"]
    print(f"[{task.NAME}] SFT test {task.PRIMARY} {test[task.PRIMARY]:.3f} (demonstrations score "
          f"{results['demonstration_score']:.3f}); critic blames {test['criticised']:.0%} of responses, "
          f"{test['unaligned_rate']:.1%} of its spans unaligned; SFT {progress.time('sft'):.0f}s"
          + (f" after pretraining {progress.time('base'):.0f}s" if base else ""))

    start = time.time()
    if given_annotations:
        records = given_annotations
    elif "annotate" not in progress:
        records = annotate_stage(task, model, tokenizer, {**splits, "train": demonstrations[:preset["annotated"]]},
                                 preset["samples_per_prompt"], args.seed, args.out)
    else:
        records = checked(read_annotations, args.out, check=None)
    if "annotate" not in progress:
        progress.finish("annotate", {}, start)

    records, encoded, alignment = checked(encode_splits, tokenizer, records, model.config.block_size,
                                          args.annotations or args.out, preset["batch_size"])
    spans = sum(a["spans"] for a in alignment.values())
    reward_seeds = [args.seed + k for k in range(args.reward_seeds)]
    draws = checked(draw_stage, task, model, tokenizer, demonstrations[:preset["annotated"]], preset, reward_seeds,
                    args.out, progress, units) if args.own_annotations else {}
    results["reward_model"], reward_models = reward_stage(model, tokenizer, records, encoded, preset, device,
                                                          reward_seeds, args.out, progress, units, draws=draws)
    results["own_annotations"] = args.own_annotations
    items = {seed: draws.get(seed, encoded["train"]) for seed in reward_seeds}  # what each seed's models read
    first = reward_models[reward_seeds[0]]
    results["alignment"] = {"unaligned_rate": sum(a["unaligned"] for a in alignment.values()) / max(1, spans),
                            **alignment}
    for name in ("cot", "no_cot"):
        seeded = results["reward_model"][name]["seeds"]
        print(f"[{task.NAME}] reward model {name:6s}: test span F1 positive "
              + " ".join(f"{v:.3f}" for v in seeded["positive_f1"]) + ", negative "
              + " ".join(f"{v:.3f}" for v in seeded["negative_f1"]) + f" (reward-model seeds {reward_seeds})")

    seeds = [args.seed + k for k in range(args.seeds)]
    pipeline = Pipeline(task, model, tokenizer, splits, reward_models, items)
    if args.advantage == "grpo":  # the optimiser study: GRPO's runs on the same SFT policy and reward models
        grpo = {**preset, "ppo": {**preset["ppo"], "advantage": "grpo", "per": args.per}}
        methods, history, grid = ppo_stage(pipeline, results["sft"], grpo, seeds, args.compile, args.out, progress,
                                           units)
        name = "results_grpo.json" if args.per == "token" else "results_grpo_sum.json"
        atomic_save(json.dumps({**results, "advantage": "grpo", "per": args.per, "methods": methods,
                                "ppo_history": history, "group_grid": grid}, indent=2), path(name))
        print(f"[{task.NAME}] GRPO ({args.per}) -> {path(name)}; beside PPO's: python -m experiments.optimisers "
              f"--out {args.out}")
        return results
    results["methods"], results["ppo_history"], results["lambda_grid"] = ppo_stage(
        pipeline, results["sft"], preset, seeds, args.compile, args.out, progress, units)

    start = time.time()
    if "showcase" not in progress:
        saved = {name: read_jsonl(path(file)) for name, file in (("sft", "samples.jsonl"),
                                                                 ("text2grad", "samples_text2grad.jsonl"))}
        progress.finish("showcase", {"showcase": showcase(task, tokenizer, splits["test"], saved,
                                                          first["cot"])}, start)
    results.update(progress["showcase"])
    stages = {"data": ["data"], "pretrain": ["base"] if base else [], "sft": ["sft"], "evaluate": ["evaluate"],
              "annotate": ["annotate"] + [f"annotate/{seed}" for seed in draws],
              "reward_models": [stage for name in REWARD_MODELS
                                for stage in reward_stage_names(preset, name, reward_seeds).values()],
              "ppo": [stage for stage in progress.done if stage.startswith(("ppo/", "test/"))],
              "showcase": ["showcase"]}
    results["wall_time_s"] = {key: sum(progress.time(s) for s in names) for key, names in stages.items()}
    results.update(command=args.command, commits=progress.commits(), machine=machine(),
                   units=units.record(args.out))
    atomic_save(json.dumps(results, indent=2), path("results.json"))
    print(f"[{task.NAME}] total {sum(results['wall_time_s'].values()):.0f}s -> {path('results.json')}")
    return results


# ---------------------------------------------------------------------------------------------
# The command line

def main(argv=None):
    """python -m experiments.protocol [flags]: parse the flags, run each task, end bad input with one line."""
    parser = argparse.ArgumentParser(prog="python -m experiments.protocol",
                                     description="The full experiment: Text2Grad against scalar PPO, seeds, the lambda grid, resume.",
                                     epilog="Then python -m experiments.report --out DIR prints the tables (95% intervals, "
                                            "paired differences) and writes DIR/report.html. The studies of the method, "
                                            "each a command: python -m experiments.sweep (K flaws per response), "
                                            "experiments.robustness, experiments.information, experiments.lookup, "
                                            "experiments.bench.")
    parser.add_argument("--task", default="summarize", choices=["summarize", "code", "qa", "all"],
                        help="toy task to run (default: summarize)")
    parser.add_argument("--preset", default="default", choices=sorted(PRESETS), help="run size")
    parser.add_argument("--seeds", type=int, default=1, help="PPO runs per method at its chosen GAE lambda, seeds "
                        "--seed, --seed+1, ... (default 1, to keep the default run short; RESULTS.md's experiment uses "
                        "9 over 3 reward-model seeds; --resume with more seeds adds runs to a finished run)")
    parser.add_argument("--out", default="runs", help="output directory (one sub-folder per task)")
    parser.add_argument("--annotations", metavar="DIR", help="read annotations_{train,validation,test}.jsonl "
                        "from DIR instead of sampling the SFT policy and running the critic")
    parser.add_argument("--reward-seeds", type=int, default=1, help="train the reward models with this many seeds; "
                        "the j-th PPO seed reads the (j mod R)-th, so the paired intervals include the reward models' "
                        "variation (default 1)")
    parser.add_argument("--own-annotations", action="store_true", help="each reward-model seed after the first "
                        "trains on a draw of its own (the SFT policy's answers to the annotated prompts sampled "
                        "afresh, annotated by the critic), so that the reward models vary as annotation does, not "
                        "only in minibatch order (default off: every seed reads the first draw)")
    parser.add_argument("--praise", choices=["token", "phrase"], help="how PPO pays praise: +1 on every praised "
                        "token (the paper) or +1 once per distinct praised phrase; default: the task's, chosen on "
                        "validation (PRAISE)")
    parser.add_argument("--advantage", choices=["gae", "grpo"], default="gae", help="gae: PPO (the experiment); grpo: "
                        "the same methods with GRPO's group-normalised advantages and no value head, each choosing its "
                        "group size on validation, written to results_grpo.json beside a run's results.json")
    parser.add_argument("--per", choices=["token", "response"], default="token", help="with --advantage grpo, "
                        "how the span methods' rewards are normalised: per token (default), or summed per response "
                        "first (the collapse; results_grpo_sum.json)")
    add_run_flags(parser)
    add_flags(parser)
    args = parser.parse_args(argv)
    check_flags(parser, args)
    if args.per == "response" and args.advantage != "grpo":
        fail("--per response is GRPO's: add --advantage grpo")
    if args.advantage == "grpo" and not args.resume:
        fail("--advantage grpo runs beside a PPO run, on its SFT policy and reward models: add --resume and its --out")
    args = check_run_flags(args)
    if args.reward_seeds < 1:
        fail("--reward-seeds must be at least 1")
    tasks = ["summarize", "code", "qa"] if args.task == "all" else [args.task]
    folders = {name: os.path.join(args.annotations, name) if args.task == "all" else args.annotations
               for name in tasks} if args.annotations else {}
    for folder in folders.values():  # every task's annotation files, checked before any work
        checked(read_annotations, folder)
    command = "python -m experiments.protocol " + " ".join(sys.argv[1:] if argv is None else argv)
    args.out = os.path.abspath(args.out)  # where a Ray worker writes, wherever it was started
    units = Units(args.ray, out=args.out, cpus=args.unit_cpus, gpus=args.unit_gpus, device=pick_device(args.device))

    with units:  # Ctrl-C or a failed unit: the tasks end with the run
        for name in tasks:
            per_task = {"task": name, "out": os.path.join(args.out, name), "annotations": folders.get(name),
                        "command": command}
            run_to_the_end(lambda: run(argparse.Namespace(**{**vars(args), **per_task}), units), args.out)
        if args.ray:
            units.report()
    print(f"the tables with 95% intervals and paired differences, and report.html: "
          f"python -m experiments.report --out {args.out}")


if __name__ == "__main__":
    main()
