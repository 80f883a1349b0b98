"""experiments/showcase.py: the reward model's reading of a few test responses beside the critic's,
token by token, which a run stores in results.json for the report to draw."""
from align import align

SHOWN = 6  # test prompts read token by token (the first whose SFT response is blamed)


def showcase(task, tokenizer, examples, samples, reward_model):
    """The reward model's reading of a few test responses beside the critic's, token by token, for the
    report to draw. samples: {method: its saved greedy test samples} (say "sft" and "text2grad"), one
    per example in order. The first SHOWN prompts whose SFT response the critic blames (then any
    others) get, per method: the response cut into tokens' text (tokenizer.pieces), the critic's
    delta per token and critique, the reward model's."""
    blamed = [i for i, s in enumerate(samples["sft"]) if s["poor_spans"]]
    chosen = (blamed + [i for i in range(len(examples)) if i not in blamed])[:SHOWN]
    entries = [{"prompt": examples[i].prompt, "reference": examples[i].reference} for i in chosen]
    for name, rows in samples.items():
        ids = [tokenizer.encode(rows[i]["response"]) for i in chosen]
        critiques, deltas = reward_model.predict(tokenizer, [examples[i].prompt for i in chosen], ids)
        for entry, i, r, critique, delta in zip(entries, chosen, ids, critiques, deltas):
            row = rows[i]
            entry[name] = {"response": row["response"], "pieces": tokenizer.pieces(r),
                           "score": task.metrics(examples[i], row["response"])[task.PRIMARY],
                           "critic": {"critique": row["textual_feedback"],
                                      "delta": [int(d) for d in align(row["response"], tokenizer.offsets(r), row)[0]]},
                           "reward_model": {"critique": critique, "delta": delta}}
    return entries
