"""Data parallelism (parallel.py) with 2 CPU processes and the gloo backend: one SFT step, one
reward-model step and one PPO update, each on fixed data split between the ranks, must leave the
weights that one process gets from the same step on the combined batch."""
import copy
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import parallel
import ppo
import sft
from data import Example, get_task, make_splits
from data.tokenizer import Tokenizer, training_texts
from model import GPT, GPTConfig
from reward import RewardModel, encode_record, train_reward_model

WORLD = 2
CASES = ("sft", "reward", "ppo")


def setup():
    """Tokenizer, an initial GPT and each rank's share of the data. The shares hold equally many
    loss tokens (DDP averages per-rank means: equal to the combined mean only then), with different
    prompts, so the ranks' gradients differ."""
    task = get_task("summarize")
    splits = make_splits(task, {"train": 16, "validation": 2, "test": 2}, seed=0)
    tokenizer = Tokenizer.train(training_texts(task, splits["train"]), 400)
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=256, n_layer=1, n_head=2, n_embd=32))
    examples = splits["train"][:4]
    shares = {"sft": [[Example(e.prompt + f" ({rank})" * (rank + 1), e.reference, e.demonstration) for e in examples]
                      for rank in range(WORLD)]}
    records = [{"prompt": e.prompt, "response": e.demonstration, **task.critique(e, e.demonstration)} for e in examples]
    shares["reward"] = [[encode_record(tokenizer, {**r, "prompt": r["prompt"] + " !" * (rank + 1)})[0] for r in records]
                        for rank in range(WORLD)]
    generator = torch.Generator().manual_seed(1)
    shares["ppo"] = []
    for rank in range(WORLD):
        prompts = [[tokenizer.bos_id, *torch.randint(5, tokenizer.vocab_size, (6,), generator=generator).tolist(),
                    tokenizer.response_id] for _ in range(4)]
        tokens = torch.randint(5, tokenizer.vocab_size, (4, 8), generator=generator)  # no EOS: every mask full
        scores = torch.randn(4, 8, generator=generator)
        shares["ppo"].append((prompts, tokens, torch.ones(4, 8, dtype=torch.long), scores))
    return tokenizer, gpt, shares


def step(case, tokenizer, gpt, share):
    """One optimizer step of `case` on `share` (a list for one process, the whole data for the reference)."""
    torch.manual_seed(0)
    if case == "sft":
        model = copy.deepcopy(gpt)
        sft.train_sft(model, tokenizer, share, steps=1, batch_size=len(share), lr=1e-2, device="cpu", seed=0)
        return model
    if case == "reward":
        model = RewardModel(copy.deepcopy(gpt), "span", cot=True)
        train_reward_model(model, tokenizer, share, steps=1, batch_size=len(share), lr=1e-2, device="cpu", seed=0)
        return model
    prompts, tokens, mask, scores = share
    config = ppo.PPOConfig(epochs=1, minibatch_size=len(prompts), lr=1e-2, max_new_tokens=8)
    model = ppo.ActorCritic(copy.deepcopy(gpt))
    batch = ppo.score_responses(model, gpt, prompts, tokens, mask, tokenizer.eos_id, tokenizer.pad_id, config)
    optimizer = model.optimizer(config)
    ppo.ppo_iteration(parallel.wrap(model), optimizer, batch, scores, ppo.KLController(config.beta), config,
                      torch.Generator().manual_seed(0))
    return model


def worker(rank, port, out):
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    parallel.init("cpu")
    tokenizer, gpt, shares = setup()
    for case in CASES:
        model = step(case, tokenizer, gpt, shares[case][rank])
        torch.save(model.state_dict(), os.path.join(out, f"{case}_{rank}.pt"))
    dist.destroy_process_group()


def combined(case, shares):
    if case == "ppo":
        return ([p for s in shares for p in s[0]], *(torch.cat([s[k] for s in shares]) for k in (1, 2, 3)))
    return [x for s in shares for x in s]


@pytest.mark.slow
def test_two_processes_take_the_step_of_one_on_the_combined_batch(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(port, str(tmp_path)), nprocs=WORLD)
    tokenizer, gpt, shares = setup()
    for case in CASES:
        reference = step(case, tokenizer, gpt, combined(case, shares[case])).state_dict()
        ranks = [torch.load(tmp_path / f"{case}_{rank}.pt", weights_only=True) for rank in range(WORLD)]
        alone = step(case, tokenizer, gpt, shares[case][0]).state_dict()  # rank 0's data only: must differ
        # Adam's first step is lr * g / (|g| + eps): a gradient within float noise of zero (the sums run
        # in another order) can move its weight by a fraction of lr (1e-2), so allow 1% of lr
        moved = max((reference[k] - alone[k]).abs().max().item() for k in reference)
        assert moved > 1e-3, f"{case}: the two shares give the same step, so the test proves nothing"
        for name, value in reference.items():
            torch.testing.assert_close(ranks[0][name], value, rtol=0, atol=1e-4, msg=f"{case}: {name}")
            assert torch.equal(ranks[0][name], ranks[1][name]), f"{case}: the ranks disagree on {name}"
