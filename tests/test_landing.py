"""landing.py against a hand-worked batch and an fp64 recompute; the first look's flags and figure."""
import copy
import re

import pytest
import torch

import flags
import landing
import ppo
import text2grad
from align import align
from data import get_task, make_splits
from data.tokenizer import Tokenizer, training_texts
from model import GPT, GPTConfig


def test_agreement_by_hand():
    # two answers; the last column of the first is its EOS (not a response token), the second has
    # two tokens. Blamed: positions 0 and 2 of the first, 1 of the second; praised: 1 of the first.
    change = torch.tensor([[-0.2, 0.1, -0.3, 0.4], [0.05, -0.05, 0.0, 0.0]])
    delta = torch.tensor([[-1.0, 1.0, -1.0, 0.0], [0.0, -1.0, 0.0, 0.0]])
    text = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    numbers = landing.landed({"change": change, "delta": delta, "text": text})
    # the way asked: blamed falls of 0.2, 0.3, 0.05 and the praised rise of 0.1; the neutral 0.05
    # counts in the movement only: 0.2 + 0.1 + 0.3 + 0.05 + 0.05
    assert numbers["agreement"] == pytest.approx(0.65 / 0.70)
    # an even push: the first answer's deltas net -1 over 3 tokens, the second's -1 over 2
    assert numbers["even"] == pytest.approx((1 + 1) / 5) and numbers["answers"] == 2
    assert numbers["blamed_change"] == pytest.approx((-0.2 - 0.3 - 0.05) / 3)
    assert numbers["praised_change"] == pytest.approx(0.1)
    assert numbers["others_change"] == pytest.approx(0.05)
    # a praised token falling counts against the critique (the landing share ignored it)
    fallen = change.clone()
    fallen[0, 1] = -0.1
    assert landing.agreement(fallen, delta, text) == pytest.approx((0.2 - 0.1 + 0.3 + 0.05) / 0.7)
    assert landing.agreement(-change, delta, text) == pytest.approx(-0.65 / 0.70)
    assert landing.agreement(torch.zeros(2, 4), delta, text) == 0.0  # nothing moved: 0


def test_the_finding_is_said_from_the_holds():
    contrasts = text2grad.CONTRASTS
    held = {"text2grad": 3, "text2grad_last": 5, "oracle": 4, "oracle_scalar": 4}
    assert landing.finding(held, contrasts) == (
        "Span rewards held 90% of the gap 2 updates sooner with the learned judge (3 against 5) "
        "and at the same update with the critic (4 against 4).")
    held.update(oracle=6, oracle_scalar=5)
    assert "1 update later with the critic (6 against 5)" in landing.finding(held, contrasts)
    assert landing.finding({"oracle": 3}, contrasts) == ""  # no contrast ran: nothing to say


def test_first_update_measures_the_change_of_log_pi_and_the_critics_blame():
    task = get_task("summarize")
    examples = make_splits(task, {"train": 60, "validation": 1, "test": 1}, seed=0)["train"]
    tokenizer = Tokenizer.train(training_texts(task, examples), 300)
    torch.manual_seed(0)
    policy = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=192, n_layer=1, n_head=2,
                           n_embd=16)).eval()
    config = ppo.PPOConfig(batch_size=6, minibatch_size=3, lr=1e-2, max_new_tokens=12,
                           value_warmup_steps=0)
    model = ppo.PolicyWithValue(copy.deepcopy(policy))
    batch = ppo.rollout(model, policy, [tokenizer.prompt(e.prompt) for e in examples[:6]],
                        tokenizer.eos_id, tokenizer.pad_id, config, torch.Generator().manual_seed(0))
    scores = text2grad.reward_function("oracle", task, tokenizer, examples, {})(range(6), batch["tokens"],
                                                                                 batch["mask"])
    ppo.ppo_iteration(model, model.optimizer(config), batch, scores, config, torch.Generator().manual_seed(0))
    first = landing.first_update(task, tokenizer, examples[:6], batch, model, 1.0)
    # the change: an fp64 log-softmax of the updated policy over each whole sequence, minus pi_old
    with torch.no_grad():
        logits = model.gpt(batch["ids"], batch["attention_mask"])[1].double()
    start, N = batch["last_prompt"], batch["mask"].shape[1]
    after = torch.log_softmax(logits[:, start:start + N], -1).gather(-1, batch["tokens"][..., None])[..., 0]
    expected = (after - batch["logprobs"].double()) * batch["mask"]
    torch.testing.assert_close(first["change"].double(), expected, atol=1e-5, rtol=0)
    assert first["change"].abs().sum() > 0  # the update moved something
    for i, (example, row) in enumerate(zip(examples, batch["tokens"].tolist())):
        n = int(first["text"][i].sum())
        ids = row[:n]  # the response tokens, the EOS left out
        assert tokenizer.eos_id not in ids and "".join(first["pieces"][i]) == tokenizer.decode(ids)
        text = tokenizer.decode(ids)
        delta = align(text, tokenizer.offsets(ids), task.critique(example, text))[0]
        assert first["delta"][i, :n].tolist() == delta and not first["delta"][i, n:].any()


