"""What each method is given: the first look's rows beside rows that hold the information fixed.

    python -m experiments.information --probe 19 --out runs/information   # the settings alone
    python -m experiments.information --seeds 10 11 12 13 14 15 16 17 --out runs/information \
        --record results/information_facts.json     # the seeds' numbers, for report --from

Every PPO method of the first look is denied the references and starts from an SFT policy that
imitates flawed demonstrations. Rows per seed, at the first look's sizes (text2grad.first_look_config):
  the first look       SFT on the demonstrations, then PPO's methods from it (first_looks.one_seed)
  references           SFT on the clean references: the ceiling that withholding them creates; then
                       PPO's methods from it (do span rewards add anything when no habit is built?)
  expert_iteration     the critic's judgements used without RL, at Text2Grad's critic calls (its
                       annotations: Config.annotated * samples_per_prompt): ROUNDS rounds of K
                       samples per prompt from the current policy; the best of K by the critic's
                       summed score (what oracle_scalar is paid) is kept; fine-tune; repeat
  deleted              one sample per prompt; where every blamed phrase is a whole clause, those
                       clauses are cut and the critic reads the rest again (a second call); answers
                       it then passes are kept; fine-tune once (a cut inside a clause would leave a
                       hole no span can blame: a missing fact is never blamed)
Each row's cost (critic calls, policy samples) and what its test answers hold (gold: passed by the
critic, tokens, and on summarize the name, the amount, the plan). The fine-tuning's learning rate
and steps are chosen on validation at the --probe seed, which no reported row uses; PPO's settings
are the first look's. Each seed's records go to OUT/{row}/seed{N}.json as they finish.
"""
import argparse
import contextlib
import copy
import dataclasses
import glob
import io
import json
import os
import re
import sys
import time

import torch

import guards
import text2grad
from align import find_span
from data import experiment_splits, get_task
from data.tokenizer import Tokenizer, training_texts
from experiments import fanout, records
from experiments.records import header, interval
from experiments.first_looks import mean_sd, one_seed
from experiments.runstate import atomic_save, checked, commit, fail, pick_device, run_to_the_end
from experiments.stats import mean_ci95, sign_test
from model import generate
from sft import MAX_NEW_TOKENS, evaluate, response_ids, train_sft

ROUNDS, K = 2, 4                          # expert iteration: rounds, samples per prompt
GRID = {"lr": (1e-4, 3e-4, 1e-3), "steps": (25, 75)}  # fine-tuning, chosen at the --probe seed
FIRST_LOOK = "text2grad,text2grad_last,oracle_scalar,oracle"


def sft_stage(config):
    """(task, splits, tokenizer, SFT policy) exactly as text2grad.run builds them for config."""
    task = get_task(config.task)
    torch.manual_seed(config.seed)
    splits, demonstrations = experiment_splits(task, dataclasses.asdict(config), config.seed)
    tokenizer = Tokenizer.train(training_texts(task, splits["train"]), config.vocab_size)
    return task, splits, tokenizer, text2grad.sft_policy(config, task, tokenizer, demonstrations)


def sample(policy, tokenizer, examples, config, task, generator):
    """One sampled answer per example, as PPO samples them (temperature 1, the task's minimum
    length): (tokens, mask) of generate, the answers' texts and ids."""
    tokens, _, mask = generate(policy, [tokenizer.prompt(e.prompt) for e in examples],
                               MAX_NEW_TOKENS, tokenizer.eos_id, tokenizer.pad_id,
                               generator=generator, min_new_tokens=min_new_tokens(config, task))
    ids = response_ids(tokenizer, tokens, mask)
    return tokens, mask, [tokenizer.decode(row) for row in ids]


def min_new_tokens(config, task):
    if config.min_new_tokens is None:
        return text2grad.MIN_NEW_TOKENS.get(task.NAME, 0)
    return config.min_new_tokens


def fine_tune(policy, tokenizer, kept, lr, steps, config):
    """A copy of policy trained by SFT on kept [(example, answer)]."""
    tuned = copy.deepcopy(policy)
    examples = [dataclasses.replace(e, demonstration=answer) for e, answer in kept]
    train_sft(tuned, tokenizer, examples, steps, min(config.batch_size, len(examples)), lr,
              config.device, config.seed, desc=None)
    return tuned


