"""integrations/verl against verl 0.9.1 on the CPU: the contract between the bridge and verl's own
code, each side checked against a hand-worked or independent number. Skipped where verl is not
installed (integrations/verl/requirements.txt; .ci/run's third environment installs it).

What runs here is verl's: its config (composed from the recipe's overrides and validated), its
loader of the config keys, its reward-loop worker calling the manager, its default
assemble_rm_scores, its GAE, whitening and GRPO. What cannot run without a GPU (the rollout, the
workers, the trainer's loop) is listed in DETAILS.md."""
import copy
import http.server
import json
import math
import os
import random
import re
import threading

import pytest

verl = pytest.importorskip("verl")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from tokenizers import Tokenizer as Backend  # noqa: E402
from tokenizers import decoders, models, pre_tokenizers  # noqa: E402
from transformers import PreTrainedTokenizerFast, Qwen2Config  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker  # noqa: E402
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.reward import load_reward_manager, resolve_reward_manager_cls  # noqa: E402
from verl.trainer.ppo.utils import need_critic, need_reference_policy  # noqa: E402
from verl.utils.config import validate_config  # noqa: E402
from verl.utils.import_utils import load_extern_object  # noqa: E402

import guards  # noqa: E402
import ppo  # noqa: E402
import text2grad  # noqa: E402
from data import facts, make_splits  # noqa: E402
from data.tokenizer import SPECIALS, Tokenizer, byte_of_symbol, training_texts  # noqa: E402
from integrations.verl import critics, estimator, export_facts, manager  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, "integrations", "verl")
SYMBOL = {b: s for s, b in byte_of_symbol().items()}  # byte -> byte-level BPE's symbol
NOTE = "The gift is a kite. It is from Felix. It goes to Paris. It leaves on saturday."
WIDTH = 12  # the batch's response width: verl's max_response_length here
BETA, PENALTY = ppo.PPOConfig.beta, ppo.PPOConfig.missing_eos_penalty


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


def symbols(piece):
    """A piece of text (or raw bytes) as the byte-level BPE token that stands for it."""
    raw = piece.encode() if isinstance(piece, str) else piece
    return "".join(SYMBOL[b] for b in raw)


def wrap(backend):
    """A transformers tokenizer over a tokenizers backend whose first ids are SPECIALS."""
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<|pad|>",
                                   bos_token="<|bos|>", eos_token="<|eos|>",
                                   additional_special_tokens=SPECIALS[3:])


# Hand-picked pieces, each one token: sampled ids that encode() never makes (no merges at all).
PIECES = ["name", " Alex", " city", " Par", "is", " day", " saturday", " sun", " col", "our",
          " gr"]


@pytest.fixture(scope="module")
def tokenizer():
    """A transformers tokenizer over a byte-level BPE of SPECIALS, the 256 bytes, then PIECES,
    and no merges: encode(decode(ids)) != ids for any piece."""
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for symbol in [SYMBOL[b] for b in range(256)] + [symbols(p) for p in PIECES]:
        vocab[symbol] = len(vocab)
    backend = Backend(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(SPECIALS)
    return wrap(backend)


def ids_of(tokenizer, pieces, eos=True):
    ids = tokenizer.convert_tokens_to_ids([symbols(p) for p in pieces])
    return ids + [tokenizer.eos_token_id] * eos


def fake_batch(rows, prompts, ground_truths=None, width=WIDTH, pad=0):
    """A DataProto as verl's reward loop hands it over: prompts (B, 4), responses right-padded to
    width (B, N), attention_mask over both, and each sample's chat as raw_prompt."""
    B = len(rows)
    responses = torch.full((B, width), pad)
    attention = torch.cat([torch.ones(B, 4, dtype=torch.long), torch.zeros(B, width).long()], 1)
    for i, ids in enumerate(rows):
        responses[i, :len(ids)] = torch.tensor(ids)
        attention[i, 4:4 + len(ids)] = 1
    chats = np.empty(B, dtype=object)
    chats[:] = [[{"role": "user", "content": p}] for p in prompts]
    non_tensors = {"raw_prompt": chats}
    if ground_truths is not None:
        non_tensors["reward_model"] = np.array([{"ground_truth": g} for g in ground_truths])
    tensors = {"prompts": torch.zeros(B, 4, dtype=torch.long), "responses": responses,
               "attention_mask": attention}
    return DataProto(batch=TensorDict(tensors, batch_size=B), non_tensor_batch=non_tensors)


def recipe_overrides(**values):
    """run_ppo.sh's verl overrides, one per line as written, its shell variables filled in."""
    text = open(os.path.join(HERE, "run_ppo.sh")).read()
    overrides = re.findall(r"^    ([\w.]+=\S+) \\$", text, re.M)
    values = {"HERE": HERE, "MODEL": "model", "DATA": "data", "GPUS": "1", **values}
    return [re.sub(r"\$(\w+)", lambda m: values[m.group(1)], o) for o in overrides]


def compose_config(overrides):
    folder = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=folder, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


@pytest.fixture(scope="module")
def model_dir(tokenizer, tmp_path_factory):
    """A model folder verl can read offline: the tokenizer and a tiny Qwen2 config."""
    folder = tmp_path_factory.mktemp("model")
    tokenizer.save_pretrained(folder)
    Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                architectures=["Qwen2ForCausalLM"]).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def config(model_dir):
    """verl's full PPO config with the recipe's overrides, the model being model_dir."""
    return compose_config(recipe_overrides(MODEL=model_dir))


