"""Task metrics that no learned model touches: ROUGE-1/2/L F1 and token F1 / exact match.

Words are lowercase runs of letters and digits, so punctuation and case never change a score.
"""
import re
from collections import Counter


def words(text):
    return re.findall(r"[a-z0-9]+", text.lower())


def _f1(overlap, n_candidate, n_reference):
    if overlap == 0:
        return 0.0
    precision, recall = overlap / n_candidate, overlap / n_reference
    return 2 * precision * recall / (precision + recall)


def rouge_n(candidate, reference, n):
    """ROUGE-N F1: n-gram overlap with clipped counts."""
    def grams(ws):
        return Counter(tuple(ws[i:i + n]) for i in range(len(ws) - n + 1))
    c, r = grams(words(candidate)), grams(words(reference))
    return _f1(sum((c & r).values()), sum(c.values()), sum(r.values()))


def lcs_length(a, b):
    """Length of the longest common subsequence of two word lists (dynamic programming)."""
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def rouge_l(candidate, reference):
    """ROUGE-L F1: precision and recall of the longest common subsequence of words."""
    c, r = words(candidate), words(reference)
    return _f1(lcs_length(c, r), len(c), len(r))


def rouge(candidate, reference):
    return {"rouge1": rouge_n(candidate, reference, 1), "rouge2": rouge_n(candidate, reference, 2),
            "rougeL": rouge_l(candidate, reference)}


def token_f1(candidate, reference):
    """SQuAD-style F1 over the bags of words."""
    c, r = Counter(words(candidate)), Counter(words(reference))
    return _f1(sum((c & r).values()), sum(c.values()), sum(r.values()))


def exact_match(candidate, reference):
    return float(words(candidate) == words(reference))
