"""A small GPT: the policy, the reference policy and the reward model's trunk.

Pre-LayerNorm decoder blocks, causal attention through scaled_dot_product_attention, learned
positions, output projection tied to the token embedding. forward() returns the hidden states and
the logits of every position, because PPO and the reward model read every position, not only the
last one. A first read can take this file as nanoGPT's and skip what is marked "skip on a first
read": the canon layer, the KV cache's inner workings, bf16 and the choice of device.

The canon layer (Allen-Zhu, "Physics of Language Models: Part 4.1", 2025) is a causal convolution
over the last few positions, channel by channel, added to each attention's input. It lets the
token "Rome" in "Lena lives in Rome" carry "Lena" before any attention has learned to fetch it, so
that a question about Lena can find Rome in one attention step: without it this GPT answers qa's
look-ups at chance (`python -m experiments.lookup`); summarize and code do not need it.

Padding: with an attention_mask (left padding: generation, PPO), positions count real tokens only
and padded keys are never attended to, so a sequence gets the same numbers whatever its padding.
Precision: float32 weights; on a CUDA device that supports it the forward runs under bf16 autocast
(model.bf16), LayerNorm, softmax and every loss in float32; elsewhere everything is float32, so a
CPU run repeats itself. Left out on purpose: dropout (RL needs none), weight decay groups.
"""
import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 1024  # tokenizer's vocabulary, special tokens included
    block_size: int = 256   # longest sequence (prompt + response) the positions cover
    n_layer: int = 4        # transformer blocks
    n_head: int = 4         # attention heads per block
    n_embd: int = 128       # width of the residual stream; must divide by n_head
    canon: int = 10         # positions each canon layer mixes (this one and canon - 1 before
                            # it); 0: no canon layers (nanoGPT's block)


class KVCache:
    """Keys and values of every layer for the tokens seen so far (a new token costs one position
    of compute, not the whole sequence), and each canon layer's last canon - 1 inputs. (Skip on
    a first read) Its shapes never change: attention reads all max_len slots, masking unfilled
    ones, and the fill level is a tensor, so a GPU can replay a recorded step (decoder)."""

    def __init__(self, config, batch_size, max_len, device, dtype=torch.float32):
        if max_len > config.block_size:  # so that no position it hands out is past the block
            raise ValueError(f"a cache of {max_len} positions exceeds block_size "
                             f"{config.block_size}")
        head_size = config.n_embd // config.n_head
        shape = (config.n_layer, batch_size, config.n_head, max_len, head_size)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        canon_shape = (config.n_layer, batch_size, max(0, config.canon - 1), config.n_embd)
        self.canon = torch.zeros(canon_shape, device=device, dtype=dtype)  # before the first token
        self.real = torch.zeros(batch_size, max_len, dtype=torch.bool, device=device)  # real keys
        self.length = torch.zeros((), dtype=torch.long, device=device)  # slots filled
        self.slots = None  # the slots of the tokens being added (T,)

    def add(self, token_mask):
        """Take in T new tokens, token_mask (B, T) 1 for real ones. Returns their positions (B, T)
        (real tokens before them) and the attention mask (B, 1, T, max_len): a token sees the real
        tokens up to itself, and always itself (a padding row is never empty: softmax of nothing
        is NaN). Sets slots, where the layers write the new keys and values."""
        T, max_len = token_mask.shape[1], self.real.shape[1]
        self.slots = self.length + torch.arange(T, device=self.length.device)  # (T,)
        self.real.index_copy_(1, self.slots, token_mask.bool())
        positions = (self.real.long().cumsum(1) - 1).clamp(min=0).index_select(1, self.slots)
        query = self.slots[:, None]
        key = torch.arange(max_len, device=query.device)[None, :]
        mask = ((key <= query) & self.real[:, None, None, :]) | (key == query)
        self.length += T
        return positions, mask


