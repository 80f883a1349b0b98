"""runstate.Snapshots inside the training loops: a loop stopped and resumed from its snapshot ends with
exactly the weights of a loop never stopped, and runs only the steps that were left; a NaN stops
training and leaves the last good state on disk."""
import copy

import pytest
import torch

import ppo
import runstate
from model import GPT, GPTConfig, fit
from runstate import Diverged, Interrupted, Snapshots

PAD, EOS = 0, 2


@pytest.fixture
def stop():
    """Ask for a stop as Ctrl-C would; always cleared afterwards."""
    yield lambda: runstate._stop.update(requested=True)
    runstate._stop.update(requested=False)


def tiny_gpt():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=12, block_size=32, n_layer=1, n_head=2, n_embd=16))


def regression(model, calls, stop_after=None, nan_at=None, stop=None):
    """batch_loss for fit: next-token loss on random rows drawn with the loop's rng; records the
    steps it was called for."""
    def batch_loss(step, rng):
        calls.append(step)
        rows = torch.tensor([[rng.randrange(3, 12) for _ in range(8)] for _ in range(4)])
        _, logits = model(rows[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten())
        if step == stop_after:
            stop()
        if step == nan_at:
            loss = loss * float("nan")
        return loss, {}
    return batch_loss


def test_fit_stopped_and_resumed_equals_fit_straight(tmp_path, stop):
    def norm(model):  # a learning-curve point: changes every step, so a curve resumed wrongly shows it
        return {"norm": model.wte.weight.norm().item()}

    straight, calls = tiny_gpt(), []
    losses, curve = fit(straight, regression(straight, calls), steps=10, lr=1e-2, warmup=2, seed=3, evaluate=norm,
                        eval_every=3)
    assert [step for step, _ in curve] == [3, 6, 9, 10]  # every 3 steps, and after the last
    assert curve[-1][1]["norm"] == pytest.approx(straight.wte.weight.norm().item())

    path = str(tmp_path / "fit.partial.pt")
    first, calls_first = tiny_gpt(), []
    with pytest.raises(Interrupted):
        fit(first, regression(first, calls_first, stop_after=4, stop=stop), steps=10, lr=1e-2, warmup=2, seed=3,
            snapshots=Snapshots(path, every_s=1e9), evaluate=norm, eval_every=3)  # saved only because of the stop
    runstate._stop.update(requested=False)
    second, calls_second = tiny_gpt(), []
    resumed, resumed_curve = fit(second, regression(second, calls_second), steps=10, lr=1e-2, warmup=2, seed=3,
                                 snapshots=Snapshots(path, every_s=1e9), evaluate=norm, eval_every=3)
    assert calls_first == [0, 1, 2, 3, 4] and calls_second == [5, 6, 7, 8, 9]
    assert resumed == losses and resumed_curve == curve
    for p, q in zip(second.state_dict().values(), straight.state_dict().values()):
        assert torch.equal(p, q)


def test_nan_stops_fit_and_the_snapshot_is_the_last_good_step(tmp_path, stop):
    path = str(tmp_path / "fit.partial.pt")
    model, calls = tiny_gpt(), []
    with pytest.raises(Diverged) as error:
        fit(model, regression(model, calls, nan_at=3), steps=10, lr=1e-2, seed=3, snapshots=Snapshots(path, every_s=0))
    assert "the loss is nan at step 3" in str(error.value) and f"{path} (step 3)" in str(error.value)
    saved = torch.load(path, weights_only=True)
    assert saved["step"] == 3
    # the weights after steps 0, 1, 2 of a clean 10-step run (same schedule), stopped there
    clean, calls = tiny_gpt(), []
    with pytest.raises(Interrupted):
        fit(clean, regression(clean, calls, stop_after=2, stop=stop), steps=10, lr=1e-2, seed=3)
    for name, value in clean.state_dict().items():
        assert torch.equal(saved["model"][name], value)


def test_ppo_train_stopped_and_resumed_equals_straight(tmp_path, stop):
    config = ppo.PPOConfig(max_new_tokens=6, batch_size=8, minibatch_size=4, epochs=2, updates=4, lr=3e-3)
    policy = tiny_gpt().eval()
    prompts = [[1, 3 + i % 8] for i in range(16)]
    evaluate = lambda gpt: sum(p.sum().item() for p in gpt.parameters())

    def train(reward, snapshots=None):
        model = ppo.ActorCritic(copy.deepcopy(policy))
        curve, history, _ = ppo.train(model, policy, prompts, reward, EOS, PAD, config, seed=5, evaluate=evaluate,
                                      eval_every=2, snapshots=snapshots)
        return model, curve, history

    def blame_sevens(indices, tokens, mask):
        return -((tokens == 7) & mask.bool()).float()

    straight, curve, history = train(blame_sevens)
    seen = []

    def stop_after_two(indices, tokens, mask):
        seen.append(indices)
        if len(seen) == 3:  # the value warm-up's batch, then two updates
            stop()
        return blame_sevens(indices, tokens, mask)

    path = str(tmp_path / "ppo.partial.pt")
    with pytest.raises(Interrupted):
        train(stop_after_two, Snapshots(path, every_s=1e9))
    runstate._stop.update(requested=False)
    resumed, curve2, history2 = train(lambda *a: (seen.append(a[0]), blame_sevens(*a))[1], Snapshots(path, every_s=1e9))
    assert len(seen) == 5  # the warm-up and two updates, then the two that were left
    assert curve2 == curve and history2 == history
    for p, q in zip(resumed.state_dict().values(), straight.state_dict().values()):
        assert torch.equal(p, q)


def test_nan_reward_stops_ppo_naming_the_update(tmp_path):
    config = ppo.PPOConfig(max_new_tokens=6, batch_size=8, minibatch_size=4, epochs=1, updates=3)
    policy = tiny_gpt().eval()
    model = ppo.ActorCritic(copy.deepcopy(policy))
    calls = []

    def nan_on_second_update(indices, tokens, mask):
        calls.append(1)
        return mask.float() * (float("nan") if len(calls) == 3 else 1.0)  # the value warm-up, update 1, update 2

    path = str(tmp_path / "ppo.partial.pt")
    with pytest.raises(Diverged) as error:
        ppo.train(model, policy, [[1, 3 + i % 8] for i in range(16)], nan_on_second_update, EOS, PAD, config,
                  snapshots=Snapshots(path, every_s=0))
    assert "the PPO loss is nan" in str(error.value) and "at step 2" in str(error.value)
    assert f"{path} (step 1)" in str(error.value) and torch.load(path, weights_only=True)["step"] == 1
