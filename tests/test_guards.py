"""The guards against a gamed reward (guards.shaped_scores, the sweep's defaults) and the over-optimisation
measurement (experiments.measures.overoptimisation), and the reward model's refresh (experiments.refresh.Refresh),
against hand-worked numbers."""
import pytest
import torch

import guards
import ppo
import text2grad
from data import facts, get_task
from data.tokenizer import Tokenizer, training_texts
from experiments.measures import overoptimisation
from experiments.ppo_runs import configs
from experiments.protocol import PRESETS
from experiments.sweep import SWEEP_PRESETS
from model import GPT, GPTConfig, generate
from experiments.refresh import RefreshConfig, encode_sample, method_reward
from reward import MAX_CRITIQUE_TOKENS, RewardModel, layout
from sft import MAX_NEW_TOKENS

DEFAULTS = configs(SWEEP_PRESETS["default"]["ppo"])  # (PPOConfig, Guards, RefreshConfig) of the K sweep
PAPER = configs({**SWEEP_PRESETS["default"]["ppo"], "praise": "token", "cut_praise": False})


@pytest.fixture(scope="module")
def setup():
    examples = facts.make_examples(60, seed=3, k=None)
    tokenizer = Tokenizer.train(training_texts(facts, examples), vocab_size=400)
    return examples, tokenizer


def as_batch(tokenizer, responses, ended=True, N=80):
    """Token ids of responses as a sampled batch (B, N): EOS after each when ended, else cut there."""
    tokens = torch.full((len(responses), N), tokenizer.pad_id)
    mask = torch.zeros(len(responses), N, dtype=torch.long)
    for i, r in enumerate(responses):
        ids = tokenizer.encode(r) + ([tokenizer.eos_id] if ended else [])
        tokens[i, :len(ids)], mask[i, :len(ids)] = torch.tensor(ids), 1
    return tokens, mask


def praising(tokenizer, response, words):
    """Deltas of a reward model that praises every token overlapping one of `words`, wherever it
    stands (the learned model's failure on a repeated clause: it never saw one)."""
    ids = tokenizer.encode(response)
    spans, start = [], 0
    for word in words:
        at = response.find(word, start)
        while at >= 0:
            spans.append((at, at + len(word)))
            at = response.find(word, at + 1)
    return [1 if any(s < e2 and s2 < e for s2, e2 in spans) else 0 for s, e in tokenizer.offsets(ids)]


class Praising:
    """A stand-in span reward model that returns the given deltas, keyed by response length."""
    def __init__(self, deltas):
        self.deltas = deltas

    def predict(self, tokenizer, prompts, responses):
        return ["a critique"] * len(responses), [self.deltas[len(r)] for r in responses]


def test_bound_praise_hand_worked():
    delta = [1, 1, 0, -1, 1, 1, 1, 0, 1, 1]
    tokens = [5, 6, 0, 7, 8, 9, 10, 0, 5, 6]  # the last span repeats the first one's tokens
    assert guards.bound_praise(delta, tokens) == pytest.approx([0.5, 0.5, 0, -1, 1 / 3, 1 / 3, 1 / 3, 0, 0, 0])
    # blame is left per token; a praised span of one token pays 1
    assert guards.bound_praise([-1, -1, 1], [1, 2, 3]) == [-1.0, -1.0, 1.0]


def test_a_repeated_praised_clause_does_not_raise_text2grads_return(setup):
    examples, tokenizer = setup
    example = next(e for e in examples if len(e.facts["sites"]) >= 2)
    (kind, right, _), *_ = example.facts["sites"]
    response = example.reference                             # every site right
    longer = response[:-1] + f"; {kind} {right}."            # the first clause said again
    values = [r for _, r, _ in example.facts["sites"]]
    deltas = {len(tokenizer.encode(r)): praising(tokenizer, r, values) for r in (response, longer)}
    assert sum(deltas[len(tokenizer.encode(longer))]) > sum(deltas[len(tokenizer.encode(response))])  # praised again
    tokens, mask = as_batch(tokenizer, [response, longer])
    returns = {}
    for name, (config, shaping, _) in (("defaults", DEFAULTS), ("paper", PAPER)):
        scores = text2grad.reward_function("text2grad", facts, tokenizer, [example], {"cot": Praising(deltas)},
                                           shaping)([0, 0], tokens, mask)
        zero = torch.zeros_like(scores)  # the policy is the reference: no KL
        returns[name] = ppo.token_rewards(scores, zero, zero, mask.float(), torch.tensor([True, True]), 0.0,
                                          config.missing_eos_penalty).sum(1).tolist()
    short, long = returns["paper"]
    assert long > short  # +1 per praised token pays for the repeat: what the guard is for
    short, long = returns["defaults"]
    assert long <= short + 1e-6 and short == pytest.approx(len(values), abs=0.01)  # a unit per praised value