def test_every_flag_has_its_help_line_and_choices(capsys):
    helps = flags.field_help(text2grad.Config)
    assert set(helps) == {f for f in text2grad.Config.__dataclass_fields__}
    assert all(len(h) > 10 for h in helps.values())
    assert helps["min_new_tokens"].endswith("0: answers may stop before a fact")  # a continued comment
    with pytest.raises(SystemExit):
        text2grad.main(["--help"])
    printed = " ".join(capsys.readouterr().out.split())
    assert "--task {facts,summarize,code,qa}" in printed and "--advantage {gae,grpo}" in printed
    assert "(default: 2000; summarize, code, qa: 4000)" in printed  # --train: each task's size
    squeezed = "".join(printed.split())  # argparse wraps lines, even at hyphens
    for name, text in helps.items():
        assert "".join(text.split()) in squeezed, name


def test_the_figure_draws_a_method_outside_the_2x2():
    # Things to try: a method with a judge the colours do not list (the no-critique ablation)
    methods = {"text2grad": ("cot", "every"), "text2grad_no_cot": ("no_cot", "every")}
    change = torch.tensor([[-0.5, 0.2, 0.0]])
    first = {m: {"change": change, "delta": torch.tensor([[-1.0, 1.0, 0.0]]),
                 "text": torch.tensor([[1.0, 1.0, 0.0]]), "pieces": [["Lena", "'s"]]} for m in methods}
    table = {m: {"curve": [(0, 0.5, 0.5, 0.0), (1, 0.6, 0.6, 0.0)]} for m in methods}
    table["sft"] = {"test": (0.5, 0.0)}
    config = text2grad.Config(figure="")

    class Task:
        NAME, PRIMARY = "summarize", "rougeL"
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/look.svg"
        landing.draw(path, table, first, Task, config, methods)
        svg = open(path).read()
    assert svg.count("<polyline") == 4 and ">text2grad_no_cot</text>" in svg
    assert re.findall(r'rgba\(214,39,40,0\.800\)', svg)  # the fall of 0.5 on 'Lena', full strength


def test_the_figure_marks_the_line_and_where_each_method_holds(tmp_path):
    # SFT at 0.2: the line at 0.2 + 0.9 * 0.8 = 0.92. Over 4 updates "text2grad" holds from update
    # 2 (0.95, 1.0, 1.0); "oracle_scalar" dips below at update 4 and never holds.
    methods = {"text2grad": ("cot", "every"), "oracle_scalar": ("critic", "last")}
    curves = {"text2grad": [0.2, 0.5, 0.95, 1.0, 1.0], "oracle_scalar": [0.2, 0.6, 0.93, 0.95, 0.9]}
    table = {m: {"curve": [(u, v, v, 0.0) for u, v in enumerate(c)]} for m, c in curves.items()}
    table["sft"] = {"test": (0.2, 0.0)}
    first = {m: {"change": torch.tensor([[-0.5, 0.2, 0.0]]), "delta": torch.tensor([[-1.0, 1.0, 0.0]]),
                 "text": torch.tensor([[1.0, 1.0, 1.0]]), "pieces": [["Ann", " Oslo", "."]]} for m in methods}
    config = text2grad.Config(figure="", ppo_batch_size=16, ppo_lr=1e-4)

    class Task:
        NAME, PRIMARY = "facts", "sites_right"
    landing.draw(str(tmp_path / "f.svg"), table, first, Task, config, methods)
    svg = (tmp_path / "f.svg").read_text()
    # x: 70 + 400 u / 4; y: 250 - 210 (v - 0.2) / 0.8, so the line sits at 250 - 210 * 0.9 = 61
    assert '<line x1="70" x2="470" y1="61" y2="61"' in svg
    assert svg.count("<circle") == 1 and '<circle cx="270" cy="53" r="4"' in svg  # (2, 0.95): 250 - 210 * 0.75 / 0.8
    assert ">text2grad: holds from update 2</text>" in svg and ">oracle_scalar: never holds</text>" in svg
    assert ">90%</text>" in svg and "one draw" in svg and "batch 16, lr 0.0001" in svg
    # each row beside its agreement and an even push's: change -0.5 on the blamed, +0.2 on the
    # praised, 0 on the neutral token: all 0.7 of the movement the way asked; the deltas net 0: 0
    assert svg.count("agreement 1.00 over the batch (an even push: 0.00)") == 2


