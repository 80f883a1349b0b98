"""An LLM annotator's reply -> the annotation format (data/annotations.py).

The method reads one shape: {"textual_feedback", "good_spans", "poor_spans"}. An LLM's reply is
rarely that clean: the object comes fenced in ```json, with prose before and after it, // comments
and trailing commas; SLF5K stores a score per word (word_score_list) instead of span lists.
parse_reply reads all of that, for the lab's converter of stored annotations
(experiments/convert.py) and for a judge's live replies (integrations/verl/critics.py).
JSON repair stops at fences, prose around the object (the first {...} that parses is read),
trailing commas and // line comments; block comments and single quotes are rejected with a
one-line error.
"""
import json
import re

from data.annotations import annotation_fields

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
    """SLF5K style [[word, score], ...] -> (good_spans, poor_spans): runs of one sign become a
    phrase."""
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
    """The first {...} in text that parses as JSON once repaired, whatever prose stands before or
    after it: each "{" is tried in turn, so a brace in the preamble ("Good {overall}") does not hide
    the object."""
    decoder, first_error = json.JSONDecoder(), None
    for start in (m.start() for m in re.finditer(r"{", text)):
        try:
            # raw_decode stops where the object ends
            return decoder.raw_decode(_repair_json(text[start:]))[0]
        except json.JSONDecodeError as error:
            first_error = first_error or error
    raise ValueError(f"annotation is not valid JSON: {first_error or 'no {...} object in it'}")


def parse_reply(raw):
    """An annotator's reply (a dict, or a string: JSON, fenced or not, with prose around it, //
    comments or trailing commas; or the SLF5K word_score_list shape) -> {"textual_feedback",
    "good_spans", "poor_spans"}. ValueError, one line, when it cannot be read."""
    if isinstance(raw, str):
        fenced = _FENCE.search(raw)
        body = fenced.group(1) if fenced else raw
        if body.lstrip().startswith("["):  # a bare array: parsed whole, to say it is not an object
            try:
                raw = json.loads(_repair_json(body))
            except json.JSONDecodeError as error:
                raise ValueError(f"annotation is not valid JSON: {error}") from None
        else:
            raw = _first_object(body)
    if isinstance(raw, dict) and "word_score_list" in raw:
        if "good_spans" in raw or "poor_spans" in raw:  # two sources of labels: no safe merge
            raise ValueError("annotation has both word_score_list and good_spans/poor_spans")
        good, poor = _spans_from_word_scores(raw["word_score_list"])
        raw = {"textual_feedback": raw.get("textual_feedback"), "good_spans": good,
               "poor_spans": poor}
    return annotation_fields(raw)