def expert_iteration(policy, task, tokenizer, prompts, config, lr, steps):
    """ROUNDS rounds: K samples for each of its prompts, the best of K by the critic's summed
    score kept, the policy fine-tuned on them. Returns (policy, cost)."""
    budget = config.annotated * config.samples_per_prompt  # Text2Grad's critic calls
    per_round = budget // (ROUNDS * K)
    generator = torch.Generator(config.device).manual_seed(config.seed)
    cost = {"critic calls": 0, "policy samples": 0}
    for r in range(ROUNDS):
        examples = [e for e in prompts[r * per_round:(r + 1) * per_round] for _ in range(K)]
        tokens, mask, texts = sample(policy, tokenizer, examples, config, task, generator)
        shaping = guards.Guards(praise=guards.PRAISE[task.NAME])  # as PPO pays oracle_scalar
        pay = text2grad.reward_function("oracle_scalar", task, tokenizer, examples, {}, shaping)
        scores = pay(list(range(len(examples))), tokens, mask).sum(1)  # (per_round * K,)
        best = scores.view(per_round, K).argmax(1)                      # the best of K per prompt
        kept = [(examples[i * K + j], texts[i * K + j]) for i, j in enumerate(best.tolist())]
        policy = fine_tune(policy, tokenizer, kept, lr, steps, config)
        cost["critic calls"] += len(examples)
        cost["policy samples"] += len(examples)
    return policy, cost


def delete_blamed(text, annotation):
    """text with every blamed phrase cut out, when each is a whole clause (between the text's ends
    and , . ! ?), so that what is left still reads as an answer; None when a blamed phrase sits
    inside a clause (a wrong name or amount: its cut would leave a hole no span can blame)."""
    places = [find_span(text, phrase) for phrase in annotation["poor_spans"]]
    if None in places:
        return None
    for start, end in places:
        before, after = text[:start].rstrip(), text[end:].lstrip()
        if (before and before[-1] not in ",.!?") or (after and after[0] not in ",.!?"):
            return None
    cut = "".join(c for i, c in enumerate(text) if not any(s <= i < e for s, e in places))
    cut = re.sub(r"\s+([,.!?])", r"\1", " ".join(cut.split()))  # no space before a mark
    cut = re.sub(r",+(?=[,.!?])", "", cut)                      # no comma left before a mark
    return cut.lstrip(",.!? ")


def deleted(policy, task, tokenizer, prompts, config, lr, steps):
    """One sample per prompt until the critic calls are spent (a blamed answer whose blamed phrases
    are whole clauses costs two: the critique, and the critique of what is left once they are cut);
    the answers the critic passes, cut or not, are kept; the policy fine-tuned on them (left as it
    is if none is). Returns (policy, cost)."""
    budget = config.annotated * config.samples_per_prompt
    generator = torch.Generator(config.device).manual_seed(config.seed)
    cost, kept, at = {"critic calls": 0, "policy samples": 0, "kept": 0, "cut": 0}, [], 0
    while cost["critic calls"] < budget - 1 and at < len(prompts):
        examples = prompts[at:at + 100]
        at += len(examples)
        _, _, texts = sample(policy, tokenizer, examples, config, task, generator)
        cost["policy samples"] += len(examples)
        for e, text in zip(examples, texts):
            if cost["critic calls"] >= budget - 1:
                break
            annotation, cost["critic calls"] = task.critique(e, text), cost["critic calls"] + 1
            if annotation["poor_spans"]:
                text = delete_blamed(text, annotation)
                if not text:  # a blamed phrase inside a clause, or nothing left
                    continue
                cost["critic calls"] += 1
                if task.critique(e, text)["poor_spans"]:
                    continue
                cost["cut"] += 1
            kept.append((e, text))
    cost["kept"] = len(kept)
    return (fine_tune(policy, tokenizer, kept, lr, steps, config) if kept else policy), cost


ROWS = {"expert_iteration": expert_iteration, "deleted": deleted}


def given_rows(records, task_name):
    """{row: ([test score per seed], [gold() per seed], what it was given)} from the seeds' records
    (one_seed_rows), in the table's order: each method from the flawed SFT policy and from the
    references, then the rows without RL."""
    config = text2grad.first_look_config(**records[0]["first_look"]["fields"])
    annotations = config.annotated * config.samples_per_prompt
    rollouts = (config.updates + 1) * config.ppo_batch_size  # and the value head's warm-up batch
    rows = {}  # name -> ([score per seed], [gold() per seed], what it was given)
    for start, label in (("first_look", "demonstrations"), ("references", "references")):
        for method in records[0][start]["table"]:
            judge = text2grad.METHODS.get(method, ("-",))[0]
            given = {"cot": f"{annotations} critic calls, {annotations + rollouts} samples",
                     "critic": f"{rollouts} critic calls, {rollouts} samples"}.get(judge, "-")
            rows[f"{label}: {method}"] = ([r[start]["table"][method]["test"][0] for r in records],
                                          [r[start]["gold"].get(method, {}) for r in records],
                                          given)
    for row in ROWS:
        costs = [r[row]["cost"] for r in records]
        given = (f"{max(c['critic calls'] for c in costs)} critic calls, "
                 f"{max(c['policy samples'] for c in costs)} samples")
        if row == "deleted":
            given += f", kept {min(c['kept'] for c in costs)}-{max(c['kept'] for c in costs)}"
        rows[f"demonstrations: {row}"] = ([r[row]["test"][0] for r in records],
                                          [r[row]["test"][2] for r in records], given)
    return rows


