"""The paper's other baseline: the critique in the prompt, the weights untouched (Reflexion, Self-Refine).

    python -m experiments.revise --out runs/code [--seeds 3] [--rounds 2]

On a finished run (`python -m experiments.protocol`): a revising policy, the run's SFT policy trained
further (a second SFT stage, the same fit) on turns

    <|bos|> prompt <|response|> answer <|critique|> critique <|response|> revision <|eos|>

built from the run's annotated training records: the SFT policy's own sampled answer, the critic's
critique of it, and the task's reference as the revision (a ceiling: no RL arm sees a reference). With
--target best the revision is instead an answer of the policy's own judged better by the critic
(best_of_own_turns): like for like in training, on the critic calls Text2Grad's reward model was
trained on (its refresh adds 96 a run at the experiment's size). At inference the critic's critique
of code states what the reference computes, so "after a critique by the critic" reads more than any
RL arm does at test time, with either target. The loss falls on the revision and its
EOS only. At inference it answers, reads a critique of that answer and answers again: the critique
reaches it through the prompt, every time, and never through its weights. Rows, greedy, on the
run's test split (the same prompts as every other row):
  revise_first           the revising policy's first answer, before any critique
  revise_critic_R        after R rounds, each with the critic's critique of the latest answer: feedback
                         an ideal annotator would give at inference, this family's upper bound
  revise_learned_R       the same with the critique Text2Grad's reward model writes (reward_cot.pt,
                         and the run's other reward-model seeds, as trained: PPO's runs read a copy
                         refreshed on their own samples, which is not kept): what a deployed system could do
  text2grad              Text2Grad's policy, one pass, no critique (its test scores from results.json)
  text2grad_first_seed   the same, the run's first PPO seed (the one whose policy is kept), answered here
  text2grad_revised_*    those answers revised once by the revising policy, with either critique: is it
                         still worth a round?
Each row's cost per answer: model calls (policy passes and reward-model passes) and tokens
generated. The revising stage's steps are chosen on validation (revise_critic_1, the first seed);
the test split is read once, at the end. Revising seed j is paired with PPO seed j and reads its
reward-model seed (and, from a run with --own-annotations, trains on that seed's draw): the runs that share a
reward model are grouped as everywhere (experiments/summary.py). Writes DIR/revise.json (or
revise_best.json); the run's own files are not changed.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

from data import experiment_splits
from align import align
from data.annotations import read_annotations, read_jsonl
from experiments import stats
from experiments.run_folder import read_json, read_run
from experiments.runstate import atomic_save, checked, fail, pick_device
from experiments.checkpoint import load_checkpoint
from model import generate
from sft import MAX_NEW_TOKENS, fit, response_ids


def context(tokenizer, prompt, answer, critique, block_size):
    """What the revising policy continues: <|bos|> prompt <|response|> answer <|critique|> critique
    <|response|> (answer: token ids; critique: text). The critique is cut at its end so that the
    context and MAX_NEW_TOKENS fit the block; ValueError when prompt and answer alone do not."""
    head, tail = [*tokenizer.prompt(prompt), *answer, tokenizer.critique_id], [tokenizer.response_id]
    room = block_size - MAX_NEW_TOKENS - len(head) - len(tail)
    if room < 0:
        raise ValueError(f"prompt and answer take {len(head) + 1} tokens: no room to revise in block_size {block_size}")
    return head + tokenizer.encode(critique)[:room] + tail


def revision_batch(tokenizer, turns, block_size, device):
    """Turns (prompt, answer ids, critique, revision text) -> right-padded inputs, targets and loss_mask
    (B, T): the loss falls on the revision's tokens and its EOS, every other position is context."""
    rows = [(c, [*tokenizer.encode(r), tokenizer.eos_id]) for c, r in
            ((context(tokenizer, p, a, c, block_size), r) for p, a, c, r in turns)]
    T = max(len(c) + len(r) for c, r in rows) - 1
    inputs = torch.full((len(rows), T), tokenizer.pad_id, dtype=torch.long)
    targets, loss_mask = inputs.clone(), torch.zeros(len(rows), T)
    for i, (c, r) in enumerate(rows):
        row = c + r
        inputs[i, :len(row) - 1], targets[i, :len(row) - 1] = torch.tensor(row[:-1]), torch.tensor(row[1:])
        loss_mask[i, len(c) - 1:len(row) - 1] = 1  # position len(c) - 1 (the <|response|>) predicts the first
    return inputs.to(device), targets.to(device), loss_mask.to(device)


