"""The reward model refreshed as PPO runs (iterated RLHF): the lab's fourth defence against a gamed
learned reward, after the three guards of guards.py. Not Text2Grad's idea and not in the first look:
the lab's experiments wrap the core's reward (text2grad.reward_function) with it, every 4th rollout
(RefreshConfig), as chosen on the K sweep's validation prompts (RESULTS.md, the defence ablation).

    reward, models = method_reward(method, task, tokenizer, examples, reward_models, shaping, refresh, items, seed)
"""
import copy
from dataclasses import dataclass

from align import align
from reward import MAX_CRITIQUE_TOKENS, fit_to_block, train_reward_model
from sft import response_ids
from text2grad import METHODS, reward_function


def encode_sample(tokenizer, prompt, response_ids, annotation, block_size):
    """encode_record's item for the token ids a policy sampled (not always the tokenizer's encoding of
    their text), annotated by the critic: the labels land on those ids. The critique is cut to
    MAX_CRITIQUE_TOKENS (the most predict() writes), then fitted to the block (fit_to_block)."""
    delta, _ = align(tokenizer.decode(response_ids), tokenizer.offsets(response_ids), annotation)
    item = {"prompt": tokenizer.encode(prompt), "response": list(response_ids),
            "critique": tokenizer.encode(annotation["textual_feedback"])[:MAX_CRITIQUE_TOKENS],
            "delta": [int(d) for d in delta]}
    fit_to_block(tokenizer, item, block_size, f"a sampled response to {prompt[:40]!r}")
    return item


@dataclass
class RefreshConfig:
    every: int = 4                # every this many rollouts the model trains on fresh annotations; 0: never
    samples: int = 32             # rollout responses the critic annotates per refresh (the annotation budget)
    steps: int = 20               # training steps per refresh, batches half fresh, half original
    lr: float = 5e-4              # their learning rate


class Refresh:
    """A learned reward model trained online on the policy's own samples (iterated RLHF): it scores out
    of distribution what it never saw. Called like a reward f(indices, tokens, mask): it scores the
    rollout with the model as it is; then, at every config.every-th call (the value warm-up's call
    counts; GRPO has none), the critic annotates config.samples of the responses, one per prompt
    first (GRPO samples a group for each), and the model trains on all the fresh annotations so far,
    mixed with `items`, its original training items. score: the method's reward reading `model`
    (text2grad.reward_function); model changes in place: give each run a copy."""

    def __init__(self, score, model, task, tokenizer, examples, items, config, seed=0):
        self.model, self.score = model, score
        self.task, self.tokenizer, self.examples, self.items = task, tokenizer, examples, items
        self.config, self.seed, self.calls, self.fresh = config, seed, 0, []

    def __call__(self, indices, tokens, mask):
        scores = self.score(indices, tokens, mask)
        self.calls += 1
        if self.calls % self.config.every == 0:
            # one response per prompt first (GRPO samples a group of each), then the second, ...
            n = self.config.samples
            order = sorted(range(len(indices)), key=lambda j: list(indices[:j]).count(indices[j]))[:n]
            picked = [indices[j] for j in order]
            for i, ids in zip(picked, response_ids(self.tokenizer, tokens[order], mask[order])):
                annotation = self.task.critique(self.examples[i], self.tokenizer.decode(ids))
                self.fresh.append(encode_sample(self.tokenizer, self.examples[i].prompt, ids, annotation,
                                                self.model.gpt.config.block_size))
            train_reward_model(self.model, self.tokenizer, self.items, self.config.steps, n, self.config.lr,
                               next(self.model.parameters()).device, self.seed * 1000 + self.calls,
                               desc=f"refresh {self.model.kind} reward model", fresh=self.fresh)
        return scores




def method_reward(method, task, tokenizer, examples, reward_models, shaping, refresh, items, seed=0):
    """(reward, the reward models it reads) for one PPO run of `method`: reward_function's, wrapped in
    a Refresh of the run's own copy of its learned reward model (refresh.every 0: none; items:
    the reward model's training items, which the refresh keeps mixing in)."""
    judge = METHODS[method][0]
    if not refresh.every or judge not in reward_models:
        return reward_function(method, task, tokenizer, examples, reward_models, shaping), reward_models
    own = {**reward_models, judge: copy.deepcopy(reward_models[judge])}
    score = reward_function(method, task, tokenizer, examples, own, shaping)
    return Refresh(score, own[judge], task, tokenizer, examples, items, refresh, seed), own
