"""experiments/information.py: the rows that hold the information fixed spend the critic calls they
say, keep what they say, and start from the first look's own SFT policy."""
import random

import pytest
import torch

import sft
import text2grad
from data import get_task
from experiments import information
from sft import respond

TINY = dict(task="summarize", train=64, annotated=32, demonstrations=320, validation=8, test=8, vocab_size=400,
            pretrain_steps=3, sft_steps=5, batch_size=8, reward_steps=2, updates=1,
            ppo_batch_size=8, minibatch_size=8, eval_every=1, n_layer=1, n_head=2, n_embd=32,
            block_size=512, figure="", device="cpu")


def test_delete_blamed_cuts_whole_clauses_and_refuses_a_hole_inside_one():
    text = "Mia needs 300 dollars to fix the car, and she feels bad."
    assert information.delete_blamed(text, {"poor_spans": ["and she feels bad"]}) == \
        "Mia needs 300 dollars to fix the car."
    two = "Omar needs 5 dollars, since he is 40, and he feels bad."
    assert information.delete_blamed(two, {"poor_spans": ["since he is 40", "and he feels bad"]}) \
        == "Omar needs 5 dollars."
    assert information.delete_blamed("Side note. Mia needs 3 dollars.", {"poor_spans": [
        "Side note"]}) == "Mia needs 3 dollars."
    for inside in (["Mia"], ["300 dollars"], ["and she feels bad", "Mia"], ["not there"]):
        assert information.delete_blamed(text, {"poor_spans": inside}) is None


def test_gold_reads_the_facts_of_each_answer():
    task = get_task("summarize")
    example = next(e for e in task.make_examples(20, seed=0) if e.facts["friend"])
    f = example.facts
    right = example.reference
    samples = [{"response": answer, "poor_spans": poor} for answer, poor in (
        (right, []),
        (right.replace(f["name"], f["friend"]), [f["friend"]]),  # the friend named instead
        (right.replace(f" {f['amount']} ", f" {f['amount']}0 "), ["x"]),  # a wrong amount
        (right.replace(f["action"], "something"), []))]  # the plan left out
    measured = information.gold(task, [example] * 4, samples, [[1, 2], [1], [1, 2, 3], [1, 2]])
    assert right.count(f["name"]) and f"{f['amount']} {f['unit']}" in right and f["action"] in right
    assert measured == {"passed": 0.5, "tokens": 2.0, "name": 0.75, "amount": 0.75, "plan": 0.75}


def stage(seed=3):
    config = text2grad.Config(seed=seed, **TINY)
    task, splits, tokenizer, policy = information.sft_stage(config)
    return config, task, splits, tokenizer, policy


class Built(Exception):
    """Stops text2grad.run once its SFT policy is built."""


def test_the_rows_without_rl_start_from_the_first_looks_own_sft_policy(monkeypatch):
    captured = {}
    original = text2grad.sft_policy

    def keep(*arguments):
        captured["policy"] = original(*arguments)
        raise Built

    monkeypatch.setattr(text2grad, "sft_policy", keep)
    with pytest.raises(Built):
        text2grad.run(text2grad.Config(seed=3, methods="oracle", **TINY))
    monkeypatch.undo()
    rebuilt = stage(seed=3)[-1]
    for a, b in zip(captured["policy"].state_dict().values(), rebuilt.state_dict().values()):
        assert torch.equal(a, b)


