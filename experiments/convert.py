"""experiments/convert.py: annotations as the authors and LLM annotators store them -> our JSONL.

    python -m experiments.convert THEIRS.json DIR/annotations_train.jsonl [--skip-bad]

The method reads one shape (data/annotations.py): {"prompt", "response", "textual_feedback",
"good_spans", "poor_spans"}. An annotator's reply, fenced, wrapped in prose or in SLF5K's score per
word, is read into it by data/replies.py (parse_reply); from_authors_record and
convert_authors_file turn the authors' two stored shapes (SLF5K, UltraFeedback) into ours.
"""
import argparse
import json
import os

from data.replies import parse_reply
from experiments.runstate import atomic_save, fail

PROMPT_KEYS = ("prompt", "post", "Post")           # the text annotated: UltraFeedback, SLF5K
RESPONSE_KEYS = ("response", "generated_summary")


def from_authors_record(record):
    """One record as the authors' annotation scripts store it -> our record. Two shapes:
      SLF5K          {"post", "generated_summary", "critique": the annotator's whole reply, prose
                      and a (usually fenced) JSON object with textual_feedback and the spans}
      UltraFeedback  {"prompt", "response", "critique": the textual feedback alone,
                      "annotations": {"good_spans", "poor_spans"}}; a response given as chat
                      messages [{"role", "content"}] becomes its last assistant message.
    Raises ValueError saying what is missing or unreadable."""
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
        annotation = parse_reply({"textual_feedback": critique, **record["annotations"]})
    else:
        annotation = parse_reply(critique)
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
    parser = argparse.ArgumentParser(prog="python -m experiments.convert",
                                     description="The authors' stored annotations -> our JSONL (one split).")
    parser.add_argument("source", help="the authors' annotated file (JSON list, JSON object by id, or JSON lines)")
    parser.add_argument("target", help="the JSONL to write, e.g. DIR/annotations_train.jsonl (must not exist)")
    parser.add_argument("--skip-bad", action="store_true",
                        help="drop records that cannot be converted (an annotator's failed reply) and count them")
    args = parser.parse_args(argv)
    try:
        written, skipped = convert_authors_file(args.source, args.target, args.skip_bad)
    except ValueError as error:
        fail(str(error))
    print(f"{args.target}: {written} converted, {skipped} skipped")


if __name__ == "__main__":
    main()