def revision_turns(task, tokenizer, records, examples):
    """The revising stage's data: each annotated record (the SFT policy's sampled answer and the
    critic's critique) with its example's reference as the revision."""
    by_prompt = {e.prompt: e for e in examples}
    return [(r["prompt"], tokenizer.encode(r["response"]), r["textual_feedback"], by_prompt[r["prompt"]].reference)
            for r in records if r["prompt"] in by_prompt]


def verdict(tokenizer, record):
    """The critic's verdict on an annotated answer, larger better: fewer blamed phrases first, then
    the summed delta of its tokens (praised minus blamed)."""
    delta, _ = align(record["response"], tokenizer.offsets(tokenizer.encode(record["response"])), record)
    return -len(record["poor_spans"]), sum(delta)


def best_of_own_turns(tokenizer, records):
    """The like-for-like data from the annotated records (the SFT policy's own sampled answers to
    each prompt, the critic's critique of each): an answer the critic passes (nothing blamed) is its
    own revision; a blamed answer's revision is the best answer to its prompt by the critic's verdict
    when that is strictly better (the first of equals), and a blamed answer with none better makes
    no turn. No reference is read, and the critic calls are the records' own: the ones Text2Grad's
    reward model trained on."""
    by_prompt = {}
    for r in records:
        by_prompt.setdefault(r["prompt"], []).append(r)
    turns = []
    for prompt, answers in by_prompt.items():
        verdicts = [verdict(tokenizer, r) for r in answers]
        best = max(range(len(answers)), key=lambda j: (verdicts[j], -j))  # the first of equals
        for r, v in zip(answers, verdicts):
            if not r["poor_spans"] or verdicts[best] > v:
                target = r if not r["poor_spans"] else answers[best]
                turns.append((prompt, tokenizer.encode(r["response"]), r["textual_feedback"], target["response"]))
    return turns


def draw_of(folder, reward_seed, first_seed, own):
    """The annotated training records reward-model seed reward_seed trained on: with own (the run's
    --own-annotations) its draw, protocol.draw_stage's draw{seed}_train.jsonl (a missing one ends the
    command: its model read no other); else, and for the first seed, the first draw."""
    if own and reward_seed != first_seed:
        path = os.path.join(folder, f"draw{reward_seed}_train.jsonl")
        if not os.path.exists(path):
            fail(f"{path} is missing: reward-model seed {reward_seed} trained on it; resume the run to draw it again")
        return checked(read_jsonl, path, check=None)
    return checked(read_annotations, folder, check=None, splits=("train",))["train"]


