"""experiments/ppo_runs.py: the lab's PPO stage, every method of the 2 x 2 from one SFT policy over seeds.

    configs(preset["ppo"])   -> (ppo.PPOConfig, guards.Guards, experiments.refresh.RefreshConfig)
    ppo_stage(...)           each method at each GAE lambda of a grid on the first seed, the one
                             chosen on validation (choice_score) run on the other seeds, each PPO seed
                             reading its reward-model seed; then test, for the chosen runs only

The experiment (protocol.py) and the K sweep (sweep.py) both call it; each run is a stage of
progress.json, so --resume skips it.
"""
import copy
import dataclasses
import glob
import json
import os
import time
from dataclasses import replace

import guards
import ppo
from experiments.checkpoint import load_checkpoint, save_checkpoint
from experiments.measures import evaluate_policy, overoptimisation, primary_score
from experiments.refresh import RefreshConfig, method_reward
from experiments.runstate import atomic_save, fail
from sft import MAX_NEW_TOKENS
from text2grad import METHODS


def reward_settings(preset, name):
    """(learning rate, steps) of reward model `name`: its task's choice (preset["reward"], from
    protocol.REWARD_CHOICES; no_cot takes cot's), or the preset's reward_lr and reward_steps."""
    default = (preset["reward_lr"], preset["reward_steps"])
    return tuple(preset.get("reward", {}).get("cot" if name == "no_cot" else name, default))


def chosen_tag(preset, name):
    """"" for reward model `name` (or the critic) at the preset's settings, else "/lr{lr}_steps{steps}":
    the stages of a model trained at a chosen setting, and of the PPO runs that read it, say so, so
    that --resume on a folder made before the choice runs them again instead of loading old ones."""
    if name not in ("cot", "no_cot", "scalar"):
        return ""
    lr, steps = reward_settings(preset, name)
    return "" if (lr, steps) == (preset["reward_lr"], preset["reward_steps"]) else f"/lr{lr:g}_steps{steps}"


def configs(fields, **extra):
    """(ppo.PPOConfig, guards.Guards, experiments.refresh.RefreshConfig) from a preset's ppo dict (and extra PPOConfig fields)."""
    shaping = {k: v for k, v in fields.items() if k in {f.name for f in dataclasses.fields(guards.Guards)}}
    refresh = {k[len("refresh_"):]: v for k, v in fields.items() if k.startswith("refresh_")}
    rest = {k: v for k, v in fields.items() if k not in shaping and not k.startswith("refresh_")}
    return ppo.PPOConfig(**rest, **extra), guards.Guards(**shaping), RefreshConfig(**refresh)


