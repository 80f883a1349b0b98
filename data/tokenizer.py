"""A byte-level BPE tokenizer trained on the toy tasks' text, with character offsets for every token.

Byte-level means any string round-trips exactly (unicode, tabs, runs of spaces): tokens are pieces
of the UTF-8 bytes. A consequence worth knowing: one multi-byte character may be split over several
tokens, which then share that character's offset range.

Special tokens (ids fixed by their order in SPECIALS):
    <|pad|>       padding; never a training target, distinct from EOS
    <|bos|>       starts every sequence
    <|eos|>       ends a response (and a critique)
    <|response|>  separates the prompt from the response
    <|critique|>  separates the response from the critique (reward model)
    <|span|>      separates the critique from the re-read response (reward model)

Sequences are built by concatenating the ids of their parts, e.g. for the policy:
    <|bos|> prompt <|response|> response <|eos|>
so a response's token ids, and their offsets, are the same wherever the response appears.
"""
import codecs

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

SPECIALS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|response|>", "<|critique|>", "<|span|>"]


def byte_of_symbol():
    """Inverse of byte-level BPE's byte -> printable-symbol table (printable bytes map to
    themselves; the rest to code points from 256 up, in byte order)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    symbols, extra = {}, 0
    for b in range(256):
        if b in printable:
            symbols[chr(b)] = b
        else:
            symbols[chr(256 + extra)] = b
            extra += 1
    return symbols


def char_offsets(token_bytes):
    """(start, end) character range of each token in b"".join(token_bytes) decoded as UTF-8 (invalid
    bytes as U+FFFD), from the bytes each token stands for (b"" for a special token, which gets an
    empty range at its position). A token's range covers every character one of its bytes belongs
    to. Tokenizer.offsets reads its tokens' bytes here; any other byte-level BPE's can be read the
    same way (a tokenizer from the transformers library: integrations/verl).
    """
    # char_of_byte[k]: the character of the text that byte k ends up in. An incremental UTF-8
    # decoder emits characters once their bytes are complete (invalid bytes become U+FFFD, as in
    # decode()); the bytes it consumed go to what it emitted, counted from the end, since the last
    # byte always completes the last character and any extra leading bytes were one invalid run.
    decoder, char_of_byte, waiting, n_chars = codecs.getincrementaldecoder("utf-8")("replace"), [], 0, 0
    for byte in b"".join(token_bytes):
        waiting += 1
        out = decoder.decode(bytes([byte]))
        consumed = waiting - len(decoder.getstate()[0])  # bytes no longer held back
        if out:
            char_of_byte += [n_chars + max(0, len(out) - consumed + j) for j in range(consumed)]
            n_chars, waiting = n_chars + len(out), waiting - consumed
    tail = decoder.decode(b"", final=True)  # bytes of an unfinished character at the end
    char_of_byte += [n_chars] * waiting
    n_chars += len(tail)
    spans, k = [], 0
    for b in token_bytes:
        start = char_of_byte[k] if k < len(char_of_byte) else n_chars
        spans.append((start, char_of_byte[k + len(b) - 1] + 1) if b else (start, start))
        k += len(b)
    return spans


class Tokenizer:
    def __init__(self, hf_tokenizer):
        self.hf = hf_tokenizer
        self.vocab_size = hf_tokenizer.get_vocab_size()
        self.pad_id, self.bos_id, self.eos_id, self.response_id, self.critique_id, self.span_id = (
            hf_tokenizer.token_to_id(s) for s in SPECIALS)
        self._byte_of_symbol = byte_of_symbol()

    @classmethod
    def train(cls, texts, vocab_size=1024):
        """Learn merges from an iterable of strings."""
        hf = HFTokenizer(models.BPE())
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        hf.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        hf.train_from_iterator(texts, trainer)
        return cls(hf)

    def to_json(self):
        return self.hf.to_str()

    @classmethod
    def from_json(cls, text):
        return cls(HFTokenizer.from_str(text))

    def encode(self, text):
        """Token ids of plain text (special-token strings in the text are not treated as special)."""
        return self.hf.encode(text, add_special_tokens=False).ids

    def prompt(self, prompt):
        """<|bos|> prompt <|response|>, from a prompt string or its token ids: what the policy
        continues, and what the reward models read before the response."""
        ids = self.encode(prompt) if isinstance(prompt, str) else prompt
        return [self.bos_id, *ids, self.response_id]

    def decode(self, ids):
        """Text of ids, special tokens left out."""
        return self.hf.decode(ids, skip_special_tokens=True)

    def offsets(self, ids):
        """(start, end) character range of each token in decode(ids), for any id sequence,
        including ones the policy sampled (which need not be what encode() would produce).
        Special tokens get an empty range at their position (char_offsets).
        """
        token_bytes = [b"" if i < len(SPECIALS) else bytes(self._byte_of_symbol[s] for s in self.hf.id_to_token(i))
                       for i in ids]
        return char_offsets(token_bytes)

    def pieces(self, ids):
        """decode(ids) cut into one string per token, by offsets(): "".join(pieces) == decode(ids).
        A character made of several tokens' bytes goes to the first of them; the others get ""."""
        text, out, done = self.decode(ids), [], 0
        for start, end in self.offsets(ids):
            out.append(text[max(start, done):end])
            done = max(done, end)
        return out


def training_texts(task, examples):
    """Every kind of string the models read or write, from the training split only (validation and
    test text must not shape the tokenizer): prompts, references, demonstrations, and the critic's
    feedback on the demonstrations (the reward model writes critiques)."""
    for e in examples:
        yield from (e.prompt, e.reference, e.demonstration)
        yield task.critique(e, e.demonstration)["textual_feedback"]
