"""experiments/loss_forms.py: the three forms of the loss path that experiments/bench.py times must compute the
same numbers; and the update benchmark runs."""
import pytest
import torch

from experiments import bench, loss_forms


@pytest.mark.slow
def test_the_three_forms_agree_with_float64():
    x = loss_forms.make_inputs(N=96, V=40, dtype=torch.float32, device="cpu", T=32)
    errors = loss_forms.fp64_errors(x, rows=96)
    for form in loss_forms.FORMS:
        assert errors[form]["rollout"] < 1e-4 and errors[form]["loss"] < 1e-5 and errors[form]["grad"] < 1e-6, form


def test_inputs_have_the_documented_padding():
    x = loss_forms.make_inputs(N=64 * 100, V=8, dtype=torch.float32, device="cpu", T=100)
    padding = 1 - x["mask"].mean(1)
    assert x["logits"].shape == (64, 100, 8)
    assert padding.min() >= 0.1 - 1e-6 and padding.max() <= 0.5 + 1e-6


def test_smoke_one_ppo_update_of_each_method_runs_and_is_timed(tmp_path, monkeypatch):
    """A smoke test: the PPO-update benchmark calls text2grad's reward functions and ppo's update as
    they are now (it once broke silently when they changed). Its numbers are timings; nothing here
    can check them against an independent value but their signs."""
    monkeypatch.chdir(tmp_path)  # no runs/summarize here: untrained models, seconds on a CPU
    result = bench.bench_ppo_update("cpu", 4, compare_compile=False)  # compiling: tests/test_loss.py, tests/test_ppo.py
    assert set(result["update_s"]) == {"text2grad", "ppo_scalar"}
    assert all(seconds > 0 for seconds in result["seconds"].values())
    assert 4 <= result["response_tokens"] <= 4 * 64  # four prompts, at most MAX_NEW_TOKENS each
