"""Annotated data: the files the reward models learn from, read and checked.

One JSONL record per (prompt, response):
    {"prompt": str, "response": str, "textual_feedback": str, "good_spans": [str], "poor_spans": [str]}
the paper's annotation shape plus the text it annotates. A run writes its critic's annotations in
this shape (annotate); swap in your own (an LLM's, say) with `python -m experiments.protocol
--annotations DIR`, and the token labels are re-derived by align.py when reward.py encodes them.

    annotate(task, examples, responses)   the task's critic reads each response -> records
    read_annotations(folder)              {split: records} from folder/annotations_{split}.jsonl,
                                          every line checked, bad input as one line (ValueError)
    annotation_fields(record)             the annotation of a record, checked

The authors' stored shapes (SLF5K, UltraFeedback: an LLM's whole reply, fenced JSON and all) are
converted into this one by the lab: python -m experiments.convert THEIRS.json DIR/annotations_train.jsonl
"""
import json
import os

from data import SPLITS


def annotate(task, examples, responses):
    """Records in the annotation shape: the task's critic reads each (prompt, response)."""
    return [{"prompt": e.prompt, "response": r, **task.critique(e, r)} for e, r in zip(examples, responses)]


def annotation_fields(record):
    """{"textual_feedback", "good_spans", "poor_spans"} of a record (a missing span list is empty);
    ValueError, one line, when a field has the wrong type."""
    if not isinstance(record, dict):
        raise ValueError(f"annotation must be a JSON object, got {type(record).__name__}")
    if "word_score_list" in record:  # SLF5K's scores per word: spans only after conversion
        raise ValueError("word_score_list is not read here; convert the file first (python -m experiments.convert)")
    feedback = record.get("textual_feedback")
    if not isinstance(feedback, str):
        raise ValueError("textual_feedback is missing or not a string")
    spans = {}
    for key in ("good_spans", "poor_spans"):
        value = record.get(key, [])
        if not (isinstance(value, list) and all(isinstance(s, str) for s in value)):
            raise ValueError(f"{key} must be a list of strings, got {value!r}")
        spans[key] = list(value)
    return {"textual_feedback": feedback, **spans}


def read_jsonl(path, check=None):
    """Records of a JSONL file, each tagged with "_source": "path, line n" for error messages. A line
    that is not UTF-8, not JSON, not an object with string "prompt" and "response", or that
    check(record) rejects (it raises ValueError), raises ValueError naming the file and the line."""
    records = []
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            where = f"{path}, line {n}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(f"{where}: not UTF-8 text (byte 0x{raw[error.start]:02x} at column "
                                 f"{error.start + 1}); save the file as UTF-8") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{where}: not valid JSON ({error.msg} at column {error.colno})") from None
            if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in ("prompt", "response")):
                raise ValueError(f"{where}: a record needs string fields \"prompt\" and \"response\"")
            if check is not None:
                try:
                    check(record)
                except ValueError as error:
                    raise ValueError(f"{where}: {error}") from None
            records.append({**record, "_source": where})
    return records


def check_annotation(record):
    """What an annotated record needs beyond a prompt and a response (ValueError if it lacks it)."""
    if not record["response"].strip():
        raise ValueError("the response is empty; remove the record")
    annotation_fields(record)


def read_annotations(folder, check=check_annotation, splits=SPLITS):
    """{split: records} from folder/annotations_{split}.jsonl for each of splits. check: check_annotation
    for a user's files; None for a run's own (read back on resume), whose sampled responses may be
    empty. Unusable input raises ValueError, one line naming the file (and the line)."""
    records = {}
    for split in splits:
        path = os.path.join(folder, f"annotations_{split}.jsonl")
        try:
            records[split] = read_jsonl(path, check=check)
        except OSError as error:
            raise ValueError(f"cannot read {path} ({error.strerror})") from None
        if not records[split]:
            raise ValueError(f"{path} holds no records")
    return records