def changed(config, **values):
    """A copy of config with values set by dotted key ("reward.reward_model.enable")."""
    config = copy.deepcopy(config)
    for key, value in values.items():
        OmegaConf.update(config, key, value, force_add=True)
    return config


def span_manager(config, tokenizer, critic=critics.facts_critic, **reward_kwargs):
    config = changed(config, **{"reward.reward_kwargs": reward_kwargs})
    return manager.SpanRewardManager(config, tokenizer, critic)


def scored(span, data):
    """What verl's RewardLoopManager does with a manager, without Ray: run_single per sample,
    then the class's assemble_rm_scores. (rm_scores (B, N), outputs)."""
    outputs = [span.loop.run_until_complete(span.run_single(data[i:i + 1]))
               for i in range(len(data))]
    return type(span).assemble_rm_scores(data, [o["reward_score"] for o in outputs]), outputs


# ------------------------------------------------------------------------------------------------
# The rows of rm_scores, worked out by hand

ENDED = ["name", " Alex", ";", " city", " Par", "is", ";", " day", " saturday", "."]  # 10 + EOS
CUT = ["name", " Alex", ";", " city", " Par", "is", ";", " day", " sun", "d", "a", "y"]  # 12


def hand_rows():
    """The note: name Felix, city Paris, day saturday. Alex is blamed (-1), Paris praised over
    two tokens (1/2 each), saturday praised (1), praise faded by sigmoid((40 - t) / 4)."""
    ended = [0, -1, 0, 0, 0.5 * sigmoid(9), 0.5 * sigmoid(8.75), 0, 0, sigmoid(8), 0, 0, 0]
    # cut at the length limit: its praise dropped, "sunday" blamed, the missing EOS on the last
    cut = [0, -1, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1 - PENALTY]
    empty = [0] * WIDTH  # the EOS alone: no span, no reward
    return torch.tensor([ended, cut, empty])


def test_rm_scores_are_the_hand_worked_rows_where_verl_puts_sums_last(config, tokenizer):
    rows = [ids_of(tokenizer, ENDED), ids_of(tokenizer, CUT, eos=False), [tokenizer.eos_token_id]]
    data = fake_batch(rows, [NOTE] * 3)
    rm_scores, outputs = scored(span_manager(config, tokenizer), data)
    expected = hand_rows()
    assert torch.allclose(rm_scores, expected, atol=1e-6, rtol=0)
    assert rm_scores[0, 11] == 0  # past the end: 0
    assert [o["reward_extra_info"]["unaligned"] for o in outputs] == [0, 0, 0]
    # verl's default would put each row's sum on its last token, the EOS or the cut one
    default = RewardManagerBase.assemble_rm_scores(data, expected.sum(1).tolist())
    last = torch.tensor([10, 11, 0])
    assert torch.allclose(default[torch.arange(3), last], expected.sum(1))
    assert default.abs().sum() == default[torch.arange(3), last].abs().sum()


