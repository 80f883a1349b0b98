"""The K sweep: where credit assignment decides.

    python -m experiments.sweep [--ks 1 2 4 8] [--seeds 5] [--out runs/sweep] [--resume]
    python -m experiments.sweep --ablation --ks 1 4 8 --seeds 3 [--out runs/sweep] [--resume]

K is the number of independent flaws per response (data/facts.py: an order note with K facts,
each restated as a one-word choice the SFT policy gets wrong by habit). A scalar reward is the sum
of the K site verdicts, so the signal for one site is buried in the noise of the other K - 1; a
span reward puts each verdict on its own tokens. Bandit theory puts the gain of per-part feedback
over sum-only feedback between sqrt(K) and K in regret (K to K^2 in the updates needed to reach a
given level); this sweep measures it in updates.

    data -> tokenizer -> one SFT policy (K mixed) -> annotate -> reward models (cot, scalar; K
    mixed; --reward-seeds of them, PPO seed j reading the (j mod R)-th) -> per K, one budget for
    every K: the METHODS of text2grad.py, GAE lambda chosen on validation (by the last quarter of
    its curve: where a run ends up, not how fast it rose), several seeds, test scored at every
    update -> updates needed to reach 50% and 90% of the gap from SFT to the ceiling (every site
    right) *and hold it* to the end of the budget, read on the test curves: on the mean curve over
    seeds (ratios scalar / span, paired bootstrap over seeds) and by Kaplan-Meier over seeds; and
    the area under each run's test curve (paired differences)

A learned reward is a proxy, and at K = 8 a policy finds what it never saw (RESULTS.md,
"Over-optimisation"). Every curve point therefore also holds, on validation samples, the critic's
score (gold), the method's own reward (proxy) and the KL to the SFT policy; and PPO runs with the
guards of the preset's ppo fields (guards.shaped_scores). --ablation runs each guard alone and together
(DEFENCES) for the two learned-reward methods, on validation, which is how the preset's were chosen.

Everything goes into --out: the main run's files for the shared stages (tokenizer.json, sft.pt,
annotations_*.jsonl, reward_*.pt), one sub-folder k{K} per K with that K's PPO runs (its own
progress.json, samples_{method}.jsonl, ppo_{method}.pt), results.json, report.html and
updates_to_90.svg (the updates each method needs to close 90% of the gap, against K); with
--ablation, ablation/k{K}/ (its runs' progress) and ablation.json.
"""
import argparse
import json
import os
import sys
import time

import torch

import text2grad
from data import facts
from data.annotations import read_annotations
from experiments import fanout, figures, measures, ppo_runs, protocol, stats, terminal
from experiments.report import render
from experiments.summary import shared, summarise_methods
from experiments.runstate import (Progress, add_run_flags, atomic_save, check_run_flags, checked, fail, machine,
                                  pick_device, run_to_the_end)
from sft import MAX_NEW_TOKENS, respond

