"""Toy tasks that mirror the paper's three: summarisation, code generation, question answering; and
a fourth with a knob, K independent flaws per response (data/facts.py): the first look's default at
K = 8, and the K sweep's task (experiments/sweep.py).

Each task module (data/summarize.py, data/codegen.py, data/qa.py, data/facts.py) exposes the same
small interface:

    NAME: str                      # "summarize" | "code" | "qa" | "facts"
    PRIMARY: str                   # the key of metrics() that the experiment reports
    WATCHED: (str, str)            # a share the first look prints beside its curves: a key of
                                   # metrics() or "criticised" (sft.evaluate), and its name
    FLAW_RATES: dict[str, float]   # chance that a demonstration carries each flaw kind
    make_examples(n, seed) -> list[Example]         # seeded, deterministic
    metrics(example, response) -> dict[str, float]  # independent of any learned model
    critique(example, response) -> dict             # the programmatic annotator (see below)
    follow_up(example, rng) -> (text, answer)       # optional: one more turn of a pretraining
                                                    # document on the same example (document)
    first_turn(example, rng) -> (text, answer)      # optional (summarize): a pretraining document's
                                                    # first turn, instead of (prompt, reference)

critique() plays the paper's GPT-4o annotator and returns the paper's annotation shape:
    {"textual_feedback": str, "good_spans": [str], "poor_spans": [str]}
where every span is quoted verbatim from the response (align.py turns them into token rewards).

Demonstrations (the SFT targets) are deliberately imperfect: each flaw kind is injected at the rate
its module's FLAW_RATES documents, so that RL has something to fix. The reference answer is always
correct and is what the metric compares against.
"""
from dataclasses import dataclass, field

SPLITS = ("train", "validation", "test")
TASKS = ("facts", "summarize", "code", "qa")  # the first look's (facts at K = 8 its default)


@dataclass
class Example:
    prompt: str                # what the policy sees
    reference: str             # a correct answer; metrics compare against it
    demonstration: str         # the SFT target: the reference, possibly with injected flaws
    flaws: list = field(default_factory=list)  # flaw kinds injected into the demonstration
    facts: dict = field(default_factory=dict)  # task ground truth the critic reads (JSON-safe)


def get_task(name):
    """The task module called `name`."""
    from data import codegen, facts, qa, summarize
    tasks = {m.NAME: m for m in (summarize, codegen, qa, facts)}
    if name not in tasks:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(tasks)}")
    return tasks[name]


def document(task, example, rng, turns=12):
    """What the pretraining stage reads of one training example: turns [(text, answer)] of correct
    text only, the example's prompt and reference first (or the task's first_turn: summarize reads
    questions on the post, never a summary). A task with follow_up adds turns - 1 more
    on the same example (qa: another question on the passage, whose text is the question alone, the
    passage being already in the context; code: another program for the spec and its check), so
    that one sequence supervises many look-ups or comparisons instead of one (as many turns as fit
    in the block: sft.document_batch)."""
    doc = [task.first_turn(example, rng) if hasattr(task, "first_turn") else (example.prompt, example.reference)]
    if hasattr(task, "follow_up"):
        doc += [task.follow_up(example, rng) for _ in range(turns - 1)]
    return doc


def make_splits(task, sizes, seed=0):
    """{split: [Example]} with no example shared between splits.

    sizes: {"train": n, "validation": n, "test": n}. Held-out splits are drawn first and any later
    example that shares task.held_out_key(example) with an earlier one is dropped (the key is the
    prompt unless the task says more: code's program up to renaming, qa's passage), so the reported
    metrics are never measured on a problem the policy was trained on under other names.
    """
    key = getattr(task, "held_out_key", lambda e: e.prompt)
    splits, held_out = {}, set()
    for k, split in enumerate(("test", "validation", "train")):
        examples, drawn = [], 0
        while len(examples) < sizes[split]:  # the first n new ones of the split's stream of examples
            drawn = 2 * drawn or sizes[split]
            if drawn > 64 * sizes[split]:
                raise ValueError(f"{task.NAME}: fewer than {sizes[split]} {split} examples are new to the other splits")
            examples = [e for e in task.make_examples(drawn, seed=seed * 1000 + k) if key(e) not in held_out]
        splits[split] = examples[:sizes[split]]
        held_out.update(key(e) for e in splits[split])
    return {s: splits[s] for s in SPLITS}


def experiment_splits(task, sizes, seed):
    """(splits, demonstrations): validation and test of the given sizes, and the training pool of
    sizes["demonstrations"] (or more) examples; splits["train"], PPO's prompts, is its first
    sizes["train"]. No training example is a held-out one, up to renaming (data.make_splits)."""
    pool = max(sizes["train"], sizes["annotated"], sizes["demonstrations"])
    splits = make_splits(task, {"train": pool, "validation": sizes["validation"], "test": sizes["test"]}, seed=seed)
    return {**splits, "train": splits["train"][:sizes["train"]]}, splits["train"]


def quote(text, start, end):
    """text[s:end] for the largest s <= start whose leftmost occurrence in text is at s.

    align.py places a phrase at its leftmost occurrence, so a critic that blames a repeat quotes it
    with the space or the words before it that tell it apart from the earlier copy.
    """
    while text.find(text[start:end]) != start:
        start -= 1
        while start > 0 and not text[start].isspace() and not text[start - 1].isspace():
            start -= 1
    return text[start:end]