class Canon(nn.Module):
    """(skip on a first read) h_t + sum_{o = 0}^{k-1} w_o * h_{t-o}, each channel with its own k
    weights: a causal depthwise convolution, added to its input. h before the first token (and at
    padded positions) counts as 0."""

    def __init__(self, n_embd, k):
        super().__init__()
        self.k = k
        # conv1d's layout (C, 1, k): weight[c, 0, k - 1 - o] multiplies h_{t-o}. A random start,
        # not a zero one: from zero the mixing gets almost no gradient while attention is uniform.
        self.weight = nn.Parameter(torch.randn(n_embd, 1, k) * 0.5)

    def forward(self, h, token_mask=None, cache=None, layer=None):
        """h (B, T, C); token_mask (B, T, 1), 1 for real tokens, or None; cache: a KVCache holding
        the inputs before these T positions (and updated with them), or None. -> (B, T, C)"""
        if token_mask is not None:
            h = h * token_mask
        if cache is None:
            before = h.new_zeros(h.shape[0], self.k - 1, h.shape[2])
        else:
            before = cache.canon[layer]
        window = torch.cat([before, h], dim=1)  # (B, k - 1 + T, C)
        if cache is not None:
            cache.canon[layer] = window[:, window.shape[1] - (self.k - 1):]
        weight = self.weight.to(h.dtype)
        mixed = F.conv1d(window.transpose(1, 2), weight, groups=h.shape[2])  # (B, C, T)
        return h + mixed.transpose(1, 2)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x, mask, cache, layer):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in (q, k, v))  # (B, H, T, D)
        if cache is not None:  # write the new keys and values, then read every slot
            cache.k[layer].index_copy_(2, cache.slots, k.to(cache.k.dtype))
            cache.v[layer].index_copy_(2, cache.slots, v.to(cache.v.dtype))
            k, v = cache.k[layer], cache.v[layer]  # (B, H, S, D), S = the cache's max_len
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                           is_causal=mask is None)  # (B, H, T, D)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.canon = Canon(config.n_embd, config.canon) if config.canon else None
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(),
                                 nn.Linear(4 * config.n_embd, config.n_embd))

    def forward(self, x, mask, cache, layer, token_mask=None):
        h = self.ln_1(x)
        if self.canon is not None:
            h = self.canon(h, token_mask, cache, layer)
        x = x + self.attn(h, mask, cache, layer)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.bf16 = True  # bf16 autocast where supported (uses_bf16); a run-time choice, not saved
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("attn.proj.weight") or name.endswith("mlp.2.weight"):
                # residual branches scaled so the stream's variance does not grow with depth
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx, attention_mask=None, cache=None):
        """idx (B, T) token ids; attention_mask (B, T) with 1 for real tokens, or None when
        nothing is padded; cache a KVCache holding the tokens before these (which it then holds
        too), or None. Returns hidden (B, T, C) after the final LayerNorm and logits (B, T, V)."""
        hidden = self.hidden_states(idx, attention_mask, cache)
        return hidden, self.lm_head(hidden)

    def lm_head(self, hidden):
        """Logits through the tied embedding: (..., C) -> (..., V), bf16 under autocast."""
        with self.autocast(hidden.device):
            return hidden @ self.wte.weight.T

    def autocast(self, device):
        """(skip on a first read) bf16 autocast where uses_bf16, a no-op context elsewhere."""
        if not (self.bf16 and uses_bf16(device)):
            return contextlib.nullcontext()  # also where autocast knows no such device (meta)
        # cache_enabled False: no weight cast kept between calls; a recorded step casts its own
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False)

    def hidden_states(self, idx, attention_mask=None, cache=None):
        """forward() without the logits (B, T, C): PPO needs the logits of the response only."""
        B, T = idx.shape
        if T > self.config.block_size:  # a cache is checked against block_size when made
            raise ValueError(f"sequence of {T} tokens is longer than block_size "
                             f"{self.config.block_size}")
        token_mask = None
        if cache is not None:
            attention_mask = torch.ones_like(idx) if attention_mask is None else attention_mask
            positions, mask = cache.add(attention_mask)
            token_mask = attention_mask[:, :, None].float()  # (B, T, 1): padding feeds no canon
        elif attention_mask is None:
            positions, mask = torch.arange(T, device=idx.device).expand(B, T), None  # causal
        else:
            # Position = number of real tokens before this one, so left padding shifts nothing.
            positions = (attention_mask.long().cumsum(1) - 1).clamp(min=0)
            query = torch.arange(T, device=idx.device)[:, None]
            key = torch.arange(T, device=idx.device)[None, :]
            # (B, 1, T, T): causal and real keys only; a query may always see itself, so the rows
            # of padding positions are never empty (an empty row would make softmax NaN).
            mask = ((key <= query) & attention_mask.bool()[:, None, None, :]) | (key == query)
            token_mask = attention_mask[:, :, None].float()  # (B, T, 1): padding feeds no canon
        with self.autocast(idx.device):
            x = self.wte(idx) + self.wpe(positions)  # (B, T, C)
            for layer, block in enumerate(self.blocks):
                x = block(x, mask, cache, layer, token_mask)
            return self.ln_f(x)  # float32: autocast runs LayerNorm in float32