# Sizes. validation and test are per K; train mixes K. ppo: PPOConfig fields; updates: the PPO budget,
# the same for every method and every K (the largest K's, 1.5x what it was before the guards, so that
# a late collapse would show); eval_every 1: the curves' points are every update, so a threshold is located
# to the update. choose_by "last_quarter": lambda is chosen by the mean of the last quarter of the
# first seed's validation curve (the mean over the whole curve chose runs that rose fast and then
# collapsed). test_curve: each point also holds the test score, where the thresholds are read.
# overopt_prompts: the validation prompts the over-optimisation measurement samples at every point.
# The guards against a gamed reward are guards.Guards' and experiments.refresh.RefreshConfig's defaults, chosen on validation by --ablation (RESULTS.md).
# canon=0: the sweep keeps the plain nanoGPT block its RESULTS.md numbers were measured with (the
# canon layers came later, for qa's look-up; the facts task's sites sit in their own sentences).
SWEEP_PRESETS = {
    "default": dict(train=4000, validation=100, test=100, vocab_size=512, sft_steps=1500, batch_size=32,
                    lr=3e-3, model=dict(n_layer=2, n_head=4, n_embd=96, block_size=384, canon=0),
                    samples_per_prompt=2, reward_steps=1200, reward_lr=2e-3,
                    ppo=dict(batch_size=32, minibatch_size=32, lr=2e-4, beta=0.1, praise_fade_at=40),
                    updates=36, eval_every=1, lambdas=(0.5, 0.95), groups=(4, 8, 16),
                    choose_by="last_quarter", test_curve=True, overopt_prompts=64),
    # the test suite's run: every stage in seconds; its numbers mean nothing
    "tiny": dict(train=64, validation=8, test=8, vocab_size=512, sft_steps=10, batch_size=16,
                 lr=3e-3, model=dict(n_layer=1, n_head=2, n_embd=32, block_size=384),
                 samples_per_prompt=1, reward_steps=4, reward_lr=2e-3,
                 ppo=dict(batch_size=8, minibatch_size=8, lr=3e-5, praise_fade_at=40),
                 updates=2, eval_every=1, lambdas=(0.5, 0.95), groups=(2,), choose_by="last_quarter",
                 test_curve=True, overopt_prompts=4),
}
REWARD_MODELS = ("cot", "scalar")  # the ones the methods read (the no-critique model is not in the sweep)
RATIOS = [("ppo_scalar", "text2grad"), ("text2grad_last", "text2grad"), ("oracle_scalar", "oracle")]  # updates(a) / updates(b): a > 1 favours b
THRESHOLDS = (0.5, 0.9)  # the share of the gap from SFT to the ceiling closed
# The guards against a gamed reward (guards.Guards fields) and the refresh, each alone and together, for the ablation
# (--ablation): the same guards for both learned-reward methods; what does not apply to a method (the
# scalar reward model has no spans to bound) leaves its run the same, and the same run is not repeated.
DEFENCES = {"paper": {"praise": "token", "cut_praise": False, "refresh_every": 0},
            "cut": {"praise": "token", "cut_praise": True, "refresh_every": 0},
            "phrase": {"praise": "phrase", "cut_praise": False, "refresh_every": 0},
            "refresh": {"praise": "token", "cut_praise": False, "refresh_every": 4},
            "cut+phrase": {"praise": "phrase", "cut_praise": True, "refresh_every": 0},
            "cut+phrase+refresh": {"praise": "phrase", "cut_praise": True, "refresh_every": 4}}
ABLATION = {"methods": ("ppo_scalar", "text2grad"), "lambda": 0.95, "points": 4}  # curve points after update 0


def make_splits(sizes, seed, ks=facts.KS):
    """(train, {K: {"validation", "test"}}): train mixes K (facts.KS); held-out splits are per K and
    share no prompt with train or with each other (one split may draw a prompt twice: at K = 1 there
    are under a thousand)."""
    held_out, per_k = set(), {}
    for k in ks:
        per_k[k] = {}
        for j, split in enumerate(("test", "validation")):
            examples = facts.make_examples(sizes[split], seed * 1000 + 100 * k + j, k=k)
            per_k[k][split] = [e for e in examples if e.prompt not in held_out]
            held_out.update(e.prompt for e in per_k[k][split])
    train = [e for e in facts.make_examples(sizes["train"], seed * 1000 + 99, k=None) if e.prompt not in held_out]
    return train, per_k


def thresholds(curves, start, budget, eval_every):
    """Per threshold q: the updates the runs' curves [(update, score)] need to close q of the gap from
    start (the SFT policy's score) to the ceiling 1 and *hold* it to the end of the budget
    (stats.updates_to_hold), read three ways:
      mean_curve  on the mean of the seeds' curves (None: it never holds; the speed ratios read this)
      km_median   the Kaplan-Meier median over the seeds, a seed that never holds it censored at its
                  last update (None: fewer than half are known to reach it)
      per_seed    each seed's own, budget + eval_every where it never holds it (a bound: the figure's);
                  "censored" counts those seeds.
    A curve that first reaches the level at its last point counts as holding it: "hold" means to
    the end of this budget, not beyond it."""
    out = {}
    for q in THRESHOLDS:
        level = start + q * (1 - start)
        held = [stats.updates_to_hold(curve, level) for curve in curves]
        out[str(q)] = {"level": level, "mean_curve": stats.updates_to_hold(stats.mean_curve(curves), level),
                       "km_median": stats.km_median([budget if u is None else u for u in held],
                                                    [u is not None for u in held]),
                       "per_seed": [budget + eval_every if u is None else u for u in held],
                       "censored": sum(u is None for u in held)}
    return out