def test_a_truncated_response_keeps_its_blame_and_no_praise_and_ends_there(setup):
    _, tokenizer = setup
    cut = guards.Guards(praise="token", cut_praise=True, praise_fade_at=None)
    mask = torch.ones(1, 3)
    ended = torch.tensor([False])  # three tokens, the limit reached without an EOS
    scores = guards.shaped_scores([[1, -1, 1]], [[4, 5, 6]], mask, ended, cut)
    assert scores.tolist() == [[0, -1, 0]]
    zero = torch.zeros(1, 3)
    rewards = ppo.token_rewards(scores, zero, zero, mask, ended, 0.0, 1.0)
    assert rewards.tolist() == [[0, -1, -1]]  # the missing-EOS penalty on the last token
    # GAE by hand with V = (0.5, 0.2, 0.1), gamma 1, lambda 0.5, and no value past the cut: the length
    # limit is part of the task, the response is final there
    #   td_2 = -1 - 0.1 = -1.1                      A_2 = -1.1
    #   td_1 = -1 + 0.1 - 0.2 = -1.1                A_1 = -1.1 + 0.5 * -1.1 = -1.65
    #   td_0 = 0 + 0.2 - 0.5 = -0.3                 A_0 = -0.3 + 0.5 * -1.65 = -1.125
    advantages, returns = ppo.compute_advantages(rewards, torch.tensor([[0.5, 0.2, 0.1]]), mask, 1.0, 0.5)
    assert advantages[0].tolist() == pytest.approx([-1.125, -1.65, -1.1])
    assert returns[0].tolist() == pytest.approx([-0.625, -1.45, -1.0])
    # the same response with its EOS keeps its praise and pays no penalty
    done = torch.tensor([True])
    assert guards.shaped_scores([[1, -1, 1]], [[4, 5, 6]], torch.ones(1, 4), done, cut).tolist() == [[1, -1, 1, 0]]
    # through the reward function: the scalar reward model's score of a cut response is capped at 0
    example = facts.make_examples(1, seed=0, k=2)[0]

    class Scalar:
        def predict(self, tokenizer, prompts, responses):
            return [3.0] * len(responses)

    for ended, expected in ((True, 3.0), (False, 0.0)):
        tokens, mask = as_batch(tokenizer, [example.reference], ended=ended)
        scores = text2grad.reward_function("ppo_scalar", facts, tokenizer, [example], {"scalar": Scalar()}, cut)([0], tokens, mask)
        assert scores.sum().item() == expected


def test_reward_model_reads_a_response_at_the_length_limit_within_its_positions(setup):
    """The longest sequence the K sweep's reward model can be asked about: the longest K = 8 prompt,
    a 64-token response cut at the limit, the longest critique and the response's second copy. Every
    position must be inside the model's position table (past it there are no weights at all), and
    the model must give one delta per response token."""
    examples, tokenizer = setup
    preset = SWEEP_PRESETS["default"]
    prompt = max((e.prompt for e in facts.make_examples(200, seed=1, k=8)), key=lambda p: len(tokenizer.encode(p)))
    longest = len(tokenizer.prompt(tokenizer.encode(prompt))) + 64 + 1 + MAX_CRITIQUE_TOKENS + 1 + 64
    assert longest <= preset["model"]["block_size"]
    gpt = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=preset["model"]["block_size"], n_layer=1, n_head=2,
                        n_embd=32))
    model = RewardModel(gpt, "span", cot=True).eval()
    response = tokenizer.encode("name Maya; " * 40)[:64]  # rambling, as a gamed policy writes
    critiques, deltas = model.predict(tokenizer, [prompt], [response])
    assert len(deltas[0]) == 64 and set(deltas[0]) <= {-1, 0, 1}


