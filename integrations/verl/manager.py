"""Text2Grad's span rewards as a verl 0.9.1 reward manager: a reward on every response token.

verl's reward loop scores one sample at a time (run_single) and then lays the batch's scores into
rm_scores (B, N), which PPO reads as token_level_scores, in the classmethod assemble_rm_scores;
verl's own puts each sample's one number on its last token. Here run_single returns a whole row:
    sampled ids -> their bytes -> the text, each token's characters  (data/tokenizer.py)
    the critic reads (prompt, text) -> a critique quoting spans       (critics.py, data/replies.py)
    align.align -> delta_t; guards.shaped_scores -> score_t           (the core's, as text2grad.py)
    ppo.token_rewards with beta 0: a response cut at the length limit loses missing_eos_penalty
                                   on its last token
and assemble_rm_scores lays each row from its response's first token, 0 past its end. verl takes
beta KL_t off itself (algorithm.use_kl_in_reward), as ppo.token_rewards does in the core.

A judge that does not answer, or answers with no annotation, quotes no span: the row is the core's
for no span (0, and the missing-EOS penalty of a cut response), counted as `unparsed` in what verl
logs; a critic's own error (a prompt it cannot read: the wrong dataset) ends the run. A response has ended when its last id is a stop token (an EOS inside a cut one is not).

Offsets come from the sampled ids' bytes, never from re-encoding the text: a policy may sample ids
that encode() would not produce, and an offset mapping of the re-encoded text then numbers other
tokens. That needs a byte-level BPE (GPT-2's alphabet: Qwen2.5, Llama 3); other tokenizers are
refused with a ValueError when the manager starts.

verl calls assemble_rm_scores only with a colocated reward model (reward.reward_model.enable=True,
enable_resource_pool=False), and calls run_single there only when a custom reward function is set
(reward.custom_reward_function.path): the critic. Elsewhere its loop keeps one float per sample,
so the manager refuses to start. Settings: reward.reward_kwargs (praise, cut_praise,
praise_fade_at: guards.Guards; missing_eos_penalty: ppo.PPOConfig's), the core's defaults if unset.
Loading this module registers the token-level GRPO estimator (estimator.py): verl loads it in the
trainer's process, where advantages are computed.
"""
import dataclasses

import torch
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

import guards
import ppo
from align import align
from data.replies import parse_reply
from data.tokenizer import byte_of_symbol, char_offsets
from integrations.verl import estimator  # noqa: F401 (registers estimator.NAME with verl)

BYTE_OF_SYMBOL = byte_of_symbol()  # byte-level BPE's printable symbol -> the byte it stands for
SETTINGS = {field.name for field in dataclasses.fields(guards.Guards)} | {"missing_eos_penalty"}


def token_bytes(tokenizer, ids):
    """The bytes each id of a transformers byte-level BPE tokenizer stands for; b"" for a special
    token (decoding leaves it out). ValueError for a token outside the byte alphabet."""
    special = set(tokenizer.all_special_ids)
    pieces = []
    for i, symbol in zip(ids, tokenizer.convert_ids_to_tokens(ids)):
        if i in special:
            pieces.append(b"")
        elif all(c in BYTE_OF_SYMBOL for c in symbol):
            pieces.append(bytes(BYTE_OF_SYMBOL[c] for c in symbol))
        else:
            name = tokenizer.name_or_path or "the tokenizer"
            raise ValueError(f"token {i} ({symbol!r}) of {name} is not byte-level BPE: "
                             "character offsets need its bytes")
    return pieces


def check_byte_level(tokenizer):
    """ValueError, before any sample, for a tokenizer whose vocabulary is not byte-level BPE."""
    special = set(tokenizer.all_special_ids)
    token_bytes(tokenizer, [i for i in range(len(tokenizer)) if i not in special])


def user_text(messages):
    """The text of a chat's last user message: the prompt the critic reads."""
    for message in reversed(list(messages)):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"]
    raise ValueError("the sample's raw_prompt holds no user message with text content")