def train_reviser(model, tokenizer, turns, steps, batch_size, lr, device, seed):
    """sft.fit on revision turns (5% warm-up), batches drawn at random (all of them, when there are
    fewer turns than a batch); in place."""
    def batch_loss(step, rng):
        inputs, targets, loss_mask = revision_batch(tokenizer, rng.sample(turns, min(batch_size, len(turns))),
                                                    model.config.block_size, device)
        _, logits = model(inputs)
        nll = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
        loss = (nll * loss_mask.flatten()).sum() / loss_mask.sum()
        return loss, {"loss": loss.detach()}
    fit(model, batch_loss, steps, lr, warmup=max(1, steps // 20), desc=f"revising stage, {steps} steps", seed=seed)


def answer(model, tokenizer, contexts, batch_size=50):
    """Greedy responses to contexts (token-id lists): (token-id lists, EOS dropped; the tokens generated
    per response, its EOS counted when it wrote one)."""
    ids, generated = [], []
    for i in range(0, len(contexts), batch_size):
        tokens, _, mask = generate(model, contexts[i:i + batch_size], MAX_NEW_TOKENS, tokenizer.eos_id,
                                   tokenizer.pad_id, greedy=True)
        ids += response_ids(tokenizer, tokens, mask)
        generated += mask.sum(1).tolist()
    return ids, generated


def critiques(task, tokenizer, examples, ids, critic, reward_model):
    """The critique of each answer (token ids) and the tokens its writer generated: the task's critic
    (an annotator: no model call, no token) or Text2Grad's reward model (one call, its critique's tokens)."""
    texts = [tokenizer.decode(i) for i in ids]
    if critic:
        return [task.critique(e, t)["textual_feedback"] for e, t in zip(examples, texts)], 0
    written, _ = reward_model.predict(tokenizer, [e.prompt for e in examples], ids)
    return written, sum(len(tokenizer.encode(c)) + 1 for c in written)  # re-encoded, and its closing <|span|>


def score(task, tokenizer, examples, ids):
    """The task's primary metric of each answer, as every other row is scored (sft.evaluate's metric)."""
    return [task.metrics(e, tokenizer.decode(i))[task.PRIMARY] for e, i in zip(examples, ids)]


def revise_rows(task, model, tokenizer, examples, first, rounds, reward_model, prefix="revise",
                sources=("critic", "learned")):
    """From first answers (token ids), `rounds` rounds of critique and revision with each critique
    source. Returns {row: {"scores": per example, "calls": per answer, "tokens": per answer}}; the first
    answers' own cost is the caller's to add."""
    rows = {}
    for source in sources:
        ids, calls, tokens = first, 0, 0
        for r in range(1, rounds + 1):
            written, critique_tokens = critiques(task, tokenizer, examples, ids, source == "critic", reward_model)
            contexts = [context(tokenizer, e.prompt, i, c, model.config.block_size)
                        for e, i, c in zip(examples, ids, written)]
            ids, generated = answer(model, tokenizer, contexts)
            calls += 1 + (source == "learned")
            tokens += (critique_tokens + sum(generated)) / len(examples)
            rows[f"{prefix}_{source}_{r}"] = {"scores": score(task, tokenizer, examples, ids), "calls": calls,
                                              "tokens": tokens}
    return rows


def main(argv=None):
    """python -m experiments.revise --out DIR: the prompt-only baseline on a finished run."""
    parser = argparse.ArgumentParser(prog="python -m experiments.revise", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/code", help="a finished run's folder (default: runs/code)")
    parser.add_argument("--seeds", type=int, help="revising stages, seeds --seed, --seed+1, ...; seed j reads "
                        "reward-model seed j's Text2Grad model and pairs with PPO seed j (default: the run's PPO seeds)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of critique and revision (default 2)")
    parser.add_argument("--steps", type=int, nargs="+", help="the revising stage's steps to choose from on "
                        "validation (default: the run's preset's revise_steps, (150, 300, 600) at the experiment's size)")
    parser.add_argument("--target", choices=["reference", "best"], default="reference", help="the revision the "
                        "revising stage learns: the task's reference (default; a ceiling: no RL arm sees it), or "
                        "best: from the annotated records seed j's reward model read, an answer the critic passes "
                        "kept, a blamed one revised to a strictly better answer of the policy's own to that prompt, "
                        "none otherwise (like for like: the same critic calls; revise_best.json)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, ...")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if (args.seeds is not None and args.seeds < 1) or args.rounds < 1 or min(args.steps or [1]) < 1:
        parser.error("--seeds, --rounds and --steps must be at least 1")
    run = read_run(args.out, pick_device(args.device))
    device, tokenizer, task, preset = next(run.policy.parameters()).device, run.tokenizer, run.task, run.preset
    args.steps = args.steps or list(preset["revise_steps"])
    if not os.path.exists(os.path.join(args.out, "results.json")):
        fail(f"{args.out} has no results.json: finish the run first (python -m experiments.protocol --resume)")
    results = checked(read_json, os.path.join(args.out, "results.json"))
    t2g = results["methods"]["text2grad"]
    seeds = len(t2g["scores"]) if args.seeds is None else args.seeds
    if len(t2g["scores"]) < seeds:
        fail(f"--seeds {seeds}: the run has {len(t2g['scores'])} PPO seeds to pair with")
    demonstrations = experiment_splits(task, preset, run.seed)[1]

    made = {}

    def turns_of(j):
        """Revising seed j's turns and the critic calls behind them: from the records reward-model
        seed j read (its own draw, with --own-annotations)."""
        if j not in made:
            records = draw_of(args.out, t2g["reward_seeds"][j], run.seed, results.get("own_annotations"))
            turns = revision_turns(task, tokenizer, records, demonstrations) if args.target == "reference" else \
                best_of_own_turns(tokenizer, records)
            if not turns:
                fail(f"{args.out}: no revision turn from its annotated training records (--target {args.target})")
            made[j] = turns, len(records)
        return made[j]

    def reviser(steps, j):
        model = load_checkpoint(os.path.join(args.out, "sft.pt"), device, tokenizer)[0]
        train_reviser(model, tokenizer, turns_of(j)[0], steps, preset["batch_size"], preset["lr"], device,
                      run.seed + j)
        return model

    # the revising stage's steps, chosen on validation after one round with the critic (the first seed)
    validation, chosen, steps, best = run.splits["validation"], {}, None, None
    for s in dict.fromkeys(args.steps):  # each once, in the order given
        model = reviser(s, 0)
        first, _ = answer(model, tokenizer, [tokenizer.prompt(e.prompt) for e in validation])
        rows = checked(revise_rows, task, model, tokenizer, validation, first, 1, None, sources=("critic",))
        chosen[s] = sum(rows["revise_critic_1"]["scores"]) / len(validation)
        if steps is None or chosen[s] > chosen[steps]:  # the first of equals
            steps, best = s, model
        print(f"[{task.NAME}] revising stage, {s} steps: validation {task.PRIMARY} after one round with "
              f"the critic's critique {chosen[s]:.3f}")

    test, out = run.splits["test"], {"target": args.target, "steps": steps, "validation": chosen, "seeds": [],
                                     "validation_critic_calls": len(validation) * len(chosen)}  # one critique each
    for j in range(seeds):
        model, reward_seed = (best if j == 0 else reviser(steps, j)), t2g["reward_seeds"][j]
        reward_model = load_checkpoint(os.path.join(args.out, "reward_cot.pt" if reward_seed == run.seed else
                                                    f"reward_cot_seed{reward_seed}.pt"), device, tokenizer)[0]
        first, generated = answer(model, tokenizer, [tokenizer.prompt(e.prompt) for e in test])
        rows = {"revise_first": with_cost(score(task, tokenizer, test, first), generated, {})}
        rows.update({name: with_cost(row["scores"], generated, row) for name, row in
                     checked(revise_rows, task, model, tokenizer, test, first, args.rounds, reward_model).items()})
        if j == 0:  # Text2Grad's answers (its first PPO seed, whose policy the run keeps), revised once
            kept = load_checkpoint(os.path.join(args.out, "ppo_text2grad.pt"), device, tokenizer)[0]
            once, generated = answer(kept, tokenizer, [tokenizer.prompt(e.prompt) for e in test])
            rows["text2grad_first_seed"] = with_cost(score(task, tokenizer, test, once), generated, {})
            rows.update({name: with_cost(row["scores"], generated, row) for name, row in checked(
                revise_rows, task, model, tokenizer, test, once, 1, reward_model, "text2grad_revised").items()})
        turns, calls = turns_of(j)
        out["seeds"].append({"seed": run.seed + j, "reward_seed": reward_seed, "critic_calls": calls,
                             "turns": len(turns), "kept_as_they_are": sum(tokenizer.decode(a) == r for _, a, _, r in turns),
                             "rows": rows})
    out["sft"], out["text2grad"] = results["sft"]["test"][task.PRIMARY], {
        "scores": t2g["scores"][:seeds], "reward_seeds": t2g["reward_seeds"][:seeds],
        "tokens": sum(t["length"] + 1 for t in t2g["tests"][:seeds]) / seeds}  # test, one pass, its EOS counted
    name = "revise.json" if args.target == "reference" else "revise_best.json"
    atomic_save(json.dumps(out, indent=2), os.path.join(args.out, name))
    print_table(task, out)
    print(f"-> {os.path.join(args.out, name)}")


def with_cost(scores, generated, row):
    """A row's mean score and its cost per answer: the first answer's call and tokens, and the rounds'."""
    return {"score": sum(scores) / len(scores), "calls": 1 + row.get("calls", 0),
            "tokens": sum(generated) / len(generated) + row.get("tokens", 0)}


def print_table(task, out):
    """Each row's test score (mean over the revising seeds, 95% interval), its cost per answer (means
    over the seeds), and its difference from Text2Grad's one pass paired by seed (revising seed j
    against PPO seed j; the seeds that read one reward model averaged first, as summary.py does)."""
    seeds, t2g = out["seeds"], out["text2grad"]
    interval = lambda values: "{:6.3f} ± {:.3f}".format(*stats.mean_ci95(values)) if len(values) > 1 else \
        f"{values[0]:6.3f}  (1 seed)"
    print(f"\n{task.NAME}: test {task.PRIMARY}, revising stage of {out['steps']} steps, {len(seeds)} seed(s); "
          f"SFT {out['sft']:.3f}")
    print(f"{'row':34s} {'score':>16s} {'calls':>5s} {'tokens':>6s}  {'minus text2grad (paired)':>24s}")
    print(f"{'text2grad (one pass, no critique)':34s} {interval(t2g['scores']):>16s} {1:5d} {t2g['tokens']:6.1f}")
    for name in seeds[0]["rows"]:
        runs = [s for s in seeds if name in s["rows"]]
        values = [s["rows"][name]["score"] for s in runs]
        calls, tokens = (sum(s["rows"][name][k] for s in runs) / len(runs) for k in ("calls", "tokens"))
        d = stats.paired_difference(values, t2g["scores"][:len(values)], [s["reward_seed"] for s in runs])
        print(f"{name:34s} {interval(values):>16s} {calls:5.0f} {tokens:6.1f}  "
              + stats.difference_text(d))


if __name__ == "__main__":
    main()