def test_overoptimisation_measures_kl_gold_and_proxy(setup):
    examples, tokenizer = setup
    chosen = examples[:6]
    torch.manual_seed(0)
    policy = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=256, n_layer=1, n_head=2, n_embd=32))
    config = ppo.PPOConfig(max_new_tokens=12)
    measure = overoptimisation("oracle", facts, tokenizer, chosen, {}, policy, config, seed=7)
    same = measure(policy)
    assert same["kl"] == 0 and same["proxy"] == same["gold"]  # the policy is the reference; the critic judges
    # the gold by hand: the same samples (the same seed), each token +1 inside a good span, -1 inside a
    # poor one, by character offsets
    prompts = [tokenizer.prompt(e.prompt) for e in chosen]
    tokens, _, mask = generate(policy, prompts, 12, tokenizer.eos_id, tokenizer.pad_id,
                               generator=torch.Generator().manual_seed(7))
    gold, blamed, length = 0, 0, int(mask.sum())
    for e, row, m in zip(chosen, tokens.tolist(), mask.tolist()):
        ids = [t for t, k in zip(row, m) if k and t != tokenizer.eos_id]
        text = tokenizer.decode(ids)
        critique = facts.critique(e, text)
        inside = lambda quotes, s, t: any(text.find(q) >= 0 and any(text.find(q) <= c < text.find(q) + len(q)
                                                                     for c in range(s, t) if not text[c].isspace())
                                          for q in quotes)
        for s, t in tokenizer.offsets(ids):
            good, poor = inside(critique["good_spans"], s, t), inside(critique["poor_spans"], s, t)
            gold += good - poor
            blamed += poor
    assert same["gold"] == pytest.approx(gold / len(chosen))
    assert same["criticised"] == pytest.approx(blamed / length)
    assert same["length"] == pytest.approx(length / len(chosen))
    # another policy: KL is the mean over responses of sum_t log pi - log pi_ref on its own samples
    torch.manual_seed(1)
    other = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=256, n_layer=1, n_head=2, n_embd=32))
    tokens, _, mask = generate(other, prompts, 12, tokenizer.eos_id, tokenizer.pad_id,
                               generator=torch.Generator().manual_seed(7))
    kl = 0.0
    for i, row in enumerate(tokens.tolist()):
        for t in range(int(mask[i].sum())):
            context = torch.tensor([prompts[i] + row[:t]])
            lp = [torch.log_softmax(m(context)[1][0, -1].double(), -1)[row[t]].item() for m in (other, policy)]
            kl += lp[0] - lp[1]
    assert measure(other)["kl"] == pytest.approx(kl / len(chosen), abs=1e-4)


def test_refresh_scores_first_then_learns_the_critics_labels_of_the_policys_samples(setup):
    examples, tokenizer = setup
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=256, n_layer=1, n_head=2, n_embd=32))
    scalar = RewardModel(gpt, "scalar")
    original = [{"prompt": tokenizer.encode(e.prompt), "response": tokenizer.encode(e.reference),
                 "critique": [], "delta": [0] * len(tokenizer.encode(e.reference))} for e in examples[:8]]
    shaping, refresh = guards.Guards(), RefreshConfig(every=2, samples=4, steps=3, lr=1e-2)
    reward, own = method_reward("ppo_scalar", facts, tokenizer, examples, {"scalar": scalar}, shaping, refresh,
                                          original, seed=0)
    assert own["scalar"] is not scalar  # the run's own copy; the shared model is never trained
    before = {k: v.clone() for k, v in scalar.state_dict().items()}
    responses = [examples[i].demonstration for i in range(5)]  # flawed: the critic blames their defaults
    tokens, mask = as_batch(tokenizer, responses)
    first = reward(list(range(5)), tokens, mask)  # call 1: no refresh
    assert reward.fresh == [] and all(torch.equal(v, own["scalar"].state_dict()[k]) for k, v in before.items())
    weights = {k: v.clone() for k, v in own["scalar"].state_dict().items()}
    second = reward(list(range(5)), tokens, mask)  # call 2: scored with the model as it was, then refreshed
    assert torch.equal(first, second)
    assert not all(torch.equal(v, own["scalar"].state_dict()[k]) for k, v in weights.items())
    assert all(torch.equal(v, scalar.state_dict()[k]) for k, v in before.items())
    # the first refresh_samples responses, labelled by the critic on the sampled ids: blame where it blames
    assert len(reward.fresh) == 4
    critic = text2grad.reward_function("oracle", facts, tokenizer, examples, {})(list(range(4)), tokens[:4], mask[:4])
    for row, item in enumerate(reward.fresh):
        n = len(item["response"])
        assert item["response"] == tokens[row, :n].tolist() and item["delta"] == critic[row, :n].int().tolist()
        assert item["prompt"] == tokenizer.encode(examples[row].prompt)


