"""Bad input ends a run with one line naming the file, the line or record and what to do, exit
status 2, no traceback, and no output written; a few unusable records are skipped and counted."""
import json

import pytest

import reward
import text2grad
from data import annotations, get_task, make_splits
from data.tokenizer import Tokenizer, training_texts
from experiments import checkpoint, protocol, reward_grid
from model import GPT, GPTConfig

GOOD = {"prompt": "I am Yuki (34). My landlord raised my rent by 270 dollars.", "response": "Yuki's rent rose.",
        "textual_feedback": "Fine.", "good_spans": ["Yuki"], "poor_spans": []}


def write_annotations(folder, train_lines):
    """annotations_{split}.jsonl with train_lines (raw bytes or records) in train, good records elsewhere."""
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "validation", "test"):
        lines = train_lines if split == "train" else [GOOD] * 3
        data = b"".join((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines)
        (folder / f"annotations_{split}.jsonl").write_bytes(data)


def run_fails(capsys, argv, main=protocol.main):
    """Run main(argv) (the lab's protocol by default), expect exit status 2; return the error text (its last line)."""
    with pytest.raises(SystemExit) as exit:
        main(argv)
    err = capsys.readouterr().err
    assert exit.value.code == 2 and "Traceback" not in err
    assert err.count("\n") == 1 or main is text2grad.main, err  # argparse's usage line comes first there
    return err


@pytest.mark.parametrize("line, message", [
    (b'{"prompt": "p", "response": ', "line 2: not valid JSON"),
    (json.dumps({"prompt": "p", "response": "r", "good_spans": [], "poor_spans": []}).encode(),
     "line 2: textual_feedback is missing"),
    (json.dumps({**GOOD, "poor_spans": "rent"}).encode(), "line 2: poor_spans must be a list of strings"),
    (json.dumps({**GOOD, "response": "  "}).encode(), "line 2: the response is empty"),
    (json.dumps({**GOOD, "response": "caf"}).encode()[:-2] + b'\xe9"}', "line 2: not UTF-8 text (byte 0xe9"),
    (json.dumps({"prompt": "p"}).encode(), 'line 2: a record needs string fields "prompt" and "response"'),
    (json.dumps({**GOOD, "word_score_list": [["Yuki", 1]]}).encode(), "line 2: word_score_list is not read here"),
])
def test_malformed_annotation_file(tmp_path, capsys, line, message):
    write_annotations(tmp_path / "ann", [GOOD, line, GOOD])
    out = tmp_path / "out"
    err = run_fails(capsys, ["--annotations", str(tmp_path / "ann"), "--preset", "tiny", "--out", str(out)])
    assert f"annotations_train.jsonl, {message}" in err
    assert not out.exists()  # checked before any work: nothing written


def test_every_tasks_annotations_are_checked_before_the_first_task_runs(tmp_path, capsys):
    for task in ("summarize", "code"):
        write_annotations(tmp_path / "ann" / task, [GOOD] * 3)
    write_annotations(tmp_path / "ann" / "qa", [GOOD, b"{broken"])
    out = tmp_path / "out"
    err = run_fails(capsys, ["--annotations", str(tmp_path / "ann"), "--task", "all", "--preset", "tiny",
                             "--device", "cpu", "--out", str(out)])
    assert f"{tmp_path / 'ann' / 'qa' / 'annotations_train.jsonl'}, line 2: not valid JSON" in err
    assert not out.exists()  # summarize did not start


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "0"], "--seeds must be at least 1"),
    (["--reward-seeds", "0"], "--reward-seeds must be at least 1"),
    (["--resume"], "nothing to resume"),
    (["--annotations", "/no/such/folder"], "cannot read /no/such/folder/annotations_train.jsonl"),
])
def test_impossible_flags(tmp_path, capsys, argv, message):
    out = tmp_path / "never"
    err = run_fails(capsys, ["--preset", "tiny", "--out", str(out)] + argv)
    assert message in err and not out.exists()