def choice_score(curve, choose_by):
    """What a lambda is chosen by, from its validation curve [(update, score, ...)]: the final score
    ("final"), the mean over the curve's last quarter of points ("last_quarter": where the run ends
    up, less noisy than one point), or the mean over all its points ("mean", which rewards getting
    there sooner, and so a run that rises fast and then collapses)."""
    if choose_by == "mean":
        return sum(p[1] for p in curve) / len(curve)
    if choose_by == "last_quarter":
        tail = curve[-max(1, len(curve) // 4):]
        return sum(p[1] for p in tail) / len(tail)
    if choose_by == "final":
        return curve[-1][1]
    raise ValueError(f"unknown choose_by {choose_by!r}; use 'final', 'last_quarter' or 'mean'")


def ppo_stage(task, policy, tokenizer, splits, reward_models, sft_results, preset, seeds, compile, out, progress,
              reward_items=None):
    """Every method of METHODS from the SFT policy, each run a stage of its own for --resume.
    reward_models {reward seed: {name: model}} (reward_stage): the j-th PPO seed reads the
    (j mod R)-th reward seed's models, so that over the runs both the PPO seed and the reward
    model's seed vary (summary.py's intervals average the runs of a reward seed first). reward_items:
    the reward models' training items the refresh mixes in, one list, or {reward seed: items} when
    each seed trained on its own annotations (protocol.draw_stage).
      1. GAE lambda: one run per lambda of preset["lambdas"] at the first seed; the method keeps the
         lambda whose final validation score is highest (the first of equals, in grid order), or,
         with preset["choose_by"] "mean", whose validation curve has the highest mean (sooner is better);
      2. the other seeds at that lambda; the first seed's run at it is reused, not run again;
      3. test: the chosen runs, and only those, are evaluated on the test split (with
         preset["test_curve"], every curve point also holds the test score: read by the K sweep,
         never by a choice).
    --resume with more --seeds adds the new seeds' runs to a finished run. With preset["ppo"]
    ["advantage"] "grpo" the group sizes of preset["groups"] take the lambdas' place (methods[name]
    ["group"]; "lambda" None), in stages and files of their own (grpo/..., ppo_{name}_grpo*.pt).
    Returns (methods, history, grid): methods[name] = {lambda, scores (test, per seed), curves (the
    validation curve per seed), test (the first seed's metrics), tests (every seed's), explained_variance(_mc) and warmup
    (per seed), reward_seeds (the reward seed each run read), time_s}, with "sft" (from sft_results) as the starting point; history["<name>/<seed>"]
    the logged statistics per update; grid[name][lambda] the validation score each lambda's run was
    chosen by. Means and intervals over the seeds are experiments/summary.py's."""
    config, shaping, refresh = configs(preset["ppo"], max_new_tokens=MAX_NEW_TOKENS, compile=compile)
    # GRPO's runs choose their group size as PPO's choose lambda, in stages and files of their own:
    # grpo/..., or grpo_sum/... for a span method whose rewards are summed before normalising (per
    # "response"); a last-token method is normalised per response either way, so it shares grpo's runs
    grpo = config.advantage == "grpo"
    knob, knobs = ("group", preset["groups"]) if grpo else ("lambda", preset["lambdas"])
    variant = lambda name: "" if not grpo else (
        "grpo_sum" if config.per == "response" and METHODS[name][1] == "every" else "grpo")
    prefix = lambda name: f"{variant(name)}/" if grpo else ""   # of its stages
    tag = lambda name: f"_{variant(name)}" if grpo else ""      # of its files
    train = splits["train"]
    prompts = [tokenizer.prompt(e.prompt) for e in train]
    validation = splits["validation"]
    device = next(policy.parameters()).device

    watched = validation[:preset.get("overopt_prompts", 64)]

    def validation_score(name, run_models):
        """The curve's point for method `name`: validation, with preset["test_curve"] the test score
        beside it (the K sweep reads its thresholds there; nothing is chosen by it), and last the
        over-optimisation measurement on the first overopt_prompts validation prompts (overoptimisation),
        whose proxy is the run's reward models as they are at that point."""
        watch = overoptimisation(name, task, tokenizer, watched, run_models, policy, config, seed=1)

        def point(gpt):
            score = primary_score(task, gpt, tokenizer, validation)
            test = (primary_score(task, gpt, tokenizer, splits["test"], "test"),) if preset.get("test_curve") else ()
            return (score, *test, watch(gpt))
        return point

    reward_seeds = list(reward_models)
    reads = {seed: reward_seeds[j % len(reward_seeds)] for j, seed in enumerate(seeds)}  # PPO seed -> reward seed
    suffix = lambda seed: "" if reads[seed] == reward_seeds[0] else f"/reward{reads[seed]}"  # older runs' names kept
    stage_of = lambda name, lam, seed: (f"{prefix(name)}ppo/{name}{chosen_tag(preset, METHODS[name][0])}/{knob}{lam}/"
                                        f"{seed}{suffix(seed)}")
    test_of = lambda name, seed: f"{prefix(name)}test/{name}{chosen_tag(preset, METHODS[name][0])}/{seed}{suffix(seed)}"
    checkpoint = lambda name, lam, seed: os.path.join(out, f"ppo_{name}{tag(name)}_{knob}{lam}_seed{seed}.pt")

    def run_once(name, lam, seed):
        """One PPO run; its policy waits in checkpoint(name, lam, seed) for the test stage. With GRPO,
        lam is the group size, and a last-token reward is normalised per response."""
        stage, start = stage_of(name, lam, seed), time.time()
        if stage in progress:
            return
        run_config = replace(config, group=lam, per=config.per if METHODS[name][1] == "every" else "response") \
            if grpo else replace(config, lam=lam)
        model = ppo.PolicyWithValue(copy.deepcopy(policy), run_config.detach_value)
        items = reward_items[reads[seed]] if isinstance(reward_items, dict) else reward_items
        reward, run_models = method_reward(name, task, tokenizer, train, reward_models[reads[seed]], shaping, refresh,
                                           items, seed)
        curve, logged, warmup = ppo.train(
            model, policy, prompts, reward, tokenizer.eos_id, tokenizer.pad_id, run_config, seed=seed,
            evaluate=validation_score(name, run_models),
            eval_every=preset["eval_every"], desc=f"{variant(name) or 'ppo'} {name} {knob} {lam} seed {seed}")
        save_checkpoint(checkpoint(name, lam, seed), model.gpt, tokenizer, config.updates)
        progress.finish(stage, {"curve": curve, "history": logged, "warmup": warmup}, start)

    sft_test = sft_results["test"]
    methods = {"sft": {"scores": [sft_test[task.PRIMARY]], "curves": [[[0, sft_results["validation"][task.PRIMARY]]]],
                       "test": sft_test}}
    history, grid = {}, {}
    for name in METHODS:
        for lam in knobs:
            run_once(name, lam, seeds[0])
        curves = [progress[stage_of(name, lam, seeds[0])]["curve"] for lam in knobs]
        scores = [choice_score(curve, preset.get("choose_by", "final")) for curve in curves]
        grid[name] = dict(zip(knobs, scores))
        lam = max(knobs, key=lambda candidate: grid[name][candidate])
        for seed in seeds[1:]:
            run_once(name, lam, seed)
        for seed in seeds:
            stage, start = test_of(name, seed), time.time()
            stale = stage in progress and not progress.made_of(stage, f"{knob}{lam}")  # the grid changed since
            if stale and not os.path.exists(checkpoint(name, lam, seed)):
                fail(f"{stage} was tested at another {knob} than the {lam} now chosen, and that run's policy is gone: "
                     "resume with the grid it was run with, or use another --out")
            if stage not in progress or stale:
                gpt = load_checkpoint(checkpoint(name, lam, seed), device, tokenizer, policy.config)[0]
                test, samples = evaluate_policy(task, gpt, tokenizer, splits["test"])
                if seed == seeds[0]:
                    save_checkpoint(os.path.join(out, f"ppo_{name}{tag(name)}.pt"), gpt, tokenizer, config.updates)
                    atomic_save("".join(json.dumps(s) + "\n" for s in samples), os.path.join(out, f"samples_{name}{tag(name)}.jsonl"))
                progress.finish(stage, test, start, of=f"{knob}{lam}")
        for leftover in glob.glob(checkpoint(name, "*", "*")):  # ppo_{name}.pt keeps seed 0's
            os.remove(leftover)

        runs = [progress[stage_of(name, lam, seed)] for seed in seeds]
        history.update({f"{name}/{seed}": run["history"] for seed, run in zip(seeds, runs)})
        tests = [progress[test_of(name, seed)] for seed in seeds]
        scores = [test[task.PRIMARY] for test in tests]
        time_s = sum(progress.time(stage_of(name, lam, seed)) + progress.time(test_of(name, seed)) for seed in seeds)
        methods[name] = {"lambda": None if grpo else lam, **({"group": lam} if grpo else {}), "scores": scores, "curves": [run["curve"] for run in runs],
                         "test": tests[0], "tests": tests, "explained_variance": [run["history"][-1]["explained_variance"] for run in runs],
                         "explained_variance_mc": [run["history"][-1]["explained_variance_mc"] for run in runs],
                         "warmup": [run["warmup"] for run in runs], "reward_seeds": [reads[seed] for seed in seeds],
                         "time_s": time_s}
        print(f"[{task.NAME}] {variant(name) + ' ' if grpo else ''}{name:17s} {knob} {lam:<4} test {task.PRIMARY}, mean over {len(seeds)} seed(s) "
              f"{sum(scores) / len(scores):.3f} ({' '.join(f'{v:.3f}' for v in scores)}), {time_s:.0f}s")
    return methods, history, grid