def test_a_phrase_not_in_the_response_gives_nothing(config, tokenizer):
    """An annotator's reply, fenced with a trailing comma, blames Alex and a Lisbon never said."""
    reply = ('My review:\n```json\n{"textual_feedback": "Alex is wrong; Lisbon is not named.",'
             ' "poor_spans": ["Alex", "Lisbon"],}\n```')
    span = span_manager(config, tokenizer, critic=lambda **_: reply)
    data = fake_batch([ids_of(tokenizer, ["name", " Alex", "."])], [NOTE])
    rm_scores, outputs = scored(span, data)
    assert rm_scores[0, :4].tolist() == [0, -1, 0, 0] and rm_scores[0, 4:].abs().sum() == 0
    assert outputs[0]["reward_extra_info"]["unaligned"] == 1


def test_the_guards_are_read_from_reward_kwargs(config, tokenizer):
    """praise "token" and no fade: Paris +1 on each of its tokens, saturday +1."""
    span = span_manager(config, tokenizer, praise="token", praise_fade_at=None)
    rm_scores, _ = scored(span, fake_batch([ids_of(tokenizer, ENDED)], [NOTE]))
    assert rm_scores[0].tolist() == [0, -1, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0]


def test_verls_reward_loop_worker_asks_the_manager_the_recipe_names(config, tokenizer):
    """verl's own worker, as a Ray actor would run it: the recipe's config keys load the manager
    and the critic, and compute_score reaches run_single (a custom reward function is set)."""
    worker = RewardLoopWorker(config)
    assert type(worker.reward_manager).__name__ == "SpanRewardManager"
    rows = [ids_of(tokenizer, ENDED), ids_of(tokenizer, CUT, eos=False), [tokenizer.eos_token_id]]
    data = fake_batch(rows, [NOTE] * 3, ground_truths=["name Felix; city Paris; day saturday."] * 3)
    outputs = worker.loop.run_until_complete(worker.compute_score_batch(data))
    cls = resolve_reward_manager_cls(config)
    rm_scores = cls.assemble_rm_scores(data, [o["reward_score"] for o in outputs])
    assert torch.allclose(rm_scores, hand_rows(), atol=1e-6, rtol=0)


@pytest.mark.parametrize("key, value, message", [
    ("reward.reward_model.enable", False, "colocated reward model"),
    ("reward.reward_model.enable_resource_pool", True, "colocated reward model"),
    ("reward.custom_reward_function.path", None, "custom_reward_function.path"),
    ("reward.reward_kwargs", {"praise_fade": 30}, "unknown ['praise_fade']"),
])
def test_a_mode_where_verl_keeps_one_reward_per_sample_is_refused(config, tokenizer, key, value,
                                                                  message):
    config = changed(config, **{key: value})
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        manager.SpanRewardManager(config, tokenizer, critics.facts_critic)
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------------------------
# Offsets from the sampled ids' bytes

def test_offsets_come_from_the_sampled_bytes_not_from_re_encoding(tokenizer):
    ids = ids_of(tokenizer, ["name", " col", "our", " gr", b"\xc3", b"\xab", "y", "."])
    pieces = manager.token_bytes(tokenizer, ids)
    text = b"".join(pieces).decode("utf-8", "replace")
    assert text == "name colour grëy." == tokenizer.decode(ids, skip_special_tokens=True)
    # by hand: the two bytes of "ë" share its character; the EOS is empty at the end
    assert manager.char_offsets(pieces) == [(0, 4), (4, 8), (8, 11), (11, 14), (14, 15), (14, 15),
                                            (15, 16), (16, 17), (17, 17)]
    again = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    assert again["input_ids"] != ids[:-1] and len(again["offset_mapping"]) != len(ids) - 1


def test_a_tokenizer_that_is_not_byte_level_is_refused(config):
    backend = Backend(models.WordLevel({"▁hello": 0, "<unk>": 1}, unk_token="<unk>"))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    with pytest.raises(ValueError, match="not byte-level BPE"):
        manager.token_bytes(tokenizer, [0])
    with pytest.raises(ValueError, match="not byte-level BPE"):  # at start, before any sample
        span_manager(config, tokenizer)


def test_a_reply_that_is_no_annotation_gives_a_row_of_zeros_and_is_counted(config, tokenizer):
    def judge(prompt, response, ground_truth=None, router=None):
        return "I cannot judge this."  # prose, no JSON object
    rows = [ids_of(tokenizer, ENDED), ids_of(tokenizer, CUT, eos=False)]
    rm_scores, outputs = scored(span_manager(config, tokenizer, critic=judge), fake_batch(rows, [NOTE] * 2))
    # no span: the ended answer earns 0 everywhere, the cut one still loses the missing-EOS penalty
    expected = torch.zeros(2, WIDTH)
    expected[1, 11] = -PENALTY
    assert torch.equal(rm_scores, expected)
    assert [o["reward_extra_info"]["unparsed"] for o in outputs] == [1, 1]