def test_the_first_look_says_where_it_ran(capsys):
    table = {"sft": {"lambda": None, "curve": [(0, 0.2, 0.2, 0.0)], "test": (0.2, 0.0)}}
    config = text2grad.Config(device="cpu")

    class Task:
        NAME, PRIMARY = "facts", "sites_right"
    landing.report(table, {}, Task, config, text2grad.METHODS, text2grad.CONTRASTS)
    assert f"facts, seed 0 (cpu, float32, {torch.get_num_threads()} CPU threads)" in capsys.readouterr().out


def test_summarize_watches_the_answers_that_stop_before_the_plan():
    task = get_task("summarize")
    example = make_splits(task, {"train": 1, "validation": 1, "test": 1}, seed=0)["test"][0]
    plan = example.facts["action"]
    assert task.metrics(example, example.reference)["no_plan"] == 0.0
    cut = example.reference[:example.reference.index(plan)]
    assert task.metrics(example, cut)["no_plan"] == 1.0
    assert task.WATCHED[0] == "no_plan"


def test_updates_to_hold_by_hand():
    # SFT at 0.2: 90% of the way to 1 is 0.92. The curve reaches it at update 2, falls below at
    # update 3, and from update 4 on stays at or above it: 4. Never held: the last update plus one.
    curve = [(0, 0.2), (1, 0.5), (2, 0.95), (3, 0.9), (4, 0.93), (5, 1.0)]
    assert landing.updates_to_hold(curve, 0.2) == 4
    assert landing.updates_to_hold(curve[:4], 0.2) == 4  # ends below at update 3: never, 3 + 1
    assert landing.updates_to_hold(curve, 0.2, hold=0.5) == 2  # 0.6: from update 2 on
    assert landing.updates_to_hold([(0, 0.2), (2, 0.4), (4, 0.99)], 0.2) == 4  # a point every 2


def test_facts_is_the_first_looks_default_and_the_other_tasks_keep_their_sizes():
    assert text2grad.Config().task == "facts" and text2grad.first_look_config().task == "facts"
    summarize = text2grad.first_look_config("summarize", seed=3, updates=5)
    assert (summarize.seed, summarize.updates, summarize.ppo_lr, summarize.pretrain_steps) == (3, 5, 5e-5, 50)
    assert text2grad.first_look_config("facts", updates=5).ppo_lr == text2grad.Config().ppo_lr
    assert all(set(sizes) <= set(text2grad.Config.__dataclass_fields__) for sizes in text2grad.SIZES.values())


def test_the_finding_counts_seeds_and_takes_the_geometric_mean_of_ratios():
    from experiments.first_looks import finding
    seeds = []
    for holds, ends, shares in (((2, 6), (1.0, 0.9), (0.5, 0.4)), ((4, 4), (0.9, 1.0), (0.5, 0.6)),
                                ((3, 12), (1.0, 1.0), (0.6, 0.5))):
        row = {}
        for method, hold, end, share in zip(("oracle", "oracle_scalar"), holds, ends, shares):
            row[method] = {"hold": hold, "test": end, "agreement": share}
        seeds.append(row)
    found = finding(seeds)["placement, critic"]
    assert (found["sooner"], found["later"], found["seeds"]) == (2, 0, 3)
    assert found["geometric_mean_ratio"] == pytest.approx((3 * 1 * 4) ** (1 / 3))
    assert found["end"][0] == pytest.approx((0.1 - 0.1 + 0.0) / 3) and found["end_positive"] == 1
    assert found["agreement_positive"] == 2 and "placement, learned" not in finding(seeds)