class Wordy:
    """A task whose critic says everything three times: critiques longer than any room the block leaves."""

    def __init__(self, task):
        self.task = task

    def critique(self, example, response):
        annotation = self.task.critique(example, response)
        return {**annotation, "textual_feedback": " ".join([annotation["textual_feedback"]] * 3)}


@pytest.mark.parametrize("name", ["summarize", "code", "qa"])
def test_refresh_fits_a_rambling_batch_to_the_main_presets_block(name):
    """The main presets' reward model (block 256) refreshed on the longest prompts of a task, each
    answered by a response cut at the 64-token limit and criticised at length: every item fits the
    block, the critique cut by exactly the overflow, worked out by hand from the layout
    <|bos|> x <|response|> y <|critique|> c <|span|> y."""
    task = get_task(name)
    examples = task.make_examples(300, seed=1)
    tokenizer = Tokenizer.train(training_texts(task, examples), vocab_size=512)
    longest = sorted(examples, key=lambda e: -len(tokenizer.encode(e.prompt)))[:4]
    block = GPTConfig.block_size
    assert all(PRESETS[p]["model"].get("block_size", block) == block for p in ("default", "small"))
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=block, n_layer=1, n_head=2, n_embd=32))
    original = [{"prompt": tokenizer.encode(e.prompt), "response": tokenizer.encode(e.reference), "critique": [],
                 "delta": [0] * len(tokenizer.encode(e.reference))} for e in longest]
    reward, own = method_reward("text2grad", Wordy(task), tokenizer, longest,
                                          {"cot": RewardModel(gpt, "span", cot=True)}, guards.Guards(),
                                          RefreshConfig(every=1, samples=4, steps=1), original)
    responses = [tokenizer.encode(" ".join([e.demonstration] * 40))[:MAX_NEW_TOKENS] for e in longest]
    tokens, mask = torch.full((4, MAX_NEW_TOKENS), tokenizer.pad_id), torch.ones(4, MAX_NEW_TOKENS, dtype=torch.long)
    for row, ids in enumerate(responses):
        tokens[row] = torch.tensor(ids)  # no EOS: every response cut at the limit
    weights = {k: v.clone() for k, v in own["cot"].state_dict().items()}
    reward(list(range(4)), tokens, mask)  # scores, then refreshes on all four
    assert reward.calls == 1 and len(reward.fresh) == 4
    assert not all(torch.equal(v, own["cot"].state_dict()[k]) for k, v in weights.items())
    for e, ids, item in zip(longest, responses, reward.fresh):
        full = tokenizer.encode(Wordy(task).critique(e, tokenizer.decode(ids))["textual_feedback"])
        room = block - (1 + len(tokenizer.encode(e.prompt)) + 1) - MAX_NEW_TOKENS - 2 - MAX_NEW_TOKENS
        # the critique is longer than the room; on summarize and qa even its first 96 tokens are (code's
        # longest prompts leave exactly 96)
        assert 0 < room <= MAX_CRITIQUE_TOKENS < len(full) and (room < MAX_CRITIQUE_TOKENS or name == "code")
        assert item["critique"] == full[:room] and item["response"] == ids
        assert len(layout(tokenizer, item, "span", cot=True)[0]) == block


def test_an_item_whose_prompt_and_response_alone_overflow_is_refused_in_one_line(setup):
    examples, tokenizer = setup
    prompt = " ".join(e.prompt for e in examples[:6])
    with pytest.raises(ValueError, match="more than the block size 256; shorten or remove the record"):
        encode_sample(tokenizer, prompt, tokenizer.encode(examples[0].reference), facts.critique(examples[0], ""), 256)


def test_a_repeat_is_the_same_ids_in_order_of_an_earlier_praised_span():
    # [6, 5] after the praised [5, 6]: the same ids in another order, not a repeat: 1/2 each
    assert guards.bound_praise([1, 1, 0, 1, 1], [5, 6, 0, 6, 5]) == pytest.approx([0.5, 0.5, 0, 0.5, 0.5])
    # [5, 6] said earlier without praise, then praised: the first praised span pays 1/2 each
    assert guards.bound_praise([0, 0, 0, 1, 1], [5, 6, 0, 5, 6]) == pytest.approx([0, 0, 0, 0.5, 0.5])