def report(records, task_name):
    """Each row's test score over the seeds (mean, 95% t-interval half-width, sd), what its answers
    hold (gold(), means) and what it was given; then the paired differences over the seeds (one
    seed's data, test split and first-look SFT policy pair the rows)."""
    task, rows = get_task(task_name), given_rows(records, task_name)
    measured = records[0]["expert_iteration"]["test"][2]
    keys = [k for k in ("passed", "name", "amount", "plan", "tokens") if k in measured]
    seeds = ", ".join(str(r["first_look"]["seed"]) for r in records)
    print(f"\n{task_name}, test {task.PRIMARY} over seeds {seeds}: mean ± 95% t half-width (sd); "
          f"then the answers' {', '.join(keys)} (gold, means); what the row was given")
    for name, (scores, golds, given) in rows.items():
        mean, half = mean_ci95(scores)
        held = " ".join(f"{sum(g[k] for g in golds) / len(golds):5.2f}" if all(golds) else "    -"
                        for k in keys)
        print(f"  {name:34s} {mean:.3f} ± {half:.3f} ({mean_sd(scores)[1]:.3f})  {held}  {given}")
    print("\npaired differences over the seeds (uncorrected: read each interval on its own)")
    for a, b in DIFFERENCES:
        values = [x - y for x, y in zip(rows[a][0], rows[b][0])]
        mean, half = mean_ci95(values)
        wins, losses = sum(v > 0 for v in values), sum(v < 0 for v in values)
        print(f"  {a} - {b}".ljust(72) + f"{mean:+.3f} ± {half:.3f}  {wins} of {len(values)} "
              f"positive, sign test p {sign_test(wins, losses):.3f}")


# The differences read, fixed before any seed ran: the ceiling's gap, the rows without RL against
# Text2Grad, and placement with the habits built in and without them.
DIFFERENCES = [("references: sft", "demonstrations: text2grad"),
               ("references: text2grad", "demonstrations: text2grad"),
               ("demonstrations: text2grad", "demonstrations: expert_iteration"),
               ("demonstrations: oracle", "demonstrations: expert_iteration"),
               ("demonstrations: expert_iteration", "demonstrations: sft"),
               ("demonstrations: text2grad", "demonstrations: deleted"),
               ("demonstrations: text2grad", "demonstrations: text2grad_last"),
               ("demonstrations: oracle", "demonstrations: oracle_scalar"),
               ("references: text2grad", "references: text2grad_last"),
               ("references: oracle", "references: oracle_scalar"),
               ("references: text2grad", "references: sft")]


def gold(task, examples, samples, ids):
    """What greedy answers hold, read from the examples' facts (no model): the share the critic
    passes (no blamed span), tokens per answer, and on summarize the shares that name the poster
    and no one else, give the right amount, and say the plan (ROUGE-L alone misses an omission)."""
    share = lambda flags: sum(map(bool, flags)) / len(samples)
    answers = [s["response"] for s in samples]
    out = {"passed": share(not s["poor_spans"] for s in samples),
           "tokens": sum(map(len, ids)) / len(ids)}
    if task.NAME == "summarize":
        facts = [e.facts for e in examples]
        out["name"] = share(set(task.NAME_PATTERN.findall(a)) == {f["name"]}
                            for a, f in zip(answers, facts))
        out["amount"] = share(re.search(rf"\b{f['amount']} {f['unit']}\b", a)
                              for a, f in zip(answers, facts))
        out["plan"] = share(f["action"] in a for a, f in zip(answers, facts))
    return out


def scored(task, policy, tokenizer, examples):
    """(the task's metric, the watched share, gold()) of greedy answers."""
    summary, samples, ids = evaluate(task, policy, tokenizer, examples)
    return summary[task.PRIMARY], summary[task.WATCHED[0]], gold(task, examples, samples, ids)


