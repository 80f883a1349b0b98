"""Span alignment: from an annotator's critique to per-token pseudo-rewards delta_t.

The annotator (GPT-4o in the paper, a programmatic critic here) returns
    {"textual_feedback": str, "good_spans": [str], "poor_spans": [str]}
where each span is a phrase quoted from the response y. This file
  1. finds each phrase in y as a character range (find_span),
  2. turns the character ranges into delta_t in {-1, 0, +1}, one per token (span_rewards):
         delta_t = +1 if y_t lies in a good span, -1 if in a poor span, 0 otherwise.
align() chains the two and counts the phrases that could not be placed. (Reading an LLM's reply,
with its fences and stray commas, into that shape is the converter's job: experiments/convert.py.)

Rules, and why:
- Three tiers, first hit wins: exact, case- and whitespace-insensitive, then fuzzy (difflib ratio >=
  FUZZY_THRESHOLD over windows of whole words): annotators quote loosely.
- A repeated phrase resolves to its leftmost occurrence on word boundaries ("24" is the standalone
  24, not the start of an earlier "240"), else the leftmost of all: reproducible labels.
- Tokens are mapped through the tokenizer's character offsets, not by re-matching words (no "skip
  rate" as in the authors' code); phrases that cannot be found are counted ("unaligned").
- A token takes a span's value when any of its non-whitespace characters lies in it; where good and
  poor spans overlap, blame wins (praise there would push up the very thing criticised).
- Punctuation is labelled like any token (in code, ">=" is often what a critic blames); the authors
  give it delta = 0 and drop ". , ? !" from PPO's loss (DETAILS.md, "Where this project departs").
"""
import difflib
import re

FUZZY_THRESHOLD = 0.8  # lowest difflib ratio for a fuzzy match; 0.8 tolerates a dropped comma or
                       # a changed word ending, but not a different phrase of similar length

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
    """Character range [start, end) of phrase in text, or None: in each tier, the leftmost
    occurrence on word boundaries, else the leftmost occurrence."""
    phrase_words = phrase.split()
    if not text or not phrase_words:
        return None
    exact = re.escape(phrase)                                            # tier 1: exact
    loose = r"\s+".join(re.escape(word) for word in phrase_words)        # tier 2: case, whitespace
    tiers = ((exact, phrase, 0), (loose, " ".join(phrase_words), re.IGNORECASE))
    for pattern, ends, flags in tiers:
        match = re.search(_on_word_boundaries(pattern, ends), text, flags)
        match = match or re.search(pattern, text, flags)
        if match:
            return match.span()
    return _fuzzy_span(text, phrase_words)                               # tier 3: fuzzy


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
    labelled = ([(p, 1.0) for p in annotation["good_spans"]]
                + [(p, -1.0) for p in annotation["poor_spans"]])
    found = [find_span(text, phrase) for phrase, _ in labelled]  # (start, end) or None
    spans = [(*place, value) for place, (_, value) in zip(found, labelled) if place is not None]
    delta = span_rewards(offsets, spans, text)
    stats = {"spans": len(labelled),                          # phrases quoted
             "unaligned": found.count(None),                  # those find_span could not place
             "labelled_tokens": sum(d != 0 for d in delta),   # tokens with delta != 0
             "tokens": len(offsets)}
    return delta, stats