def test_a_critic_that_cannot_read_the_prompt_ends_the_run_and_an_empty_response_gets_nothing(
        config, tokenizer):
    span = span_manager(config, tokenizer)
    with pytest.raises(ValueError, match="no fact of the facts task"):  # the wrong dataset
        span.score("What is 2 + 2?", ids_of(tokenizer, ENDED), None)
    assert span.score(NOTE, [], None) == ([], {"span_reward": 0.0, "unaligned": 0, "unparsed": 0})


def test_a_stop_token_inside_a_cut_response_is_no_eos(config, tokenizer):
    # a response cut at the limit with the EOS inside it, not last, is still cut: the penalty lands
    ids = ids_of(tokenizer, CUT, eos=False)
    ids[3] = tokenizer.eos_token_id
    rm_scores, _ = scored(span_manager(config, tokenizer), fake_batch([ids], [NOTE]))
    assert rm_scores[0, len(ids) - 1].item() == pytest.approx(-1 - PENALTY)  # "sunday" blamed, and cut


# ------------------------------------------------------------------------------------------------
# The same rewards as the core's

@pytest.fixture(scope="module")
def trained():
    """The facts task's notes and a byte-level BPE trained on their text, as the core trains it:
    (examples, transformers tokenizer, the core's Tokenizer) over one backend."""
    examples = make_splits(facts, {"train": 300, "validation": 0, "test": 24}, seed=3)
    core = Tokenizer.train(training_texts(facts, examples["train"]), vocab_size=400)
    return examples["test"], wrap(core.hf), core


def sampled(core, examples, rng):
    """Responses as a policy might sample them: each demonstration (with "Zürich" in some, a
    character of two bytes) cut into random chunks encoded one by one, then the EOS; every third
    cut at WIDTH = 40 with no EOS; and some random ids."""
    rows = []
    for n, e in enumerate(examples):
        text = e.demonstration if n % 4 else e.demonstration.replace("city ", "city Zürich ")
        cuts = sorted(rng.sample(range(1, len(text)), 6))
        ids = [i for a, b in zip([0] + cuts, cuts + [len(text)]) for i in core.encode(text[a:b])]
        rows.append((ids + ids)[:40] if n % 3 == 0 else ids[:39] + [core.eos_id])
    rows += [[rng.randrange(len(SPECIALS), core.vocab_size) for _ in range(30)] + [core.eos_id]
             for _ in range(4)]
    return rows


def test_rm_scores_equal_the_cores_token_rewards_on_sampled_ids(config, trained):
    """text2grad.reward_function's critic path (align, guards) and ppo.token_rewards with beta 0,
    on the same ids: equal to the last bit; and verl's KL in the reward (rm_scores - beta KL_t)
    equals ppo.token_rewards at beta."""
    examples, tokenizer, core = trained
    rng = random.Random(0)
    rows = sampled(core, examples, rng)
    notes = [e.prompt for e in examples] + [examples[0].prompt] * 4
    cases = examples + [examples[0]] * 4
    rm_scores, _ = scored(span_manager(config, tokenizer), fake_batch(rows, notes, width=40))

    tokens, mask = torch.full((len(rows), 40), core.pad_id), torch.zeros(len(rows), 40)
    for i, ids in enumerate(rows):
        tokens[i, :len(ids)], mask[i, :len(ids)] = torch.tensor(ids), 1
    scores = text2grad.reward_function("oracle", facts, core, cases, None, guards.Guards())(
        range(len(rows)), tokens, mask)
    ended = ppo.ended_with_eos(tokens, mask, core.eos_id)
    assert 0 < ended.sum() < len(rows)
    zero = torch.zeros_like(mask)
    assert torch.equal(rm_scores, ppo.token_rewards(scores, zero, zero, mask, ended, 0.0, PENALTY))
    assert (rm_scores > 0).any() and (rm_scores < 0).any()

    logprobs, ref = -torch.rand(mask.shape) * mask, -torch.rand(mask.shape) * mask
    # verl's apply_kl_penalty (ray_trainer.py; its module needs the trainer's extras) as it reads
    verl_rewards = rm_scores - BETA * core_algos.kl_penalty(logprobs, ref, "kl") * mask
    core_rewards = ppo.token_rewards(scores, logprobs, ref, mask, ended, BETA, PENALTY)
    assert torch.allclose(verl_rewards, core_rewards, atol=1e-6, rtol=0)