def test_expert_iteration_keeps_the_best_of_k_and_spends_the_annotations_calls(monkeypatch):
    config, task, splits, tokenizer, policy = stage()
    calls, kept_answers = [], []
    critique = task.critique
    monkeypatch.setattr(task, "critique", lambda e, r: calls.append(r) or critique(e, r))

    def sample(policy, tokenizer, examples, config, task, generator):
        # K answers per prompt: the flawed demonstration three times, the reference once (second)
        texts = [e.reference if i % information.K == 1 else e.demonstration
                 for i, e in enumerate(examples)]
        rows = [tokenizer.encode(t) + [tokenizer.eos_id] for t in texts]
        width = max(map(len, rows))
        tokens = torch.tensor([r + [tokenizer.pad_id] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        return tokens, mask, texts

    def fine_tune(policy, tokenizer, kept, lr, steps, config):
        kept_answers.append(kept)
        return policy

    monkeypatch.setattr(information, "sample", sample)
    monkeypatch.setattr(information, "fine_tune", fine_tune)
    prompts = [e for e in splits["train"] if e.flaws]  # a flawed demonstration scores lower
    _, cost = information.expert_iteration(policy, task, tokenizer, prompts, config, 1e-4, 1)
    assert cost["critic calls"] == len(calls) == config.annotated * config.samples_per_prompt
    assert len(kept_answers) == information.ROUNDS
    for kept in kept_answers:
        assert len(kept) == config.annotated // (information.ROUNDS * information.K)
        assert all(answer == e.reference for e, answer in kept)


def test_deleted_keeps_only_what_the_critic_passes_within_the_budget(monkeypatch):
    config, task, splits, tokenizer, policy = stage()
    calls, kept_answers = [], []
    critique = task.critique
    monkeypatch.setattr(task, "critique", lambda e, r: calls.append(r) or critique(e, r))
    monkeypatch.setattr(information, "fine_tune",
                        lambda policy, tokenizer, kept, *rest: kept_answers.extend(kept) or policy)
    _, cost = information.deleted(policy, task, tokenizer, splits["train"], config, 1e-4, 1)
    assert cost["critic calls"] == len(calls) <= config.annotated * config.samples_per_prompt
    assert cost["kept"] == len(kept_answers)
    for e, answer in kept_answers:
        assert not critique(e, answer)["poor_spans"]



def test_sft_on_references_imitates_the_references_and_by_default_the_demonstrations(monkeypatch):
    config, task, splits, tokenizer, _ = stage()
    flawed = next(e for e in splits["train"] if e.flaws and e.demonstration != e.reference)
    read = []  # (desc, what one call of train_sft reads of the flawed example)

    def train_sft(model, tokenizer, examples, *rest, document=None, desc="sft"):
        document = document or (lambda e, rng: [(e.prompt, e.demonstration)])  # train_sft's own
        read.append((desc, document(flawed, random.Random(0))[0]))

    monkeypatch.setattr(sft, "train_sft", train_sft)
    for sft_on, answer in (("demonstrations", flawed.demonstration),
                           ("references", flawed.reference)):
        read.clear()
        sft.sft_policy(text2grad.Config(sft_on=sft_on, **TINY), task, tokenizer, [flawed])
        assert [desc for desc, _ in read] == ["pretraining", "sft"]
        assert read[1][1] == (flawed.prompt, answer)


def test_rows_sample_as_the_policy_answers_a_prompt():
    config, task, splits, tokenizer, policy = stage()
    config.min_new_tokens = 0  # respond() has no minimum length
    examples = splits["validation"]
    _, _, texts = information.sample(policy, tokenizer, examples, config, task,
                                     torch.Generator().manual_seed(5))
    answers, _ = respond(policy, tokenizer, [e.prompt for e in examples], greedy=False,
                         generator=torch.Generator().manual_seed(5), desc=None)
    assert texts == answers


def test_the_seams_keep_run_s_sft_policy_and_measure_its_test_answers_only():
    config = text2grad.Config(seed=3, methods="oracle", **TINY)
    task = get_task(config.task)
    splits, _ = information.experiment_splits(task, information.dataclasses.asdict(config), 3)
    captured, measured = {}, []
    with information.seams(splits["test"], captured, measured):
        table, _ = text2grad.run(config)
    assert text2grad.evaluate is information.evaluate  # put back
    assert list(table) == ["sft", "oracle"] and len(measured) == 1 + len(table["oracle"]["curve"])
    _, tokenizer, policy = captured["stage"]
    summary, samples, ids = information.evaluate(task, policy, tokenizer, splits["test"])
    assert measured[0] == information.gold(task, splits["test"], samples, ids)
    assert table["sft"]["test"] == (summary["rougeL"], summary["no_plan"])


def test_a_records_commits_are_every_rows():
    from experiments.information import commits_of
    done = [{"first_look": {"commit": "a1"}, "references": {"commit": "b2+changes"}, "deleted": {"commit": "a1"}},
            {"first_look": {"commit": "a1"}, "references": {"commit": "a1"}, "deleted": {"commit": "c3"}}]
    assert commits_of(done) == ["a1", "b2+changes", "c3"]


def test_an_unwritable_record_is_refused_before_any_run(monkeypatch, capsys):
    monkeypatch.setattr(information, "probe", None)  # nothing may run: the probe is the first work
    with pytest.raises(SystemExit) as stop:
        information.main(["--record", "/no/such/folder/information.json", "--seeds", "10"])
    assert stop.value.code == 2
    assert "--record /no/such/folder/information.json: not in a folder" in capsys.readouterr().err
