"""data/annotations.py: annotation files read line by line; data/replies.py: an annotator's
reply; experiments/convert.py: the authors' stored shapes. Written by hand here, converted into
our JSONL."""
import json
import re

import pytest

from data import annotations, replies
from experiments import convert

REPLY = ('Here is my evaluation of the summary.\n```json\n{"textual_feedback": "The amount is wrong.",\n'
         ' "good_spans": ["landlord"], "poor_spans": ["24 dollars"]}\n```\nI hope this helps.')
SLF5K = {"post": "I am Maya (24). My landlord raised the rent by 300 dollars.",
         "generated_summary": "Maya's landlord raised the rent by 24 dollars.", "critique": REPLY}
OURS = {"prompt": SLF5K["post"], "response": SLF5K["generated_summary"], "textual_feedback": "The amount is wrong.",
        "good_spans": ["landlord"], "poor_spans": ["24 dollars"]}


def read(path):
    return [json.loads(line) for line in open(path)]


def test_slf5k_list_and_object_by_id(tmp_path):
    (tmp_path / "list.json").write_text(json.dumps([SLF5K, {**SLF5K, "post": "Second post."}]))
    (tmp_path / "by_id.json").write_text(json.dumps({"t3_abc": SLF5K}))
    assert convert.convert_authors_file(tmp_path / "list.json", tmp_path / "a.jsonl") == (2, 0)
    assert read(tmp_path / "a.jsonl") == [OURS, {**OURS, "prompt": "Second post."}]
    assert convert.convert_authors_file(tmp_path / "by_id.json", tmp_path / "b.jsonl") == (1, 0)
    assert read(tmp_path / "b.jsonl") == [OURS]
    # what the experiment then reads: every record passes the checks of --annotations
    assert len(annotations.read_jsonl(tmp_path / "a.jsonl", check=annotations.check_annotation)) == 2


