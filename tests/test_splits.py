import pytest
"""Held-out splits are new problems, not new names: no test or validation program (code) or passage
(qa) is also a training one under other names, checked here by a renaming of its own."""
from data import codegen, make_splits, minilang, qa

SIZES = {"train": 3000, "validation": 100, "test": 100}


def program(example):
    """The reference with its two parameters, read off the prompt "Write f(a, b) ...", put back to x
    and y, token by token (minilang's tokens, not held_out_key's regular expression)."""
    a, b = example.prompt[len("Write f("):].split(")")[0].split(", ")
    names = {a: "x", b: "y"}
    return " ".join(names.get(t.text, t.text) for t in minilang.tokenize(example.reference))


def passage(example):
    return example.prompt[:example.prompt.index("Question:")].strip()


@pytest.mark.slow
def test_code_test_programs_are_new_up_to_renaming():
    splits = make_splits(codegen, SIZES, seed=0)
    assert [len(splits[s]) for s in ("train", "validation", "test")] == [3000, 100, 100]
    train = {program(e) for e in splits["train"]}
    assert not any(program(e) in train for e in splits["test"] + splits["validation"])
    # the same draw kept apart by prompt alone shares about a third of its test programs with training
    stream = codegen.make_examples(3000, seed=2)
    programs = [program(t) for t in stream]
    assert sum(program(e) in set(programs) for e in codegen.make_examples(100, seed=0)) > 25
    assert any(e.prompt != t.prompt and programs[i] == programs[j]
               for i, e in enumerate(stream[:50]) for j, t in enumerate(stream))


def test_qa_test_passages_are_new():
    splits = make_splits(qa, SIZES, seed=0)
    train = {passage(e) for e in splits["train"]}
    assert not any(passage(e) in train for e in splits["test"] + splits["validation"])


@pytest.mark.slow
def test_a_split_is_the_first_new_examples_of_its_stream():
    # what is dropped is replaced by the next example of the same seed's stream, so a task with
    # nothing dropped (summarize: its key is the prompt) keeps exactly the examples it had
    from data import summarize
    splits = make_splits(summarize, {"train": 200, "validation": 20, "test": 20}, seed=3)
    assert [e.prompt for e in splits["test"]] == [e.prompt for e in summarize.make_examples(20, seed=3000)]
    code = make_splits(codegen, SIZES, seed=0)
    held = {program(e) for e in code["test"] + code["validation"]}
    expected = [e for e in codegen.make_examples(6000, seed=2) if program(e) not in held][:3000]
    assert [e.prompt for e in code["train"]] == [e.prompt for e in expected]