def speed_ratio(curves_a, curves_b, level, censor_at):
    """f(seeds) -> (updates(a) / updates(b) to hold `level`, censored): each read off the mean curve
    of the chosen seeds' runs (seed i of a paired with seed i of b). A mean curve that never holds the
    level counts as censor_at (the budget plus one evaluation), which makes the ratio a bound; censored
    says whether either did. r > 1 favours b."""
    def stat(seeds):
        ua, ub = (stats.updates_to_hold(stats.mean_curve([curves[i] for i in seeds]), level)
                  for curves in (curves_a, curves_b))
        return (censor_at if ua is None else ua) / max(1e-9, censor_at if ub is None else ub), ua is None or ub is None
    return stat


def ratio(stat, n, seed=0):
    """A speed_ratio over n paired seeds, with the percentile bootstrap: resample the seeds, average each
    method's curves again, read both again. "censored": the share of resamples where a mean curve never
    held the level (the interval is then partly a bound)."""
    flags = []

    def resampled(idx):  # the ratio, noting whether a mean curve never held the level
        value, censored = stat(idx)
        flags.append(censored)
        return value
    low, high = stats.bootstrap_ci95(n, resampled, seed=seed)
    return {"ratio": stat(range(n))[0], "ci95": [low, high], "censored": sum(flags) / len(flags)}


def faster(a, b):
    """Seed by seed, which of two methods held the level sooner (per_seed updates, a censored seed at
    budget + 1): {"b", "a", "tied", "sign_p"}, sign_p the two-sided sign test of b's wins against a's
    (stats.sign_test). The per-seed reading beside the mean curves' ratio."""
    wins, losses = sum(y < x for x, y in zip(a, b)), sum(x < y for x, y in zip(a, b))
    return {"b": wins, "a": losses, "tied": len(a) - wins - losses, "sign_p": stats.sign_test(wins, losses)}


def sweep_k(k, pipeline, preset, seeds, compile, out, args, units):
    """The methods at one K, in out/k{K} (its own progress.json); returns that K's results."""
    folder = os.path.join(out, f"k{k}")
    os.makedirs(folder, exist_ok=True)
    progress = Progress(folder, {"k": k, "preset": args.preset, "seed": args.seed}, args.resume)
    sft = protocol.evaluate_stage(facts, pipeline.policy, pipeline.tokenizer, pipeline.splits, folder, progress)
    k_preset = {**preset, "ppo": {**preset["ppo"], "updates": preset["updates"]}}
    methods, _, grid = ppo_runs.ppo_stage(pipeline, sft, k_preset, seeds, compile, folder, progress, units)
    # the test curve of each seed's run at the chosen lambda: points (update, validation, test, ...)
    curves = {name: [[(p[0], p[2]) for p in curve] for curve in methods[name]["curves"]] for name in text2grad.METHODS}
    methods = summarise_methods(methods)
    budget, every, start = preset["updates"], preset["eval_every"], sft["test"][facts.PRIMARY]
    steps = {name: thresholds(curves[name], start, budget, every) for name in text2grad.METHODS}
    for name in text2grad.METHODS:
        methods[name]["test_curve"] = [[u, score] for u, score in stats.mean_curve(curves[name])]
        methods[name]["area"] = [stats.curve_area(curve) for curve in curves[name]]
        tests = methods[name]["tests"]  # where each run ended: a policy that games its reward grows long and far from SFT
        last = methods[name]["overopt"][-1]  # summarise_methods averaged it over the seeds
        methods[name].update({f"final_{key}": last[key] for key in ("gold", "proxy", "kl")})
        for key in ("length", "reference_length", "blamed_share"):  # greedy test responses, mean over seeds
            methods[name][f"test_{key}"] = sum(t[key] for t in tests) / len(tests)
    speed = {str(q): {f"{a} / {b}": speed_ratio(curves[a], curves[b], steps[a][str(q)]["level"], budget + every)
                      for a, b in RATIOS} for q in THRESHOLDS}
    return {"k": k, "updates": budget, "eval_every": every, "sft": sft, "methods": methods, "lambda_grid": grid,
            "thresholds": steps,
            "ratios": {q: {key: ratio(stat, len(seeds)) for key, stat in pairs.items()} for q, pairs in speed.items()},
            "seeds_faster": {q: {f"{a} / {b}": faster(steps[a][q]["per_seed"], steps[b][q]["per_seed"]) for a, b in RATIOS}
                             for q in speed},
            "area": {f"{b} - {a}": stats.paired_difference(methods[b]["area"], methods[a]["area"], shared(methods, a, b))
                     for a, b in RATIOS},
            "paired": {f"{a} - {b}": stats.paired_difference(methods[a]["scores"], methods[b]["scores"],
                                                             shared(methods, a, b)) for a, b in protocol.COMPARISONS},
            "all_right": {name: methods[name]["test"]["all_right"] for name in methods},
            "time_s": sum(entry["time_s"] for entry in progress.done.values())}