def test_the_facts_critic_reads_the_notes_facts_back(trained):
    """The sites read from each note are the ones the generator drew."""
    examples = trained[0]
    for e in examples:
        read = critics.facts_critic(e.prompt, e.reference)
        assert read["poor_spans"] == [] and len(read["good_spans"]) == len(e.facts["sites"])
    with pytest.raises(ValueError, match="no fact of the facts task"):
        critics.facts_critic("Hello.", "name Maya.")


# ------------------------------------------------------------------------------------------------
# Advantages: verl's GAE on span rewards as it is (GRPO: tests/test_verl_estimator.py)

def gae_fp64(rewards, values, mask, gamma, lam):
    """A naive loop in float64: the returns, response by response, the value past the end 0."""
    returns = torch.zeros_like(rewards, dtype=torch.float64)
    for i in range(len(rewards)):
        n, running = int(mask[i].sum()), 0.0
        for t in reversed(range(n)):
            following = float(values[i, t + 1]) if t + 1 < n else 0.0
            running = (float(rewards[i, t]) + gamma * following - float(values[i, t])
                       + gamma * lam * running)
            returns[i, t] = running + float(values[i, t])
    return returns


@pytest.mark.parametrize("gamma, lam", [(1.0, 0.95), (0.99, 0.9), (1.0, 0.0)])
def test_verls_gae_on_span_rewards_is_ppos_on_the_mask(config, tokenizer, gamma, lam):
    rows = [ids_of(tokenizer, ENDED), ids_of(tokenizer, CUT, eos=False), [tokenizer.eos_token_id],
            ids_of(tokenizer, ["name", " Alex", "."])]
    rm_scores, _ = scored(span_manager(config, tokenizer), fake_batch(rows, [NOTE] * 4))
    mask = (torch.arange(WIDTH) < torch.tensor([len(r) for r in rows])[:, None]).float()
    generator = torch.Generator().manual_seed(0)
    kl = torch.randn(mask.shape, generator=generator) * 0.1
    rewards = (rm_scores - BETA * kl) * mask
    values = torch.randn(mask.shape, generator=generator) * mask

    advantages, returns = core_algos.compute_gae_advantage_return(rewards, values, mask, gamma, lam)
    core_advantages, core_returns = ppo.compute_advantages(rewards, values, mask, gamma, lam)
    reference = gae_fp64(rewards, values, mask, gamma, lam)
    assert torch.equal(returns * mask, core_returns)
    assert torch.allclose(core_returns.double(), reference, atol=1e-5, rtol=0)
    # verl whitens inside, with the sample variance: the core's after sqrt((n - 1) / n)
    n = mask.sum()
    scaled = advantages * torch.sqrt(n / (n - 1)) * mask
    assert torch.allclose(scaled, ppo.masked_whiten(core_advantages, mask), atol=1e-5, rtol=0)
    assert (advantages * (1 - mask)).abs().sum() > 0  # verl leaves padding non-zero


# ------------------------------------------------------------------------------------------------
# Loaded from the config keys, as the recipe sets them

def test_the_recipe_composes_and_validates_with_the_cores_settings(config, model_dir):
    validate_config(config, use_reference_policy=need_reference_policy(config),
                    use_critic=need_critic(config))
    defaults = ppo.PPOConfig()
    algorithm = config.algorithm
    assert (algorithm.gamma, algorithm.lam) == (defaults.gamma, defaults.lam)
    assert algorithm.use_kl_in_reward and algorithm.kl_penalty == "kl"  # k1: log pi - log pi_ref
    assert (algorithm.kl_ctrl.type, algorithm.kl_ctrl.kl_coef) == ("fixed", defaults.beta)
    assert not config.actor_rollout_ref.actor.use_kl_loss
    assert config.actor_rollout_ref.actor.ppo_epochs == defaults.epochs
    assert config.data.max_response_length == defaults.max_new_tokens
    reward = config.reward
    assert reward.reward_model.enable and not reward.reward_model.enable_resource_pool