def token_logprobs(logits, targets, temperature=1.0):
    """log pi(target) under softmax(logits / temperature), without building the full log-softmax:
    log pi(y) = z_y - logsumexp(z), z = logits / temperature.  (..., V), (...) -> (...)"""
    z = logits.float() / temperature
    return z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(z, dim=-1)


def left_pad(sequences, pad_id, device=None):
    """Token-id lists -> (ids (B, P), attention_mask (B, P)), padded on the left."""
    P = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), P), pad_id, dtype=torch.long)
    mask = torch.zeros(len(sequences), P, dtype=torch.long)
    for i, s in enumerate(sequences):
        if s:
            ids[i, P - len(s):] = torch.tensor(s)
            mask[i, P - len(s):] = 1
    return ids.to(device), mask.to(device)


# Tokens between "all done?" checks: free on a CPU; a GPU runs 8 tokens ahead meanwhile
ALL_DONE_EVERY = {"cpu": 1}
CUDA_GRAPHS = True  # replay a recorded decode step on CUDA (decoder); False: launch each kernel


def decoder(model, cache):
    """(skip on a first read) decode(token (B, 1), real (B, 1)) -> the next logits (B, V), one
    step through the cache, on CUDA recorded once as a CUDA graph and replayed: its few hundred
    tiny kernels take longer to launch one by one from Python than to run."""
    if cache.k.device.type != "cuda" or not CUDA_GRAPHS:
        return lambda token, real: model(token, real, cache)[1][:, -1]
    B, max_len = cache.real.shape
    token = torch.zeros(B, 1, dtype=torch.long, device=cache.k.device)  # the graph's inputs
    real = torch.ones_like(token)
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # recording needs a stream of its own
        # a warm-up on a scratch cache (nothing set up for the first time while recording), then
        # the step recorded, not run: the cache is untouched until a replay
        model(token, real, KVCache(model.config, B, max_len, cache.k.device, cache.k.dtype))
        graph.capture_begin()
        logits = model(token, real, cache)[1][:, -1]
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(stream)

    def decode(new_token, new_real):
        token.copy_(new_token)
        real.copy_(new_real)
        graph.replay()
        return logits  # the graph's output, overwritten by the next replay
    return decode


