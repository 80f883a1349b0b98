"""experiments/robustness.py against hand-made curves (no training): the setting each method
chooses on validation, the samples and critic calls to hold on test, the contrasts, its record and
the tables report --from rebuilds; and one tiny real seed through text2grad.prepare (slow tier)."""
import json
import math

import pytest

from experiments.fanout import Outcome, Units
from experiments import report, robustness

SFT = 0.2  # 90% of the way to 1: 0.92


def run(setting, holds, areas):
    """A (seed, setting) record: SFT at 0.2; method m's test curve at 1.0 from update holds[m] on
    (0.5 before), its validation curve flat at areas[m] (its area)."""
    updates = robustness.BUDGET // setting["batch"]
    curves = {m: [[u, areas[m] if u else SFT, 1.0 if u >= holds[m] else 0.5] for u in range(updates + 1)]
              for m in robustness.METHODS}
    return {"seed": 0, "setting": setting, "commit": "abc", "machine": "test", "device": "cpu", "seconds": 1,
            "annotations": 2000, "sft": {"validation": SFT, "test": SFT}, "curves": curves}


def fake_runs(seeds=(30, 31)):
    """Every setting; the sums validate best at batch 16, lr 2e-4, lambda 1.0, the spans at batch
    64, lr 1e-4, lambda 0.95; spans hold at update 2 everywhere, the sums at update 6 (never at
    batch 64: 8 updates, but held from 9 on)."""
    runs = {}
    for seed in seeds:
        runs[str(seed)] = {}
        for setting in robustness.settings():
            span_best = setting == {"batch": 64, "lr": 1e-4, "lam": 0.95}
            sum_best = setting == {"batch": 16, "lr": 2e-4, "lam": 1.0}
            areas = {m: 0.9 if (span_best if m in ("text2grad", "oracle") else sum_best) else 0.5
                     for m in robustness.METHODS}
            holds = {m: 2 if m in ("text2grad", "oracle") else (6 if setting["batch"] < 64 else 9)
                     for m in robustness.METHODS}
            runs[str(seed)][robustness.name_of(setting)] = run(setting, holds, areas)
    return runs


def test_the_grid_has_18_settings_of_128_gradient_steps_each():
    settings = robustness.settings()
    assert len(settings) == 18 and len({robustness.name_of(s) for s in settings}) == 18
    for s in settings:  # updates x (batch / minibatch) x 4 epochs
        assert robustness.BUDGET // s["batch"] * (s["batch"] // robustness.MINIBATCH) * 4 == 128
        config = robustness.config_of(30, s, "cpu")
        assert (config.ppo_batch_size, config.ppo_lr, config.lam, config.minibatch_size,
                config.eval_every) == (s["batch"], s["lr"], s["lam"], 16, 1)


def test_samples_calls_and_area_by_hand():
    setting = {"batch": 32, "lr": 1e-4, "lam": 1.0}  # 16 updates
    one = run(setting, {m: 3 for m in robustness.METHODS}, {m: 0.8 for m in robustness.METHODS})
    learned, critic = robustness.measured(one, "text2grad"), robustness.measured(one, "oracle")
    # area: the validation curve 0.2 at update 0, 0.8 from update 1: (0.5 * (0.2 + 0.8) + 15 * 0.8) / 16
    assert learned["area"] == pytest.approx((0.5 + 15 * 0.8) / 16)
    # held from update 3: 3 batches of 32 and the warm-up's batch
    assert (learned["hold"], learned["samples"], learned["held"]) == (3, 128, True)
    assert critic["calls"] == 128 and learned["calls"] == 2000  # the critic on every sample; 2,000 annotations
    never = robustness.measured(run(setting, {m: 17 for m in robustness.METHODS},
                                    {m: 0.8 for m in robustness.METHODS}), "oracle")
    assert (never["hold"], never["samples"], never["held"]) == (17, 32 * 18, False)


def test_each_method_chooses_by_its_validation_area_and_the_contrast_reads_the_chosen():
    runs = fake_runs()
    picked = robustness.chosen(runs)
    assert picked["text2grad"] == picked["oracle"] == "b64_lr0.0001_lam0.95"
    assert picked["text2grad_last"] == picked["oracle_scalar"] == "b16_lr0.0002_lam1"
    c = robustness.contrast(runs, "oracle", "oracle_scalar", picked["oracle"], picked["oracle_scalar"])
    # spans at batch 64 hold at update 2: 64 * 3 = 192 samples; sums at batch 16, update 6: 16 * 7 = 112
    assert c["pairs"] == [(192, 112), (192, 112)] and (c["sooner"], c["tie"], c["later"]) == (0, 0, 2)
    assert c["ratio"] == pytest.approx(112 / 192) and c["ratio_ci95"] == pytest.approx([112 / 192] * 2)


def test_ties_go_to_the_grids_order():
    runs = fake_runs(seeds=(30,))
    for name in runs["30"]:
        for curve in runs["30"][name]["curves"].values():
            for point in curve[1:]:
                point[1] = 0.7  # every setting validates alike
    assert set(robustness.chosen(runs).values()) == {"b16_lr5e-05_lam0.95"}


