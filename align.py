"""Span alignment: from an annotator's critique to per-token pseudo-rewards delta_t.

The annotator (GPT-4o in the paper, a programmatic critic here) returns
    {"textual_feedback": str, "good_spans": [str], "poor_spans": [str]}
where each span is a phrase quoted from the response y. This file
  1. parses that output, repairing what language models commonly get wrong (parse_annotation),
  2. finds each phrase in y as a character range (find_span),
  3. turns the character ranges into delta_t in {-1, 0, +1}, one per token (span_rewards):
         delta_t = +1 if y_t lies in a good span, -1 if in a poor span, 0 otherwise.
align() chains 2 and 3 and counts the phrases that could not be placed.

Rules, and why:
- Phrases are matched in three tiers, first hit wins: exact, then case- and whitespace-insensitive,
  then fuzzy (difflib ratio >= FUZZY_THRESHOLD over windows of whole words). Annotators quote loosely;
  each tier is looser and less trustworthy than the one before.
- A phrase that occurs several times resolves to the LEFTMOST occurrence that stands on word
  boundaries ("24" is the standalone 24, not the start of an earlier "240"), or failing that the
  leftmost occurrence of all. The annotation does not say which one was meant; a fixed rule at
  least makes the labels reproducible.
- Tokens are mapped through the tokenizer's character offsets, not by re-matching words, so the
  authors' word -> token "skip rate" failure mode disappears. What is left is phrases that cannot be
  found at all; align() counts them as "unaligned".
- A token takes a span's value when any of its non-whitespace characters lies in the span, so a
  byte-level BPE token " world" counts for a span starting at "w", but its leading space alone does not.
- When good and poor spans overlap on a token, blame wins (the lowest value). Rewarding a token the
  annotator also blamed would push its probability up for the very thing that was criticised.

Left out, on purpose:
- The authors give punctuation and special tokens delta = 0, and their PPO drops the tokens
  ". , ? !" from the reward, GAE and loss altogether. We keep punctuation labelled and in the loss:
  in code, ">=" or ":" is often exactly what a critic blames. Special tokens have empty offsets and
  get 0 anyway. (DETAILS.md, "Where this project departs", lists every such difference.)
- Graded severities, length weights for summaries and the code task's "+1 outside flagged spans"
  default belong to the task files, which can rescale delta after this step.
- JSON repair stops at fences, prose before or after the object (the first {...} that parses is read),
  trailing commas and // line comments; block comments and single quotes are rejected with an AnnotationError.
"""

import difflib
import json
import re

FUZZY_THRESHOLD = 0.8  # lowest difflib ratio for a fuzzy match; 0.8 tolerates a dropped comma or
                       # a changed word ending, but not a different phrase of similar length

# ------------------------------------------------------------------------------------------------
# Parsing the annotator's output


class AnnotationError(ValueError):
    """The annotator's output cannot be used; the message says why, in one line."""


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
    raise AnnotationError(f"word score must be a number or positive/negative/neutral, got {score!r}")


def _spans_from_word_scores(word_score_list):
    """SLF5K style [[word, score], ...] -> (good_spans, poor_spans): runs of one sign become a phrase."""
    if not isinstance(word_score_list, list):
        raise AnnotationError("word_score_list must be a list of [word, score] pairs")
    spans = {1: [], -1: []}
    run_words, run_sign = [], 0
    for pair in word_score_list + [["", 0]]:  # a neutral sentinel closes the last run
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], str)):
            raise AnnotationError(f"word_score_list entry must be [word, score], got {pair!r}")
        sign = _sign(pair[1])
        if sign != run_sign and run_words:
            spans[run_sign].append(" ".join(run_words))
            run_words = []
        run_sign = sign
        if sign != 0:
            run_words.append(pair[0])
    return spans[1], spans[-1]


def _string_list(obj, key):
    value = obj.get(key, [])
    if not (isinstance(value, list) and all(isinstance(s, str) for s in value)):
        raise AnnotationError(f"{key} must be a list of strings, got {value!r}")
    return value


def _first_object(text):
    """The first {...} in text that parses as JSON once repaired, whatever prose stands before or after
    it: each "{" is tried in turn, so a brace in the preamble ("Good {overall}") does not hide the object."""
    decoder, first_error = json.JSONDecoder(), None
    for start in (m.start() for m in re.finditer(r"{", text)):
        try:
            return decoder.raw_decode(_repair_json(text[start:]))[0]   # raw_decode stops where the object ends
        except json.JSONDecodeError as error:
            first_error = first_error or error
    raise AnnotationError(f"annotation is not valid JSON: {first_error or 'no {...} object in it'}")