def test_ultrafeedback_with_chat_messages_as_json_lines(tmp_path):
    record = {"prompt": "Name a prime.", "critique": "Correct and short.",
              "response": [{"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "7 is prime."}],
              "annotations": {"good_spans": ["7 is prime"], "poor_spans": []}}
    (tmp_path / "uf.jsonl").write_text(json.dumps(record) + "\n\n" + json.dumps({**record, "response": "2."}) + "\n")
    assert convert.convert_authors_file(tmp_path / "uf.jsonl", tmp_path / "out.jsonl") == (2, 0)
    first, second = read(tmp_path / "out.jsonl")
    assert first == {"prompt": "Name a prime.", "response": "7 is prime.", "textual_feedback": "Correct and short.",
                     "good_spans": ["7 is prime"], "poor_spans": []}
    assert second["response"] == "2."


def test_one_record_as_json_lines(tmp_path):
    (tmp_path / "one.jsonl").write_text(json.dumps(SLF5K) + "\n")
    assert convert.convert_authors_file(tmp_path / "one.jsonl", tmp_path / "out.jsonl") == (1, 0)
    assert read(tmp_path / "out.jsonl") == [OURS]


def test_a_target_that_cannot_be_written_is_one_line(tmp_path):
    (tmp_path / "in.json").write_text(json.dumps([SLF5K]))
    with pytest.raises(ValueError, match="is a folder"):
        convert.convert_authors_file(tmp_path / "in.json", tmp_path)
    with pytest.raises(ValueError, match="cannot write .*no_folder"):
        convert.convert_authors_file(tmp_path / "in.json", tmp_path / "no_folder" / "out.jsonl")


def test_a_failed_reply_names_its_record_or_is_skipped(tmp_path):
    failed = {**SLF5K, "critique": "Error generating critique"}
    (tmp_path / "in.json").write_text(json.dumps([SLF5K, failed, SLF5K]))
    with pytest.raises(ValueError, match=r"in.json, record 2: annotation is not valid JSON"):
        convert.convert_authors_file(tmp_path / "in.json", tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists() and not list(tmp_path.glob("*.tmp"))
    assert convert.convert_authors_file(tmp_path / "in.json", tmp_path / "out.jsonl", skip_bad=True) == (2, 1)


@pytest.mark.parametrize("content, message", [
    ("[1, 2", "neither one JSON document nor JSON lines (line 1"),
    ("42", "expected a list of records or an object of them, got int"),
    (json.dumps([{"post": "x", "critique": REPLY}]), "record 1: needs a prompt"),
    (json.dumps([{"post": "x", "generated_summary": "y"}]), "record 1: needs \"critique\""),
])
def test_unusable_files_are_one_line(tmp_path, content, message):
    (tmp_path / "in.json").write_text(content)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        convert.convert_authors_file(tmp_path / "in.json", tmp_path / "out.jsonl")


def test_command_line_never_overwrites(tmp_path, capsys):
    (tmp_path / "in.json").write_text(json.dumps([SLF5K]))
    (tmp_path / "annotations_train.jsonl").write_text("kept\n")
    with pytest.raises(SystemExit) as exit_info:
        convert.main([str(tmp_path / "in.json"), str(tmp_path / "annotations_train.jsonl")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("text2grad: error: ") and "already exists" in err and err.count("\n") == 1
    assert (tmp_path / "annotations_train.jsonl").read_text() == "kept\n"
    convert.main([str(tmp_path / "in.json"), str(tmp_path / "new.jsonl")])
    assert capsys.readouterr().out.strip() == f"{tmp_path / 'new.jsonl'}: 1 converted, 0 skipped"


def test_bad_annotation_files_name_the_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"prompt": "p", "response": "r"}\n\n{"prompt": "p"}\n')
    with pytest.raises(ValueError, match=r"a.jsonl, line 3: a record needs"):
        annotations.read_jsonl(path)
    path.write_text('{"prompt": "p", "response": "r"}\n{"prompt": \n')
    with pytest.raises(ValueError, match=r"line 2: not valid JSON"):
        annotations.read_jsonl(path)


# ------------------------------------------------------------------------------------------------
# parse_reply (data/replies.py): an annotator's reply read into our shape


def test_dict_input_fills_missing_span_lists():
    assert annotations.annotation_fields({"textual_feedback": "fine", "good_spans": ["a"]}) == {
        "textual_feedback": "fine", "good_spans": ["a"], "poor_spans": []}


@pytest.mark.parametrize("raw", [
    '```json\n{"textual_feedback": "ok", "good_spans": ["a"]}\n```',
    'Here is my annotation:\n```\n{"textual_feedback": "ok", "good_spans": ["a"]}\n```\nDone.',
    '```JSON {"textual_feedback": "ok", "good_spans": ["a"]} ```',
])
def test_fenced_json(raw):
    assert replies.parse_reply(raw) == {"textual_feedback": "ok", "good_spans": ["a"], "poor_spans": []}


def test_trailing_commas_removed_but_not_inside_strings():
    raw = '{"textual_feedback": "the list [1,] is wrong", "good_spans": ["a", "b",], "poor_spans": [],}'
    assert replies.parse_reply(raw) == {
        "textual_feedback": "the list [1,] is wrong", "good_spans": ["a", "b"], "poor_spans": []}


def test_line_comments_removed_but_url_in_string_survives():
    raw = (
        '{\n'
        '  // critique first\n'
        '  "textual_feedback": "see http://example.org/a \\"quoted\\" // not a comment",\n'
        '  "poor_spans": ["x >= 0"], // the comma before this comment is trailing\n'
        '}'
    )
    assert replies.parse_reply(raw) == {
        "textual_feedback": 'see http://example.org/a "quoted" // not a comment',
        "good_spans": [],
        "poor_spans": ["x >= 0"],
    }


def test_word_score_list_groups_runs_of_one_sign():
    raw = {"textual_feedback": "ok", "word_score_list": [
        ["The", 0], ["cat", 1], ["sat", 2.5], ["on", -1], ["the", -0.5], ["mat", 0], ["today", 1]]}
    assert replies.parse_reply(raw) == {
        "textual_feedback": "ok", "good_spans": ["cat sat", "today"], "poor_spans": ["on the"]}


def test_word_score_list_with_sign_words():
    raw = ('{"textual_feedback": "ok", "word_score_list": '
           '[["a", "positive"], ["b", "negative"], ["c", "neutral"], ["d", "Negative"], ["e", "negative"]]}')
    assert replies.parse_reply(raw) == {"textual_feedback": "ok", "good_spans": ["a"], "poor_spans": ["b", "d e"]}


# Every shape DETAILS.md promises for a bare (unfenced) object: alone, prose before, prose after, both.
@pytest.mark.parametrize("raw", [
    '{"textual_feedback": "Fine.", "good_spans": ["moving out"], "poor_spans": []}',
    'My annotation:\n{"textual_feedback": "Fine.", "good_spans": ["moving out"], "poor_spans": []}',
    '{"textual_feedback": "Fine.", "good_spans": ["moving out"], "poor_spans": []}\nHope this helps.',
    'Sure. {"textual_feedback": "Fine.", "good_spans": ["moving out"]}\nHope this {helps}.',
    'A {braced} aside first. {"textual_feedback": "Fine.", "good_spans": ["moving out"]} Then "more".',
])
def test_bare_object_with_or_without_prose(raw):
    assert replies.parse_reply(raw) == {"textual_feedback": "Fine.", "good_spans": ["moving out"], "poor_spans": []}


def test_unfenced_object_with_prose_around_it():
    # what annotators write when nobody fences their JSON: a preamble, the object, a sign-off
    raw = ('Here is my review of the summary:\n{"textual_feedback": "Good {overall}, a \\"quoted\\" slip.",\n'
           ' "good_spans": ["the cat"], "poor_spans": ["sat",],}\nLet me know if you need more. }')
    assert replies.parse_reply(raw) == {"textual_feedback": 'Good {overall}, a "quoted" slip.',
                                     "good_spans": ["the cat"], "poor_spans": ["sat"]}


def test_object_in_prose_that_never_closes_is_one_clear_error():
    with pytest.raises(ValueError, match="not valid JSON"):
        replies.parse_reply('My verdict: {"textual_feedback": "ok", "good_spans": ["a"]')


@pytest.mark.parametrize("raw, message", [
    ('{"textual_feedback": "ok", ', "not valid JSON"),
    ("no json here at all", "not valid JSON"),
    ("{'textual_feedback': 'single quotes'}", "not valid JSON"),
    ("[1, 2]", "must be a JSON object, got list"),
    (42, "must be a JSON object, got int"),
    ('{"good_spans": []}', "textual_feedback is missing"),
    ('{"textual_feedback": 3}', "textual_feedback is missing or not a string"),
    ('{"textual_feedback": "x", "good_spans": "a"}', "good_spans must be a list of strings"),
    ('{"textual_feedback": "x", "poor_spans": [1]}', "poor_spans must be a list of strings"),
    ('{"textual_feedback": "x", "word_score_list": [["a", "great"]]}', "word score must be"),
    ('{"textual_feedback": "x", "word_score_list": [["a", true]]}', "word score must be"),
    ('{"textual_feedback": "x", "word_score_list": [["a"]]}', "entry must be [word, score]"),
    ('{"textual_feedback": "x", "word_score_list": [], "good_spans": []}', "both word_score_list"),
])
def test_unusable_annotations_raise_one_clear_error(raw, message):
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        replies.parse_reply(raw)
    assert "\n" not in str(info.value)