@contextlib.contextmanager
def seams(test, captured, measured):
    """While text2grad.run runs: its SFT policy kept in captured["stage"], and gold() of each of its
    evaluations of the test split appended to measured (SFT's, then each point of each method's
    curve in turn). The
    seam: run calls sft_policy and evaluate by its module's names."""
    sft_policy, evaluate_split = text2grad.sft_policy, text2grad.evaluate

    def keep(config, task, tokenizer, demonstrations):
        captured["stage"] = (task, tokenizer, sft_policy(config, task, tokenizer, demonstrations))
        return captured["stage"][2]

    def measure(task, model, tokenizer, examples):
        summary, samples, ids = evaluate_split(task, model, tokenizer, examples)
        if [e.prompt for e in examples] == [e.prompt for e in test]:
            measured.append(gold(task, examples, samples, ids))
        return summary, samples, ids

    text2grad.sft_policy, text2grad.evaluate = keep, measure
    try:
        yield
    finally:
        text2grad.sft_policy, text2grad.evaluate = sft_policy, evaluate_split


def probe(seed, out, task_name, device, sizes=None):
    """Each row's (lr, steps) from GRID, by validation at seed (never a reported seed):
    OUT/probe_{row}.json each, or read back from it. Returns {row: {"lr", "steps"}}."""
    config = text2grad.first_look_config(task=task_name, seed=seed, device=device, figure="", **(sizes or {}))
    chosen, stage = {}, None
    for row, learn in ROWS.items():
        path = os.path.join(out, f"probe_{row}.json")
        if not os.path.exists(path):
            if stage is None:
                with contextlib.redirect_stdout(io.StringIO()):
                    stage = sft_stage(config)
            task, splits, tokenizer, policy = stage
            tried = {}
            for lr in GRID["lr"]:
                for steps in GRID["steps"]:
                    tuned, _ = learn(policy, task, tokenizer, splits["train"], config, lr, steps)
                    tried[f"lr {lr} steps {steps}"] = score = scored(
                        task, tuned, tokenizer, splits["validation"])[0]
                    print(f"probe {row} lr {lr} steps {steps}: validation {task.PRIMARY} "
                          f"{score:.3f}", flush=True)
            best = max(tried, key=tried.get).split()  # the first of any tied
            record = {"seed": seed, "task": task_name, "grid": GRID, "validation": tried,
                      "chosen": {"lr": float(best[1]), "steps": int(best[3])}}
            os.makedirs(out, exist_ok=True)
            atomic_save(json.dumps(record, indent=1), path)
        with open(path) as f:
            record = json.load(f)
        if (record["seed"], record["task"]) != (seed, task_name):
            raise ValueError(f"{path} was chosen at {record['task']} seed {record['seed']}, not "
                             f"{task_name} seed {seed}; use another --out")
        chosen[row] = record["chosen"]
    return chosen


def commits_of(done):
    """The commits every row of every seed ran at."""
    return sorted({row["commit"] for rows in done for row in rows.values()})


def one_seed_rows(seed, out, task_name, device, chosen, sizes=None):
    """The four kinds of row at one seed, each record read back if it is there already; sizes:
    Config fields other than the first look's (the tests' tiny ones)."""
    fields = {"task": task_name, "methods": FIRST_LOOK, **(sizes or {})}
    config = text2grad.first_look_config(seed=seed, device=device, figure="", **fields)
    splits, _ = experiment_splits(get_task(task_name), dataclasses.asdict(config), seed)
    records, captured = {}, {}
    for row, extra in (("first_look", {}), ("references", {"sft_on": "references"})):
        folder, stage, measured = os.path.join(out, row), {}, []
        if not os.path.exists(os.path.join(folder, f"seed{seed}_gold.json")):  # stopped before its gold:
            for done in glob.glob(os.path.join(folder, f"seed{seed}.*")):     # the row runs again
                os.remove(done)
        with seams(splits["test"], stage, measured):
            records[row] = one_seed(seed, folder, device, **fields, **extra)
        path = os.path.join(folder, f"seed{seed}_gold.json")
        if measured:  # run now, not read back: SFT's test answers, then each method's curve
            golds, at = {}, 0  # of test points (before its first update, ..., after its last)
            for method, line in records[row]["table"].items():
                at += 1 if method == "sft" else len(line["curve"])
                golds[method] = measured[at - 1]  # the end of the method's curve
            atomic_save(json.dumps(golds), path)
        if row == "first_look":
            captured = stage
        records[row]["gold"] = {}
        if os.path.exists(path):
            with open(path) as f:
                records[row]["gold"] = json.load(f)
    config = text2grad.first_look_config(seed=seed, device=device, figure="", **fields)
    for row, learn in ROWS.items():
        path = os.path.join(out, row, f"seed{seed}.json")
        if not os.path.exists(path):
            start = time.time()
            if "stage" not in captured:  # the first look was read back: build its policy again
                with contextlib.redirect_stdout(io.StringIO()):
                    task, _, tokenizer, policy = sft_stage(config)
                captured["stage"] = (task, tokenizer, policy)
            task, tokenizer, policy = captured["stage"]
            tuned, cost = learn(policy, task, tokenizer, splits["train"], config, **chosen[row])
            test = scored(task, tuned, tokenizer, splits["test"])
            validation = scored(task, tuned, tokenizer, splits["validation"])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            atomic_save(json.dumps({"seed": seed, "seconds": time.time() - start, "cost": cost,
                                    "commit": commit(), "settings": chosen[row], "test": test,
                                    "validation": validation}, indent=1), path)
        with open(path) as f:
            records[row] = json.load(f)
    return records



