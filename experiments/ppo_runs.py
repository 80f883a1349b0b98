"""experiments/ppo_runs.py: the lab's PPO stage, every method of the 2 x 2 from one SFT policy over seeds.

    configs(preset["ppo"])   -> (ppo.PPOConfig, guards.Guards, experiments.refresh.RefreshConfig)
    run_once(pipeline, ...)  one PPO run: a stage of progress.json (--resume skips it) and a unit
                             (experiments/fanout.py); the experiment, the K sweep and its ablation's
    ppo_stage(...)           each method at each GAE lambda of a grid on the first seed, the one
                             chosen on validation (choice_score) run on the other seeds; then test
"""
import copy
import dataclasses
import json
import os
import time
from dataclasses import replace

import guards
import ppo
from experiments.checkpoint import load_checkpoint, save_checkpoint
from experiments.fanout import Units
from experiments.measures import evaluate_policy, overoptimisation, primary_score
from experiments.refresh import RefreshConfig, method_reward
from experiments.runstate import atomic_save, fail
from sft import MAX_NEW_TOKENS
from text2grad import METHODS


@dataclasses.dataclass
class Pipeline:
    """What every PPO run of a study reads, made by its shared stages."""
    task: object           # the data/ module of the task
    policy: object         # the SFT policy: where every run starts, and its KL reference
    tokenizer: object
    splits: dict           # {"train", "validation", "test"}: lists of examples
    reward_models: dict    # {reward seed: {name: reward model}} (protocol.reward_stage)
    items: object = None   # the reward models' training items the refresh mixes in: one list, or
                           # {reward seed: items} when each seed trained on its own annotations


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
    ("final"), or the mean over the points of the last quarter of its updates ("last_quarter",
    update >= 3/4 of the last: where the run ends up, less noisy than one point)."""
    if choose_by == "last_quarter":
        tail = [p[1] for p in curve if p[0] >= 0.75 * curve[-1][0]]
        return sum(tail) / len(tail)
    if choose_by == "final":
        return curve[-1][1]
    raise ValueError(f"unknown choose_by {choose_by!r}; use 'final' or 'last_quarter'")


def run_once(pipeline, name, seed, reward_seed, config, shaping, refresh, preset, stage, progress,
             checkpoint=None, desc=None):
    """One PPO run of method `name` from the SFT policy with PPO seed `seed`, reading reward seed
    `reward_seed`'s models; a stage of progress.json, skipped once finished. Its curve's points
    (every preset["eval_every"] updates): the validation score, with preset["test_curve"] the
    test score beside it (the K sweep reads its thresholds there; nothing is chosen by it), and
    last the over-optimisation measurement on the first preset["overopt_prompts"] validation
    prompts, whose proxy is the run's reward models as they are at that point. checkpoint: where
    its policy waits for the test stage."""
    if stage in progress:
        return
    start, task, tokenizer, splits = time.time(), pipeline.task, pipeline.tokenizer, pipeline.splits
    model = ppo.PolicyWithValue(copy.deepcopy(pipeline.policy), config.detach_value)
    items = pipeline.items[reward_seed] if isinstance(pipeline.items, dict) else pipeline.items
    reward, run_models = method_reward(name, task, tokenizer, splits["train"],
                                       pipeline.reward_models[reward_seed], shaping, refresh, items, seed)
    validation = splits["validation"]
    watch = overoptimisation(name, task, tokenizer, validation[:preset.get("overopt_prompts", 64)],
                             run_models, pipeline.policy, config, seed=1)

    def point(gpt):
        score = primary_score(task, gpt, tokenizer, validation)
        test = (primary_score(task, gpt, tokenizer, splits["test"], "test"),) if preset.get("test_curve") else ()
        return (score, *test, watch(gpt))
    prompts = [tokenizer.prompt(e.prompt) for e in splits["train"]]
    curve, logged, warmup = ppo.train(model, pipeline.policy, prompts, reward, tokenizer.eos_id, tokenizer.pad_id,
                                      config, seed=seed, evaluate=point, eval_every=preset["eval_every"], desc=desc)
    if checkpoint:
        save_checkpoint(checkpoint, model.gpt, tokenizer, config.updates)
    progress.finish(stage, {"curve": curve, "history": logged, "warmup": warmup}, start)


def test_once(pipeline, checkpoint, stage, progress, of, keep=None):
    """One run's test stage: its policy answers the test prompts greedily; keep: (policy file,
    samples file, step) the first seed's run leaves in the folder too."""
    start, tokenizer, device = time.time(), pipeline.tokenizer, next(pipeline.policy.parameters()).device
    gpt = load_checkpoint(checkpoint, device, tokenizer, pipeline.policy.config)[0]
    test, samples = evaluate_policy(pipeline.task, gpt, tokenizer, pipeline.splits["test"])
    if keep:
        save_checkpoint(keep[0], gpt, tokenizer, keep[2])
        atomic_save("".join(json.dumps(s) + "\n" for s in samples), keep[1])
    progress.finish(stage, test, start, of=of)


