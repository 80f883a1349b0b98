"""experiments/convert.py: annotations as the authors and LLM annotators store them -> our JSONL.

    python -m experiments.convert THEIRS.json DIR/annotations_train.jsonl [--skip-bad]

The method reads one shape (data/annotations.py): {"prompt", "response", "textual_feedback",
"good_spans", "poor_spans"}. An LLM's reply is rarely that clean: the object comes fenced in
```json, with prose before and after it, // comments and trailing commas; SLF5K stores a score per
word (word_score_list) instead of span lists. parse_reply reads all of that; from_authors_record
and convert_authors_file turn the authors' two stored shapes (SLF5K, UltraFeedback) into ours.
JSON repair stops at fences, prose around the object (the first {...} that parses is read), trailing
commas and // line comments; block comments and single quotes are rejected with a one-line error.
"""
import argparse
import json
import os
import re

from data.annotations import annotation_fields
from experiments.runstate import atomic_save, fail

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_SIGN_WORDS = {"positive": 1, "negative": -1, "neutral": 0}


def _next_significant_char(text, i):
    """The first character at or after i that is neither whitespace nor inside a // comment."""
    while i < len(text):
        if text[i].isspace():
            i += 1
        elif text.startswith("//", i):
            i = text.find("\n", i)
            if i == -1:
                return ""
        else:
            return text[i]
    return ""


def _repair_json(text):
    """Drop // comments and trailing commas, copying string literals untouched.

    A scanner rather than a regex, because "//" and ",]" may legitimately appear inside a
    string value (a URL in the critique, a quoted code fragment).
    """
    out, i, in_string = [], 0, False
    while i < len(text):
        ch = text[i]
        if in_string:
            if ch == "\\":  # copy the escape and the escaped character together
                out.append(text[i:i + 2])
                i += 2
                continue
            in_string = ch != '"'
        elif ch == '"':
            in_string = True
        elif text.startswith("//", i):
            i = text.find("\n", i)
            if i == -1:
                break
            continue
        elif ch == "," and _next_significant_char(text, i + 1) in ("}", "]"):
            i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _sign(score):
    if isinstance(score, str) and score.lower() in _SIGN_WORDS:
        return _SIGN_WORDS[score.lower()]
    if isinstance(score, (int, float)) and not isinstance(score, bool):
        return (score > 0) - (score < 0)
    raise ValueError(f"word score must be a number or positive/negative/neutral, got {score!r}")


def _spans_from_word_scores(word_score_list):
    """SLF5K style [[word, score], ...] -> (good_spans, poor_spans): runs of one sign become a phrase."""
    if not isinstance(word_score_list, list):
        raise ValueError("word_score_list must be a list of [word, score] pairs")
    spans = {1: [], -1: []}
    run_words, run_sign = [], 0
    for pair in word_score_list + [["", 0]]:  # a neutral sentinel closes the last run
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], str)):
            raise ValueError(f"word_score_list entry must be [word, score], got {pair!r}")
        sign = _sign(pair[1])
        if sign != run_sign and run_words:
            spans[run_sign].append(" ".join(run_words))
            run_words = []
        run_sign = sign
        if sign != 0:
            run_words.append(pair[0])
    return spans[1], spans[-1]


def _first_object(text):
    """The first {...} in text that parses as JSON once repaired, whatever prose stands before or after
    it: each "{" is tried in turn, so a brace in the preamble ("Good {overall}") does not hide the object."""
    decoder, first_error = json.JSONDecoder(), None
    for start in (m.start() for m in re.finditer(r"{", text)):
        try:
            return decoder.raw_decode(_repair_json(text[start:]))[0]   # raw_decode stops where the object ends
        except json.JSONDecodeError as error:
            first_error = first_error or error
    raise ValueError(f"annotation is not valid JSON: {first_error or 'no {...} object in it'}")


def parse_reply(raw):
    """An annotator's reply (a dict, or a string: JSON, fenced or not, with prose around it, // comments
    or trailing commas; or the SLF5K word_score_list shape) -> {"textual_feedback", "good_spans",
    "poor_spans"}. ValueError, one line, when it cannot be read."""
    if isinstance(raw, str):
        fenced = _FENCE.search(raw)
        body = fenced.group(1) if fenced else raw
        if body.lstrip().startswith("["):   # a bare array: parse it whole, to say it is not an object
            try:
                raw = json.loads(_repair_json(body))
            except json.JSONDecodeError as error:
                raise ValueError(f"annotation is not valid JSON: {error}") from None
        else:
            raw = _first_object(body)
    if isinstance(raw, dict) and "word_score_list" in raw:
        if "good_spans" in raw or "poor_spans" in raw:  # two sources of labels: no safe way to merge
            raise ValueError("annotation has both word_score_list and good_spans/poor_spans")
        good, poor = _spans_from_word_scores(raw["word_score_list"])
        raw = {"textual_feedback": raw.get("textual_feedback"), "good_spans": good, "poor_spans": poor}
    return annotation_fields(raw)


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