def tables(record):
    """The rows of experiments.information, each mean ± 95% t half-width over the seeds, with the
    share of answers the critic passes and what the row was given; a placement pair on one line."""
    rows = given_rows(record["seeds"], record["task"])
    passed = lambda golds: f"{sum(g['passed'] for g in golds) / len(golds):.2f}" if all(golds) else "-"
    groups = [(f"{start}: {a}", f"{start}: {b}") if b else (f"{start}: {a}",)
              for start in ("demonstrations", "references")
              for a, b in (("sft", None), ("text2grad", "text2grad_last"), ("oracle", "oracle_scalar"))]
    groups[3:3] = [(f"demonstrations: {name}",) for name in ROWS]  # the rows without RL, from the flawed SFT
    lines = header(["row", "score", "passed", "given"])
    for group in groups:
        if all(name in rows for name in group):
            start = group[0].split(": ")[0]
            lines.append(records.row([f"{start}: " + " / ".join(f"`{name.split(': ')[1]}`" for name in group),
                              " / ".join(interval(rows[name][0]) for name in group),
                              " / ".join(passed(rows[name][1]) for name in group), rows[group[0]][2]]))
    metric = get_task(record["task"]).PRIMARY
    return [(f"What each method is given ({record['task']}, test {metric}, {len(record['seeds'])} seeds): ± the "
             f"95% t half-width over seeds; passed: the share of test answers the critic passes (mean over "
             f"seeds); given: the critic calls and samples a row read, the most over seeds", lines)]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.information",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="*", default=[], help="the seeds to run or read")
    parser.add_argument("--probe", type=int, default=19,
                        help="the seed whose validation split chooses the fine-tuning settings")
    parser.add_argument("--out", default="runs/information", help="where the records go")
    parser.add_argument("--task", default="facts", choices=text2grad.TASKS, help="the task")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, mps, ...")
    parser.add_argument("--record", default="", help="write the seeds' numbers here (results/NAME.json), "
                        "which python -m experiments.report --from reads")
    fanout.add_flags(parser)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    fanout.check_flags(parser, args)
    device = pick_device(args.device)
    if args.record and not records.writable(args.record):
        fail(f"--record {args.record}: not in a folder this run can write to")
    os.makedirs(args.out, exist_ok=True)
    args.out = os.path.abspath(args.out)  # where a Ray worker writes, wherever it was started
    if args.probe in args.seeds:
        parser.error(f"--probe {args.probe} is among --seeds: the settings would be chosen on a "
                     "reported seed")
    units = fanout.Units(args.ray, out=args.out, cpus=args.unit_cpus, gpus=args.unit_gpus, device=device)
    with units:  # the probe, then each seed's rows: a unit each, every seed's reading the probe's choice
        chosen = units.wait([units.submit(f"probe {args.probe}", checked, probe, args.probe, args.out, args.task,
                                          device)])[0]
        print(f"chosen on validation at seed {args.probe}: {chosen}", flush=True)
        done = units.wait([units.submit(f"seed {seed}", checked, one_seed_rows, seed, args.out, args.task, device,
                                        chosen) for seed in args.seeds])
        if args.ray:
            units.report()
    if done:
        report(done, args.task)
    if args.record:
        record = {"kind": "information", "task": args.task,
                  "command": "python -m experiments.information " + " ".join(argv),
                  "probe": {"seed": args.probe, "chosen": chosen},
                  "commits": commits_of(done), "units": units.record(),
                  "machines": sorted({r["first_look"]["machine"] for r in done}), "seeds": done}
        checked(records.write, args.record, record)
        print(f"written: {args.record}; its table: python -m experiments.report --from {args.record}")


if __name__ == "__main__":
    run_to_the_end(main, "runs/information", "text2grad information", "again (what is written is read back)")
