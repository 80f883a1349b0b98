"""Annotated data: the files the reward models learn from, read, checked and converted.

One JSONL record per (prompt, response):
    {"prompt": str, "response": str, "textual_feedback": str, "good_spans": [str], "poor_spans": [str]}
the paper's annotation shape plus the text it annotates. A run writes its critic's annotations in
this shape (annotate); swap in your own (an LLM's, say) with --annotations DIR, and the token labels
are re-derived by align.py when reward.py encodes the records.

    annotate(task, examples, responses)   the task's critic reads each response -> records
    read_annotations(folder)              {split: records} from folder/annotations_{split}.jsonl,
                                          every line checked, bad input as one line (ValueError)
    python -m data.annotations convert THEIRS.json DIR/annotations_train.jsonl
                                          the authors' stored shapes (SLF5K, UltraFeedback) -> ours
"""
import argparse
import json
import os

from align import parse_annotation
from data import SPLITS
from runstate import atomic_save, fail


def annotate(task, examples, responses):
    """Records in the annotation shape: the task's critic reads each (prompt, response)."""
    return [{"prompt": e.prompt, "response": r, **task.critique(e, r)} for e, r in zip(examples, responses)]


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
    parse_annotation({k: v for k, v in record.items() if k not in ("prompt", "response", "_source")})


def read_annotations(folder, check=check_annotation):
    """{split: records} from folder/annotations_{split}.jsonl. check: check_annotation for a user's
    files; None for a run's own (--resume), whose sampled responses may be empty. Unusable input
    raises ValueError, one line naming the file (and the line)."""
    records = {}
    for split in SPLITS:
        path = os.path.join(folder, f"annotations_{split}.jsonl")
        try:
            records[split] = read_jsonl(path, check=check)
        except OSError as error:
            raise ValueError(f"cannot read {path} ({error.strerror})") from None
        if not records[split]:
            raise ValueError(f"{path} holds no records")
    return records


# ---------------------------------------------------------------------------------------------
# The authors' stored shape -> ours:  python -m data.annotations convert THEIRS.json annotations_train.jsonl

PROMPT_KEYS = ("prompt", "post", "Post")           # the text annotated: UltraFeedback, SLF5K
RESPONSE_KEYS = ("response", "generated_summary")


def from_authors_record(record):
    """One record as the authors' annotation scripts store it -> our record. Two shapes:
      SLF5K          {"post", "generated_summary", "critique": the annotator's whole reply, prose
                      and a (usually fenced) JSON object with textual_feedback and the spans}
      UltraFeedback  {"prompt", "response", "critique": the textual feedback alone,
                      "annotations": {"good_spans", "poor_spans"}}; a response given as chat
                      messages [{"role", "content"}] becomes its last assistant message.
    Raises ValueError (align.AnnotationError) saying what is missing or unreadable."""
    if not isinstance(record, dict):
        raise ValueError(f"a record must be a JSON object, got {type(record).__name__}")
    prompt = next((record[k] for k in PROMPT_KEYS if isinstance(record.get(k), str)), None)
    response = next((record[k] for k in RESPONSE_KEYS if k in record), None)
    if isinstance(response, list):  # chat messages
        replies = [m.get("content") for m in response if isinstance(m, dict) and m.get("role") == "assistant"]
        response = replies[-1] if replies else None
    if prompt is None or not isinstance(response, str):
        raise ValueError(f"needs a prompt ({', '.join(PROMPT_KEYS)}) and a response ({', '.join(RESPONSE_KEYS)})")
    critique = record.get("critique")
    if not isinstance(critique, str):
        raise ValueError("needs \"critique\", the annotator's reply as a string")
    if isinstance(record.get("annotations"), dict):  # UltraFeedback: the reply already taken apart
        annotation = parse_annotation({"textual_feedback": critique, **record["annotations"]})
    else:
        annotation = parse_annotation(critique)
    return {"prompt": prompt, "response": response, **annotation}


def convert_authors_file(source, target, skip_bad=False):
    """Read source (a JSON list, a JSON object of records keyed by id, or JSON lines), write target
    as our JSONL. A record that cannot be converted raises ValueError naming the file and the
    record, unless skip_bad, which drops it and counts it. target must not exist yet; it appears
    complete or not at all. Returns (records written, records skipped)."""
    if os.path.isdir(target):
        raise ValueError(f"{target} is a folder; give the file to write, e.g. {os.path.join(target, 'annotations_train.jsonl')}")
    if os.path.exists(target):
        raise ValueError(f"{target} already exists; choose another name or remove it")
    try:
        with open(source, encoding="utf-8") as f:
            text = f.read()
    except OSError as error:
        raise ValueError(f"cannot read {source} ({error.strerror})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{source} is not UTF-8 text; save it as UTF-8") from None
    try:
        data = json.loads(text)
        if isinstance(data, dict) and not all(isinstance(v, dict) for v in data.values()):
            data = [data]  # one record (a JSON-lines file of one line)
        if not isinstance(data, (list, dict)):
            raise ValueError(f"{source}: expected a list of records or an object of them, got {type(data).__name__}")
        entries = list(data.items()) if isinstance(data, dict) else list(enumerate(data, 1))
        where = "record {}" if isinstance(data, list) else "record {!r}"
    except json.JSONDecodeError:  # JSON lines
        entries, where = [], "line {}"
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    entries.append((n, json.loads(line)))
                except json.JSONDecodeError as error:
                    raise ValueError(f"{source}: neither one JSON document nor JSON lines (line {n}: {error.msg})") from None
    converted, skipped = [], 0
    for key, record in entries:
        try:
            converted.append(from_authors_record(record))
        except ValueError as error:
            if not skip_bad:
                raise ValueError(f"{source}, {where.format(key)}: {error}") from None
            skipped += 1
    if not converted:
        raise ValueError(f"{source}: no record could be converted")
    try:
        atomic_save("".join(json.dumps(r) + "\n" for r in converted), target)
    except OSError as error:
        raise ValueError(f"cannot write {target} ({error.strerror})") from None
    return len(converted), skipped


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m data.annotations", description="Annotated data for the reward models.")
    commands = parser.add_subparsers(dest="command", required=True)
    convert = commands.add_parser("convert", help="the authors' stored annotations -> our JSONL (one split)")
    convert.add_argument("source", help="the authors' annotated file (JSON list, JSON object by id, or JSON lines)")
    convert.add_argument("target", help="the JSONL to write, e.g. DIR/annotations_train.jsonl (must not exist)")
    convert.add_argument("--skip-bad", action="store_true",
                         help="drop records that cannot be converted (an annotator's failed reply) and count them")
    args = parser.parse_args(argv)
    try:
        written, skipped = convert_authors_file(args.source, args.target, args.skip_bad)
    except ValueError as error:
        fail(str(error))
    print(f"{args.target}: {written} converted, {skipped} skipped")


if __name__ == "__main__":
    main()