def test_resume_with_other_flags_is_refused(tmp_path, capsys):
    out = tmp_path / "run" / "summarize"
    out.mkdir(parents=True)
    (out / "progress.json").write_text(json.dumps({"identity": {"task": "summarize", "preset": "small", "seed": 0,
                                                                "seeds": 1, "annotations": None}, "done": {}}))
    err = run_fails(capsys, ["--preset", "tiny", "--seeds", "1", "--out", str(tmp_path / "run"), "--resume"])
    assert "was started with preset 'small', not 'tiny'" in err


@pytest.fixture(scope="module")
def tokenizer():
    task = get_task("summarize")
    return Tokenizer.train(training_texts(task, make_splits(task, {"train": 40, "validation": 5, "test": 5}, 0)["train"]), 400)


def test_checkpoint_of_another_size_or_tokenizer(tmp_path, capsys, tokenizer):
    config = GPTConfig(vocab_size=tokenizer.vocab_size, block_size=64, n_layer=1, n_head=2, n_embd=16)
    path = str(tmp_path / "sft.pt")
    checkpoint.save_checkpoint(path, GPT(config), tokenizer, step=5)
    model, _, step = checkpoint.load_checkpoint(path, tokenizer=tokenizer, config=config)
    assert step == 5
    bigger = GPTConfig(**{**config.__dict__, "n_layer": 2})
    with pytest.raises(SystemExit):
        checkpoint.load_checkpoint(path, tokenizer=tokenizer, config=bigger)
    assert "holds a model of another size: n_layer 1 (expected 2)" in capsys.readouterr().err
    other = Tokenizer.train(["completely different text " * 20], 300)
    with pytest.raises(SystemExit):
        checkpoint.load_checkpoint(path, tokenizer=other, config=config)
    assert "was made with another tokenizer" in capsys.readouterr().err
    (tmp_path / "broken.pt").write_bytes(open(path, "rb").read()[:100])  # a save cut short
    with pytest.raises(SystemExit):
        checkpoint.load_checkpoint(str(tmp_path / "broken.pt"))
    assert "is not a checkpoint this code wrote" in capsys.readouterr().err


def test_records_quoting_absent_spans_are_skipped_and_counted(tmp_path, capsys, tokenizer):
    bad = {**GOOD, "poor_spans": ["a phrase that is nowhere"]}
    records = [dict(GOOD, _source=f"f, line {i}") for i in range(19)] + [dict(bad, _source="f, line 20")]
    kept, items, stats = reward.encode_records(tokenizer, records, block_size=256)
    assert len(kept) == len(items) == 19 and stats["skipped"] == 1 and stats["unaligned"] == 1
    assert all(r["poor_spans"] == [] for r in kept)
    protocol.check_skipped(stats, "f")  # 5%: reported, the run goes on
    assert "1 of 20 records (5.0%) quote a span that is not in their response; skipped" in capsys.readouterr().out
    _, _, stats = reward.encode_records(tokenizer, records[:8] + [records[-1]] * 2, block_size=256)
    with pytest.raises(ValueError, match="more than the 10% allowed"):
        protocol.check_skipped(stats, "f")  # 20%: the run stops with this line


def test_record_longer_than_the_block_names_its_line(tokenizer):
    long = dict(GOOD, response="Yuki's rent rose. " * 40, _source="annotations_train.jsonl, line 7")
    with pytest.raises(ValueError, match="annotations_train.jsonl, line 7: prompt and response take"):
        reward.encode_records(tokenizer, [long], block_size=64)


def test_a_runs_own_annotations_may_hold_empty_responses(tmp_path, capsys):
    write_annotations(tmp_path, [GOOD, {**GOOD, "response": ""}])
    assert len(annotations.read_annotations(str(tmp_path), check=None)["train"]) == 2  # --resume reads these
    with pytest.raises(ValueError, match="line 2: the response is empty"):
        annotations.read_annotations(str(tmp_path))  # a user's file: the empty response is an error


