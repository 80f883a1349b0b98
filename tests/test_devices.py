"""Device bugs caught with no GPU: every module built around a policy, and every stage that can run
without reading numbers back, on PyTorch's `meta` device (shapes only, no data).

A tensor made on the CPU and met by a meta one raises here exactly where it would raise on CUDA or
MPS, so a head or buffer left on the CPU (the value head once was: `python text2grad.py` crashed at
PPO's first rollout on every CUDA machine) fails this file on a laptop. What cannot run on meta
(anything that reads a number back: .item(), .tolist(), a sampler's "all done?") is listed in
DETAILS.md, "One GPU", with how it is covered.
"""
import pytest
import torch

import grpo
import guards
import loss
import ppo
from data.tokenizer import Tokenizer
from model import GPT, GPTConfig, KVCache, left_pad
from reward import RewardModel, collate, encode_record
from sft import document_batch

META = torch.device("meta")
B, N, V = 3, 5, 64
RECORDS = [
    {"prompt": "Where does Omar live?", "response": "Omar lives in Rome. He is tall.",
     "textual_feedback": "Wrong city: Oslo.", "good_spans": ["Omar"], "poor_spans": ["in Rome"]},
    {"prompt": "How many cats?", "response": "Seven cats.", "textual_feedback": "Six.",
     "good_spans": [], "poor_spans": ["Seven"]},
]


def meta_gpt():
    with META:
        return GPT(GPTConfig(vocab_size=V, block_size=128, n_layer=2, n_head=2, n_embd=32))


def assert_all_on(module, device):
    """Every parameter and buffer of module on device, each named when it is not."""
    elsewhere = [f"{name} on {tensor.device}" for name, tensor in
                 [*module.named_parameters(), *module.named_buffers()] if tensor.device != device]
    assert not elsewhere, f"not on {device}: {', '.join(elsewhere)}"


@pytest.fixture(scope="module")
def tokenizer():
    text = [t for r in RECORDS for t in (r["prompt"], r["response"], r["textual_feedback"])]
    return Tokenizer.train(text * 10, vocab_size=V)


def test_the_value_head_is_where_the_policy_is_and_runs_there():
    model = ppo.PolicyWithValue(meta_gpt())
    assert_all_on(model, META)
    ids = torch.randint(3, V, (B, 12), device=META)
    logits, values = model(ids, torch.ones_like(ids), 6, N)
    assert logits.shape == (B, N, V) and values.shape == (B, N) and values.device == META
    assert model.optimizer(ppo.PPOConfig()).param_groups[1]["params"][0].device == META


def test_the_value_head_starts_the_same_whatever_the_global_seed():
    """Initialised from its own CPU generator, then moved: the same numbers whatever the global
    seed, and so wherever gpt is (a move copies them), so a run on a GPU starts V where a CPU run
    does."""
    config = GPTConfig(vocab_size=V, block_size=32, n_layer=1, n_head=2, n_embd=16)
    torch.manual_seed(1)
    first = ppo.PolicyWithValue(GPT(config)).value_head.state_dict()
    torch.manual_seed(2)
    second = ppo.PolicyWithValue(GPT(config)).value_head.state_dict()
    for name in first:
        torch.testing.assert_close(first[name], second[name], rtol=0, atol=0)
    C = config.n_embd  # the first layer uniform in +-C^-1/2, the last at zero (V = 0)
    assert first["0.weight"].abs().max() <= C ** -0.5 and first["0.weight"].std() > 0.5 * C ** -0.5 / 3 ** 0.5
    assert not first["2.weight"].any() and not first["2.bias"].any()


@pytest.mark.parametrize("kind, cot", [("span", True), ("span", False), ("scalar", False)])
def test_the_reward_model_is_where_its_trunk_is_and_its_loss_runs_there(tokenizer, kind, cot):
    model = RewardModel(meta_gpt(), kind, cot)
    assert_all_on(model, META)
    items = [encode_record(tokenizer, r)[0] for r in RECORDS]
    ids, critique_targets, span_labels, score_position = collate(tokenizer, items, kind, cot, META)
    assert ids.device == META and score_position.device == META
    scores = torch.zeros(len(items), device=META) if kind == "scalar" else None
    objective, parts = model.loss(ids, critique_targets, span_labels, score_position, scores)
    assert objective.device == META and objective.shape == ()
    objective.backward()
    assert all(p.grad.device == META for p in model.head.parameters())


def test_the_rewards_and_advantages_are_made_where_the_mask_is():
    mask = torch.ones(B, N, device=META)
    ended = torch.ones(B, dtype=torch.bool, device=META)
    logprobs, values = torch.zeros(B, N, device=META), torch.zeros(B, N, device=META)
    scores = ppo.final_scores([1.0, 0.0, -1.0], mask)
    dense = guards.dense_scores([[1, 0, -1], [0], [-1, -1, -1, -1]], mask, praise_fade_at=3)
    for score in (scores, dense):
        rewards = ppo.token_rewards(score, logprobs, logprobs, mask, ended, 0.05, 1.0)
        advantages, returns = ppo.compute_advantages(rewards, values, mask)
        for x in (rewards, ppo.masked_whiten(advantages, mask), returns,
                  ppo.reward_to_go(rewards, mask)):
            assert x.device == META and x.shape == (B, N)
    assert ppo.ended_with_eos(torch.zeros(B, N, dtype=torch.long, device=META), mask, 2).device == META
    config = ppo.PPOConfig(advantage="grpo", group=B)
    assert grpo.advantages(scores, logprobs, mask, config).device == META


def test_the_loss_path_runs_where_the_logits_are():
    logits = torch.zeros(B, N, V, device=META, requires_grad=True)
    values = torch.zeros(B, N, device=META, requires_grad=True)
    targets = torch.zeros(B, N, dtype=torch.long, device=META)
    rest = [torch.zeros(B, N, device=META) for _ in range(5)]  # mask, old log-probs and values, A, R
    coefficients = [torch.tensor(c, device=META) for c in (1.0, 0.2, 0.2, 0.1, 0.0)]
    objective, stats = loss.ppo_loss(logits, values, targets, *rest, *coefficients)
    objective.backward()
    assert objective.device == META and logits.grad.device == META
    assert all(s.device == META for s in stats.values())


def test_batches_and_caches_are_made_on_the_device_asked_for(tokenizer):
    ids, mask = left_pad([[5, 6], [7]], 0, META)
    assert ids.device == META and mask.device == META
    documents = [[("a prompt", "an answer")], [("another", "one")]]
    assert all(x.device == META for x in document_batch(tokenizer, documents, META, 128))
    gpt = meta_gpt()
    cache = KVCache(gpt.config, B, 16, META)
    assert all(x.device == META for x in (cache.k, cache.v, cache.canon, cache.real, cache.length))
    ids = torch.randint(3, V, (B, 6), device=META)
    logits = gpt(ids, torch.ones_like(ids), cache)[1]            # the prompt, then one token
    logits = gpt(ids[:, :1], torch.ones_like(ids[:, :1]), cache)[1]
    assert logits.shape == (B, 1, V) and logits.device == META