def test_the_grpo_overrides_compose_and_validate(model_dir):
    readme = open(os.path.join(HERE, "README.md")).read()
    block = readme.split("```bash\nbash integrations/verl/run_ppo.sh \\\n", 1)[1].split("```")[0]
    grpo_overrides = [line.strip(" \\") for line in block.splitlines() if "=" in line]
    assert "algorithm.adv_estimator=text2grad_token_grpo" in grpo_overrides
    config = compose_config(recipe_overrides(MODEL=model_dir) + grpo_overrides)
    validate_config(config, use_reference_policy=need_reference_policy(config),
                    use_critic=need_critic(config))
    assert not need_critic(config) and not config.algorithm.use_kl_in_reward


def test_the_manager_and_the_estimator_load_from_the_config_keys_twice(config, tokenizer):
    """load_extern_object runs a file afresh on each load: two classes, one registered estimator."""
    first, second = resolve_reward_manager_cls(config), resolve_reward_manager_cls(config)
    assert first is not second and issubclass(first, RewardManagerBase)
    load_extern_object(os.path.join(HERE, "estimator.py"), "token_grpo_advantage")
    assert core_algos.get_adv_estimator_fn(estimator.NAME) is estimator.token_grpo_advantage
    built = load_reward_manager(config, tokenizer)
    assert type(built).__name__ == "SpanRewardManager"
    assert built.compute_score(prompt=NOTE, response="name Felix.", ground_truth=None,
                               router=None)["good_spans"] == ["Felix"]


# ------------------------------------------------------------------------------------------------
# The facts task exported to verl's dataset; the LLM judge over HTTP

def test_the_export_is_verls_dataset_format(tmp_path):
    pandas = pytest.importorskip("pandas")
    train, test = export_facts.export(str(tmp_path), train=20, test=5, seed=0)
    frame = pandas.read_parquet(train)
    assert len(frame) == 20 and len(pandas.read_parquet(test)) == 5
    assert set(frame.columns) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    row = frame.iloc[0]
    system, user = row["prompt"]
    assert (system["role"], user["role"]) == ("system", "user")
    assert all(f"{kind} (" in system["content"] for kind in facts.KINDS)
    note = make_splits(facts, {"train": 20, "validation": 0, "test": 5}, seed=0)["train"][0]
    assert user["content"] == note.prompt
    assert row["reward_model"]["ground_truth"] == note.reference
    read = critics.facts_critic(user["content"], note.reference)
    assert read["poor_spans"] == [] and len(read["good_spans"]) == facts.K


def test_the_llm_judge_asks_the_router_and_its_reply_is_read(config, tokenizer):
    """A stand-in for verl's router: an OpenAI-style chat completion whose content is a fenced
    reply; the manager turns it into the hand-worked row."""
    asked = []
    reply = ('```json\n{"textual_feedback": "Alex should be Felix.", '
             '"good_spans": ["Paris"], "poor_spans": ["Alex"]}\n```')
    answers = [json.dumps({"choices": [{"message": {"content": reply}}]}),
               json.dumps({"error": "the model is loading"})]  # then an error, not a completion

    class Router(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers["Content-Length"])
            asked.append((self.path, json.loads(self.rfile.read(length))))
            body = answers.pop(0).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Router)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        span = manager.SpanRewardManager(config, tokenizer, critics.llm_judge,
                                         reward_router_address=f"127.0.0.1:{server.server_port}")
        data = fake_batch([ids_of(tokenizer, ENDED[:6] + ["."])], [NOTE],
                          ground_truths=["name Felix; city Paris."])
        rm_scores, _ = scored(span, data)
        no_answer, outputs = scored(span, data)  # the error: no span, counted
    finally:
        server.shutdown()
    assert torch.equal(no_answer, torch.zeros_like(no_answer))
    assert outputs[0]["reward_extra_info"]["unparsed"] == 1
    assert torch.allclose(rm_scores[0, :8], torch.tensor(
        [0, -1, 0, 0, 0.5 * sigmoid(9), 0.5 * sigmoid(8.75), 0, 0]), atol=1e-6)
    path, request = asked[0]
    assert path == "/v1/chat/completions"
    assert "name Alex; city Paris." in request["messages"][1]["content"]
    assert "name Felix; city Paris." in request["messages"][1]["content"]
    with pytest.raises(ValueError, match="no router"):
        critics.llm_judge(NOTE, "name Alex.")