@torch.no_grad()
def generate(model, prompts, max_new_tokens, eos_id, pad_id, temperature=1.0, greedy=False,
             generator=None, with_logprobs=False, min_new_tokens=0):
    """Sample responses for a batch of prompts with a KV cache.

    prompts: list of B token-id lists (different lengths are left-padded).
    Returns (tokens, logprobs, mask), each (B, N) with N <= max_new_tokens: the sampled ids
    (pad_id after a sequence's EOS); log pi(token) at `temperature`, or None unless with_logprobs
    (PPO recomputes them in one full pass, and the tests compare the two); 1 for real response
    tokens, the EOS included. min_new_tokens: no EOS before that many tokens (a sampler's rule,
    as the authors' `min_new_tokens`; the log-probs are still the policy's own).
    The loop stops once every sequence has its EOS. Asking "all done?" waits for the device, so
    it is asked every ALL_DONE_EVERY[device type] tokens; the columns past the longest response
    are then cut, so the result is the same however often it is asked.
    """
    device = next(model.parameters()).device
    idx, attention_mask = left_pad(prompts, pad_id, device)
    B, P = idx.shape
    if P + max_new_tokens > model.config.block_size:
        raise ValueError(f"prompt of {P} tokens plus {max_new_tokens} new tokens exceeds "
                         f"block_size {model.config.block_size}")
    cache = KVCache(model.config, B, P + max_new_tokens, device, next(model.parameters()).dtype)
    logits = model(idx, attention_mask, cache)[1][:, -1]  # (B, V)
    decode = decoder(model, cache)  # PLUMBING: a step through the cache, recorded on CUDA
    done = torch.zeros(B, dtype=torch.bool, device=device)
    check_every = ALL_DONE_EVERY.get(device.type, 8)
    tokens, logprobs, masks = [], [], []
    for step in range(max_new_tokens):
        allowed = logits  # what the sampler draws from; the log-probs stay the policy's own
        if step < min_new_tokens:  # no EOS yet: the response cannot end before min_new_tokens
            allowed = logits.clone()
            allowed[:, eos_id] = float("-inf")
        if greedy:
            token = allowed.argmax(-1)
        else:
            probs = torch.softmax(allowed.float() / temperature, dim=-1)
            # a draw from probs: argmax p / q, q ~ Exp(1), what torch.multinomial(probs, 1)
            # computes, draw for draw, without its check that waits for the device every token
            noise = torch.empty_like(probs).exponential_(generator=generator)
            token = (probs / noise).argmax(-1)
        alive = ~done
        token = torch.where(alive, token, torch.full_like(token, pad_id))
        tokens.append(token)
        if with_logprobs:
            logprobs.append(token_logprobs(logits, token, temperature) * alive)
        masks.append(alive.long())
        done = done | (token == eos_id)
        if (step + 1) % check_every == 0 and done.all():  # PLUMBING: a wait for the device
            break
        if step + 1 < max_new_tokens:
            logits = decode(token[:, None], alive.long()[:, None])
    masks = torch.stack(masks, 1)
    N = int(masks.sum(0).nonzero().max()) + 1  # the last column with a real token
    logprobs = torch.stack(logprobs, 1)[:, :N] if with_logprobs else None
    return torch.stack(tokens, 1)[:, :N], logprobs, masks[:, :N]


# PLUMBING (skip on a first read): which device a run uses, and where bf16 autocast is on

def pick_device(name="auto"):
    """The device for name: "auto" picks CUDA, then Apple's MPS, then the CPU; any other name
    is checked by allocating on it. Returns its name; ValueError in one line if torch cannot use
    it. On CUDA, float32 matmuls may use TF32 (coarser than float32, finer than bf16)."""
    if name == "auto":
        if torch.cuda.is_available():
            name = "cuda"
        elif torch.backends.mps.is_available():
            name = "mps"
        else:
            name = "cpu"
    try:
        torch.zeros(1, device=name)
    except (RuntimeError, ValueError, AssertionError) as error:
        raise ValueError(f"--device {name} is not a device torch can use here "
                         f"({type(error).__name__}); try --device cpu") from None
    if torch.device(name).type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return name


def uses_bf16(device):
    """bf16 autocast only on a CUDA device that supports bf16; float32 on the CPU and MPS."""
    return device.type == "cuda" and torch.cuda.is_bf16_supported()