class SpanRewardManager(RewardManagerBase):
    """verl's reward manager for Text2Grad: a critique per response, a reward per token."""

    def __init__(self, config, tokenizer, compute_score, reward_router_address=None,
                 reward_model_tokenizer=None):  # verl passes the reward model's tokenizer: unread
        super().__init__(config, tokenizer, compute_score)
        reward = config.reward
        if not reward.reward_model.enable or reward.reward_model.enable_resource_pool:
            raise ValueError("SpanRewardManager needs the colocated reward model "
                             "(reward.reward_model.enable=True, enable_resource_pool=False): "
                             "elsewhere verl keeps one reward per sample")
        if not reward.custom_reward_function.path:
            raise ValueError("set reward.custom_reward_function.path and .name to the critic "
                             "(integrations/verl/critics.py): without one verl never asks this "
                             "manager and scores with the reward model alone")
        settings = dict(reward.get("reward_kwargs") or {})
        unknown = set(settings) - SETTINGS
        if unknown:
            raise ValueError(f"reward.reward_kwargs: unknown {sorted(unknown)}; "
                             f"known: {sorted(SETTINGS)}")
        self.missing_eos_penalty = settings.pop("missing_eos_penalty",
                                                ppo.PPOConfig.missing_eos_penalty)
        self.shaping = guards.Guards(**settings)
        self.router = reward_router_address  # the colocated reward model's servers (llm_judge)
        self.stops = set(tokenizer.all_special_ids)
        check_byte_level(tokenizer)

    async def run_single(self, data):
        """One sample -> {"reward_score": its row of rm_scores (a list, one per response token),
        "reward_extra_info": what verl logs beside it}."""
        item = data[-1]  # a sample of several turns: its last, as verl's own managers score
        width = item.batch["responses"].shape[-1]
        length = int(item.batch["attention_mask"][-width:].sum())  # responses are right-padded
        ids = item.batch["responses"][:length].tolist()
        prompt = user_text(item.non_tensor_batch["raw_prompt"])
        ground_truth = (item.non_tensor_batch.get("reward_model") or {}).get("ground_truth")
        row, stats = await self.loop.run_in_executor(None, self.score, prompt, ids, ground_truth)
        return {"reward_score": row, "reward_extra_info": stats}

    def score(self, prompt, ids, ground_truth):
        """(row, stats) for one response, ids (L,) as sampled, its EOS included if it has one."""
        if not ids:  # no token to reward
            return [], {"span_reward": 0.0, "unaligned": 0, "unparsed": 0}
        pieces = token_bytes(self.tokenizer, ids)
        text = b"".join(pieces).decode("utf-8", "replace")  # what char_offsets counts in
        try:  # the critic's own errors (a prompt it cannot read) end the run; a judge that did
            critique = self.compute_score(prompt=prompt, response=text,  # not answer: no reply
                                          ground_truth=ground_truth, router=self.router)
        except OSError:
            critique = ""
        try:  # no reply, or not in the annotation format: no span, counted
            reply, unparsed = parse_reply(critique), 0
        except ValueError:
            reply, unparsed = {"textual_feedback": "", "good_spans": [], "poor_spans": []}, 1
        delta, stats = align(text, char_offsets(pieces), reply)                 # a special: 0
        mask = torch.ones(1, len(ids))                                          # (1, L)
        ended = torch.tensor([bool(ids) and ids[-1] in self.stops])             # (1,) its EOS last
        scores = guards.shaped_scores([delta], [ids], mask, ended, self.shaping)
        no_kl = torch.zeros_like(mask)  # verl subtracts beta KL_t itself
        rewards = ppo.token_rewards(scores, no_kl, no_kl, mask, ended, 0.0,
                                    self.missing_eos_penalty)                   # (1, L)
        return rewards[0].tolist(), {"span_reward": rewards.sum().item(),
                                     "unaligned": stats["unaligned"], "unparsed": unparsed}

    @classmethod
    def assemble_rm_scores(cls, data, scores):
        """rm_scores (B, N) from one row per sample, each from its response's first token on and 0
        past its end (verl's own puts each sample's one number on its last token)."""
        rm_scores = torch.zeros_like(data.batch["responses"], dtype=torch.float32)  # (B, N)
        for i, row in enumerate(scores):
            rm_scores[i, :len(row)] = torch.tensor(row, dtype=torch.float32)
        return rm_scores