def parse_annotation(raw):
    """Annotator output (dict or str) -> {"textual_feedback", "good_spans", "poor_spans"}."""
    if isinstance(raw, str):
        fenced = _FENCE.search(raw)
        body = fenced.group(1) if fenced else raw
        if body.lstrip().startswith("["):   # a bare array: parse it whole, to say it is not an object
            try:
                raw = json.loads(_repair_json(body))
            except json.JSONDecodeError as error:
                raise AnnotationError(f"annotation is not valid JSON: {error}") from None
        else:
            raw = _first_object(body)
    if not isinstance(raw, dict):
        raise AnnotationError(f"annotation must be a JSON object, got {type(raw).__name__}")
    feedback = raw.get("textual_feedback")
    if not isinstance(feedback, str):
        raise AnnotationError("textual_feedback is missing or not a string")
    if "word_score_list" in raw:
        if "good_spans" in raw or "poor_spans" in raw:  # two sources of labels: no safe way to merge
            raise AnnotationError("annotation has both word_score_list and good_spans/poor_spans")
        good, poor = _spans_from_word_scores(raw["word_score_list"])
    else:
        good, poor = _string_list(raw, "good_spans"), _string_list(raw, "poor_spans")
    return {"textual_feedback": feedback, "good_spans": list(good), "poor_spans": list(poor)}


# ------------------------------------------------------------------------------------------------
# Finding a phrase in the response


def _fuzzy_span(text, phrase_words):
    """Best window of whole words by difflib ratio; None below FUZZY_THRESHOLD."""
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    target = " ".join(phrase_words).lower()
    n = len(phrase_words)
    best_ratio, best_span = 0.0, None
    for first in range(len(words)):  # leftmost start first, shortest window first
        for size in range(max(1, n - 1), n + 2):
            last = first + size - 1
            if last >= len(words):
                break
            window = " ".join(text[s:e] for s, e in words[first:last + 1]).lower()
            # autojunk off: its popularity heuristic would make long phrases score erratically
            ratio = difflib.SequenceMatcher(None, target, window, autojunk=False).ratio()
            if ratio > best_ratio:  # strictly greater keeps the leftmost of equal ratios
                best_ratio, best_span = ratio, (words[first][0], words[last][1])
    return best_span if best_ratio >= FUZZY_THRESHOLD else None


def _on_word_boundaries(pattern, phrase):
    """pattern, refusing a word character glued to the phrase's word-character ends."""
    before = r"(?<!\w)" if re.match(r"\w", phrase) else ""
    after = r"(?!\w)" if re.search(r"\w$", phrase) else ""
    return before + pattern + after


def find_span(text, phrase):
    """Character range [start, end) of phrase in text, or None: in each tier, the leftmost occurrence
    on word boundaries, else the leftmost occurrence."""
    phrase_words = phrase.split()
    if not text or not phrase_words:
        return None
    exact = re.escape(phrase)                                            # tier 1: exact
    loose = r"\s+".join(re.escape(word) for word in phrase_words)        # tier 2: case, whitespace
    for pattern, ends, flags in ((exact, phrase, 0), (loose, " ".join(phrase_words), re.IGNORECASE)):
        match = re.search(_on_word_boundaries(pattern, ends), text, flags) or re.search(pattern, text, flags)
        if match:
            return match.span()
    return _fuzzy_span(text, phrase_words)                               # tier 3: fuzzy


# ------------------------------------------------------------------------------------------------
# Character ranges -> token rewards


def span_rewards(offsets, spans, text):
    """delta per token from (start, end, value) character spans.

    offsets[t] = (start, end) of token t in text, untrimmed, as the tokenizer reports it.
    A token takes a span's value if any of its non-whitespace characters lies inside the span;
    whitespace-only and empty tokens get 0; under overlapping spans the lowest value wins (blame).
    """
    delta = []
    for token_start, token_end in offsets:
        visible = [c for c in range(token_start, token_end) if not text[c].isspace()]
        values = [value for start, end, value in spans if any(start <= c < end for c in visible)]
        delta.append(float(min(values)) if values else 0.0)
    return delta


def align(text, offsets, annotation):
    """Parsed annotation -> (delta per token, stats). Good phrases give +1, poor phrases -1."""
    labelled = [(p, 1.0) for p in annotation["good_spans"]] + [(p, -1.0) for p in annotation["poor_spans"]]
    spans, unaligned = [], 0
    for phrase, value in labelled:
        found = find_span(text, phrase)
        if found is None:
            unaligned += 1
        else:
            spans.append((found[0], found[1], value))
    delta = span_rewards(offsets, spans, text)
    stats = {
        "spans": len(labelled),                           # phrases the annotator quoted
        "unaligned": unaligned,                           # phrases find_span could not place
        "labelled_tokens": sum(d != 0 for d in delta),    # tokens with delta != 0
        "tokens": len(offsets),
    }
    return delta, stats
