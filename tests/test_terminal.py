"""terminal.py against a hand-written results dict: every printed number is the one put in, rounded as
the lines say (mean ± interval to 3 decimals, explained variance to 2)."""
from data import get_task
from experiments import terminal

TASK = get_task("summarize")


def method(scores, ci95, lam, ev, ev_mc):
    return {"score": sum(scores) / len(scores), "ci95": ci95, "scores": scores, "curve": [[1, 0.5], [2, 0.8125]],
            "lambda": lam, "explained_variance": ev, "explained_variance_mc": ev_mc}


def results(seeds=2):
    scores = [0.75, 0.85][:seeds]
    methods = {"sft": {"score": 0.5, "ci95": 0.0, "scores": [0.5], "curve": [[0, 0.4]]},
               "text2grad": method(scores, 0.0635, 0.95, [0.25, 0.35][:seeds], [0.125, 0.075][:seeds]),
               "ppo_scalar": method([0.7, 0.8][:seeds], 0.0635, 0.5, [0.0, 0.1][:seeds], [0.0, 0.0][:seeds])}
    return {"methods": methods, "paired": {"text2grad - ppo_scalar": {"mean": 0.05, "ci95": 0.0125, "verdict": "higher", "units": 2}},
            "area": {"text2grad - ppo_scalar": {"mean": 0.0375, "ci95": 0.05, "verdict": "tie", "units": 2}},
            "lambda_grid": {"text2grad": {"0.5": 0.7, "0.95": 0.8}}}


def test_results_lines_carry_the_numbers_put_in(capsys):
    terminal.print_results(TASK, results())
    out = capsys.readouterr().out
    assert "text2grad         0.800 ± 0.064   validation 0.812   seeds: 0.750 0.850   lambda 0.95  EV 0.30 (reward-to-go 0.10)" in out
    assert "ppo_scalar        0.750 ± 0.064   validation 0.812   seeds: 0.700 0.800   lambda 0.5   EV 0.05 (reward-to-go 0.00)" in out
    assert "text2grad - ppo_scalar           +0.050 ± 0.013 (higher)" in out
    assert "area over its updates), paired over seeds:\n    text2grad - ppo_scalar           +0.037 ± 0.050 (tie)" in out
    assert "text2grad 0.5:0.700 0.95:0.800" in out


def test_one_seed_asks_for_more(capsys):
    terminal.print_results(TASK, results(seeds=1))
    out = capsys.readouterr().out
    assert "paired differences need two seeds or more" in out and "+0.050" not in out


def test_reward_models_and_their_seeds(capsys):
    rm = {name: {"positive_f1": 0.9, "negative_f1": 0.8, "exact_span_match": 0.7, "critique_rougeL": 0.6,
                 "seeds": {"positive_f1": [0.9, 0.92]}} for name in ("cot", "no_cot")}
    rm["no_cot"]["seeds"] = {"positive_f1": [0.95, 0.93]}
    rm["scalar"] = {"score_correlation": 0.875, "seeds": {"score_correlation": [0.875, 0.8125]}}
    paired = {"positive_f1": {"mean": -0.03, "ci95": 0.0254, "verdict": "tie", "units": 2}}
    terminal.print_reward_models(TASK, {"reward_model": rm, "reward_paired": paired})
    out = capsys.readouterr().out
    assert "reward model cot   : span F1 positive 0.900, negative 0.800, exact spans 0.700, critique ROUGE-L 0.600" in out
    assert "reward model no_cot: span F1 positive 0.900, negative 0.800, exact spans 0.700\n" in out
    assert "correlation with its target (the critic's guarded scores, summed) 0.875, per seed 0.875 0.812\n" in out
    assert "positive_f1, cot - no_cot over 2 reward-model seeds: -0.030 ± 0.025 (tie); cot 0.900 0.920, no_cot 0.950 0.930" in out