def test_the_record_and_its_tables(tmp_path, monkeypatch, capsys):
    runs = fake_runs()
    monkeypatch.setattr(robustness, "seed_units", lambda units, seed, out, device: {
        name: Outcome(run) for name, run in runs[str(seed)].items()})
    path = tmp_path / "robustness.json"
    robustness.main(["--seeds", "30", "31", "--out", str(tmp_path / "runs"), "--device", "cpu",
                     "--record", str(path)])
    record = json.loads(path.read_text())
    assert record["kind"] == "robustness" and record["commits"] == ["abc"]
    capsys.readouterr()
    report.main(["--from", str(path)])
    printed = capsys.readouterr().out
    # the spans' area at batch 64 (8 updates): (0.5 * (0.2 + 0.9) + 7 * 0.9) / 8 = 0.856; their
    # runner-up is the grid's first setting (every other one at 0.5): 32 updates, (0.5 * (0.2 + 0.5)
    # + 31 * 0.5) / 32 = 0.4953, so the margin is 0.3609 on both seeds
    assert "| `text2grad` | 64, 0.0001, 0.95 | 0.856 (+0.361 ± 0.000) | 192 192 | 2000 2000 | 1.000 ± 0.000 |" in printed
    assert "| critic | 64, 0.0001, 0.95 / 16, 0.0002, 1 | 0, 0, 2 | 192 / 112 | 0.58 [0.58, 0.58] |" in printed
    # at the runner-ups (both at the grid's first setting): spans 16 * 3 = 48 samples, sums 16 * 7 = 112
    assert "| critic, runner-ups | 16, 5e-05, 0.95 / 16, 5e-05, 0.95 | 2, 0, 0 | 48 / 112 | 2.33 [2.33, 2.33] |" in printed
    # the grid: at batch 16 spans hold at update 2 (48 samples), the sums at 6 (112): sooner on both seeds;
    # at batch 64 the sums never hold in 8 updates: 64 * 10 = 640, starred nowhere in this table
    assert "| 16, 5e-05, 0.95 | 48 / 112 (2, 0, 0) | 48 / 112 (2, 0, 0) |" in printed
    assert "| 64, 0.0002, 1 | 192 / 640 (2, 0, 0) | 192 / 640 (2, 0, 0) |" in printed


def test_after_the_fact_reads_where_curves_first_reach_the_line_and_drop_back():
    runs = fake_runs()
    # seed 30 at the grid's first setting: text2grad reaches the line at update 2, falls to 0.5 at 3
    curve = runs["30"]["b16_lr5e-05_lam0.95"]["curves"]["text2grad"]
    curve[3][2] = 0.5
    title, lines = robustness.after_the_fact(runs, ["30", "31"])
    rows = {line.split(" | ")[0].strip("| "): line for line in lines[2:]}
    # 18 settings x 2 seeds: the spans reach the line at update 2, the sums at 6 (at batch 64, with
    # 8 updates, never): spans sooner in all 36 pairs, with either judge
    assert rows["first update at the line, held or not: spans sooner, tie, later (36 pairs)"].endswith(
        "| 36, 0, 0 | 36, 0, 0 |")
    # at lr 5e-5: 12 span runs reach the line, one drops back; 8 sum runs reach it (batch 64 never)
    assert rows["lr 5e-05: runs that drop back after reaching the line, span / summed"].endswith(
        "| 1 of 12 / 0 of 8 | 0 of 12 / 0 of 8 |")
    assert rows["lr 0.0002: runs that drop back after reaching the line, span / summed"].endswith(
        "| 0 of 12 / 0 of 8 | 0 of 12 / 0 of 8 |")


@pytest.mark.slow
def test_a_tiny_seed_runs_through_the_shared_pipeline(tmp_path, monkeypatch):
    small = dict(train=40, annotated=40, demonstrations=200, validation=8, test=8, pretrain_steps=5,
                 sft_steps=5, reward_steps=5, batch_size=8, block_size=400)  # room for a babbling policy
    made = robustness.config_of
    monkeypatch.setattr(robustness, "config_of", lambda *a: made(*a).__class__(**{**made(*a).__dict__, **small}))
    monkeypatch.setattr(robustness, "BUDGET", 32)
    grid = [{"batch": 16, "lr": 1e-4, "lam": 1.0}, {"batch": 32, "lr": 1e-4, "lam": 1.0}]
    built = []
    real_prepare = robustness.prepare
    monkeypatch.setattr(robustness, "prepare", lambda *a, **k: built.append(1) or real_prepare(*a, **k))
    units = Units()  # in sequence
    done = units.wait(robustness.seed_units(units, 30, str(tmp_path), "cpu", grid=grid))
    assert len(built) == 1  # one pipeline for every setting
    assert [len(done[robustness.name_of(s)]["curves"]["oracle"]) for s in grid] == [3, 2]
    assert all(math.isfinite(v) for r in done.values() for c in r["curves"].values() for p in c for v in p)
    monkeypatch.setattr(robustness, "prepare", None)  # read back, not run again
    assert units.wait(robustness.seed_units(units, 30, str(tmp_path), "cpu", grid=grid)) == json.loads(json.dumps(done))