def test_too_few_training_records(tmp_path, capsys):
    write_annotations(tmp_path / "ann", [GOOD] * 3)
    err = run_fails(capsys, ["--annotations", str(tmp_path / "ann"), "--preset", "tiny", "--seeds", "1",
                             "--out", str(tmp_path / "out")])
    assert "annotations_train.jsonl: 3 usable records, fewer than the 16 this preset needs" in err


def test_a_study_of_a_run_needs_a_finished_run(tmp_path, capsys):
    err = run_fails(capsys, ["--out", str(tmp_path)], reward_grid.main)
    assert "no readable progress.json" in err
    (tmp_path / "progress.json").write_text(json.dumps({"identity": {"task": "summarize", "preset": "tiny", "seed": 0,
                                                                     "annotations": None}, "done": {}}))
    err = run_fails(capsys, ["--out", str(tmp_path)], reward_grid.main)
    assert "has not finished its reward models (sft.pt, reward_cot.pt" in err


@pytest.mark.parametrize("argv, message", [
    (["--task", "chess"], "argument --task: invalid choice: 'chess'"),
    (["--methods", "text2grad,magic"], "--methods text2grad,magic: magic is not a method"),
    (["--device", "tpu7"], "--device tpu7 is not a device torch can use here"),
    (["--device", "cuda:99"], "--device cuda:99 is not a device torch can use here"),
    (["--updates", "many"], "argument --updates: invalid int value: 'many'"),
    (["--figure", "/no/such/folder/look.svg"], "--figure /no/such/folder/look.svg: not in a folder this run can write to"),
    # each field's range (flags.out_of_range): counts at least 1, a seed at least 0, rates above 0
    (["--updates", "0"], "--updates 0: must be at least 1"),
    (["--ppo-batch-size", "0"], "--ppo-batch-size 0: must be at least 1"),
    (["--test", "-3"], "--test -3: must be at least 1"),
    (["--seed", "-1"], "--seed -1: must be at least 0"),
    (["--vocab-size", "100"], "--vocab-size 100: must be at least 262"),
    (["--min-new-tokens", "-1"], "--min-new-tokens -1: must be at least 0 and at most 63"),
    (["--min-new-tokens", "64"], "--min-new-tokens 64: must be at least 0 and at most 63"),
    (["--lam", "2"], "--lam 2.0: must be from 0 to 1"),
    (["--lam", "nan"], "--lam nan: must be from 0 to 1"),
    (["--ppo-lr", "0"], "--ppo-lr 0.0: must be above 0 and finite"),
    (["--lr", "inf"], "--lr inf: must be above 0 and finite"),
    (["--reward-lr=-1e-3"], "--reward-lr -0.001: must be above 0 and finite"),
    # fields that must fit together (text2grad.refused)
    (["--n-embd", "7"], "--n-embd 7 must divide by --n-head 4"),
    (["--minibatch-size", "32"], "--minibatch-size 32 is more than --ppo-batch-size"),
    (["--advantage", "grpo", "--group", "5"], "--advantage grpo needs --group of at least 2 dividing"),
    (["--advantage", "grpo", "--group", "1"], "--advantage grpo needs --group of at least 2 dividing"),
    (["--train", "8"], "--ppo-batch-size 16 is more than --train 8"),
])
def test_the_first_look_refuses_bad_flags_in_one_line(capsys, monkeypatch, argv, message):
    monkeypatch.setattr(text2grad, "run", None)  # refused before any work: nothing may run
    assert message in run_fails(capsys, argv, text2grad.main)


def test_a_prompt_past_the_block_is_one_line_before_any_training(capsys, monkeypatch):
    # only the data can tell (the prompts' lengths in tokens); refused before pretraining starts
    monkeypatch.setattr(text2grad, "sft_policy", None)
    err = run_fails(capsys, ["--block-size", "80", "--figure", "", "--demonstrations", "200",
                             "--train", "50", "--annotated", "50"], text2grad.main)
    assert "text2grad.py: error: block_size 80 is shorter than the longest prompt" in err
    assert "usage" not in err and err.count("\n") == 1
