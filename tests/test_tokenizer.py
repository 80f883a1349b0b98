"""Byte-level BPE: exact round trips and character offsets checked against the library's own."""
import random

import pytest

from data.tokenizer import SPECIALS, Tokenizer

TEXTS = ["Maya's landlord raised the rent by 300 dollars, so Maya is thinking about moving out.",
         "def f(x, y): return x - y if x > y else y - x",
         "Zoë  paid 3 € —\ttabs,\nnewlines and 日本語 🙂 emoji", "   leading and trailing   ", ""]


@pytest.fixture(scope="module")
def tokenizer():
    corpus = [t for t in TEXTS for _ in range(20)] + ["the quick brown fox jumps over the lazy dog"] * 20
    return Tokenizer.train(corpus, vocab_size=400)


def test_special_tokens_are_distinct(tokenizer):
    ids = [tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.response_id,
           tokenizer.critique_id, tokenizer.span_id]
    assert ids == list(range(len(SPECIALS)))
    assert tokenizer.pad_id != tokenizer.eos_id


def test_prompt_is_bos_prompt_response_from_text_or_ids(tokenizer):
    text, library = TEXTS[0], tokenizer.hf  # the tokenizers library's own ids, not our wrapper's
    expected = ([library.token_to_id("<|bos|>")] + library.encode(text, add_special_tokens=False).ids
                + [library.token_to_id("<|response|>")])
    assert tokenizer.prompt(text) == expected and tokenizer.prompt(tokenizer.encode(text)) == expected


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text)) == text


@pytest.mark.parametrize("text", TEXTS)
def test_offsets_match_library_and_slice_back(tokenizer, text):
    ids = tokenizer.encode(text)
    offsets = tokenizer.offsets(ids)
    assert offsets == [tuple(o) for o in tokenizer.hf.encode(text, add_special_tokens=False).offsets]
    for i, (start, end) in zip(ids, offsets):
        piece = tokenizer.decode([i])
        if "\ufffd" not in piece:   # a whole character (a byte piece of one decodes to U+FFFD)
            assert text[start:end] == piece


def test_offsets_of_special_and_sampled_ids(tokenizer):
    ids = [tokenizer.bos_id, *tokenizer.encode("ab c"), tokenizer.eos_id]
    offsets = tokenizer.offsets(ids)
    assert offsets[0] == (0, 0) and offsets[-1] == (4, 4)
    rng = random.Random(0)
    for _ in range(50):   # arbitrary ids, as a policy may sample: ranges stay inside the text
        ids = [rng.randrange(tokenizer.vocab_size) for _ in range(15)]
        text = tokenizer.decode(ids)
        assert all(0 <= s <= e <= len(text) for s, e in tokenizer.offsets(ids))
        assert "".join(tokenizer.pieces(ids)) == text and len(tokenizer.pieces(ids)) == len(ids)


def test_pieces_of_a_character_split_across_tokens(tokenizer):
    ids = [tokenizer.hf.token_to_id(s) for s in ("x", "Ã", "©")]  # "x", then the two bytes of "é"
    assert tokenizer.pieces(ids) == ["x", "é", ""]


@pytest.mark.parametrize("raw, text, expected", [
    (b"\xc3\xc3\xa9", "\ufffd\u00e9", [(0, 1), (1, 2), (1, 2)]),          # stray lead byte, then "é"
    (b"x\xe2\xe2\x82\xac", "x\ufffd\u20ac", [(0, 1), (1, 2), (2, 3), (2, 3), (2, 3)]),
    (b"\xe2\x82A", "\ufffdA", [(0, 1), (0, 1), (1, 2)]),                  # a cut-off "€" before "A"
    (b"ab\xe2\x82", "ab\ufffd", [(0, 1), (1, 2), (2, 3), (2, 3)]),         # unfinished at the end
])
def test_offsets_of_invalid_utf8_byte_tokens(tokenizer, raw, text, expected):
    """One token per byte, worked out by hand: each byte belongs to the character it decodes into."""
    symbol_of_byte = {b: s for s, b in tokenizer._byte_of_symbol.items()}
    ids = [tokenizer.hf.token_to_id(symbol_of_byte[b]) for b in raw]
    assert tokenizer.decode(ids) == text
    assert tokenizer.offsets(ids) == expected