def ablation(k, pipeline, preset, seeds, out, args, units):
    """Each setting of DEFENCES at one K, for the learned-reward methods, at GAE lambda ABLATION["lambda"],
    on validation only (the test split is not read), each run a unit (ppo_runs.run_once). Returns
    {setting: {method: {"score", "gold", "proxy", "kl", "length", "criticised" (means over seeds
    of the last point), "per_seed" (final validation sites_right), "curve"}}}."""
    folder = os.path.join(out, "ablation", f"k{k}")
    os.makedirs(folder, exist_ok=True)
    progress = Progress(folder, {"k": k, "preset": args.preset, "seed": args.seed, "ablation": True}, args.resume)
    budget = preset["updates"]
    points = {**preset, "test_curve": False, "eval_every": max(1, budget // ABLATION["points"])}
    stages, handles, reward_seed = {}, {}, next(iter(pipeline.reward_models))
    shared = units.share(pipeline)  # under Ray, sent to the cluster once for every run
    for setting, fields in DEFENCES.items():
        for name in ABLATION["methods"]:
            # no spans: the praise setting does not reach scalar PPO's reward (its model's target was summed
            # through the preset's guards once, and a refresh keeps that target whatever the setting)
            spans = {} if name == "text2grad" else {"praise": "token"}
            config, shaping, refresh = ppo_runs.configs({**preset["ppo"], **fields, **spans, "updates": budget,
                                                    "lam": ABLATION["lambda"]}, max_new_tokens=MAX_NEW_TOKENS)
            key = f"praise={shaping.praise}-cut_praise={shaping.cut_praise}"
            key += f"-refresh_every={refresh.every}" if refresh.every else ""
            stages[setting, name] = [f"{name}/{key}/{seed}" for seed in seeds]
            for seed, stage in zip(seeds, stages[setting, name]):  # the same run is not repeated
                if stage not in progress and stage not in handles:
                    handles[stage] = units.submit(units.label(folder, stage), ppo_runs.run_once, shared, name, seed,
                                                  reward_seed, config, shaping, refresh, points, stage, progress,
                                                  None, f"K={k} {setting}: {name} seed {seed}")
    units.wait(handles)
    table = {}
    for (setting, name), names in stages.items():
        runs = [progress[stage]["curve"] for stage in names]
        last = [run[-1] for run in runs]
        mean = lambda values: sum(values) / len(values)
        table.setdefault(setting, {})[name] = {
            "score": mean([p[1] for p in last]), "per_seed": [p[1] for p in last],
            **{q: mean([p[-1][q] for p in last]) for q in ("gold", "proxy", "kl", "length", "criticised")},
            "curve": [[p[0], mean([r[j][1] for r in runs])] for j, p in enumerate(runs[0])]}
    return table


def print_ablation(tables):
    """The ablation's table: per K, setting and method, the means over seeds at the last update."""
    print("\nDefences at GAE lambda", ABLATION["lambda"], "(validation; mean over seeds at the last update): sites right, "
          "the critic's score (gold), the method's own reward (proxy), KL to SFT, length, blamed token share")
    for k, table in tables.items():
        for setting, row in table.items():
            for name, m in row.items():
                print(f"  K={k} {setting:12s} {name:11s} sites {m['score']:.3f}  gold {m['gold']:+6.2f}  proxy "
                      f"{m['proxy']:+6.2f}  KL {m['kl']:5.1f}  length {m['length']:5.1f}  blamed {m['criticised']:.3f}")


def run(args, units):
    preset = SWEEP_PRESETS[args.preset]
    if args.advantage == "grpo":  # GRPO's runs beside PPO's: the same shared stages, each K's runs its own
        preset = {**preset, "ppo": {**preset["ppo"], "advantage": "grpo", "per": args.per}}
    variant = "" if args.advantage == "gae" else ("_grpo" if args.per == "token" else "_grpo_sum")
    device = pick_device(args.device)
    compile = args.compile
    os.makedirs(args.out, exist_ok=True)
    progress = Progress(args.out, {"sweep": True, "preset": args.preset, "seed": args.seed},
                            args.resume)
    path = lambda name: os.path.join(args.out, name)
    # every K's held-out splits, whichever --ks: the shared stages (and the training split) must not
    # depend on which K are run
    train, per_k = make_splits({s: preset[s] for s in ("train", "validation", "test")}, args.seed)
    results = {"kind": "sweep", "task": facts.NAME, "preset": args.preset, "seed": args.seed, "device": device,
               "ks": args.ks, "habit_rate": facts.HABIT_RATE,
               "sizes": {"train": len(train), **{str(k): {s: len(v) for s, v in split.items()} for k, split in per_k.items()}}}

    tokenizer = protocol.tokenizer_stage(facts, train, preset["vocab_size"], args.out, progress)
    results.update(progress["data"])
    # SFT samples its batches from the 4000 training demonstrations (the main run draws from a pool
    # as large as its steps): a site is a copy from the prompt, which these trunks learn without
    # fresh data (reward-model span F1 >= 0.94). No SFT curve (the presets have no sft_eval_every).
    validation = [e for k in facts.KS for e in per_k[k]["validation"]]
    model = protocol.gpt_stage(facts, train, validation, tokenizer, preset, device, args.seed, args.out, progress)
    results["sft_training"] = progress["sft"]

    # How the SFT policy's sites go wrong, sampled (what PPO starts from) and greedy (what the metric reads)
    start = time.time()
    if "sites" not in progress:
        examples = [e for k in facts.KS for e in per_k[k]["validation"]]
        generator = torch.Generator(device).manual_seed(args.seed)
        sampled, _ = respond(model, tokenizer, [e.prompt for e in examples], greedy=False, generator=generator,
                             desc="sample sites")
        greedy, _ = respond(model, tokenizer, [e.prompt for e in examples], desc="greedy sites")
        progress.finish("sites", {"sites": {"sampled": facts.site_statistics(examples, sampled),
                                            "greedy": facts.site_statistics(examples, greedy)}}, start)
    results.update(progress["sites"])

    # Annotation and reward models: sampled SFT responses over the mixed training split; the test
    # annotations are per K, so the reward models are also scored per K.
    start = time.time()
    splits = {"train": train, "validation": [e for k in facts.KS for e in per_k[k]["validation"]],
              "test": [e for k in facts.KS for e in per_k[k]["test"]]}
    if "annotate" not in progress:
        records = protocol.annotate_stage(facts, model, tokenizer, splits, preset["samples_per_prompt"], args.seed, args.out)
        progress.finish("annotate", {}, start)
    else:
        records = checked(read_annotations, args.out, check=None)
    records, encoded, _ = checked(protocol.encode_splits, tokenizer, records, model.config.block_size, args.out,
                                  preset["batch_size"])
    reward_seeds = [args.seed + j for j in range(args.reward_seeds)]
    results["reward_model"], reward_models = protocol.reward_stage(model, tokenizer, records, encoded, preset, device,
                                                                   reward_seeds, args.out, progress, units,
                                                                   REWARD_MODELS)
    first = reward_models[reward_seeds[0]]
    start = time.time()
    if "reward_per_k" not in progress:
        per_k_rm = {}
        for k in facts.KS:
            rows = [j for j, r in enumerate(records["test"]) if facts.count_sites(r["prompt"]) == k]
            metrics = measures.reward_metrics(first["cot"], tokenizer, [records["test"][j] for j in rows],
                                         [encoded["test"][j] for j in rows])
            per_k_rm[str(k)] = {key: metrics[key] for key in ("positive_f1", "negative_f1", "exact_span_match")}
        progress.finish("reward_per_k", {"reward_per_k": per_k_rm}, start)
    results.update(progress["reward_per_k"])
    for k in args.ks:
        rm = results["reward_per_k"][str(k)]
        print(f"[sweep] K={k}: reward model (cot) span F1 positive {rm['positive_f1']:.3f}, negative {rm['negative_f1']:.3f}")

    seeds = [args.seed + j for j in range(args.seeds)]
    pipeline = lambda k: ppo_runs.Pipeline(facts, model, tokenizer, {"train": [e for e in train if facts.count_sites(
        e.prompt) == k], **per_k[k]}, reward_models, encoded["train"])  # K's runs: its prompts, every reward model
    if args.ablation:
        tables = {str(k): ablation(k, pipeline(k), preset, seeds, args.out, args, units) for k in args.ks}
        atomic_save(json.dumps({"preset": args.preset, "seeds": seeds, "defences": DEFENCES, **ABLATION,
                                "per_k": tables}, indent=2), path("ablation.json"))
        print_ablation(tables)
        return tables
    results["per_k"] = {}
    for k in args.ks:
        results["per_k"][str(k)] = sweep_k(k, pipeline(k), preset, seeds, compile, args.out, args, units)
    results["seeds"] = seeds
    results["wall_time_s"] = sum(entry["time_s"] for entry in progress.done.values()) + sum(
        r["time_s"] for r in results["per_k"].values())
    results["advantage"], results["per"] = args.advantage, args.per
    results.update(commits=progress.commits(), machine=machine(), units=units.record())
    atomic_save(json.dumps(results, indent=2), path(f"results{variant}.json"))
    atomic_save(render([results]), path(f"report{variant}.html"))
    if not variant:
        atomic_save(figures.thresholds_svg(results["per_k"], "0.9"), path("updates_to_90.svg"))  # the README's figure
    terminal.print_sweep(results)
    print(f"[sweep] total {results['wall_time_s']:.0f}s -> {path(f'results{variant}.json')}, {path(f'report{variant}.html')}")
    return results


def main(argv):
    parser = argparse.ArgumentParser(prog="python -m experiments.sweep", description=(
        "The K sweep: K is the number of sites (one-word facts) per response, each of which the SFT policy gets "
        "wrong independently (data/facts.py). For each K, "
        "scalar PPO, Text2Grad, the critic's rewards summed on the last token and the critic's spans, from one "
        "SFT policy and one set of reward models; how many PPO updates each needs to close 50% and 90% of the "
        "gap to every site right, and the ratios with bootstrap intervals over seeds."))
    parser.add_argument("--ks", type=int, nargs="+", default=list(facts.KS), metavar="K",
                        help=f"values of K, the number of sites per response, each one of {list(facts.KS)} "
                             f"(default: all)")
    parser.add_argument("--seeds", type=int, default=5, help="PPO seeds per method and K (default 5; --resume "
                        "with more seeds adds runs)")
    parser.add_argument("--reward-seeds", type=int, help="reward models (cot and scalar) trained with this many seeds; "
                        "the j-th PPO seed reads the (j mod R)-th (default: 3, or --seeds if fewer; the ablation reads "
                        "the first)")
    parser.add_argument("--preset", default="default", choices=sorted(SWEEP_PRESETS), help="run size")
    parser.add_argument("--out", default="runs/sweep", help="output directory (default runs/sweep)")
    parser.add_argument("--ablation", action="store_true", help="instead of the sweep, the defences against a "
                        "gamed reward (DEFENCES), each alone and together, for scalar PPO and Text2Grad on validation; "
                        "writes ablation.json")
    parser.add_argument("--advantage", choices=["gae", "grpo"], default="gae", help="grpo: the same methods with "
                        "GRPO's advantages (no value head), each choosing its group size on validation; on a sweep's "
                        "--out with --resume, beside its PPO runs (results_grpo.json)")
    parser.add_argument("--per", choices=["token", "response"], default="token", help="with --advantage grpo: "
                        "response sums the span rewards before normalising (the collapse; results_grpo_sum.json)")
    add_run_flags(parser)
    fanout.add_flags(parser)
    args = parser.parse_args(argv)
    fanout.check_flags(parser, args)
    if args.per == "response" and args.advantage != "grpo":
        fail("--per response is GRPO's: add --advantage grpo")
    if args.advantage == "grpo" and (args.ablation or not args.resume):
        fail("--advantage grpo runs beside a finished sweep, on its SFT policy and reward models: add --resume "
             "and its --out (and no --ablation)")
    if any(k not in facts.KS for k in args.ks):
        fail(f"--ks: each K must be one of {list(facts.KS)} (the training split mixes those)")
    args.reward_seeds = min(3, args.seeds) if args.reward_seeds is None else args.reward_seeds
    if not 1 <= args.reward_seeds <= args.seeds:
        fail(f"--reward-seeds must be between 1 and --seeds ({args.seeds})")
    args.ks = sorted(set(args.ks))
    check_run_flags(args)
    args.out = os.path.abspath(args.out)  # where a Ray worker writes, wherever it was started
    units = fanout.Units(args.ray, out=args.out, cpus=args.unit_cpus, gpus=args.unit_gpus,
                         device=pick_device(args.device))
    with units:  # Ctrl-C or a failed unit: the tasks end with the run
        results = run_to_the_end(lambda: run(args, units), args.out, "text2grad sweep")
        if args.ray:
            units.report()
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