def ppo_stage(pipeline, sft_results, preset, seeds, compile, out, progress, units=None):
    """Every method of METHODS from the SFT policy, each run a stage of its own for --resume and a
    unit of `units` (experiments/fanout.Units; default: one after another, in this process).
    pipeline.reward_models {reward seed: {name: model}} (reward_stage): the j-th PPO seed reads the
    (j mod R)-th reward seed's models, so that over the runs both the PPO seed and the reward
    model's seed vary (summary.py's intervals average the runs of a reward seed first).
      1. GAE lambda: one run per lambda of preset["lambdas"] at the first seed; the method keeps the
         lambda whose choice_score (preset["choose_by"], "final" by default) is highest (the first
         of equals, in grid order);
      2. the other seeds at that lambda; the first seed's run at it is reused, not run again;
      3. test: the chosen runs, and only those, are evaluated on the test split (with
         preset["test_curve"], every curve point also holds the test score: read by the K sweep,
         never by a choice).
    Each run depends on its method, knob and seeds alone, so the runs of step 1 all start at once;
    the methods' steps 2 and 3 follow in METHODS' order, each once its grid (or its runs) is done.
    --resume with more --seeds adds the new seeds' runs to a finished run. With preset["ppo"]
    ["advantage"] "grpo" the group sizes of preset["groups"] take the lambdas' place (methods[name]
    ["group"]; "lambda" None), in stages and files of their own (grpo/..., ppo_{name}_grpo*.pt).
    Returns (methods, history, grid): methods[name] = {lambda, scores (test, per seed), curves (the
    validation curve per seed), test (the first seed's metrics), tests (every seed's),
    explained_variance(_mc) and warmup (per seed), reward_seeds (the reward seed each run read),
    time_s}, with "sft" (from sft_results) as the starting point; history["<name>/<seed>"] the
    logged statistics per update; grid[name][lambda] the validation score each lambda's run was
    chosen by. Means and intervals over the seeds are experiments/summary.py's."""
    units, task = units or Units(), pipeline.task
    shared = units.share(pipeline)  # under Ray, sent to the cluster once for every run
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

    reward_seeds = list(pipeline.reward_models)
    reads = {seed: reward_seeds[j % len(reward_seeds)] for j, seed in enumerate(seeds)}  # PPO seed -> reward seed
    suffix = lambda seed: "" if reads[seed] == reward_seeds[0] else f"/reward{reads[seed]}"
    stage_of = lambda name, lam, seed: (f"{prefix(name)}ppo/{name}{chosen_tag(preset, METHODS[name][0])}/{knob}{lam}/"
                                        f"{seed}{suffix(seed)}")
    test_of = lambda name, seed: f"{prefix(name)}test/{name}{chosen_tag(preset, METHODS[name][0])}/{seed}{suffix(seed)}"
    checkpoint = lambda name, lam, seed: os.path.join(out, f"ppo_{name}{tag(name)}_{knob}{lam}_seed{seed}.pt")

    def run(name, lam, seed):
        """Submit one PPO run (nothing if it is finished); with GRPO, lam is the group size, and a
        last-token reward is normalised per response."""
        stage = stage_of(name, lam, seed)
        if stage in progress:
            return None
        run_config = replace(config, group=lam, per=config.per if METHODS[name][1] == "every" else "response") \
            if grpo else replace(config, lam=lam)
        desc = f"{variant(name) or 'ppo'} {name} {knob} {lam} seed {seed}"
        return units.submit(units.label(out, stage), run_once, shared, name, seed, reads[seed], run_config, shaping,
                            refresh, preset, stage, progress, checkpoint(name, lam, seed), desc)

    def test(name, lam, seed):
        """Submit the test of a chosen run (nothing if it is tested at this lambda already)."""
        stage = test_of(name, seed)
        stale = stage in progress and not progress.made_of(stage, f"{knob}{lam}")  # the grid changed since
        if stale and not os.path.exists(checkpoint(name, lam, seed)):
            fail(f"{stage} was tested at another {knob} than the {lam} now chosen, and that run's policy is gone: "
                 "resume with the grid it was run with, or use another --out")
        if stage in progress and not stale:
            return None
        keep = (os.path.join(out, f"ppo_{name}{tag(name)}.pt"), os.path.join(out, f"samples_{name}{tag(name)}.jsonl"),
                config.updates) if seed == seeds[0] else None
        return units.submit(units.label(out, stage), test_once, shared, checkpoint(name, lam, seed), stage, progress,
                            f"{knob}{lam}", keep)

    waiting = lambda handles: units.wait([h for h in handles if h is not None])
    grid_runs = {name: [run(name, lam, seeds[0]) for lam in knobs] for name in METHODS}
    grid, chosen, later, tests = {}, {}, {}, {}
    for name in METHODS:
        waiting(grid_runs[name])
        curves = [progress[stage_of(name, lam, seeds[0])]["curve"] for lam in knobs]
        scores = [choice_score(curve, preset.get("choose_by", "final")) for curve in curves]
        grid[name] = dict(zip(knobs, scores))
        chosen[name] = max(knobs, key=lambda candidate: grid[name][candidate])
        later[name] = [run(name, chosen[name], seed) for seed in seeds[1:]]
    for name in METHODS:
        waiting(later[name])
        tests[name] = [test(name, chosen[name], seed) for seed in seeds]
    sft_test = sft_results["test"]
    methods = {"sft": {"scores": [sft_test[task.PRIMARY]], "curves": [[[0, sft_results["validation"][task.PRIMARY]]]],
                       "test": sft_test}}
    history = {}
    for name in METHODS:
        waiting(tests[name])
        lam = chosen[name]
        for leftover in {checkpoint(name, k, seeds[0]) for k in knobs} | {checkpoint(name, lam, s) for s in seeds}:
            if os.path.exists(leftover):  # ppo_{name}.pt keeps the first seed's
                os.remove(leftover)
        runs = [progress[stage_of(name, lam, seed)] for seed in seeds]
        history.update({f"{name}/{seed}": run["history"] for seed, run in zip(seeds, runs)})
        tests_of = [progress[test_of(name, seed)] for seed in seeds]
        scores = [t[task.PRIMARY] for t in tests_of]
        time_s = sum(progress.time(stage_of(name, lam, seed)) + progress.time(test_of(name, seed)) for seed in seeds)
        methods[name] = {"lambda": None if grpo else lam, **({"group": lam} if grpo else {}), "scores": scores,
                         "curves": [run["curve"] for run in runs], "test": tests_of[0], "tests": tests_of,
                         "explained_variance": [run["history"][-1]["explained_variance"] for run in runs],
                         "explained_variance_mc": [run["history"][-1]["explained_variance_mc"] for run in runs],
                         "warmup": [run["warmup"] for run in runs], "reward_seeds": [reads[seed] for seed in seeds],
                         "time_s": time_s}
        print(f"[{task.NAME}] {variant(name) + ' ' if grpo else ''}{name:17s} {knob} {lam:<4} test {task.PRIMARY}, mean over {len(seeds)} seed(s) "
              f"{sum(scores) / len(scores):.3f} ({' '.join(f'{v:.3f}' for v in scores)}), {time_s:.0f}s")
    return methods, history, grid
